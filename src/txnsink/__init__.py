"""txnsink: the Spark writer for txnlog topics, batch (one job = one transaction) and streaming (one micro-batch
= one transaction, exactly once). Imports :mod:`coordinator`, never :mod:`txnsource`.

:func:`make_writer` and :func:`make_stream_writer` are what ``pyspark_txnlog.DefaultSource`` calls; the heavy
modules load only when they do.

For users, :func:`write` (``txnsink.write(df, path, topic, key=...)``, usable inside ``foreachBatch``) appends a
batch DataFrame through Spark's own Parquet writer where it can (:mod:`txnsink.native`), through the data source
otherwise; :func:`enable_native` makes ``df.write.format("txnlog")`` appends of a session do the same
(:mod:`txnsink.writerule`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from txnsink.batch import TxnBatchWriter
    from txnsink.native import WriteResult
    from txnsink.stream import TxnStreamWriter

from txnsink.writerule import disable_native, enable_native, native_enabled

__all__ = ["disable_native", "enable_native", "make_stream_writer", "make_writer", "native_enabled", "write"]


def make_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnBatchWriter:
    """The batch writer (see :func:`txnsink.batch.make_writer`).

    Raises:
        InvalidOptionError, SchemaMismatchError: bad options, save mode or schema, before any task runs.
    """
    from txnsink.batch import make_writer as _make

    return _make(options, schema, overwrite)


def make_stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> TxnStreamWriter:
    """The streaming writer (see :func:`txnsink.stream.make_stream_writer`).

    Raises:
        InvalidOptionError, SchemaMismatchError: bad options, output mode, checkpoint or schema.
    """
    from txnsink.stream import make_stream_writer as _make

    return _make(options, schema, overwrite)


def write(df: DataFrame, path: str, topic: str, *, key: str | Sequence[str] | None = None, **options: Any) \
        -> WriteResult:
    """Append ``df`` to ``topic`` as one transaction through Spark's own Parquet writer where it can (see
    :func:`txnsink.native.write`).

    Raises:
        InvalidOptionError: a bad option, or ``writePath`` = ``native`` where the native path does not apply.
        SchemaMismatchError: ``df`` does not fit the existing topic.
        ProducerFencedError, CommitStateUnknownError: as :func:`txnsink.native.write`.
    """
    from txnsink.native import write as _write

    return _write(df, path, topic, key=key, **options)
