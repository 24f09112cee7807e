"""Auto-registration of the ``txnlog`` format: Spark imports ``pyspark_*`` modules and registers their
``DefaultSource``, so ``spark.read.format("txnlog")`` works right after ``pip install`` with no register call.
``spark.dataSource.register(DefaultSource)`` works too.

This module only glues the reader package (:mod:`txnsource`) and the writer package (:mod:`txnsink`) together;
neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

    def reader(self, schema: StructType) -> DataSourceReader:
        from txnsource import make_reader

        return make_reader(self.options, schema)

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
