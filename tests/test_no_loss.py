"""No path loses, tears or wedges data: errors followed by the caller's real error path, maintenance beside commits,
expiry, read-only readers, damaged partitions, durability on local disk, honest sweeps. Each test is one scenario a
hostile reviewer reproduced against the first build (see ``docs/reliability.md``).

The Spark sinks are driven here the way Spark drives them (stage in tasks, ``commit`` on the driver, ``abort`` when
``commit`` raised), without a SparkSession: the protocol is plain Python.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from coordinator import (
    CommitStateUnknownError,
    Consumer,
    InvalidTxnStateError,
    Producer,
    ProducerFencedError,
    Store,
    StoreError,
    TransactionCoordinator,
    faults,
    open_store,
    read_snapshot,
    stage_segment,
)
from coordinator.faults import InjectedCrash
from coordinator.layout import TXN_OPEN, data_dir
from coordinator.maintenance import gc_partition
from coordinator.store import ObjectInfo
from core_helpers import SCHEMA, Backend, LostReplyStore, committed_ids, make_topic, rows

# -- helpers ------------------------------------------------------------------------------------------------------


class Partitioned(LostReplyStore):
    """A real store behind a network that can lose the reply of the next transaction-log write and then stay
    down for every read of ``_txn/`` (the client cannot learn the outcome) until :meth:`heal`."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.lose_next = False
        self.down = False
        self.fail_records = False

    def lose(self, path: str) -> str | None:
        if self.lose_next and path.startswith("_txn/log/"):
            self.lose_next = False
            self.down = True
            return "unknown"
        return None

    def heal(self) -> None:
        self.down = False

    def _check(self, path: str) -> None:
        if self.down and path.startswith("_txn"):
            raise StoreError(f"network down reading {path}")

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if self.fail_records and "/log/" in path and path.startswith("topics/"):
            raise StoreError(f"partition record write of {path} failed past the retry budget")
        if self.down and path.startswith("_txn"):
            raise StoreError(f"network down writing {path}")
        return super().put_if_absent(path, data)

    def get(self, path: str) -> bytes:
        self._check(path)
        return super().get(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> list[str]:
        self._check(prefix)
        return super().list(prefix, start_after, limit)


def spark_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("id", LongType()), StructField("txn", StringType())])


def arrow_rows(ids: list[int], label: str) -> Iterator[pa.RecordBatch]:
    return iter(pa.Table.from_pylist(rows(ids, label), schema=SCHEMA).to_batches())


def batch_writer(backend: Backend, **opts: str) -> Any:
    from txnsink import make_writer

    return make_writer({"path": backend.url, "topic": "t", **backend.options, **opts}, spark_schema(), False)


def stream_writer(backend: Backend) -> Any:
    from txnsink import make_stream_writer

    return make_stream_writer({"path": backend.url, "topic": "t", **backend.options}, spark_schema(), False)


def task(n: int, batch: int | None = None) -> Any:
    from txnsink.staging import TaskIds

    return TaskIds(n, 0, n, "5f0c2b8e-0000-4c5e-9d0a-00000000beef" if batch is not None else None, batch)


def spark_commit(writer: Any, messages: list[Any], *batch_id: int) -> BaseException | None:
    """What Spark does: ``commit``; if it raises, ``abort`` with the same messages. Returns what ``commit`` raised."""
    try:
        writer.commit(messages, *batch_id)
    except Exception as exc:  # noqa: BLE001 - Spark's own handling: any failure leads to abort
        writer.abort(messages, *batch_id)
        return exc
    return None


# -- 1. a sink never deletes what may be committed -----------------------------------------------------------------


