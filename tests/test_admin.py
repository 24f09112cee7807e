"""Consumer-group administration (``coordinator.groups``: reset and delete) and topic administration
(``coordinator.topic_admin``: delete, config) on memory, local disk and S3, checked through what real consumers,
producers and readers then see."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from coordinator import (
    Consumer,
    InvalidOptionError,
    Producer,
    TopicExistsError,
    TopicNotFoundError,
    TransactionCoordinator,
    create_topic,
    get_topic,
    list_topics,
    open_store,
)
from coordinator import inspect as ti
from coordinator.groups import apply_changes, plan_delete, plan_reset
from coordinator.partitioner import CURRENT
from coordinator.topic_admin import delete_topic, plan_delete_topic, set_topic_config
from core_helpers import Backend

SCHEMA = pa.schema([("id", pa.int64())])


def _fill(backend: Backend, topic: str = "t", partitions: int = 2, commits: int = 3) -> list[int]:
    """``commits`` transactions of 2 records per partition; returns the commit times (ms) of each, all distinct
    (commits within one millisecond share their time, and a reset to a time finds the first of them)."""
    store = backend.open()
    create_topic(store, topic, SCHEMA, partitions)
    p = Producer(store, "w")
    p.init_transactions()
    times: list[int] = []
    for c in range(commits):
        while times and time.time() * 1000 <= times[-1] + 1:
            time.sleep(0.001)
        with p.transaction():
            for part in range(partitions):
                p.send(topic, [{"id": c * 100 + part * 10 + k} for k in range(2)], partition=part)
        times.append(TransactionCoordinator(backend.open()).log.refresh().ts)
    return times


def test_reset_offsets_every_mode_then_consumers_start_there(backend: Backend) -> None:
    times = _fill(backend)
    coord = backend.coordinator()
    coord.commit_group_offsets("g", {"t": {0: 2}})
    earliest = plan_reset(coord, "g", {"t": None}, to="earliest")
    assert [(c.partition, c.current, c.new) for c in earliest] == [(0, 2, 0), (1, None, 0)]
    assert [c.new for c in plan_reset(coord, "g", None, to="latest")] == [6, 6]
    assert [c.new for c in plan_reset(coord, "g", {"t": [1]}, to="offset", offset=99)] == [6]  # clamped
    assert [c.new for c in plan_reset(coord, "g", {"t": None}, to="shift", offset=-1)] == [1, 0]
    assert [c.new for c in plan_reset(coord, "g", {"t": None}, to="datetime", time_ms=times[1])] == [2, 2]
    assert backend.coordinator().group_offsets("g") == {"t": {0: 2}}  # planning changed nothing
    apply_changes(coord, "g", plan_reset(coord, "g", {"t": None}, to="datetime", time_ms=times[2]))
    assert backend.coordinator().group_offsets("g") == {"t": {0: 4, 1: 4}}
    with Consumer(backend.open(), group_id="g") as c:
        c.subscribe(["t"])
        assert sorted(c.poll().column("id").to_pylist()) == [200, 201, 210, 211]
    with pytest.raises(InvalidOptionError):
        plan_reset(coord, "g", None, to="offset")
    with pytest.raises(TopicNotFoundError):
        plan_reset(coord, "g", {"t": [5]}, to="earliest")
    with pytest.raises(ti.GroupNotFoundError):
        plan_reset(coord, "nobody", None, to="earliest")


def test_delete_group_removes_its_offsets_for_every_reader(backend: Backend) -> None:
    _fill(backend, commits=1)
    coord = backend.coordinator()
    coord.commit_group_offsets("g", {"t": {0: 1, 1: 2}})
    coord.commit_group_offsets("other", {"t": {0: 1}})
    plan = plan_delete(coord, "g")
    assert [(c.partition, c.current, c.new) for c in plan] == [(0, 1, None), (1, 2, None)]
    apply_changes(coord, "g", plan)
    fresh = backend.coordinator()
    assert fresh.group_offsets("g") == {} and fresh.group_offsets("other") == {"t": {0: 1}}
    assert [g["group"] for g in ti.groups(backend.open())] == ["other"]
    with pytest.raises(ti.GroupNotFoundError):
        plan_delete(fresh, "g")
    # A consumer of the deleted group starts from the beginning again; the group can commit anew.
    with Consumer(backend.open(), group_id="g") as c:
        c.subscribe(["t"])
        assert c.poll().num_rows == 4
        c.commit()
    assert backend.coordinator().group_offsets("g") == {"t": {0: 2, 1: 2}}
    # A deletion survives a checkpoint (a new process rebuilds the state from it).
    apply_changes(coord, "g", plan_delete(backend.coordinator(), "g"))
    backend.coordinator().log.write_checkpoint()
    fresh_coord = backend.coordinator()
    assert fresh_coord.group_offsets("g") == {}
    assert fresh_coord.log.checkpoint_seq >= 0  # it was rebuilt from the checkpoint


def test_delete_topic_hides_it_deletes_its_files_and_keeps_its_name(backend: Backend) -> None:
    _fill(backend, "gone")
    _fill(backend, "kept", commits=1)
    store = backend.open()
    plan = plan_delete_topic(store, "gone")
    assert plan.paths and not plan.executed and all(p.startswith("topics/gone/") for p in plan.paths)
    assert list_topics(backend.open()) == ["gone", "kept"]  # a plan changes nothing
    done = delete_topic(backend.coordinator(), "gone")
    assert done.executed and list_topics(backend.open()) == ["kept"]
    with pytest.raises(TopicNotFoundError, match="was deleted"):
        get_topic(backend.open(), "gone")
    with pytest.raises(TopicExistsError, match="not reused"):
        create_topic(backend.open(), "gone", SCHEMA, 1)
    left = [o.path for o in backend.open().list_info("topics/gone")]
    assert left and all(p.startswith("topics/gone/meta/") for p in left)
    assert ti.verify(backend.open()) == []
    assert [r["name"] for r in ti.topics(backend.open())] == ["kept"]
    p = Producer(backend.open(), "w2")
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(TopicNotFoundError):
        p.send("gone", [{"id": 1}])


def test_set_config_writes_a_new_version_with_checked_values(backend: Backend) -> None:
    store = backend.open()
    create_topic(store, "t", SCHEMA, 1)
    kept = {"partitioner": CURRENT}  # the topic's key partitioner is not a setting: it stays
    meta = set_topic_config(store, "t", {"retention.ms": "604800000"})
    assert meta.version == 1 and dict(meta.config) == {**kept, "retention.ms": "604800000"}
    assert dict(get_topic(backend.open(), "t").config) == {**kept, "retention.ms": "604800000"}
    assert set_topic_config(store, "t", {"retention.ms": "604800000"}).version == 1  # unchanged: no new version
    meta = set_topic_config(store, "t", {"retention.bytes": "1024"}, remove=["retention.ms"])
    assert dict(meta.config) == {**kept, "retention.bytes": "1024"} and meta.version == 2
    assert meta.schema.equals(SCHEMA) and meta.partitions == 1
    for bad in ({"retention.ms": "-1"}, {"retention.ms": "soon"}, {"cleanup.policy": "compact"}):
        with pytest.raises(InvalidOptionError):
            set_topic_config(store, "t", bad)


def test_a_writer_that_read_the_topic_before_its_deletion_is_refused_at_commit(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer that read the definition before the deletion used to commit after it, into a folder no reader
    looks at; now its first commit after :data:`DELETED_RECHECK_S` fails naming the topic, and nothing lands."""
    import coordinator.coordinator as cc

    monkeypatch.setattr(cc, "DELETED_RECHECK_S", 0.2)
    _fill(backend, "gone", commits=1)
    p = Producer(backend.open(), "long-lived")
    p.init_transactions()
    with p.transaction():
        p.send("gone", [{"id": 1}], partition=0)  # the producer now holds the definition
    delete_topic(backend.coordinator(), "gone")
    seq = backend.coordinator().log.refresh().seq
    time.sleep(0.3)
    p.begin_transaction()
    p.send("gone", [{"id": 2}], partition=0)
    with pytest.raises(TopicNotFoundError, match=r"topic 'gone' was deleted .*nothing was committed"):
        p.commit_transaction()
    p.abort_transaction()
    assert backend.coordinator().log.refresh().seq == seq + 1  # the abort only: no commit
    with pytest.raises(TopicNotFoundError):
        plan_delete_topic(backend.open(), "gone")
    assert list_topics(backend.open()) == []


