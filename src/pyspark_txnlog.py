"""Auto-registration of the ``txnlog`` format: Spark imports ``pyspark_*`` modules and registers their
``DefaultSource``, so ``spark.read.format("txnlog")`` works right after ``pip install`` with no register call.
``spark.dataSource.register(DefaultSource)`` works too.

This module only glues the reader package (:mod:`txnsource`) and the writer package (:mod:`txnsink`) together;
neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["DefaultSource", "TxnLogDataSource"]


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
