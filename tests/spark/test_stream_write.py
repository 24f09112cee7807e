"""Streaming writes: ``df.writeStream.format("txnlog")``, one transaction per micro-batch, exactly once."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from coordinator import ProducerFencedError, TransactionCoordinator, open_store, read_snapshot
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


def test_each_micro_batch_is_one_transaction_keyed_by_query_and_batch(spark: Any, lake: str, tmp_path: Path) -> None:
    ids = make_input(tmp_path / "in", 3, 10)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", numPartitions="2", partitionKey="grp")
    assert q.exception() is None
    table = read_snapshot(lake, ["out"])["out"]
    assert sorted(table.column("id").to_pylist()) == ids
    assert table.column("tenfold").to_pylist() == [i * 10 for i in table.column("id").to_pylist()]
    # the query id is what Spark keeps in <checkpoint>/metadata; it exists by the first streamWriter() call
    qid = json.loads((tmp_path / "cp" / "metadata").read_text())["id"]
    assert qid == str(q.id)
    state = TransactionCoordinator(open_store(lake)).log.refresh()
    tid = f"spark-query-{qid}"  # the default transactionalId
    assert tid in state.producers
    assert sorted(state.app_keys[tid]) == [f"{qid}/{b}" for b in range(3)]
    # one run, one epoch
    assert state.producers[tid].epoch == 0
    assert len(open_store(lake).list(f"_sink/{tid}/runs")) == 1


def test_restart_from_checkpoint_continues_exactly_once_and_fences_the_old_run(
    spark: Any, lake: str, tmp_path: Path
) -> None:
    ids = make_input(tmp_path / "in", 2, 5)
    run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", transactionalId="etl-stream")
    ids += make_input(tmp_path / "in", 2, 5, start=2)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", transactionalId="etl-stream")
    assert q.exception() is None
    assert out_ids(lake) == ids
    state = TransactionCoordinator(open_store(lake)).log.refresh()
    assert state.producers["etl-stream"].epoch == 1  # the second run's first commit bumped the epoch
    assert len(state.app_keys["etl-stream"]) == 4


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
    assert data_files(lake, "out", 1) == files_before  # the replay's staged files were deleted


def test_new_checkpoint_with_old_transactional_id_never_skips_data(spark: Any, lake: str, tmp_path: Path) -> None:
    first = make_input(tmp_path / "a", 2, 4)
    run_stream(spark, tmp_path / "a", lake, tmp_path / "cp1", transactionalId="shared")
    second = make_input(tmp_path / "b", 2, 4, start=100)
    run_stream(spark, tmp_path / "b", lake, tmp_path / "cp2", transactionalId="shared")  # batch ids 0, 1 again
    assert out_ids(lake) == sorted(first + second)


def test_stream_option_and_mode_errors(spark: Any, lake: str, tmp_path: Path) -> None:
    make_input(tmp_path / "in", 1, 3)
    q = run_stream(spark, tmp_path / "in", lake, tmp_path / "cp", numPartitions="zero")
    assert q.exception() is not None and "option numPartitions='zero'" in str(q.exception())
    agg = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")).groupBy("grp").count()
    q = (agg.writeStream.format("txnlog").outputMode("complete").option("topic", "counts")
         .option("checkpointLocation", str(tmp_path / "cp2")).trigger(availableNow=True).start(lake))
    await_quietly(q)
    assert q.exception() is not None and "outputMode('complete') is not supported" in str(q.exception())
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "conf-cp"))
    try:
        df = spark.readStream.schema(SCHEMA).json(str(tmp_path / "in"))
        q = df.writeStream.format("txnlog").option("topic", "nocp").trigger(availableNow=True).start(lake)
        await_quietly(q)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert q.exception() is not None and "needs option checkpointLocation" in str(q.exception())
    assert not os.path.exists(os.path.join(lake, "topics", "counts"))


# -- the commit protocol driven directly, the way Spark drives it ---------------------------------------------


def direct_writer(lake: str, cp: Path, **extra: str) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_stream_writer

    cp.mkdir(parents=True, exist_ok=True)
    if not (cp / "metadata").exists():
        (cp / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
    options = {"path": lake, "topic": "direct", "checkpointLocation": str(cp), **extra}
    return make_stream_writer(options, StructType([StructField("id", LongType())]), False)


def batch(ids: list[int]) -> Any:
    return iter([pa.record_batch({"id": pa.array(ids, pa.int64())})])


def test_committing_the_same_batch_twice_publishes_once(lake: str, tmp_path: Path) -> None:
    from txnsink.staging import TaskIds

    w = direct_writer(lake, tmp_path / "cp")
    m1 = w.stage(batch([1, 2, 3]), TaskIds(0, 0, 1, "run-a", 0))
    w.commit([m1], 0)
    replay_writer = direct_writer(lake, tmp_path / "cp")  # a fresh writer, as in a fresh Python worker
    m2 = replay_writer.stage(batch([1, 2, 3]), TaskIds(0, 0, 7, "run-b", 0))
    store = open_store(lake)
    assert store.exists(m2.segments[0].path)
    replay_writer.commit([m2, None], 0)
    assert out_ids(lake, "direct") == [1, 2, 3]
    assert not store.exists(m2.segments[0].path)  # the replay's staged file was deleted
    m3 = replay_writer.stage(batch([4]), TaskIds(0, 0, 8, "run-b", 1))
    replay_writer.commit([m3], 1)
    assert out_ids(lake, "direct") == [1, 2, 3, 4]


def test_abort_deletes_staged_files(lake: str, tmp_path: Path) -> None:
    from txnsink.staging import TaskIds

    w = direct_writer(lake, tmp_path / "cp")
    m = w.stage(batch([5, 6]), TaskIds(1, 0, 3, "run-a", 0))
    w.abort([m, None], 0)
    assert not open_store(lake).exists(m.segments[0].path)
    assert out_ids(lake, "direct") == []


def test_zombie_run_is_fenced_and_publishes_nothing(lake: str, tmp_path: Path) -> None:
    from txnsink.staging import TaskIds

    old = direct_writer(lake, tmp_path / "cp")
    old.commit([old.stage(batch([1]), TaskIds(0, 0, 1, "run-old", 0))], 0)
    new = direct_writer(lake, tmp_path / "cp")
    new.commit([new.stage(batch([1]), TaskIds(0, 0, 1, "run-new", 0))], 0)  # the restart replays batch 0
    new.commit([new.stage(batch([2]), TaskIds(0, 0, 2, "run-new", 1))], 1)
    zombie_msg = old.stage(batch([99]), TaskIds(0, 0, 2, "run-old", 2))
    with pytest.raises(ProducerFencedError, match="is fenced"):
        old.commit([zombie_msg], 2)
    assert out_ids(lake, "direct") == [1, 2]
    assert not open_store(lake).exists(zombie_msg.segments[0].path)
    new.commit([new.stage(batch([3]), TaskIds(0, 0, 3, "run-new", 2))], 2)  # the live run goes on
    assert out_ids(lake, "direct") == [1, 2, 3]


def test_stream_writer_repr_hides_secrets(lake: str, tmp_path: Path) -> None:
    w = direct_writer(lake, tmp_path / "cp", **{"s3.key": "AKIDHIDDEN", "s3.secret": "SECRETHIDDEN"})
    assert "HIDDEN" not in repr(w)


def test_missing_checkpoint_metadata_is_named(lake: str, tmp_path: Path) -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from coordinator import InvalidOptionError
    from txnsink import make_stream_writer

    schema = StructType([StructField("id", LongType())])
    with pytest.raises(InvalidOptionError, match="metadata does not exist"):
        make_stream_writer({"path": lake, "topic": "t", "checkpointLocation": str(tmp_path / "none")}, schema, False)
    shutil.rmtree(tmp_path / "none", ignore_errors=True)