@pytest.mark.parametrize("sink", ["batch", "stream"])
def test_sink_abort_after_an_unknown_commit_keeps_the_committed_files(
    backend: Backend, sink: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = Partitioned(backend.open())
    make_topic(net, partitions=2)
    w = batch_writer(backend) if sink == "batch" else stream_writer(backend)
    store_for_tasks = backend.open()
    msgs = [w.stage(arrow_rows([1, 2, 3], "a"), task(0, 0)) if sink == "stream"
            else _stage_batch(w, store_for_tasks, [1, 2, 3], 0)]
    # The driver's commit reaches the store, the reply is lost and the network stays down: commit raises
    # CommitStateUnknownError (never a plain failure), Spark calls abort, which must delete nothing.
    net.lose_next = True
    # the driver reaches the store through ``net`` (tasks staged through their own connection)
    monkeypatch.setattr("txnsink.batch.open_store", lambda *_a, **_k: net)
    monkeypatch.setattr("txnsink.stream.open_store", lambda *_a, **_k: net)
    err = spark_commit(w, msgs, *([0] if sink == "stream" else []))
    assert isinstance(err, CommitStateUnknownError), err
    net.heal()
    assert committed_ids(backend) == [1, 2, 3]
    for m in msgs:
        for seg in m.segments:
            assert store_for_tasks.exists(seg.path), f"{seg.path} named by a durable commit was deleted"
    if sink == "stream":
        # Spark replays the batch after the failure: a no-op, never a loss or a duplicate
        replay = stream_writer(backend)
        assert spark_commit(replay, [replay.stage(arrow_rows([1, 2, 3], "a"), task(1, 0))], 0) is None
        assert committed_ids(backend) == [1, 2, 3]
    # and abort once the network is back learns the commit won: still nothing deleted
    w.abort(msgs, *([0] if sink == "stream" else []))
    assert committed_ids(backend) == [1, 2, 3]


def _stage_batch(w: Any, store: Store, ids: list[int], n: int) -> Any:
    from txnsink.staging import stage_batches

    return stage_batches(store, w.plan, arrow_rows(ids, "a"), task(n), w.txn)


def test_commit_past_its_commit_point_is_never_reported_failed_when_its_records_cannot_be_written(
        backend: Backend) -> None:
    """Decided, but without the second copy its partition records give it, a commit is not acknowledged either:
    it is unknown (never a failure a caller would clean up after), readers compute the missing records, and
    committing again writes them and answers."""
    net = Partitioned(backend.open())
    make_topic(net, partitions=3)
    p = Producer(net, "w")
    p.init_transactions()
    net.fail_records = True  # every partition record write fails past the retry budget
    p.begin_transaction()
    p.send("t", rows(range(9), "x"), key="id")
    with pytest.raises(CommitStateUnknownError, match="decided at transaction log entry"):
        p.commit_transaction()
    assert committed_ids(backend) == list(range(9))  # readers compute the missing records
    net.fail_records = False
    p.commit_transaction()
    assert TransactionCoordinator(backend.open()).repair_records() == 0  # the retry wrote them


# -- 2. one damaged partition never stops the store ---------------------------------------------------------------


def test_damaged_partition_stops_only_its_own_readers(backend: Backend) -> None:
    from coordinator import inspect as ti
    from coordinator.layout import marker_path

    store = backend.open()
    make_topic(store, "a", 1)
    make_topic(store, "b", 1)
    p = Producer(store, "w")
    p.init_transactions()
    for i in range(3):
        with p.transaction():
            p.send("a", rows([i], "a"))
            p.send("b", rows([i], "b"))
    store.put(marker_path("a", 0, 1), b"{damaged")
    TransactionCoordinator(store).log.write_checkpoint()  # the defining entries are no longer needed by readers
    # Commits go on, to both topics; snapshots and readers of b go on.
    q = Producer(backend.open(), "q")
    q.init_transactions()
    for i in range(3, 5):
        with q.transaction():
            q.send("a", rows([i], "a"))
            q.send("b", rows([i], "b"))
    assert committed_ids(backend, "b") == [0, 1, 2, 3, 4]
    snap = TransactionCoordinator(backend.open()).snapshot(["a", "b"])
    assert snap.ends["a"][0] == 5 and snap.ends["b"][0] == 5
    # Readers of a get an error naming the damaged file; verify names it too.
    c = Consumer(backend.open())
    c.assign([("a", 0)])
    with pytest.raises(Exception, match=r"topics/a/0/log/00000000000000000001\.json"):
        c.poll()
    assert any("topics/a/0/log/" in pr.path for pr in ti.verify(backend.open()))


# -- 3. a transaction id is committed at most once ---------------------------------------------------------------


def test_a_transaction_id_is_committed_at_most_once(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    coord = TransactionCoordinator(store)
    ident = coord.init_producer("once")
    tbl = pa.Table.from_pylist(rows([1, 2], "a"), schema=SCHEMA)
    seg_a = stage_segment(store, "t", 0, tbl, f"{ident.txn_id(0)}~a")
    first = coord.commit(ident, ident.txn_id(0), [seg_a])
    seg_b = stage_segment(store, "t", 0, pa.Table.from_pylist(rows([3], "b"), schema=SCHEMA), f"{ident.txn_id(0)}~b")
    again = backend.coordinator().commit(ident, ident.txn_id(0), [seg_b])  # the same id with other rows
    # answered with the recorded outcome of the first commit: the other rows are never published
    assert again.txn == first.txn and again.offsets == first.offsets
    assert committed_ids(backend) == [1, 2]
    # an aborted transaction can never be committed later
    coord.abort(ident, ident.txn_id(1))
    seg_c = stage_segment(store, "t", 0, tbl, f"{ident.txn_id(1)}~c")
    with pytest.raises(InvalidTxnStateError, match="aborted"):
        coord.commit(ident, ident.txn_id(1), [seg_c])
    assert committed_ids(backend) == [1, 2]


def test_producer_after_an_unknown_commit_learns_the_outcome_and_init_leaves_it_usable(backend: Backend) -> None:
    net = Partitioned(backend.open())
    make_topic(net, partitions=2)
    p = Producer(net, "u")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(4), "x"), key="id")
    net.lose_next = True
    with pytest.raises(CommitStateUnknownError):
        p.commit_transaction()
    with pytest.raises(InvalidTxnStateError, match="unknown"):
        p.send("t", rows([9], "y"))  # no more rows into a transaction whose outcome is unknown
    net.heal()
    p.init_transactions()  # usable again: sequence numbers and transaction numbers start over
    with p.transaction():
        p.send("t", rows([10, 11], "z"), key="id")
    assert committed_ids(backend) == [0, 1, 2, 3, 10, 11]


