"""Native micro-batch writes: with ``txnsink.enable_native``, ``df.writeStream.format("txnlog")`` writes each
micro-batch through Spark's own Parquet writer and commits it with the streaming sink's key (``<transactionalId or
"spark">.<query id>``, version ``batchId``), exactly once across replays, zombies, kills and changes of path."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import test_stream_write as sw  # tests/spark is on sys.path (rootdir-relative test modules)
import test_stream_write_kill as kill

import txnsink
from coordinator import TransactionCoordinator, faults, open_store, read_snapshot

pytestmark = pytest.mark.spark

QID = "5f0c2b8e-1b1c-4c5e-9d0a-0000000000aa"


@pytest.fixture
def native(spark: Any) -> Iterator[Any]:
    txnsink.enable_native(spark)
    try:
        yield spark
    finally:
        txnsink.disable_native(spark)


@contextlib.contextmanager
def everywhere(injector: Any) -> Iterator[None]:
    """``injector`` in every thread: the micro-batch is written from the thread py4j calls back on."""
    faults.install(injector, all_threads=True)
    try:
        yield
    finally:
        faults.install(None, all_threads=True)


def committed_by(lake: str, app: str) -> tuple[int, str]:
    """(last version, path) of ``app``: the native path commits through a producer transaction (its token is the
    transaction id, ``p.<pid>.<epoch>.<n>``); the data source's streaming writer with a random attempt token."""
    meta = sw.app_meta(lake, app)
    assert meta is not None, app
    return meta.version, "native" if meta.token.startswith("p.") else "python"


def plan_of(q: Any) -> str:
    return str(q._jsq.streamingQuery().lastExecution().executedPlan().toString())


def rows(lake: str, topic: str) -> list[tuple[Any, ...]]:
    t = read_snapshot(lake, [topic])[topic]
    return sorted(zip(*(t.column(c).to_pylist() for c in ("id", "grp", "tenfold")), strict=True))


def placement(lake: str, topic: str) -> dict[str, int]:
    """Each ``grp`` key's partition (one per key, or the assertion fails)."""
    t = read_snapshot(lake, [topic])[topic]
    got: dict[str, set[int]] = {}
    for g, p in zip(t.column("grp").to_pylist(), t.column("_partition").to_pylist(), strict=True):
        got.setdefault(g, set()).add(p)
    assert all(len(ps) == 1 for ps in got.values()), got
    return {g: ps.pop() for g, ps in got.items()}


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_micro_batches_are_written_natively_with_the_python_paths_rows(native: Any, tmp_path: Path,
                                                                       keyed: bool) -> None:
    lake = str(tmp_path / "lake")
    sw.make_input(tmp_path / "in", 3, 20)
    key = {"partitionKey": "grp"} if keyed else {}
    py = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp-py", topic="py", numPartitions="3",
                       writePath="python", **key)
    nat = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp-nat", topic="nat", numPartitions="3", **key)
    assert py.exception() is None and nat.exception() is None
    assert rows(lake, "nat") == rows(lake, "py") and len(rows(lake, "nat")) == 60
    assert committed_by(lake, f"spark.{nat.id}") == (2, "native")  # one commit per micro-batch, natively
    assert committed_by(lake, f"spark.{py.id}") == (2, "python")
    assert "TxnlogNativeStreamWrite" in plan_of(nat)
    if keyed:
        assert placement(lake, "nat") == placement(lake, "py")  # a key lands where the Python path puts it
    else:
        counts = Counter(read_snapshot(lake, ["nat"])["nat"].column("_partition").to_pylist())
        assert sorted(counts) == [0, 1, 2] and max(counts.values()) - min(counts.values()) <= 3


