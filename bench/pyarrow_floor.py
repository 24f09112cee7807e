"""A floor for the data-source read benchmark: a Python data source (``pyarrow-floor``) that does nothing but decode
Parquet files with pyarrow, one row group per batch, single-threaded, and hand the batches to Spark, the least a
Python data source can do. Its cost over Spark's own Parquet reader is the cost of the Python data source path
itself (the Python worker, Arrow over the socket, and Spark's Arrow-to-row conversion), which no reader can avoid.

Options: ``paths`` (comma-separated Parquet files, one input partition each) and ``schema`` (a DDL string).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition


class FilePartition(InputPartition):
    """One Parquet file."""

    def __init__(self, path: str) -> None:
        self.path = path


class FloorReader(DataSourceReader):
    """Reads each file's row groups as they are (types cast only where Spark's Arrow form differs)."""

    def __init__(self, paths: list[str], schema: Any) -> None:
        self.paths = paths
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        return [FilePartition(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema

        assert isinstance(partition, FilePartition)
        target = to_arrow_schema(self.schema, timezone="UTC")
        pf = pq.ParquetFile(partition.path)
        for i in range(pf.metadata.num_row_groups):
            for batch in pf.read_row_group(i, columns=target.names, use_threads=False).to_batches():
                yield batch if batch.schema.equals(target) else batch.cast(target)


class FloorSource(DataSource):
    """``spark.read.format("pyarrow-floor").option("paths", ...).option("schema", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return "pyarrow-floor"

    def schema(self) -> str:
        return str(self.options["schema"])

    def reader(self, schema: Any) -> DataSourceReader:
        return FloorReader(str(self.options["paths"]).split(","), schema)