# -- 4. GC never deletes a segment a commit names ----------------------------------------------------------------


class CommitsDuringGc(LostReplyStore):
    """Runs ``hook`` once, right after GC lists a partition's data files (the commit lands between GC's listing
    and its decision)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.hook: Any = None

    def list_info(self, prefix: str) -> list[ObjectInfo]:
        got = super().list_info(prefix)
        if self.hook is not None and prefix.endswith("/data"):
            hook, self.hook = self.hook, None
            hook()
        return got


def test_gc_never_deletes_what_a_commit_racing_it_names(backend: Backend) -> None:
    store = CommitsDuringGc(backend.open())
    make_topic(store, partitions=1)
    p = Producer(backend.open(), "racer")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows(range(5), "x"))
    p.flush()
    store.hook = p.commit_transaction
    far = (store.now() + 10 * 24 * 3600) * 1000  # every file looks older than any grace period
    report = gc_partition(TransactionCoordinator(store), "t", 0, grace_ms=0, now=far)
    assert report.deleted_files == []
    assert committed_ids(backend) == [0, 1, 2, 3, 4]


def test_gc_never_deletes_the_staged_files_of_a_running_job_however_old(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    w = batch_writer(backend)
    msg = _stage_batch(w, backend.open(), [1, 2], 0)
    far = (backend.open().now() + 30 * 24 * 3600) * 1000
    assert gc_partition(backend.coordinator(), "t", 0, grace_ms=0, now=far).deleted_files == []
    assert spark_commit(w, [msg]) is None
    assert committed_ids(backend) == [1, 2]


def test_gc_reaps_an_abandoned_stream_attempt_before_deleting_it(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    w = stream_writer(backend)
    msg = w.stage(arrow_rows([1], "a"), task(0, 0))
    far = (backend.open().now() + 2 * 24 * 3600) * 1000
    report = gc_partition(backend.coordinator(), "t", 0, grace_ms=24 * 3600 * 1000, now=far)
    assert report.reaped and report.deleted_files == [msg.segments[0].path]
    # the late commit of the reaped attempt is refused (Spark replays the batch), never made onto missing files
    with pytest.raises(InvalidTxnStateError, match="reaped"):
        w.commit([msg], 0)
    assert committed_ids(backend) == []


class ShiftedClock(LostReplyStore):
    """A real store whose clock differs from the local one by ``shift`` seconds (modification times and ``now``)."""

    def __init__(self, inner: Store, shift: float) -> None:
        super().__init__(inner)
        self.shift = shift

    def now(self) -> float:
        return self.inner.now() + self.shift

    def list_info(self, prefix: str) -> list[ObjectInfo]:
        return [ObjectInfo(i.path, i.size, i.mtime + self.shift) for i in self.inner.list_info(prefix)]


def test_gc_judges_age_on_the_store_clock(backend: Backend) -> None:
    store = ShiftedClock(backend.open(), shift=-3 * 24 * 3600)  # the store's clock is 3 days behind ours
    make_topic(store, partitions=1)
    p = Producer(store, "x")
    p.init_transactions()
    with p.transaction():
        p.send("t", rows([1], "x"))
    p.begin_transaction()
    p.send("t", rows([2], "y"))
    p.flush()
    p.abort_transaction()  # its file is garbage, but fresh on the store's clock
    report = gc_partition(TransactionCoordinator(store), "t", 0, grace_ms=24 * 3600 * 1000)
    assert report.deleted_files == []
    assert len(store.list(data_dir("t", 0))) == 2


# -- 5. expiry never breaks exactly-once or a healthy query -----------------------------------------------------


def test_expiry_keeps_stream_versions_and_an_idle_query_resumes(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    w = stream_writer(backend)
    for b in range(3):
        assert spark_commit(w, [w.stage(arrow_rows([b], "s"), task(b, b))], b) is None
    coord = backend.coordinator()
    Producer(backend.open(), "other").init_transactions()
    assert coord.expire_transactional_ids(now=coord.log.refresh().ts + 8 * 24 * 3600 * 1000) == ["other"]
    # a week later the query restarts, replays its last batch (a no-op) and goes on without an error
    w2 = stream_writer(backend)
    assert spark_commit(w2, [w2.stage(arrow_rows([2], "s"), task(7, 2))], 2) is None
    assert spark_commit(w2, [w2.stage(arrow_rows([3], "s"), task(8, 3))], 3) is None
    assert committed_ids(backend) == [0, 1, 2, 3]


# -- 6. readers need no write permission ---------------------------------------------------------------------------


@pytest.mark.s3
def test_readers_need_no_write_permission(s3_lake: Any) -> None:
    from s3faults import FaultProxy

    store = open_store(s3_lake.url, s3_lake.options)
    make_topic(store, partitions=2)
    p = Producer(store, "w")
    p.init_transactions()
    with p.transaction():
        p.send("t", rows(range(4), "a"), key="id")
    p.begin_transaction()
    p.send("t", rows(range(4, 8), "b"), key="id")
    with faults.injected(lambda name: _raise_at(name, "record.before")), pytest.raises(InjectedCrash):
        p.commit_transaction()  # committed; its partition records never written
    with FaultProxy(s3_lake.endpoint, read_only=True) as proxy:
        ro = open_store(s3_lake.url, s3_lake.options_for(proxy.endpoint), probe=False)
        c = Consumer(ro)
        c.subscribe(["t"])
        assert sorted(c.poll().column("id").to_pylist()) == list(range(8))
        snap = read_snapshot(ro, ["t"])["t"]
        assert sorted(snap.column("id").to_pylist()) == list(range(8))
        assert proxy.log.refused == 0, "a reader tried to write"


def _raise_at(name: str, point: str) -> None:
    if name == point:
        raise InjectedCrash(name)


# -- 7. durable means durable on local disk ------------------------------------------------------------------------


def test_local_store_fsyncs_the_folder_entry_of_every_write(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat

    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    store = open_store(str(tmp_path / "lake"))
    monkeypatch.setattr(os, "fsync", spy)
    assert store.put_if_absent("_txn/log/x.json", b"1")
    store.put("topics/t/0/data/y.parquet", b"2")
    assert str(tmp_path / "lake" / "_txn" / "log") in synced  # the link is durable
    assert str(tmp_path / "lake" / "_txn") in synced  # and so is the new folder
    assert str(tmp_path / "lake" / "topics" / "t" / "0" / "data") in synced


def test_local_store_fsyncs_each_files_data_before_it_becomes_visible(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A durable folder entry is not enough: after a power loss the name of a log entry (or a segment) must not
    point at a file whose bytes never reached the disk. Each write's temp file is fsynced before it is linked or
    renamed to its name."""
    import stat

    events: list[tuple[str, str]] = []
    real_fsync, real_link, real_replace = os.fsync, os.link, os.replace

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def link(src: str, dst: str) -> None:
        events.append(("visible", os.path.realpath(src)))
        real_link(src, dst)

    def replace(src: str, dst: str) -> None:
        events.append(("visible", os.path.realpath(src)))
        real_replace(src, dst)

    store = open_store(str(tmp_path / "lake"))
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    assert store.put_if_absent("_txn/log/x.json", b"1")
    store.put("topics/t/0/data/y.parquet", b"2")
    monkeypatch.undo()
    temps = [path for kind, path in events if kind == "visible"]
    assert len(temps) == 2, events
    for temp in temps:
        assert ("fsync", temp) in events, f"{temp} became visible without an fsync of its data: {events}"
        assert events.index(("fsync", temp)) < events.index(("visible", temp)), events


