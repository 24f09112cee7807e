"""The native write path's driver side without Spark: files laid out as Spark's Parquet writer leaves them in a
write's staging folder, store-wide GC running beside the write, and the publish step."""

from __future__ import annotations

import io
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from coordinator import IncompleteWriteError, TransactionCoordinator, create_topic, get_topic, read_snapshot
from coordinator.layout import NATIVE_LEASE, NATIVE_STAGING, data_dir
from coordinator.maintenance import NATIVE_LEASE_MS, sweep_native_staging
from coordinator.store import Store
from core_helpers import SCHEMA, Backend, rows
from txnsink.native import publish_files
from txnsink.options import parse_options
from txnsink.publish import StagingLease, output_folder, spark_files, staging_folder


def _task_file(store: Store, tag: str, split: int, ids: range) -> str:
    """Put the file Spark task ``split`` commits into the write's output folder (named as Spark names it)."""
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows(ids, f"task-{split}"), schema=SCHEMA), buf)
    path = f"{output_folder(tag)}/part-{split:05d}-{uuid.uuid4()}-c000.snappy.parquet"
    store.put(path, buf.getvalue())
    return path


def _later(store: Store, ms: int) -> float:
    """The store's time ``ms`` from now, in ms."""
    return store.now() * 1000 + ms


def test_gc_leaves_a_running_native_writes_staging_folder_while_its_lease_is_renewed(backend: Backend) -> None:
    """G5 (no lost work). Before, store-wide GC deleted a staging folder as soon as every file in it was older than
    the grace period, so with a short grace it deleted the files of tasks that had finished while a slow task of
    the same write still ran. A running write's lease now keeps its folder, whatever the grace period, until the
    lease lapses; a dead writer's folder still goes."""
    store = backend.open()
    tag = uuid.uuid4().hex[:16]
    with StagingLease(store, tag, renew_s=0.05) as lease:
        first = _task_file(store, tag, 0, range(0, 50))
        time.sleep(0.01)
        assert sweep_native_staging(store, grace_ms=0).deleted_files == []
        assert store.list_info(output_folder(tag))[0].path == first
        renewed = lease.renewals
        deadline = time.monotonic() + 5
        while lease.renewals < renewed + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.renewals >= renewed + 3  # renewed in the background while the write runs
        assert sweep_native_staging(store, grace_ms=0, now=_later(store, NATIVE_LEASE_MS // 2)).deleted_files == []
    stopped = lease.renewals
    time.sleep(0.2)
    assert lease.renewals == stopped  # no renewal after the write ended
    dead = [f"{NATIVE_STAGING}/old-driver/part-00000-x-c000.snappy.parquet"]  # a folder without a lease
    store.put(dead[0], b"PAR1")
    report = sweep_native_staging(store, grace_ms=0, now=_later(store, NATIVE_LEASE_MS + 60_000))
    assert sorted(report.deleted_files) == sorted([*dead, first, f"{staging_folder(tag)}/{NATIVE_LEASE}"])
    assert store.list_info(NATIVE_STAGING) == []


def _published(backend: Backend) -> list[int]:
    return sorted(read_snapshot(backend.open(), ["t"])["t"].column("id").to_pylist())


@pytest.mark.parametrize("gc", ["before-task-1", "none"])
def test_the_publish_step_publishes_exactly_what_sparks_tasks_reported_or_nothing(backend: Backend, gc: str) -> None:
    """G1/G5. A 100-row write by two Spark tasks: task 0 commits its 50 rows, then store-wide GC runs past the
    write's lease (its driver paused that long) and deletes them, then task 1 commits its 50. Before, the driver
    published the 50 rows it found and reported them as the write. The publish step now checks the files against
    the 100 rows Spark's tasks reported writing: it fails, publishes nothing and leaves no file behind. Without GC
    it publishes all 100."""
    store = backend.open()
    create_topic(store, "t", SCHEMA, 2)
    meta = get_topic(store, "t")
    tag = uuid.uuid4().hex[:16]
    _task_file(store, tag, 0, range(0, 50))
    if gc == "before-task-1":
        gone = sweep_native_staging(store, grace_ms=0, now=_later(store, NATIVE_LEASE_MS + 60_000))
        assert len(gone.deleted_files) == 1
    _task_file(store, tag, 1, range(50, 100))
    store.put(f"{output_folder(tag)}/_SUCCESS", b"")
    files = spark_files(store, output_folder(tag), meta.partitions, 0, False)
    opts = parse_options({"path": backend.url, "topic": "t"})
    if gc == "none":
        got = publish_files(store, opts, meta, tag, files, None, 100)
        assert (got.rows, got.segments) == (100, 2)
        assert _published(backend) == list(range(100))
        return
    with pytest.raises(IncompleteWriteError, match=r"reported writing 100 rows, but the 1 files .* hold 50"):
        publish_files(store, opts, meta, tag, files, None, 100)
    assert _published(backend) == []
    assert [n for p in range(2) for n in store.list(data_dir("t", p))] == []  # the moved file was deleted
    st = TransactionCoordinator(backend.open()).log.refresh()
    assert st.producers == {}  # the write's ephemeral producer ended with its abort
