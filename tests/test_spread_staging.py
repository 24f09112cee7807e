"""Unkeyed writes of the data source's tasks (``txnsink.staging``) spread evenly over a topic's partitions: small
tasks, tasks of several segments, and a retried attempt exactly as the first; driven through the sink's own
writer and staging, without Spark (``tests/spark/test_write_spread.py`` runs the same through Spark, on both
write paths)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import SegmentRef, open_store, read_snapshot
from txnsink import make_writer
from txnsink.staging import TaskIds, even_shares, stage_batches


def _schema() -> object:
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField("id", LongType())])


def _batches(start: int, rows: int, per_batch: int) -> Iterator[pa.RecordBatch]:
    for lo in range(start, start + rows, per_batch):
        yield pa.record_batch({"id": pa.array(range(lo, min(lo + per_batch, start + rows)), pa.int64())})


def _placement(segs: tuple[SegmentRef, ...]) -> Counter[int]:
    out: Counter[int] = Counter()
    for s in segs:
        out[s.partition] += s.rows
    return out


@pytest.mark.parametrize(("counts", "rows", "first", "want"), [
    ([0, 0, 0, 0], 10, 0, [(0, 3), (1, 3), (2, 2), (3, 2)]),
    ([0, 0, 0, 0], 10, 2, [(2, 3), (3, 3), (0, 2), (1, 2)]),
    ([0, 0, 0, 0], 2, 3, [(3, 1), (0, 1)]),
    ([100, 100, 0, 0], 50, 2, [(2, 25), (3, 25)]),  # the lowest filled first
    ([100, 100, 0, 0], 250, 2, [(2, 113), (3, 113), (0, 12), (1, 12)]),
    ([5], 7, 0, [(0, 7)]),
])
def test_even_shares_fill_the_lowest_partitions_first(counts: list[int], rows: int, first: int,
                                                      want: list[tuple[int, int]]) -> None:
    got = even_shares(counts, rows, first)
    assert got == want
    assert sum(n for _, n in got) == rows


@pytest.mark.parametrize(("rows", "per_batch"), [(10, 10), (1000, 1000), (1000, 7), (3, 1)])
def test_one_small_task_spreads_evenly_over_every_partition(tmp_path: Path, rows: int, per_batch: int) -> None:
    """Before, a task put all its rows into one partition: 1,000 of 1,000 rows into one partition of 4."""
    lake = str(tmp_path / "lake")
    w = make_writer({"path": lake, "topic": "t", "numPartitions": "4"}, _schema(), False)
    msg = stage_batches(open_store(lake), w.plan, _batches(0, rows, per_batch), TaskIds(0, 0, 0), w.txn)
    got = _placement(msg.segments)
    assert sum(got.values()) == rows
    assert len(got) == min(rows, 4) and max(got.values()) - min(got.values()) <= 1, got
    w.commit([msg])
    table = read_snapshot(lake, ["t"])["t"]
    for p in range(4):  # each partition holds a contiguous run of the task's rows, in order
        ids = [r["id"] for r in table.to_pylist() if r["_partition"] == p]
        assert ids == list(range(ids[0], ids[0] + len(ids))) if ids else True


def test_a_task_of_several_segments_stages_whole_segments_in_turn_then_evens_out(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    w = make_writer({"path": lake, "topic": "t", "numPartitions": "4"}, _schema(), False)
    target = 16 * 1000  # 1,000 rows per segment (an int64 and the producer time)
    msg = stage_batches(open_store(lake), w.plan, _batches(0, 5500, 100), TaskIds(1, 0, 1), w.txn,
                        target_bytes=target)
    sizes = [s.rows for s in msg.segments]
    assert sizes[:5] == [1000] * 5  # whole segments, one partition after another
    got = _placement(msg.segments)
    assert sum(got.values()) == 5500 and len(got) == 4
    first = (w.plan.rotation + 1) % 4
    # 5 segments over 4 partitions (the first partition has two), then the last 500 rows even out the other three
    assert got[first] == 2000 and sorted(got[(first + i) % 4] for i in (1, 2, 3)) == [1166, 1167, 1167], got
    assert [s.partition for s in msg.segments[:5]] == [(first + i) % 4 for i in range(5)]


def test_a_retried_attempt_places_its_rows_as_the_first_did(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    store = open_store(lake)
    w = make_writer({"path": lake, "topic": "t", "numPartitions": "3"}, _schema(), False)
    first = stage_batches(store, w.plan, _batches(0, 400, 30), TaskIds(5, 0, 11), w.txn, target_bytes=1600)
    retry = stage_batches(store, w.plan, _batches(0, 400, 30), TaskIds(5, 1, 12), w.txn, target_bytes=1600)
    assert [(s.partition, s.rows) for s in first.segments] == [(s.partition, s.rows) for s in retry.segments]
    assert {s.path for s in first.segments}.isdisjoint(s.path for s in retry.segments)
    w.commit([retry])
    assert read_snapshot(lake, ["t"])["t"].num_rows == 400
