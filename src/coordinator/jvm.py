"""txnlog's JVM side: the jar of Spark classes (``io.txnlog.spark``) and how a driver loads it.

The jar (``coordinator/jars/txnlog-spark.jar``, built by ``scripts/build_jar.sh`` from ``jvm/src``) holds the rules
behind ``txnsource.enable_native`` (reads) and ``txnsink.enable_native`` (writes), and the keyed Parquet format of
the native write path (``SegmentParquetFormat``, the ``txnlog-v2`` partitioner in the JVM), and the segment format of
the native read path (``SegmentFormat``, the metadata columns computed in the scan). It is loaded at run time
into a running Spark driver through its py4j gateway, by a class loader whose parent is Spark's: no ``spark.jars``,
no static configuration; a keyed write adds it to the Spark context for the executors. This module only handles
py4j objects the caller passes in; it never imports pyspark.

Rules are installed in a session's ``experimental().extraOptimizations``, which holds them in a Scala list.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.errors import InvalidOptionError

__all__ = ["JAR", "disable", "enable", "enabled", "jvm_session", "options_from_json", "segment_scans", "segment_writes",
           "source_hash"]

#: The jar of txnlog's Spark rules.
JAR = Path(__file__).parent / "jars" / "txnlog-spark.jar"

_loaders: dict[int, Any] = {}
_writes: dict[int, Any] = {}
_scans: dict[int, Any] = {}
_lock = threading.Lock()


def _loader(gateway: Any, jvm: Any) -> Any:
    """The class loader of :data:`JAR` (one per JVM), whose parent is Spark's.

    Raises:
        InvalidOptionError: the jar is missing.
    """
    with _lock:
        loader = _loaders.get(id(gateway))
        if loader is None:
            if not JAR.is_file():
                raise InvalidOptionError(f"txnlog's Spark jar is missing ({JAR}); reinstall txnlog")
            urls = gateway.new_array(jvm.java.net.URL, 1)
            urls[0] = jvm.java.io.File(str(JAR)).toURI().toURL()
            parent = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
            loader = _loaders[id(gateway)] = jvm.java.net.URLClassLoader(urls, parent)
        return loader


def new_object(gateway: Any, jvm: Any, name: str, *args: Any) -> Any:
    """A new instance of the jar's class ``name``, constructed with ``args`` (py4j converts them).

    Raises:
        InvalidOptionError: the jar is missing or does not load into this JVM's Spark.
    """
    loader = _loader(gateway, jvm)
    thread = jvm.java.lang.Thread.currentThread()
    previous = thread.getContextClassLoader()
    thread.setContextClassLoader(loader)  # py4j resolves class names through it
    try:
        return getattr(jvm, name)(*args)
    except Exception as exc:
        raise InvalidOptionError(f"txnlog's Spark jar does not load into this Spark: {exc}") from exc
    finally:
        thread.setContextClassLoader(previous)


def options_from_json(text: str) -> dict[str, str]:
    """The options of one JSON object (as the jar sends a relation's or a write's options: py4j would convert a map
    with a round trip per entry), every value as text."""
    return {str(k): str(v) for k, v in json.loads(text).items()}


def _one_per_jvm(cache: dict[int, Any], spark: Any, name: str) -> Any:
    """The instance of the jar's stateless class ``name`` kept for the JVM behind ``spark`` (a py4j call saved per
    use: creating one costs ~5 ms)."""
    gateway = spark.sparkContext._gateway
    got = cache.get(id(gateway))
    if got is None:
        got = cache[id(gateway)] = new_object(gateway, spark.sparkContext._jvm, name)
    return got


def segment_writes(spark: Any) -> Any:
    """The jar's ``io.txnlog.spark.SegmentWrites`` for the classic session ``spark`` (one per JVM: it holds no
    state): its ``write(dataset, options json, path)`` runs a ``SegmentParquetFormat`` write (the jar shipped to the
    executors first), its ``conform(dataset, spec json)`` gives the rows the topic's columns.

    Raises:
        InvalidOptionError: the jar is missing or does not load into this JVM's Spark.
    """
    return _one_per_jvm(_writes, spark, "io.txnlog.spark.SegmentWrites")


def segment_scans(spark: Any) -> Any:
    """The jar's ``io.txnlog.spark.SegmentScans`` for the classic session ``spark`` (one per JVM: its state is a
    static cache): its ``load(session, schema json, options, files)`` builds a ``SegmentFormat`` scan (the jar
    shipped to the executors first), its ``sql`` a plain Parquet scan under a filter and a projection, in one call.

    Raises:
        InvalidOptionError: the jar is missing or does not load into this JVM's Spark.
    """
    return _one_per_jvm(_scans, spark, "io.txnlog.spark.SegmentScans")


def _rules(jss: Any) -> list[Any]:
    seq = jss.experimental().extraOptimizations()
    return [seq.apply(i) for i in range(seq.size())]


def _set_rules(jvm: Any, jss: Any, rules: list[Any]) -> None:
    jlist = jvm.java.util.ArrayList()
    for r in rules:
        jlist.add(r)
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(jlist).toList()
    getattr(jss.experimental(), "extraOptimizations_$eq")(seq)


def jvm_session(spark: Any, caller: str, instead: str) -> Any:
    """The JVM ``SparkSession`` behind the Python session ``spark``.

    Raises:
        InvalidOptionError: ``spark`` is a Spark Connect session (the message names ``caller`` and what to use
            ``instead``).
    """
    jss = getattr(spark, "_jsparkSession", None)
    if jss is None:
        raise InvalidOptionError(f"{caller} needs a classic SparkSession: a Spark Connect client has no driver "
                                 f"process for the rule to call back into ({instead})")
    return jss


def enable(spark: Any, rule: str, callback: Any, fmt: str, start_callbacks: Callable[[Any], None],
           caller: str, instead: str) -> None:
    """Install the rule of class ``rule``, constructed with the py4j callback object ``callback`` and the data
    source name ``fmt``, in the classic session ``spark``, unless one is there already. ``start_callbacks``
    starts py4j's callback server on the session's gateway (pyspark's ``ensure_callback_server_started``).

    Raises:
        InvalidOptionError: ``spark`` is a Spark Connect session, or the jar is missing or does not load.
    """
    jss = jvm_session(spark, caller, instead)
    if enabled(spark, rule):
        return
    gw = spark.sparkContext._gateway
    jvm = spark.sparkContext._jvm
    start_callbacks(gw)
    _set_rules(jvm, jss, [*_rules(jss), new_object(gw, jvm, rule, callback, fmt)])


def disable(spark: Any, rule: str, caller: str, instead: str) -> None:
    """Remove every rule of class ``rule`` from the classic session ``spark``.

    Raises:
        InvalidOptionError: ``spark`` is a Spark Connect session.
    """
    jss = jvm_session(spark, caller, instead)
    _set_rules(spark.sparkContext._jvm, jss, [r for r in _rules(jss) if r.getClass().getName() != rule])


def enabled(spark: Any, rule: str) -> bool:
    """Whether the session ``spark`` has a rule of class ``rule`` (False for a Spark Connect session)."""
    jss = getattr(spark, "_jsparkSession", None)
    return jss is not None and any(r.getClass().getName() == rule for r in _rules(jss))


def source_hash(folder: str | Path) -> str:
    """SHA-256 over the Java sources under ``folder`` (relative names and contents, in name order): what the jar
    records as ``META-INF/txnlog-source.sha256``."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.java")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


if __name__ == "__main__":  # scripts/build_jar.sh
    if sys.argv[1:] != ["--source-hash"]:
        sys.exit("usage: python -m coordinator.jvm --source-hash")
    print(source_hash(Path(__file__).resolve().parents[2] / "jvm" / "src"))
