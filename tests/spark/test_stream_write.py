"""Streaming writes: ``df.writeStream.format("txnlog")``, one transaction per micro-batch, exactly once."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import TransactionCoordinator, open_store, read_snapshot
from coordinator.layout import data_dir

pytestmark = pytest.mark.spark

SCHEMA = "id long, grp string"


def make_input(folder: Path, files: int, rows: int, start: int = 0) -> list[int]:
    """JSON input files, one micro-batch each with maxFilesPerTrigger=1; returns the ids written."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for f in range(start, start + files):
        lines = []
        for r in range(rows):
            i = f * rows + r
            ids.append(i)
            lines.append(json.dumps({"id": i, "grp": f"g{i % 5}"}))
        (folder / f"part-{f:04d}.json").write_text("\n".join(lines) + "\n")
    return ids


def run_stream(spark: Any, src: Path, lake: str, cp: Path, **options: str) -> Any:
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src))
    w = df.selectExpr("id", "grp", "id * 10 as tenfold").writeStream.format("txnlog")
    for k, v in {"topic": "out", "checkpointLocation": str(cp), **options}.items():
        w = w.option(k, v)
    q = w.trigger(availableNow=True).start(lake)
    await_quietly(q)
    return q


def await_quietly(q: Any) -> None:
    """Wait for an availableNow query; a failure stays available as ``q.exception()``."""
    from pyspark.errors import StreamingQueryException

    try:
        q.awaitTermination(240)
    except StreamingQueryException:
        pass


def out_ids(lake: str, topic: str = "out") -> list[int]:
    return sorted(read_snapshot(lake, [topic])[topic].column("id").to_pylist())


def data_files(lake: str, topic: str, partitions: int) -> int:
    store = open_store(lake)
    return sum(len(store.list(data_dir(topic, p))) for p in range(partitions))


def app_meta(lake: str, app: str) -> Any:
    return TransactionCoordinator(open_store(lake)).log.refresh().apps.get(app)


def gc_all(lake: str, topic: str, partitions: int) -> None:
    from coordinator.maintenance import gc_partition

    coord = TransactionCoordinator(open_store(lake))
    for p in range(partitions):
        gc_partition(coord, topic, p, grace_ms=0)


def test_each_micro_batch_is_one_transaction_keyed_by_query_and_batch(spark: Any, lake: str, tmp_path: Path) -> None:
    ids = make_input(tmp_path / "in", 3, 10)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", numPartitions="2", partitionKey="grp")
    assert q.exception() is None
    table = read_snapshot(lake, ["out"])["out"]
    assert sorted(table.column("id").to_pylist()) == ids
    assert table.column("tenfold").to_pylist() == [i * 10 for i in table.column("id").to_pylist()]
    # Each micro-batch committed version <batchId> of the app "spark.<query id>" (Delta's SetTransaction); the
    # query id is the one Spark gives the tasks (and keeps in <checkpoint>/metadata).
    qid = json.loads((tmp_path / "cp" / "metadata").read_text())["id"]
    assert qid == str(q.id)
    meta = app_meta(lake, f"spark.{qid}")
    assert meta is not None and meta.version == 2
    state = TransactionCoordinator(open_store(lake)).log.refresh()
    assert not state.producers  # no producer, no epoch, no run records: nothing a zombie could fence
    assert not open_store(lake).list_dirs("_sink")


def test_restart_from_checkpoint_continues_exactly_once(spark: Any, lake: str, tmp_path: Path) -> None:
    ids = make_input(tmp_path / "in", 2, 5)
    run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", transactionalId="etl-stream")
    ids += make_input(tmp_path / "in", 2, 5, start=2)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", transactionalId="etl-stream")
    assert q.exception() is None
    assert out_ids(lake) == ids
    meta = app_meta(lake, f"etl-stream.{q.id}")
    assert meta is not None and meta.version == 3


def test_replayed_batch_after_lost_commit_log_entry_publishes_nothing_twice(
    spark: Any, lake: str, tmp_path: Path
) -> None:
    ids = make_input(tmp_path / "in", 3, 8)
    run_stream(spark, tmp_path / "in", lake, tmp_path / "cp")
    files_before = data_files(lake, "out", 1)
    commits = sorted(os.listdir(tmp_path / "cp" / "commits"), key=lambda n: int(n) if n.isdigit() else -1)
    # as if the driver died after the sink committed but before Spark wrote its commit log entry
    os.remove(tmp_path / "cp" / "commits" / commits[-1])
    crc = tmp_path / "cp" / "commits" / f".{commits[-1]}.crc"
    if crc.exists():
        crc.unlink()
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None
    assert (tmp_path / "cp" / "commits" / commits[-1]).exists()  # Spark did replay that batch
    assert out_ids(lake) == ids
    # The replay's staged files are garbage of a decided attempt: GC deletes them, nothing committed.
    assert data_files(lake, "out", 1) > files_before
    gc_all(lake, "out", 1)
    assert data_files(lake, "out", 1) == files_before
    assert out_ids(lake) == ids


