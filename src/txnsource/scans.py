"""The DataFrame of one native scan (:class:`~txnsource.native.NativeScan`): Spark's Parquet reader over the scan's
files, with the metadata columns computed one of two ways.

* Every file read whole and every column the files' own, computed or nullable: the jar's
  ``io.txnlog.spark.SegmentFormat`` (:func:`segment_frame`), Spark's Parquet format that appends ``_topic``,
  ``_partition``, ``_offset`` and ``_timestamp`` to each batch as column vectors, from per-file values passed in the
  scan's options, so no projection copies the rows; a filter on those columns that excludes a file whole keeps the
  file unopened.
* Otherwise (a slice that starts or ends inside a file, a column that needs a cast): a plain Parquet scan under a
  projection of SQL expressions, built in the JVM in one call (:func:`sql_frame`): per-file values picked by a
  balanced tree of comparisons on ``_metadata.file_size`` (files of equal size told apart by
  ``_metadata.file_name``), ``_offset`` the file's first offset plus the row index Spark fills, rows outside a
  slice filtered on that index.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coordinator.segments import PRODUCER_TS
from txnsource.native import ROW_COLUMN, NativeFile, NativeScan, file_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

#: The file metadata the per-file lookups compare: the size, and for files of equal size the name.
SIZE, NAME = "_metadata.file_size", "_metadata.file_name"
#: The row index, failing the query instead of reading null should a Spark version stop filling the column.
ROW = (f"coalesce({ROW_COLUMN}, raise_error('txnlog: Spark did not fill {ROW_COLUMN}; read with "
       f"readPath=python'), 0L)")


def _tree(key: str, bounds: Sequence[int], leaves: Sequence[str]) -> str:
    """SQL for ``leaves[i]`` where ``bounds[i] <= key < bounds[i + 1]`` (``bounds`` ascending; the first and last
    leaves also cover everything below and above): a balanced tree of comparisons, log2(n) deep."""
    if len(leaves) == 1:
        return leaves[0]
    mid = len(leaves) // 2
    return (f"CASE WHEN {key} < {bounds[mid]}L THEN {_tree(key, bounds[:mid], leaves[:mid])} "
            f"ELSE {_tree(key, bounds[mid:], leaves[mid:])} END")


def lookup(key: str, pairs: Sequence[tuple[int, str]]) -> str:
    """SQL for the value paired with ``key``'s exact match among ``pairs`` (keys distinct; a key matching none
    gets a neighbour's value), as :func:`_tree`; neighbours with the same value share a leaf."""
    bounds: list[int] = []
    leaves: list[str] = []
    for k, v in sorted(pairs):
        if not leaves or leaves[-1] != v:
            bounds.append(k)
            leaves.append(v)
    return _tree(key, bounds, leaves)


def _zero(dtype: Any) -> str:
    """SQL of a non-null literal of ``dtype`` (to type a never-null column as not nullable). Typed literals, not
    casts: a cast that could overflow would type the column nullable."""
    from pyspark.sql import types as T

    if isinstance(dtype, T.DecimalType):
        return "0." + "0" * dtype.scale + "BD" if dtype.scale else "0BD"
    simple = {T.ByteType: "0Y", T.ShortType: "0S", T.IntegerType: "0", T.LongType: "0L", T.FloatType: "0.0F",
              T.DoubleType: "0.0D", T.StringType: "''", T.BinaryType: "X''", T.BooleanType: "false",
              T.DateType: "DATE'1970-01-01'", T.TimestampType: "timestamp_micros(0)",
              T.TimestampNTZType: "TIMESTAMP_NTZ'1970-01-01 00:00:00'"}
    return simple[type(dtype)]


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def file_lookup(files: Sequence[NativeFile], value: Callable[[NativeFile], str]) -> str:
    """SQL for ``value(f)`` of the file ``f`` a row comes from: :func:`lookup` on :data:`SIZE`, and among files
    of equal size (distinct names, :func:`_apart`) a comparison of :data:`NAME`."""
    by_size: dict[int, list[NativeFile]] = {}
    for f in files:
        by_size.setdefault(f.size, []).append(f)
    pairs = []
    for size, same in by_size.items():
        values = [value(f) for f in same]
        leaf = values[-1]
        if len(set(values)) > 1:
            whens = " ".join(f"WHEN {NAME} = '{file_name(f)}' THEN {v}"
                             for f, v in zip(same[:-1], values[:-1], strict=True))
            leaf = f"CASE {whens} ELSE {leaf} END"
        pairs.append((size, leaf))
    return lookup(SIZE, pairs)


