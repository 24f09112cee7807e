"""The native batch read path: :func:`read` returns a DataFrame that Spark's own Parquet reader reads.

A Python data source can only hand Spark Arrow batches it decoded itself; Spark's Parquet reader decodes
vectorised in the JVM, prunes columns and row groups, and costs no Python worker. :func:`read` therefore resolves a
committed, transaction-consistent snapshot on the driver into segment files and row ranges (this module: the plan),
and builds Parquet scans of them (one per topic, unless it has many files) whose metadata columns are computed from
per-file values and the row index Spark fills (:mod:`txnsource.scans`: the DataFrames):

* ``_topic`` is the scan's topic, ``_partition`` the file's partition, ``_offset`` the file's first offset plus the
  row's index in its file (:data:`ROW_COLUMN`), ``_timestamp`` the commit time of the file (or, for a compacted file,
  of the run of rows the row index falls in);
* rows outside a slice (a range that starts or ends inside a file) are filtered on the row index.

``_producerTimestamp`` is the segment's own producer-time column, read like a data column, or, for a file written
without one, the one producer time its index gives all its rows (null in files written before producer times
existed, as the Python reader gives).

Columns a query does not use are never read: Spark's pruning sees plain expressions. A committed file that is
missing or unreadable when the query runs fails it, whatever ``spark.sql.files.ignore*Files`` say.

Same rows, same schema and the same snapshot rule as ``spark.read.format("txnlog")``: the snapshot is taken when
:func:`read` is called (or given by ``asOfSeq``) and pinned in the DataFrame, so every action on it reads the same
rows (:mod:`txnsource.pin`). A DataFrame kept past the garbage collector's grace period after a compaction may find
its files gone: call :func:`read` again.

The native path applies when Spark's file system reaches the store (a local path; ``s3://`` through ``s3a://`` when
``hadoop-aws`` is on Spark's classpath, credentials passed as read options, never set on the session), the read is
``read_committed``, the segments are Parquet and the columns have plain types (numbers, booleans, strings, binary,
dates, decimals, micro- or millisecond timestamps). ``readPath`` = ``auto`` falls back to the Python reader
otherwise; ``native`` fails naming the reason.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator import parallel
from coordinator.errors import InvalidOptionError
from coordinator.store_factory import missing_file_system
from txnsource.options import ReadOptions, parse_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from coordinator.coordinator import TransactionCoordinator
    from coordinator.store import Store
    from coordinator.topics import TopicMeta
    from txnsource.pin import ReadPin

log = logging.getLogger(__name__)

#: Files per Parquet scan at most: bounds the depth and size of the per-file lookups.
MAX_SCAN_FILES = 256
#: The column Spark's Parquet reader fills with each row's index in its file when the read schema names it (what
#: ``_metadata.row_index`` reads, without the per-row struct of metadata fields that ``_metadata`` costs).
ROW_COLUMN = "_tmp_metadata_row_index"
#: The plans of pinned reads kept (each a DataFrame's first plan, reused by its later actions).
PLANS_KEPT = 256
_plans: OrderedDict[tuple[str, str], list[NativeScan]] = OrderedDict()
_plans_lock = threading.Lock()


class NativeUnavailable(Exception):  # noqa: N818 - a reason, not an error the caller sees
    """Why the native path cannot read this (``auto`` then uses the Python reader)."""


@dataclass(frozen=True)
class NativeFile:
    """One segment file as a scan reads it.

    Attributes:
        partition: the topic partition the file belongs to.
        url: the file as Spark's file system names it.
        size: its size in bytes (the scan's lookup key).
        base_offset: the offset of the file's row 0.
        lo, hi: the file rows ``[lo, hi)`` the read takes.
        rows: the rows the file holds.
        runs: (first file row, commit time in microseconds) of each transaction's run of rows, in order.
        ptime: the producer time in microseconds of every row, for a file without a producer-time column.
    """

    partition: int
    url: str
    size: int
    base_offset: int
    lo: int
    hi: int
    rows: int
    runs: tuple[tuple[int, int], ...]
    ptime: int | None = None

    @property
    def sliced(self) -> bool:
        """Whether the read takes only part of the file's rows."""
        return self.lo > 0 or self.hi < self.rows


@dataclass(frozen=True)
class NativeScan:
    """One Parquet scan: files of one topic, each told apart from the others by its size or its name. Spark
    lists nothing to plan it: the jar's scan takes each file with its size (``io.txnlog.spark.KnownFiles``).

    Attributes:
        topic: the topic the files belong to.
        files: the files read.
    """

    topic: str
    files: tuple[NativeFile, ...]

    def files_json(self) -> str:
        """The files as the jar's scans take them: a JSON array of ``[url, size]``."""
        return json.dumps([[f.url, f.size] for f in self.files])


def read(spark: SparkSession, path: str, schema: StructType | str | None = None, **options: Any) -> DataFrame:
    """Read topics at one committed snapshot, as ``spark.read.format("txnlog").options(...).load(path)`` does,
    through Spark's own Parquet reader where it can (``readPath``: ``auto``, the default; ``native``; ``python``).

    Args:
        spark: the session (a classic or a Spark Connect session).
        path: the store root URL.
        schema: a projection, as ``spark.read.schema(...)`` gives one to the data source (a ``StructType`` or a
            DDL string): only these columns, in this order. Without it, every column; the metadata columns then
            make Spark read each row's file metadata even for queries that select none of them.
        options: the batch read options of ``format("txnlog")`` (``topic``, ``startingOffsets``,
            ``endingOffsets``, ``isolationLevel``, ``s3.*``, ...) and ``readPath``; values are turned into strings.

    Returns:
        A DataFrame of the topics' columns and ``_topic``, ``_partition``, ``_offset``, ``_timestamp``,
        ``_producerTimestamp`` (or of ``schema``).

    Raises:
        InvalidOptionError: a bad option, or ``readPath`` = ``native`` where the native path does not apply
            (the message says why).
        TopicNotFoundError: a topic does not exist.
        SchemaMismatchError: ``schema`` names a column none of the topics has.
        CorruptLogError: a committed segment is missing or has the wrong size.
    """
    text = {str(k): ("" if v is None else str(v)) for k, v in options.items()}
    opts = parse_options({**text, "path": path}, streaming=False)
    if opts.read_path == "python":
        return _python_reader(spark, path, schema, text)
    try:
        return native_frame(spark, opts, schema)
    except NativeUnavailable as why:
        if opts.read_path == "native":
            raise InvalidOptionError(f"option 'readPath' = 'native' cannot read this: {why}") from None
        log.info("txnlog: reading through the Python data source: %s", why)
        return _python_reader(spark, path, schema, text)


def _python_reader(spark: SparkSession, path: str, schema: StructType | str | None,
                   options: Mapping[str, str]) -> DataFrame:
    reader = spark.read.format("txnlog")
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        if key.lower() != "readpath":
            reader = reader.option(key, value)
    return reader.load(path)


# -- planning (driver, plain Python) --------------------------------------------------------------------------


def spark_root(opts: ReadOptions) -> str:
    """The store root as Spark's file system names it (:func:`coordinator.store_factory.hadoop_url`).

    Raises:
        NativeUnavailable: an in-memory store, or a path Spark would read as a glob pattern.
    """
    from coordinator.store_factory import HadoopUnreachable, hadoop_url

    try:
        return hadoop_url(opts.path)
    except HadoopUnreachable as exc:
        raise NativeUnavailable(str(exc)) from exc


def hadoop_options(opts: ReadOptions) -> dict[str, str]:
    """The ``fs.s3a.*`` read options equivalent to the ``s3.*`` options (empty for local stores); they travel with
    the read only."""
    from coordinator.store_factory import hadoop_s3a_options

    return hadoop_s3a_options(opts.path, opts.store)


_PLAIN = ("is_integer", "is_floating", "is_boolean", "is_string", "is_large_string", "is_binary", "is_large_binary",
          "is_date", "is_decimal")


def check_types(metas: Sequence[TopicMeta]) -> None:
    """Raises: NativeUnavailable when a column's type is not one Spark's Parquet reader reads as the Python reader
    does, or two columns differ only in case (Spark resolves Parquet columns case-insensitively)."""
    import pyarrow as pa

    for meta in metas:
        seen: dict[str, str] = {}
        for f in meta.schema:
            t = f.type
            plain = any(getattr(pa.types, k)(t) for k in _PLAIN)
            if pa.types.is_float16(t) or pa.types.is_unsigned_integer(t):
                plain = False
            if not (plain or (pa.types.is_timestamp(t) and t.unit in ("ms", "us"))):
                raise NativeUnavailable(f"column {f.name!r} of topic {meta.name!r} is {t}")
            if f.name.lower() in seen or f.name.lower() in ("_metadata", ROW_COLUMN):
                raise NativeUnavailable(f"column {f.name!r} of topic {meta.name!r} clashes with "
                                        f"{seen.get(f.name.lower(), f.name)!r} in Spark's Parquet reader")
            seen[f.name.lower()] = f.name


def _file(root: str, partition: int, seg: Any, skip: int, rows: int) -> NativeFile:
    runs = tuple((first - seg.base_offset, ts * 1000) for first, ts, _seq in seg.run_list())
    return NativeFile(partition, f"{root}/{seg.path}", seg.size, seg.base_offset, skip, skip + rows, seg.rows, runs,
                      seg.ptime)


def plan_scans(store: Store, coord: TransactionCoordinator, opts: ReadOptions, root: str,
               pin: ReadPin) -> list[NativeScan]:
    """Resolve ``pin``'s snapshot into scans: per topic, at most :data:`MAX_SCAN_FILES` files each, any two of them
    of different sizes or different names (:func:`_apart`).

    Raises:
        NativeUnavailable: ``read_uncommitted``, ``maxRecordsPerPartition``, or an Arrow IPC segment.
        InvalidOptionError: an offset option does not fit the topics.
        OffsetOutOfRangeError: retention removed records of the pinned snapshot since it was pinned.
        CorruptLogError: a committed segment is missing or its size differs from its commit record.
    """
    from coordinator.reader import READ_UNCOMMITTED
    from txnsource.offsets import batch_ranges, take_snapshot
    from txnsource.pin import check_retained

    if opts.isolation == READ_UNCOMMITTED:  # before the snapshot: refused without reading the log
        raise NativeUnavailable("read_uncommitted reads staged files, which only the Python reader lists")
    snap = take_snapshot(coord, opts, pin.snapshot)
    ranges = batch_ranges(opts, snap, coord)
    check_retained(coord, ranges, pin)
    return range_scans(store, coord, opts, root, ranges)


def range_scans(store: Store, coord: TransactionCoordinator, opts: ReadOptions, root: str,
                ranges: Mapping[tuple[str, int], tuple[int, int]]) -> list[NativeScan]:
    """The scans of the committed offset ranges ``[start, end)`` given per partition (:func:`plan_scans` without
    the snapshot; the native micro-batch read's plan).

    Raises:
        NativeUnavailable: ``read_uncommitted``, ``maxRecordsPerPartition``, or an Arrow IPC segment.
        CorruptLogError: a committed segment is missing or its size differs from its commit record.
    """
    from coordinator.errors import CorruptLogError
    from coordinator.layout import data_dir
    from coordinator.reader import READ_UNCOMMITTED

    if opts.isolation == READ_UNCOMMITTED:
        raise NativeUnavailable("read_uncommitted reads staged files, which only the Python reader lists")
    if opts.max_records_per_partition is not None:
        raise NativeUnavailable("maxRecordsPerPartition splits tasks by record count, which only the Python reader "
                                "does (Spark's Parquet scan splits by bytes)")
    groups: dict[str, list[_Group]] = {}
    wanted = [(tp, se) for tp, se in sorted(ranges.items()) if se[1] > se[0]]
    # the partitions' data folders, listed at once, check that every segment read is there, whole
    listings = parallel.pmap(lambda tp: store.list_info(data_dir(*tp)), [tp for tp, _ in wanted])
    for ((topic, p), (start, end)), infos in zip(wanted, listings, strict=True):
        plog = coord.partition(topic, p)
        if plog.end_offset < end:
            plog.refresh()
        slices = plog.slices(start, end)
        if any(not sl.segment.path.endswith(".parquet") for sl in slices):
            raise NativeUnavailable(f"partition {topic}/{p} holds Arrow IPC segments")
        sizes = {o.path: o.size for o in infos}
        scans = groups.setdefault(topic, [])
        for sl in slices:
            seg = sl.segment
            if seg.path not in sizes:
                raise CorruptLogError(f"segment {seg.path} named by a commit marker is missing")
            if sizes[seg.path] != seg.size:
                raise CorruptLogError(f"segment {seg.path} is truncated or damaged: {sizes[seg.path]} bytes, "
                                      f"expected {seg.size}")
            f = _file(root, p, seg, sl.skip, sl.rows)
            home = next((g for g in scans if g.fits(f)), None)
            if home is None:
                home = _Group()
                scans.append(home)
            home.add(f)
    return [NativeScan(topic, tuple(g.files)) for topic in opts.topics for g in groups.get(topic, [])]


#: File names that are literal in a Hadoop glob and that Spark's ``_metadata.file_name`` gives as they are (it
#: percent-encodes others). Segment names are made of these characters.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~-]*")


def file_name(f: NativeFile) -> str:
    """The file's name (the last part of its URL)."""
    return posixpath.basename(f.url)


def _apart(a: NativeFile, b: NativeFile) -> bool:
    """Whether one scan's lookups can tell ``a`` and ``b`` apart: by size, else by a name Spark gives as is."""
    if a.size != b.size:
        return True
    return file_name(a) != file_name(b) and all(_PLAIN_NAME.fullmatch(file_name(f)) for f in (a, b))


class _Group:
    """The files of one scan being planned, indexed by size (:func:`_apart` without comparing every pair)."""

    def __init__(self) -> None:
        self.files: list[NativeFile] = []
        self.by_size: dict[int, list[NativeFile]] = {}

    def fits(self, f: NativeFile) -> bool:
        return len(self.files) < MAX_SCAN_FILES and all(_apart(o, f) for o in self.by_size.get(f.size, ()))

    def add(self, f: NativeFile) -> None:
        self.files.append(f)
        self.by_size.setdefault(f.size, []).append(f)


def topic_columns(spark: SparkSession, store: Store, topics: Sequence[str], schema: StructType | str | None
                  ) -> tuple[dict[str, TopicMeta], StructType, StructType]:
    """The definitions of ``topics``, the read schema they make (their union, as Spark's types) and the columns a
    read with the given ``schema`` returns (:func:`projection`).

    Raises:
        TopicNotFoundError: a topic does not exist.
        NativeUnavailable, SchemaMismatchError: as :func:`check_types` and :func:`projection`.
    """
    from coordinator.topics import get_topic
    from txnsource.schema import to_spark_schema, union_schema

    metas = {t: get_topic(store, t) for t in topics}
    check_types(list(metas.values()))
    full = to_spark_schema(union_schema(list(metas.values())))
    return metas, full, projection(spark, schema, full, list(metas.values()))


def projection(spark: SparkSession, schema: StructType | str | None, full: StructType,
               metas: Sequence[TopicMeta]) -> StructType:
    """The columns a read returns: ``full`` (the read schema), or the given ``schema`` checked against it.

    Raises:
        SchemaMismatchError: ``schema`` names a column none of the topics has.
        NativeUnavailable: ``schema`` gives a column another type than its topic, or declares a nullable column
            not nullable (the Python reader casts and checks those).
    """
    from pyspark.sql import types as T

    from txnsource.schema import check_projection

    if schema is None:
        return full
    given = schema if isinstance(schema, T.StructType) else spark.createDataFrame([], schema).schema
    check_projection(given.names, metas)
    for f in given.fields:
        source = full[f.name]
        if f.dataType != source.dataType:
            raise NativeUnavailable(f"the given schema reads column {f.name!r} as {f.dataType.simpleString()}, "
                                    f"the topic has {source.dataType.simpleString()}")
        if source.nullable and not f.nullable:
            raise NativeUnavailable(f"the given schema declares column {f.name!r} not nullable, the topic does not")
    return given


def _planned(store: Store, coord: TransactionCoordinator, opts: ReadOptions, root: str,
             pin: ReadPin) -> list[NativeScan]:
    """:func:`plan_scans`, once per pin (a DataFrame) and read: later actions of a DataFrame read the files its first
    plan chose, as the data source's do (Spark keeps the data source's first plan), so the rule on or off gives the
    same rows even after retention moved past them (until the garbage collector deletes them)."""
    key = (pin.token, repr(opts))
    with _plans_lock:
        known = _plans.get(key)
        if known is not None:
            _plans.move_to_end(key)
            return known
    scans = plan_scans(store, coord, opts, root, pin)
    with _plans_lock:
        _plans[key] = scans
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    return scans


def native_frame(spark: SparkSession, opts: ReadOptions, schema: StructType | str | None,
                 pin: ReadPin | None = None) -> DataFrame:
    """The native DataFrame of a read (``readPath`` aside) at ``pin``'s snapshot (None: pinned now, or at
    ``asOfSeq``): :func:`read`'s, and what :func:`txnsource.enable_native` puts in place of a ``format("txnlog")``
    scan (with the pin of that scan's data source).

    Raises:
        NativeUnavailable: the native path does not apply (the reason).
        InvalidOptionError, TopicNotFoundError, SchemaMismatchError, CorruptLogError: as :func:`read`.
        OffsetOutOfRangeError: retention removed records of the pinned snapshot since it was pinned.
    """
    from coordinator import open_store
    from coordinator.coordinator import TransactionCoordinator
    from txnsource.options import with_topics
    from txnsource.pin import take_pin

    root = native_root(spark, opts)
    store = open_store(opts.path, opts.store)
    try:
        coord = TransactionCoordinator(store)
        if pin is None:
            pin = take_pin(store, coord, opts)
        opts = with_topics(opts, list(pin.topics))
        metas, full, out = topic_columns(spark, store, opts.topics, schema)
        scans = _planned(store, coord, opts, root, pin)
    finally:
        store.close()
    return scans_frame(spark, opts, root, scans, out, full, metas)


def native_root(spark: SparkSession, opts: ReadOptions) -> str:
    """The store root as Spark's file system names it, once the read's options and session allow a native read.

    Raises:
        NativeUnavailable: the store is out of Spark's reach, ``includeHeaders``, or a Spark Connect session.
    """
    root = spark_root(opts)
    if opts.include_headers:
        raise NativeUnavailable("option 'includeHeaders' reads record headers, which the native scan does not")
    if getattr(spark, "_jsparkSession", None) is None:
        raise NativeUnavailable("a Spark Connect client cannot build the Parquet scan (it needs the driver's JVM); "
                                "the data source reads, natively on a server with txnlog's session extension")
    return root


def scans_frame(spark: SparkSession, opts: ReadOptions, root: str, scans: Sequence[NativeScan], out: StructType,
                full: StructType, metas: Mapping[str, TopicMeta]) -> DataFrame:
    """The DataFrame of ``scans`` with the columns ``out`` (of the read schema ``full``): their union, or an empty
    frame of ``out`` when there is none.

    Raises:
        NativeUnavailable: Spark has no file system for the store's scheme.
    """
    from txnsource.scans import scan_frame

    if not scans:
        return spark.createDataFrame([], out)
    fs_options = hadoop_options(opts)
    frames: list[DataFrame] = []
    for scan in scans:
        try:
            frame = scan_frame(spark, scan, out, full, metas[scan.topic].schema.names, fs_options)
            if not frames:
                frame.columns  # noqa: B018 - resolves the scan now: a file system Spark lacks fails here
        except Exception as exc:
            why = missing_file_system(str(exc), root)
            if why is not None:
                raise NativeUnavailable(why) from None
            raise
        frames.append(frame)
    result = frames[0]
    for frame in frames[1:]:
        result = result.union(frame)
    return result