def test_new_checkpoint_with_old_transactional_id_never_skips_data(spark: Any, lake: str, tmp_path: Path) -> None:
    first = make_input(tmp_path / "a", 2, 4)
    run_stream(spark, tmp_path / "a", lake, tmp_path / "cp1", transactionalId="shared")
    second = make_input(tmp_path / "b", 2, 4, start=100)
    run_stream(spark, tmp_path / "b", lake, tmp_path / "cp2", transactionalId="shared")  # batch ids 0, 1 again
    assert out_ids(lake) == sorted(first + second)


def test_checkpoint_from_the_session_conf_works(spark: Any, lake: str, tmp_path: Path) -> None:
    ids = make_input(tmp_path / "in", 2, 3)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "conf-cp"))
    try:
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        q = df.writeStream.format("txnlog").option("topic", "out").trigger(availableNow=True).start(lake)
        await_quietly(q)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert q.exception() is None
    assert out_ids(lake) == ids


def test_stream_option_and_mode_errors(spark: Any, lake: str, tmp_path: Path) -> None:
    make_input(tmp_path / "in", 1, 3)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", numPartitions="zero")
    assert q.exception() is not None and "option numPartitions='zero'" in str(q.exception())
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp-v", txnAppId="x", txnVersion="1")
    assert q.exception() is not None and "txnAppId/txnVersion are for batch writes" in str(q.exception())
    agg = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")).groupBy("grp").count()
    q = (agg.writeStream.format("txnlog").outputMode("complete").option("topic", "counts")
         .option("checkpointLocation", str(tmp_path / "cp2")).trigger(availableNow=True).start(lake))
    await_quietly(q)
    assert q.exception() is not None and "outputMode('complete') is not supported" in str(q.exception())
    assert not os.path.exists(os.path.join(lake, "topics", "counts"))


# -- the commit protocol driven directly, the way Spark drives it ---------------------------------------------


QID = "5f0c2b8e-1b1c-4c5e-9d0a-000000000001"


def direct_writer(lake: str, **extra: str) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer

    options = {"path": lake, "topic": "direct", **extra}
    return make_stream_writer(options, StructType([StructField("id", LongType())]), False)


def batch(ids: list[int]) -> Any:
    return iter([pa.record_batch({"id": pa.array(ids, pa.int64())})])


def task(attempt_id: int, batch_id: int, query: str | None = QID) -> Any:
    from txnsink.staging import TaskIds

    return TaskIds(0, 0, attempt_id, query, batch_id)


def test_committing_the_same_batch_twice_publishes_once(lake: str) -> None:
    w = direct_writer(lake)
    m1 = w.stage(batch([1, 2, 3]), task(1, 0))
    w.commit([m1], 0)
    replay_writer = direct_writer(lake)  # a fresh writer, as in a fresh Python worker after a restart
    m2 = replay_writer.stage(batch([1, 2, 3]), task(7, 0))
    replay_writer.commit([m2, None], 0)  # a no-op, not an error
    assert out_ids(lake, "direct") == [1, 2, 3]
    store = open_store(lake)
    assert store.exists(m2.segments[0].path)  # never deleted by the sink ...
    gc_all(lake, "direct", 1)
    assert not store.exists(m2.segments[0].path)  # ... GC removes it: its attempt is decided
    assert store.exists(m1.segments[0].path)
    m3 = replay_writer.stage(batch([4]), task(8, 1))
    replay_writer.commit([m3], 1)
    assert out_ids(lake, "direct") == [1, 2, 3, 4]


def test_abort_decides_then_deletes_staged_files(lake: str) -> None:
    w = direct_writer(lake)
    m = w.stage(batch([5, 6]), task(3, 0))
    w.abort([m, None], 0)
    assert not open_store(lake).exists(m.segments[0].path)
    assert out_ids(lake, "direct") == []
    # the aborted attempt can never commit afterwards
    from coordinator import InvalidTxnStateError

    with pytest.raises(InvalidTxnStateError, match="reaped|aborted"):
        w.commit([m], 0)


def test_zombie_driver_is_a_no_op_and_the_live_query_goes_on(lake: str) -> None:
    live, zombie = direct_writer(lake), direct_writer(lake)  # two drivers on one checkpoint
    zombie.commit([zombie.stage(batch([1]), task(1, 0))], 0)
    live.commit([live.stage(batch([1]), task(2, 0))], 0)  # the restart replays batch 0: no-op
    live.commit([live.stage(batch([2]), task(3, 1))], 1)
    zombie.commit([zombie.stage(batch([2]), task(4, 1))], 1)  # the zombie's late commit: no-op, no error
    zombie.commit([zombie.stage(batch([3]), task(5, 2))], 2)  # the zombie is first with batch 2 (same rows)
    live.commit([live.stage(batch([3]), task(6, 2))], 2)  # no-op: the live query is not failed
    live.commit([live.stage(batch([4]), task(7, 3))], 3)
    assert out_ids(lake, "direct") == [1, 2, 3, 4]


def test_stream_writer_repr_hides_secrets(lake: str) -> None:
    w = direct_writer(lake, **{"s3.key": "AKIDHIDDEN", "s3.secret": "SECRETHIDDEN"})
    assert "HIDDEN" not in repr(w)


def test_a_task_without_query_id_is_refused_clearly(lake: str) -> None:
    from coordinator import InvalidOptionError

    w = direct_writer(lake)
    with pytest.raises(InvalidOptionError, match=r"sql\.streaming\.queryId"):
        w.stage(batch([1]), task(1, 0, query=None))