def scan_sql(scan: NativeScan) -> tuple[str | None, str, str, str]:
    """SQL over the file metadata and :data:`ROW` of one scan's row filter (None when every file is read whole) and of
    the per-file values: the partition, the first offset and the commit time in microseconds (a file's own run
    lookup when compaction merged several transactions into it).

    Three plain lookups, not one struct of the three: a struct per row costs an allocation per row, a tree of
    comparisons on a constant column does not.
    """
    keep = None
    if any(f.sliced for f in scan.files):
        keep = file_lookup(scan.files, lambda f: f"({ROW} >= {f.lo}L AND {ROW} < {f.hi}L)" if f.sliced else "true")
    part = file_lookup(scan.files, lambda f: str(f.partition))
    base = file_lookup(scan.files, lambda f: f"{f.base_offset}L")
    stamp = file_lookup(scan.files, lambda f: f"{f.runs[0][1]}L" if len(f.runs) == 1
                        else lookup(ROW, [(first, f"{t}L") for first, t in f.runs]))
    return keep, part, base, stamp


def producer_sql(scan: NativeScan) -> str:
    """SQL of ``_producerTimestamp``: the files' column, or the producer time the index gives the rows of a file
    without one (the column then reads as null)."""
    if all(f.ptime is None for f in scan.files):
        return _quoted(PRODUCER_TS)
    given = file_lookup(scan.files, lambda f: "NULL" if f.ptime is None else f"timestamp_micros({f.ptime}L)")
    return f"coalesce({_quoted(PRODUCER_TS)}, {given})"


def _nullable(sql: str) -> str:
    """``sql`` typed nullable at no cost (the optimizer folds the condition away)."""
    return f"if(true, {sql}, null)"


def scan_frame(spark: SparkSession, scan: NativeScan, schema: StructType, full: StructType,
               topic_columns: Sequence[str], fs_options: Mapping[str, str]) -> DataFrame:
    """One scan's rows as the columns of ``schema`` (a projection of ``full``, the read schema: the topic
    columns of every topic read, then the metadata columns): :func:`segment_frame` where it applies, else
    :func:`sql_frame`.

    Raises:
        InvalidOptionError: the segment format is needed and txnlog's jar does not load into this Spark.
    """
    if segment_columns(scan, schema, (*topic_columns, PRODUCER_TS)):
        return segment_frame(spark, scan, schema, fs_options)
    return sql_frame(spark, scan, schema, full, topic_columns, fs_options)


