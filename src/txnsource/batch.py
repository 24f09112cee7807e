"""The batch reader: ``spark.read.format("txnlog")``.

Planning (on the driver's planner worker) reads the transaction-consistent snapshot the DataFrame pinned when it
was created (:mod:`txnsource.pin`: one DataFrame, one snapshot, for all its scans and actions), resolves
``startingOffsets`` / ``endingOffsets`` against it, and pins the result as absolute offset ranges in the input
partitions, so every task, and every re-execution of a task, reads the same rows. ``read()`` runs on the executors
and only reads the segment files the partition names.

Filter pushdown: Spark (4.1+) only calls ``pushFilters`` when ``spark.sql.python.filterPushdown.enabled`` is true,
and refuses a reader that implements ``pushFilters`` when it is false. :func:`make_batch_reader` therefore hands
out the pushdown-capable :class:`TxnLogPushdownReader` only inside Spark's filter-pushdown planner worker, and the
plain :class:`TxnLogBatchReader` everywhere else; results are the same either way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from coordinator.reader import READ_UNCOMMITTED
from txnsource.options import ReadOptions, parse_options
from txnsource.pin import PinFailure, ReadPin
from txnsource.pushdown import Pushdown, push_filters

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"


class TxnLogBatchReader(DataSourceReader):
    """Reads committed (or, with ``read_uncommitted``, also staged) records of one snapshot: ``pin``'s (the
    DataFrame's), or, without one, a snapshot taken when the read is planned.

    Picklable; holds options, the pin and pushed filters only (credentials hidden from ``repr``).
    """

    def __init__(self, options: ReadOptions, schema: StructType, pin: ReadPin | None = None) -> None:
        self.options = options
        self.schema = schema
        self.pin = pin
        self.pushed = Pushdown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.options.path!r}, topics={self.options.topics!r})"

    def partitions(self) -> Sequence[InputPartition]:
        """Plan the pinned snapshot (or, unpinned, one taken now) into input partitions (see
        :func:`txnsource.planning.plan_partitions`; Spark does not tell a Python data source its default
        parallelism, so this machine's core count, the parallelism of a local session, stands for it).

        Raises:
            TopicNotFoundError: a topic does not exist, or ``subscribePattern`` matches none.
            InvalidOptionError: an offset or timestamp option does not fit the topics' partitions or offsets
                (offsets below the log start only with ``failOnDataLoss`` true).
            SchemaMismatchError: a user-given schema names a column none of the topics has.
            OffsetOutOfRangeError: retention removed records of the pinned snapshot since it was pinned.
        """
        from coordinator import open_store
        from coordinator.coordinator import TransactionCoordinator
        from coordinator.topics import get_topic
        from txnsource.offsets import batch_ranges, take_snapshot
        from txnsource.options import with_topics
        from txnsource.pin import check_retained, take_pin
        from txnsource.planning import list_data, plan_partitions, staged_paths
        from txnsource.schema import check_projection

        store = open_store(self.options.path, self.options.store)
        coord = TransactionCoordinator(store)
        pin = self.pin
        if pin is None:
            pin = take_pin(store, coord, self.options)
        opts = with_topics(self.options, list(pin.topics))
        metas = {t: get_topic(store, t) for t in opts.topics}
        check_projection(self.schema.names, list(metas.values()))
        listed: dict[tuple[str, int], list[str]] = {}
        if opts.isolation == READ_UNCOMMITTED:
            # listed after the pin: a file committed since is not published at the pin's entry, so it reads as staged
            for t, meta in metas.items():
                listed.update(list_data(store, t, meta.partitions))
        snap = take_snapshot(coord, opts, pin.snapshot)
        ranges = batch_ranges(opts, snap, coord)
        check_retained(coord, ranges, pin)
        staged = None
        if opts.isolation == READ_UNCOMMITTED:
            staged = {tp: staged_paths(coord, tp[0], tp[1], paths, snap.seq) for tp, paths in listed.items()}
        return plan_partitions(coord, metas, ranges, self.pushed, target_bytes=opts.max_partition_bytes,
                               min_partitions=opts.min_partitions, staged=staged,
                               max_rows=opts.max_records_per_partition, parallelism=os.cpu_count())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the partition's records as Arrow batches of exactly the read schema.

        Raises:
            CorruptLogError: a committed segment is missing or damaged.
        """
        from coordinator import open_store
        from txnsource.planning import TxnInputPartition, read_partition
        from txnsource.schema import spark_arrow_schema

        if not isinstance(partition, TxnInputPartition):
            return iter(())  # Spark's placeholder when a read plans no partitions
        store = open_store(self.options.path, self.options.store)
        return read_partition(store, partition, spark_arrow_schema(self.schema))


class TxnLogPushdownReader(TxnLogBatchReader):
    """:class:`TxnLogBatchReader` with filter pushdown on the metadata columns (see :mod:`txnsource.pushdown`)."""

    def pushFilters(self, filters: list[Any]) -> Iterable[Any]:  # noqa: N802 - Spark's name
        """Keep the filters :func:`txnsource.pushdown.push_filters` can apply exactly; return the rest."""
        self.pushed, rest = push_filters(filters)
        return rest


def refuse_native(opts: ReadOptions) -> None:
    """Raises: InvalidOptionError when ``readPath`` is ``native`` and the data source itself is asked to read: a
    Spark data source cannot hand back Spark's own Parquet scan; :func:`txnsource.read`, or a session with
    :func:`txnsource.enable_native` (whose rule takes the scan before the data source plans it), can."""
    if opts.read_path == "native":
        from coordinator.errors import InvalidOptionError

        raise InvalidOptionError(
            "option 'readPath' = 'native' needs txnsource.enable_native(spark) in the driver (then "
            "spark.read.format(\"txnlog\") batch reads use Spark's own Parquet scan) or txnsource.read(spark, path, "
            "topic=...); readStream always uses the Python reader to plan its micro-batches (readPath auto, with "
            "enable_native, reads them through Spark's Parquet scan where it can)"
        )


def _in_pushdown_worker() -> bool:
    if PUSHDOWN_WORKER in sys.modules:
        return True
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return getattr(spec, "name", None) == PUSHDOWN_WORKER


def make_batch_reader(options: Mapping[str, str], schema: StructType,
                      pin: ReadPin | PinFailure | None = None) -> DataSourceReader:
    """The batch reader for Spark's ``options`` and ``schema``, reading ``pin``'s snapshot (None: a snapshot taken
    when the read is planned).

    Raises:
        InvalidOptionError: a bad option (see :mod:`txnsource.options`), or ``readPath`` = ``native``.
        Whatever taking the pin raised (a missing topic, a store error, an ``asOfSeq`` that cannot be read).
    """
    opts = parse_options(options, streaming=False)
    refuse_native(opts)
    if isinstance(pin, PinFailure):
        raise pin.error
    cls = TxnLogPushdownReader if _in_pushdown_worker() else TxnLogBatchReader
    return cls(opts, schema, pin)