def test_creating_a_deleted_topic_again_is_refused_naming_it_and_what_to_do(backend: Backend) -> None:
    _fill(backend, "gone", commits=1)
    delete_topic(backend.coordinator(), "gone")
    for exist_ok in (False, True):
        with pytest.raises(TopicExistsError, match=r"topic 'gone' was deleted .*choose another name"):
            create_topic(backend.open(), "gone", SCHEMA, 2, exist_ok=exist_ok)
    fresh = Producer(backend.open(), "fresh")
    fresh.init_transactions()
    fresh.begin_transaction()
    with pytest.raises(TopicNotFoundError, match=r"topic 'gone' was deleted .*another name"):
        fresh.send("gone", [{"id": 1}])


def test_txnlog_produce_refuses_a_deleted_topic_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cli_lake import run

    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "gone", SCHEMA, 1)
    delete_topic(TransactionCoordinator(open_store(lake)), "gone")
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": 1}\n')
    code, out, err = run(capsys, "--store", lake, "produce", "gone", str(rows))
    assert code != 0 and "topic 'gone' was deleted" in err, (code, out, err)
    assert TransactionCoordinator(open_store(lake)).log.refresh().seq == -1  # nothing was ever committed


def test_a_spark_job_whose_topic_is_deleted_while_it_runs_commits_nothing(tmp_path: Path) -> None:
    """The batch sink's driver read the definition before its tasks ran; the topic is deleted meanwhile. Its commit
    used to publish the staged rows into the deleted topic; now it fails naming the topic, and Spark's abort decides
    the transaction aborted. (The sink's commit protocol driven directly, as Spark drives it.)"""
    from pyspark.sql.types import LongType, StructField, StructType

    from txnsink import make_writer
    from txnsink.staging import TaskIds, stage_batches

    lake = str(tmp_path / "lake")
    create_topic(open_store(lake), "gone", SCHEMA, 2)
    w = make_writer({"path": lake, "topic": "gone"}, StructType([StructField("id", LongType())]), False)
    msg = stage_batches(open_store(lake), w.plan, iter([pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})]),
                        TaskIds(0, 0, 0), w.txn)
    assert msg.segments
    delete_topic(TransactionCoordinator(open_store(lake)), "gone")
    with pytest.raises(TopicNotFoundError, match=r"topic 'gone' was deleted .*nothing was committed"):
        w.commit([msg])
    w.abort([msg])
    assert TransactionCoordinator(open_store(lake)).txn_status(w.txn) == "aborted"  # never committed