def sql_frame(spark: SparkSession, scan: NativeScan, schema: StructType, full: StructType,
              topic_columns: Sequence[str], fs_options: Mapping[str, str]) -> DataFrame:
    """:func:`scan_frame` as a plain Parquet scan under a projection of SQL expressions. Spark's file metadata is
    referred to only when a projected metadata column or a partly read file needs it."""
    from pyspark.sql import types as T

    wanted = set(schema.names)
    stored = (*topic_columns, PRODUCER_TS)
    data = [f for f in full.fields if f.name in stored and f.name in wanted]
    keep, part, base, stamp = scan_sql(scan)
    fields = [T.StructField(f.name, f.dataType, True) for f in data]
    if keep is not None or wanted & {"_offset", "_timestamp"}:
        fields.append(T.StructField(ROW_COLUMN, T.LongType(), True))
    # a committed segment that is missing or unreadable fails the read, whatever the session says
    options = {"ignoreMissingFiles": "false", "ignoreCorruptFiles": "false", **fs_options}
    cols: list[str] = []
    for field in schema.fields:
        name, source = field.name, full[field.name]
        if name == "_topic":
            col = f"'{scan.topic}'"
        elif name == "_partition":
            col = part
        elif name == "_offset":
            col = f"{base} + {ROW}"
        elif name == "_timestamp":
            col = f"timestamp_micros({stamp})"
        elif name == PRODUCER_TS:
            col = producer_sql(scan)
        elif name not in topic_columns:
            col = f"CAST(NULL AS {field.dataType.simpleString()})"
        elif source.nullable or field.nullable:
            col = _quoted(name)
        else:
            col = f"coalesce({_quoted(name)}, {_zero(field.dataType)})"
        if field.nullable and not (source.nullable and name not in ("_offset", "_timestamp")):
            col = _nullable(col)
        cols.append(f"{col} AS {_quoted(name)}")
    # SQL text, built in the JVM in one call (the reader, filter and projection cost a round trip each, and more)
    from pyspark.errors.exceptions.captured import capture_sql_exception
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    from coordinator import jvm

    jss = jvm.jvm_session(spark, "the native read path", "read with readPath=python")
    built = capture_sql_exception(jvm.segment_scans(spark).sql)(
        jss, T.StructType(fields).json(), json.dumps(options), scan.files_json(), keep, json.dumps(cols))
    return ClassicFrame(built, spark)


#: The metadata columns :class:`io.txnlog.spark.SegmentFormat` computes in the scan.
COMPUTED = ("_topic", "_partition", "_offset", "_timestamp")


def segment_columns(scan: NativeScan, schema: StructType, stored: Sequence[str]) -> bool:
    """Whether the jar's segment format reads ``scan`` as ``schema``: every file whole, and every column stored in
    the files, computed by the format, or nullable (a column the topic lacks reads as null)."""
    if any(f.sliced for f in scan.files):
        return False
    return all(f.name in stored or f.name in COMPUTED or f.nullable for f in schema.fields)


def segments_option(scan: NativeScan) -> str:
    """The per-file values of ``scan`` as :class:`io.txnlog.spark.SegmentFormat` reads them: one line per file,
    ``size, name, partition, first offset, rows, runs, producer time`` (runs ``first row:commit micros``,
    ``;``-separated; the producer time in microseconds, empty for a file with its own column) tab-separated."""
    return "".join(f"{f.size}\t{file_name(f)}\t{f.partition}\t{f.base_offset}\t{f.rows}\t"
                   + ";".join(f"{first}:{t}" for first, t in f.runs)
                   + f"\t{'' if f.ptime is None else f.ptime}\n" for f in scan.files)


def segment_frame(spark: SparkSession, scan: NativeScan, schema: StructType,
                  fs_options: Mapping[str, str]) -> DataFrame:
    """``scan`` read by the jar's segment format: the metadata columns are filled inside the scan as column
    vectors, so no projection copies the rows (docs/design.md, "The native read path").

    Raises:
        InvalidOptionError: txnlog's jar does not load into this Spark, or the session is not a classic one.
    """
    from pyspark.errors.exceptions.captured import capture_sql_exception
    from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame

    from coordinator import jvm

    options = {"ignoreMissingFiles": "false", "ignoreCorruptFiles": "false", **fs_options,
               "txnlog.topic": scan.topic, "txnlog.segments": segments_option(scan)}
    jss = jvm.jvm_session(spark, "the native read path", "read with readPath=python")
    loaded = capture_sql_exception(jvm.segment_scans(spark).load)(jss, schema.json(), json.dumps(options),
                                                                  scan.files_json())
    return ClassicFrame(loaded, spark)


