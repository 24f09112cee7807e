"""Auto-registration of the ``txnlog`` format: Spark imports ``pyspark_*`` modules and registers their
``DefaultSource``, so ``spark.read.format("txnlog")`` works right after ``pip install`` with no register call.
``spark.dataSource.register(DefaultSource)`` works too.

:func:`configure_spark_with_txnlog` puts txnlog's jar (shipped inside this package) and its session extension
(``io.txnlog.spark.TxnlogSparkSessionExtension``) on a session builder, as Delta's ``configure_spark_with_delta_pip``
does: every session of that application then reads ``format("txnlog")`` with Spark's own Parquet reader and
writes it with Spark's own Parquet writer wherever the native paths apply, with no further call (on a Spark Connect
server too: configure the server), and runs ``readStream.format("txnlog")`` queries on a JVM stream that starts no
Python process per query (:mod:`txnsource.jvmstream`). The extension's rules ask a Python process the driver's JVM
starts once (:func:`serve`) to plan each read and write.

This module only glues the reader package (:mod:`txnsource`) and the writer package (:mod:`txnsink`) together;
neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

B = TypeVar("B")

__all__ = ["EXTENSION", "DefaultSource", "TxnLogDataSource", "configure_spark_with_txnlog"]

#: txnlog's Spark session extension (for ``spark.sql.extensions``).
EXTENSION = "io.txnlog.spark.TxnlogSparkSessionExtension"


class DefaultSource(DataSource):
    """The ``txnlog`` Spark data source: batch and streaming reads and writes of txnlog topics."""

    @classmethod
    def name(cls) -> str:
        return "txnlog"

    def schema(self) -> StructType:
        from txnsource import read_schema

        return read_schema(self.options)

    def __getstate__(self) -> dict[str, Any]:
        """The instance as Spark pickles it, once, when it creates the source of a DataFrame; every scan of the
        DataFrame unpickles that copy. A read's snapshot is pinned here, so every scan and every action of one
        DataFrame reads the same one (:mod:`txnsource.pin`)."""
        if "_pin" not in self.__dict__:
            from txnsource import pin_read

            self._pin = pin_read(self.options)
        return self.__dict__

    def reader(self, schema: StructType) -> DataSourceReader:
        from txnsource import make_reader

        return make_reader(self.options, schema, self.__dict__.get("_pin"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from txnsource import make_stream_reader

        return make_stream_reader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from txnsink import make_writer

        return make_writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from txnsink import make_stream_writer

        return make_stream_writer(self.options, schema, overwrite)


TxnLogDataSource = DefaultSource


def _add(listed: str | None, item: str) -> str:
    items = [x.strip() for x in (listed or "").split(",") if x.strip()]
    return ",".join(items if item in items else [*items, item])


def configure_spark_with_txnlog(builder: B) -> B:
    """``builder`` (a ``SparkSession.Builder``, classic or ``remote``) with txnlog's jar added to ``spark.jars`` and
    its session extension to ``spark.sql.extensions`` (values already set there are kept), returned for chaining::

        spark = configure_spark_with_txnlog(SparkSession.builder.appName("app")).getOrCreate()

    For ``remote("local[...]")`` the settings go to the Connect server PySpark starts; a separately started Connect
    server or cluster driver takes the same two settings (``--jars``, ``--conf spark.sql.extensions=...``).

    Raises:
        InvalidOptionError: the jar is missing from the installed package.
    """
    from coordinator.errors import InvalidOptionError
    from coordinator.jvm import JAR

    if not JAR.is_file():
        raise InvalidOptionError(f"txnlog's Spark jar is missing ({JAR}); reinstall txnlog")
    options = getattr(builder, "_options", {})
    configured = builder.config("spark.jars", _add(options.get("spark.jars"), str(JAR)))  # type: ignore[attr-defined]
    return configured.config("spark.sql.extensions",  # type: ignore[no-any-return]
                             _add(options.get("spark.sql.extensions"), EXTENSION))


def serve() -> None:
    """The Python planner of txnlog's session extension (``io.txnlog.spark.PythonSide``): run by the driver's JVM
    in a process of its own, never by users. Connects to the JVM's py4j server (``PYSPARK_GATEWAY_PORT``,
    ``PYSPARK_GATEWAY_SECRET``), wraps the session the JVM hands over, registers the read and write planners of
    ``enable_native`` (:mod:`txnsource.nativerule`, :mod:`txnsink.writerule`), and serves them until its standard
    input (a pipe from the JVM) closes. It never stops the JVM's Spark context.
    """
    import sys

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import ensure_callback_server_started, launch_gateway
    from pyspark.sql import SparkSession

    from txnsink.writerule import _Writer
    from txnsource.nativerule import _Planner

    class _Borrowed(SparkContext):
        def stop(self) -> None:  # the context is the JVM's application's
            pass

    gateway = launch_gateway()
    side = gateway.entry_point
    jss = side.session()
    jsc = gateway.jvm.org.apache.spark.api.java.JavaSparkContext(jss.sparkContext())
    sessions = gateway.jvm.org.apache.spark.sql.classic.SparkSession
    default = sessions.getDefaultSession()
    spark = SparkSession(_Borrowed(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=jsc.getConf())), jsparkSession=jss)
    if default.isDefined():  # constructing a PySpark session made it the JVM's default: put the application's back
        sessions.setDefaultSession(default.get())
    ensure_callback_server_started(gateway)
    side.register(_Planner(spark), _Writer(spark))
    sys.stdin.read()