def _per_file(lake: str, topic: str, files: int, rows: int) -> list[Counter[int]]:
    """Rows per partition of each input file's micro-batch (file ``f`` holds ids ``f * rows`` to ``(f + 1) * rows -
    1``)."""
    t = read_snapshot(lake, [topic])[topic]
    out: list[Counter[int]] = [Counter() for _ in range(files)]
    for i, p in zip(t.column("id").to_pylist(), t.column("_partition").to_pylist(), strict=True):
        out[i // rows][p] += 1
    return out


def test_unkeyed_micro_batches_fill_a_partition_per_task_and_take_turns(native: Any, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import txnsink.streamnative as streamnative

    lake = str(tmp_path / "lake")
    ids = sw.make_input(tmp_path / "in", 4, 50)

    def run(topic: str) -> Any:
        df = native.readStream.schema(sw.SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        q = (df.repartition(2).writeStream.format("txnlog").option("topic", topic).option("numPartitions", "4")
             .option("checkpointLocation", str(tmp_path / f"cp-{topic}")).trigger(availableNow=True).start(lake))
        sw.await_quietly(q)
        assert q.exception() is None
        assert "TxnlogNativeStreamWrite" in plan_of(q)
        return q

    run("sticky")
    assert sw.out_ids(lake, "sticky") == ids
    # each of a micro-batch's 2 tasks wrote its 25 rows into one partition, one file each, 2 partitions apart; the
    # next micro-batch's tasks started one partition further on, so the 4 partitions took turns: 50 rows each
    assert [sorted(c.values()) for c in _per_file(lake, "sticky", 4, 50)] == [[25, 25]] * 4
    assert Counter(read_snapshot(lake, ["sticky"])["sticky"].column("_partition").to_pylist()) == \
        {0: 50, 1: 50, 2: 50, 3: 50}
    assert sw.data_files(lake, "sticky", 4) == 8  # evenly dealt rows would take 4 files a task: 32
    # a task moves to the next partition every STREAM_RUN_ROWS rows: in runs of 10, each task's 25 rows go 10, 10
    # and 5 into three partitions, the second task starting two partitions after the first (p: 10 + 5, p + 1: 10,
    # p + 2: 5 + 10, p + 3: 10)
    monkeypatch.setattr(streamnative, "STREAM_RUN_ROWS", 10)
    run("runs")
    assert sw.out_ids(lake, "runs") == ids
    assert [sorted(c.values()) for c in _per_file(lake, "runs", 4, 50)] == [[10, 10, 15, 15]] * 4


def test_the_spread_column_places_runs_as_the_jars_format_does(spark: Any) -> None:
    """Spark Connect's placement (its driver has no jar): task ``i``'s ``n``-th row in ``(rotation + i * stride +
    n // run) % partitions``."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's convention

    from txnsink.nativeframe import spread_column

    df = spark.range(0, 50, numPartitions=2).select(F.spark_partition_id().alias("task"),
                                                    spread_column(1, 4, 10, 2).alias("p"))
    got = Counter((r.task, r.p) for r in df.collect())
    assert got == {(0, 1): 10, (0, 2): 10, (0, 3): 5, (1, 3): 10, (1, 0): 10, (1, 1): 5}
    evenly = Counter(r.p for r in spark.range(0, 40, numPartitions=1).select(spread_column(3, 4).alias("p")).collect())
    assert evenly == {0: 10, 1: 10, 2: 10, 3: 10}  # run 1: in turn


def test_a_replayed_batch_publishes_nothing_twice(native: Any, lake: str, tmp_path: Path) -> None:
    ids = sw.make_input(tmp_path / "in", 3, 8)
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None
    files_before = sw.data_files(lake, "out", 1)
    commits = tmp_path / "cp" / "commits"
    last = max(n for n in os.listdir(commits) if n.isdigit())
    # as if the driver died after the sink committed but before Spark wrote its commit log entry
    os.remove(commits / last)
    with contextlib.suppress(FileNotFoundError):
        (commits / f".{last}.crc").unlink()
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None
    assert (commits / last).exists()  # Spark did replay that batch ...
    assert "TxnlogNativeStreamWrite" in plan_of(q)  # ... through the native path ...
    assert sw.out_ids(lake) == ids  # ... which published nothing
    assert sw.data_files(lake, "out", 1) == files_before  # (known committed before Spark wrote a file)
    assert committed_by(lake, f"spark.{q.id}") == (2, "native")


def test_a_zombies_late_commit_is_a_no_op_on_either_path(native: Any, lake: str) -> None:
    from txnsink.streamnative import write_micro_batch

    options = {"path": lake, "topic": "z", "transactionalId": "etl"}
    app = f"etl.{QID}"

    def frame(ids: list[int]) -> Any:
        return native.createDataFrame([(i,) for i in ids], "id long")

    state = {"live": False}

    def live_commits_first(name: str) -> None:
        # the zombie has written its files and is about to commit batch 0: the live driver commits it first
        if name == "native.before_commit" and not state["live"]:
            state["live"] = True
            assert write_micro_batch(frame([1, 2]), options, QID, 0).rows == 2

    with everywhere(live_commits_first):
        late = write_micro_batch(frame([1, 2, 99]), options, QID, 0)
    assert state["live"] and late.skipped and late.rows == 0
    assert sorted(sw.out_ids(lake, "z")) == [1, 2]
    assert committed_by(lake, app)[0] == 0
    # the Python path's zombie, late with batch 0, then first with batch 1: the native live query goes on
    py = sw.direct_writer(lake, topic="z", transactionalId="etl")
    py.commit([py.stage(iter([pa.record_batch({"id": pa.array([98], pa.int64())})]), sw.task(1, 0, QID))], 0)
    py.commit([py.stage(iter([pa.record_batch({"id": pa.array([3], pa.int64())})]), sw.task(2, 1, QID))], 1)
    assert write_micro_batch(frame([3]), options, QID, 1).skipped
    assert write_micro_batch(frame([4]), options, QID, 2).rows == 1
    assert sorted(sw.out_ids(lake, "z")) == [1, 2, 3, 4]


def test_switching_paths_between_restarts_stays_exactly_once(native: Any, lake: str, tmp_path: Path) -> None:
    ids = sw.make_input(tmp_path / "in", 2, 5)
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp", writePath="python")
    assert committed_by(lake, f"spark.{q.id}") == (1, "python")
    ids += sw.make_input(tmp_path / "in", 2, 5, start=2)
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None and committed_by(lake, f"spark.{q.id}") == (3, "native")
    # the native path's last batch replayed by the Python path: nothing twice
    commits = tmp_path / "cp" / "commits"
    os.remove(commits / "3")
    with contextlib.suppress(FileNotFoundError):
        (commits / ".3.crc").unlink()
    ids += sw.make_input(tmp_path / "in", 1, 5, start=4)
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp", writePath="python")
    assert q.exception() is None and committed_by(lake, f"spark.{q.id}") == (4, "python")
    assert (commits / "3").exists()
    ids += sw.make_input(tmp_path / "in", 1, 5, start=5)
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None and committed_by(lake, f"spark.{q.id}") == (5, "native")
    got = Counter(sw.out_ids(lake))
    assert [i for i, c in got.items() if c > 1] == [] and sorted(got) == ids


def test_a_failed_micro_batch_leaves_nothing_visible_and_replays_once(native: Any, lake: str,
                                                                      tmp_path: Path) -> None:
    ids = sw.make_input(tmp_path / "in", 2, 6)

    def crash(name: str) -> None:
        if name == "native.before_commit":
            raise RuntimeError("driver failed before the commit")

    with everywhere(crash):
        q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp", numPartitions="2")
    assert q.exception() is not None and "driver failed before the commit" in str(q.exception())
    assert sw.out_ids(lake) == []
    assert sw.data_files(lake, "out", 2) == 0  # the failed batch's files are deleted, not left for GC
    assert os.listdir(os.path.join(lake, "_native-staging")) == []
    # a task failing mid-batch: nothing visible either
    df = native.readStream.schema(sw.SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    bad = (df.selectExpr("if(id = 9, raise_error('bad row 9'), id) as id", "grp").writeStream.format("txnlog")
           .option("topic", "out").option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True)
           .start(lake))
    sw.await_quietly(bad)
    assert bad.exception() is not None and "bad row 9" in str(bad.exception())
    assert sw.out_ids(lake) == [] and sw.data_files(lake, "out", 2) == 0
    q = sw.run_stream(native, tmp_path / "in", lake, tmp_path / "cp")
    assert q.exception() is None and sw.out_ids(lake) == ids
    assert committed_by(lake, f"spark.{q.id}") == (1, "native")


def test_a_stateful_query_keeps_its_state_on_the_native_path(native: Any, lake: str, tmp_path: Path) -> None:
    sw.make_input(tmp_path / "in", 3, 10)
    first = (native.readStream.schema(sw.SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
             .dropDuplicates(["grp"]))
    q = (first.writeStream.format("txnlog").option("topic", "firsts")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start(lake))
    sw.await_quietly(q)
    assert q.exception() is None and committed_by(lake, f"spark.{q.id}")[1] == "native"
    t = read_snapshot(lake, ["firsts"])["firsts"]
    # the first batch holds every group: later batches, which know them from the state store, add none
    assert sorted(t.column("grp").to_pylist()) == [f"g{g}" for g in range(5)]
    assert sorted(t.column("id").to_pylist()) == list(range(5))


def test_the_python_path_still_writes_what_the_native_path_does_not_take(native: Any, lake: str,
                                                                          tmp_path: Path) -> None:
    ids = sw.make_input(tmp_path / "in", 2, 6)
    df = native.readStream.schema(sw.SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    routed = (df.selectExpr("id", "if(id % 2 = 0, 'even', 'odd') as topic").writeStream.format("txnlog")
              .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start(lake))
    sw.await_quietly(routed)
    assert routed.exception() is None and committed_by(lake, f"spark.{routed.id}") == (1, "python")
    assert "TxnlogNativeStreamWrite" not in plan_of(routed)
    tables = read_snapshot(lake, ["even", "odd"])
    assert sorted(tables["even"].column("id").to_pylist() + tables["odd"].column("id").to_pylist()) == ids


def test_write_path_native_that_cannot_apply_fails_naming_why(spark: Any, lake: str, tmp_path: Path) -> None:
    sw.make_input(tmp_path / "in", 1, 4)
    df = spark.readStream.schema(sw.SCHEMA).json(str(tmp_path / "in"))
    txnsink.enable_native(spark)
    try:
        routed = (df.selectExpr("id", "'t' as topic").writeStream.format("txnlog").option("writePath", "native")
                  .option("checkpointLocation", str(tmp_path / "cp1")).trigger(availableNow=True).start(lake))
        sw.await_quietly(routed)
    finally:
        txnsink.disable_native(spark)
    assert routed.exception() is not None
    assert "cannot write this stream: rows name their topic in a topic column" in str(routed.exception())
    q = sw.run_stream(spark, tmp_path / "in", lake, tmp_path / "cp2", writePath="native")  # no rule in force
    assert q.exception() is not None and "txnsink.enable_native(spark) is not in force" in str(q.exception())
    assert not os.path.exists(os.path.join(lake, "topics"))


@pytest.mark.slow
def test_a_sigkilled_native_driver_restarted_gives_exactly_once(tmp_path: Path) -> None:
    child = kill.CHILD.replace("df = spark.readStream", "import txnsink; txnsink.enable_native(spark)\n"
                               "df = spark.readStream")
    assert child != kill.CHILD
    at_kill, final = kill.kill_and_restart(tmp_path, child, ("out",))
    assert 0 < len(at_kill) < 250
    got = Counter(final)
    assert [i for i, c in got.items() if c > 1] == []
    assert sorted(got) == list(range(250))
    meta = next(iter(TransactionCoordinator(open_store(str(tmp_path / "lake"))).log.refresh().apps.values()))
    # the last batch Spark committed is the app's version, written natively by the restarted driver too (how many
    # batches the 10 files took across the kill is Spark's: a replayed batch keeps its id)
    last = max(int(n) for n in os.listdir(tmp_path / "cp" / "commits") if n.isdigit())
    assert last >= 8 and meta.version == last and meta.token.startswith("p."), (last, meta)