# -- 8. sweeps report what they did -------------------------------------------------------------------------------


def test_timeout_sweep_reports_only_what_it_aborted_and_ignores_producer_clocks(backend: Backend) -> None:
    store = backend.open()
    make_topic(store, partitions=1)
    p = Producer(store, "slow")
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([1], "x"))
    p.flush()
    (opened,) = store.list_info(TXN_OPEN)
    late = opened.mtime * 1000 + 5 * 60_000
    sweeper = backend.coordinator()
    # the producer's commit wins the race with the sweep's abort: the sweep must not report it as aborted
    fired: list[str] = []

    def commit_first(name: str) -> None:
        if name == "txnlog.entry.before" and not fired:
            fired.append(name)
            with faults.injected(None):
                p.commit_transaction()

    with faults.injected(commit_first):
        assert sweeper.abort_timed_out(now=late) == []
    assert committed_ids(backend) == [1]


def test_timeout_sweep_judges_on_the_store_clock_not_its_own(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    q = Producer(backend.open(), "judged")
    q.init_transactions()
    q.begin_transaction()
    q.send("t", rows([2], "y"))
    q.flush()
    # The store's clock is 3 hours behind this process's: judged on the local clock the open transaction would
    # look hours old and be aborted at once; on the store's clock it is seconds old.
    sweeper = TransactionCoordinator(ShiftedClock(backend.open(), shift=-3 * 3600))
    assert sweeper.abort_timed_out() == []
    assert sweeper.abort_timed_out(now=sweeper.store.now() * 1000 + 120_000) == ["judged"]
    with pytest.raises(ProducerFencedError):
        q.commit_transaction()
