"""Filter pushdown of batch reads on the metadata columns: same rows as Spark's own filtering, and real pruning."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)
from pyspark.sql import functions as F

from coordinator import create_topic, open_store
from coordinator.layout import data_dir

pytestmark = pytest.mark.spark

PUSHDOWN_CONF, SCHEMA, ids, produce, reader, rows = (base.PUSHDOWN_CONF, base.SCHEMA, base.ids, base.produce,
                                                     base.reader, base.rows)
# the batch read tests' fixtures
orders, pushdown, many_segments, with_open_and_aborted = (base.orders, base.pushdown, base.many_segments,
                                                          base.with_open_and_aborted)


# -- pushdown -----------------------------------------------------------------------------------------------

FILTERS = [
    "_partition = 1",
    "_offset >= 3 and _offset < 7 and _partition in (0, 5)",
    "_offset > 8 or _partition = 1",
    "_offset in (0, 4, 9, 200) and name like 'n%'",
    "_topic = 'orders' and _offset <= 2 and id = 1",
    "_topic in ('none')",
    "not (_offset = 3) or _offset is null",
    "_timestamp >= {last}",
    "_timestamp > {first} and _partition = 0",
    "_timestamp in ({first}, {last}) or _offset = 1",
]


def _ts_literal(micros: int) -> str:
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
    return f"timestamp'{when.strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00'"


@pytest.mark.parametrize("pushdown", [True], indirect=True)
def test_pushdown_gives_the_same_rows_as_spark_filtering(pushdown: Any, with_open_and_aborted: str) -> None:
    spark, lake = pushdown, with_open_and_aborted
    times = reader(spark, lake, topic="orders").select(F.unix_micros("_timestamp").alias("us")).distinct()
    us = sorted(r.us for r in times.collect())
    assert len(us) >= 3
    wheres = [w.format(first=_ts_literal(us[0]), last=_ts_literal(us[-1])) for w in FILTERS]
    for iso in ("read_committed", "read_uncommitted"):
        # without pushdown: Spark filters a copy of the whole read, which no data source is involved in
        whole = reader(spark, lake, topic="orders", isolationLevel=iso)
        copy = spark.createDataFrame(whole.collect(), whole.schema)
        expected = [copy.where(w).select(F.lit(i).alias("q"), "id", "_offset") for i, w in enumerate(wheres)]
        # with pushdown: one scan per filter, all in one job; every scan is planned (and pushed down) on its own
        scans = [reader(spark, lake, topic="orders", isolationLevel=iso).where(w)
                 .select(F.lit(i).alias("q"), "id", "_offset") for i, w in enumerate(wheres)]
        got, want = scans[0], expected[0]
        for scan, exp in zip(scans[1:], expected[1:], strict=True):
            got, want = got.unionAll(scan), want.unionAll(exp)
        got_rows = sorted(got.collect())
        assert got_rows == sorted(want.collect()), iso
        per_filter = {i: sum(1 for r in got_rows if r.q == i) for i in range(len(wheres))}
        # sanity: the filters select different, non-trivial parts of the data
        assert per_filter[0] == 6 + (2 if iso == "read_uncommitted" else 0)
        assert per_filter[4] == 1 and per_filter[5] == 0 and per_filter[8] > 0


@pytest.mark.parametrize("pushdown", [True], indirect=True)
def test_pushdown_prunes_partitions_and_segments(pushdown: Any, many_segments: str) -> None:
    spark = pushdown
    lake = many_segments
    create_topic(open_store(lake), "two", SCHEMA, partitions=2)
    produce(lake, "two", [rows(0, 5)], partition=0, tid="w0")
    produce(lake, "two", [rows(5, 5)], partition=1, tid="w1")
    # damage partition 0 of "two" and segment 0 of "big": a read that needs them fails, a pruned one does not
    store = open_store(lake)
    for topic, name in (("two", store.list(data_dir("two", 0))[0]), ("big", store.list(data_dir("big", 0))[0])):
        store.put(f"{data_dir(topic, 0)}/{name}", b"garbage")
    with pytest.raises(Exception, match="segment .* (truncated|checksum)"):
        reader(spark, lake, topic="two").collect()
    assert ids(reader(spark, lake, topic="two").filter("_partition = 1")) == list(range(5, 10))
    assert ids(reader(spark, lake, topic="two").filter("_topic = 'nope'")) == []
    big = reader(spark, lake, topic="big", maxPartitionBytes="1")
    assert ids(big.filter("_offset >= 120 and _offset < 130")) == list(range(120, 130))
    assert big.filter("_offset >= 50").rdd.getNumPartitions() == 11
    assert ids(big.filter("_offset in (75, 580)")) == [75, 580]
    assert big.filter("_offset in (75, 580)").rdd.getNumPartitions() == 2


# -- compaction ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pushdown", [True], indirect=True)
def test_compacted_segments_read_the_same_with_and_without_pushdown(pushdown: Any, with_open_and_aborted: str) -> None:
    from coordinator import TransactionCoordinator
    from coordinator.maintenance import compact_partition

    spark, lake = pushdown, with_open_and_aborted
    produce(lake, "orders", [rows(20, 2), rows(22, 2)], partition=0, tid="more")
    times = sorted(r.us for r in reader(spark, lake, topic="orders").select(F.unix_micros("_timestamp").alias("us"))
                   .distinct().collect())
    wheres = ["true", f"_timestamp > {_ts_literal(times[0])} and _timestamp < {_ts_literal(times[-1])}",
              f"_timestamp = {_ts_literal(times[1])}", "_offset in (1, 11)"]

    def snapshot_rows() -> list[list[Any]]:
        out = []
        for iso in ("read_committed", "read_uncommitted"):
            for w in wheres:
                df = reader(spark, lake, topic="orders", isolationLevel=iso).where(w)
                out.append(sorted(df.select("id", "_partition", "_offset", "_timestamp").collect()))
        return out

    before = snapshot_rows()
    report = compact_partition(TransactionCoordinator(open_store(lake)), "orders", 0, target_bytes=1 << 30)
    assert report is not None
    assert any(s.runs for s in TransactionCoordinator(open_store(lake)).partition("orders", 0).segments)
    assert snapshot_rows() == before
    assert len(before[0]) == 20 and 0 < len(before[2]) < 20 and len(before[3]) == 3
    assert len(before[4]) == 25  # read_uncommitted adds the 5 staged records
