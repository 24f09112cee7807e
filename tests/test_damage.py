"""Damaged transaction log objects: a damaged entry or checkpoint names itself and what to run; an entry a readable
checkpoint covers stops nobody (readers and writers jump over it); a damaged checkpoint is skipped for a readable
one, and truncation never keeps one; an entry above every readable checkpoint stops readers and writers with an
error naming it until the operator's ``repair_log`` rebuilds it from the copies (partition records, checkpoints,
the entries after it, intents), naming what no copy holds. Memory and local stores; one run on S3."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import (
    CommitStateUnknownError,
    Consumer,
    CorruptLogError,
    MemoryStore,
    Producer,
    ProducerFencedError,
    Store,
    StoreError,
    TransactionCoordinator,
    faults,
    read_snapshot,
)
from coordinator import inspect as ti
from coordinator.coordinator import ProducerIdentity
from coordinator.layout import LAST_CHECKPOINT, marker_path, txn_checkpoint_path, txn_log_path
from coordinator.state import CoordinatorState
from core_helpers import Backend, LostReplyStore, make_topic, rows
from s3_lake import S3Lake


@pytest.fixture(params=["memory", "local"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Memory and local stores (the one S3 run below uses the S3 fixtures)."""
    if request.param == "memory":
        url = f"memory://damage-{uuid.uuid4().hex}"
        try:
            yield url, {}
        finally:
            MemoryStore.drop(url)
    else:
        yield f"file://{tmp_path / 'lake'}", {}


def producer(backend: Backend, tid: str, *, interval: int = 100) -> Producer:
    """A producer in a process of its own, checkpointing every ``interval`` entries (synchronously)."""
    store = backend.open()
    coord = TransactionCoordinator(store, checkpoint_interval=interval)
    coord.log.background_checkpoints = False
    p = Producer(store, tid, coordinator=coord)
    p.init_transactions()
    return p


def commit(p: Producer, ids: list[int], *, partitions: tuple[int, ...] = (0,)) -> None:
    with p.transaction():
        for i, part in enumerate(partitions):
            p.send("t", rows(ids[i::len(partitions)], p.transactional_id), partition=part)


def flip(store: Store, path: str) -> bytes:
    """Damage ``path`` as bit rot does (its first byte changed; the rest stays legible). Returns the old bytes."""
    data = store.get(path)
    store.put(path, b"#" + data[1:])
    return data


def read(backend: Backend) -> list[tuple[int, int, int]]:
    """(partition, offset, id) of every committed record, from a fresh process."""
    table = read_snapshot(backend.open(), ["t"])["t"]
    cols = [table.column(c).to_pylist() for c in ("_partition", "_offset", "id")]
    return sorted(zip(*cols, strict=True))


def fresh_state(backend: Backend) -> CoordinatorState:
    return TransactionCoordinator(backend.open()).log.refresh()


def without(state: CoordinatorState, *expired: str) -> dict[str, object]:
    """``state`` as JSON with producers ``expired`` forgotten: a rebuilt entry fences for good (expires) each
    producer no copy shows outliving it (it may have held a newer init of it, whose zombie must not commit)."""
    d = state.to_json()
    d["producers"] = [m for m in d["producers"] if m["tid"] not in expired]
    d["sequences"] = {t: s for t, s in d["sequences"].items() if t not in expired}
    return d


# -- damage a readable checkpoint covers ----------------------------------------------------------------------------


@pytest.mark.parametrize("victim", [1, 3], ids=["read-by-name", "read-in-a-listing"])
def test_a_damaged_entry_a_checkpoint_covers_stops_no_reader_or_producer(backend: Backend, victim: int) -> None:
    make_topic(backend.open(), partitions=2)
    early = producer(backend, "early", interval=4)  # entry 0; its process keeps a view older than the damage
    watcher = TransactionCoordinator(backend.open())
    watcher.log.refresh()
    busy = producer(backend, "busy", interval=4)  # entry 1
    for i in range(6):
        commit(busy, [i], partitions=(i % 2,))  # entries 2..7: the checkpoint at 7 covers them
    assert TransactionCoordinator(backend.open()).log.last_checkpoint().seq == 7  # type: ignore[union-attr]
    want = read(backend)
    flip(backend.open(), txn_log_path(victim))  # 1: the next entry the views below ask for by name
    # A view older than the damage jumps over it to the checkpoint ...
    assert watcher.log.refresh().seq == 7
    # ... a producer whose view is older commits on ...
    commit(early, [100])
    assert read(backend) == sorted([*want, (0, 3, 100)])
    # ... and a consumer reading every partition sees every record.
    c = Consumer(backend.open())
    c.assign([("t", 0), ("t", 1)])
    assert sorted(c.poll().column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 100]


@pytest.mark.parametrize("damage", [b"", b"{not json", b'{"v": 2, "seq": 9}'])
@pytest.mark.parametrize("which", ["last", "numbered", "both"])
def test_damaged_checkpoints_are_skipped_for_readable_ones(backend: Backend, damage: bytes, which: str) -> None:
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p", interval=1)  # a checkpoint after every entry, a numbered one every 4
    for i in range(9):
        commit(p, [i])  # entries 1..9; numbered checkpoints at 3 and 7
    want = read(backend)
    store = backend.open()
    if which in ("last", "both"):
        store.put(LAST_CHECKPOINT, damage)
    if which in ("numbered", "both"):
        store.put(txn_checkpoint_path(7), damage)
    assert fresh_state(backend).seq == 9
    assert read(backend) == want
    commit(producer(backend, "q"), [100])  # a new producer opens and commits
    assert len(read(backend)) == 10


def test_truncation_never_keeps_a_damaged_checkpoint(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p", interval=1)
    for i in range(40):
        commit(p, [i])  # entries 1..40; numbered checkpoints at 3, 7, ..., 39
    want = read(backend)
    store = backend.open()
    flip(store, txn_checkpoint_path(39))
    log = TransactionCoordinator(store).log
    assert log.truncate(now=store.now() + 3600) > 0
    # the newest checkpoint that decodes is kept, with every entry from it on
    names = set(store.list("_txn/checkpoint"))
    assert txn_checkpoint_path(35).rsplit("/", 1)[1] in names
    assert txn_checkpoint_path(31).rsplit("/", 1)[1] not in names
    assert store.get(txn_log_path(35)) and store.get(txn_log_path(36))
    # so a reader whose _last.json is damaged too still opens (from the checkpoint at 35)
    store.put(LAST_CHECKPOINT, b"")
    assert fresh_state(backend).seq == 40
    assert read(backend) == want


# -- damage above every readable checkpoint ----------------------------------------------------------------------


def tail_store(backend: Backend) -> tuple[Producer, Producer]:
    """Two producers' commits, none covered by a checkpoint: a writes partitions 0 and 1 in each transaction."""
    make_topic(backend.open(), partitions=2)
    a, b = producer(backend, "a"), producer(backend, "b")
    for i in range(3):
        commit(a, [i * 10, i * 10 + 1, i * 10 + 2], partitions=(0, 1))
        commit(b, [100 + i], partitions=(1,))
    return a, b


@pytest.mark.parametrize("damage", ["flip", "empty", "no format", "fields missing", "another entry"])
def test_a_damaged_entry_above_every_checkpoint_stops_readers_and_writers_naming_it(backend: Backend,
                                                                                   damage: str) -> None:
    tail_store(backend)
    seq = fresh_state(backend).seq - 1
    victim = txn_log_path(seq)
    store = backend.open()
    if damage == "flip":
        flip(store, victim)
    else:
        store.put(victim, {"empty": b"", "no format": b"{}", "fields missing": b'{"v": 2, "seq": %d}' % seq,
                           "another entry": store.get(txn_log_path(seq - 1))}[damage])
    for attempt in (lambda: fresh_state(backend), lambda: producer(backend, "c")):
        with pytest.raises(CorruptLogError, match=victim.replace(".", r"\.")) as err:
            attempt()
        assert "no readable checkpoint covers it" in str(err.value)
        assert "txnlog repair --log" in str(err.value)


def test_repair_log_rebuilds_a_damaged_entry_above_every_checkpoint_from_the_copies(backend: Backend) -> None:
    a, _b = tail_store(backend)
    before = fresh_state(backend)
    want = read(backend)
    victim = txn_log_path(before.seq - 1)  # a's last commit, in partitions 0 and 1
    coord = TransactionCoordinator(backend.open())
    flip(coord.store, victim)
    damaged = coord.store.get(victim)
    plan = coord.repair_log()  # a dry run: reports, changes nothing
    [obj] = plan.objects
    assert (obj.path, obj.kind, obj.action, obj.covered) == (victim, "entry", "rebuild", False)
    assert any("commit p.0.0.2 of 'a'" in line for line in obj.recovered)
    assert any(line.startswith("consumer-group offsets committed with p.0.0.2") for line in obj.lost)
    assert coord.store.get(victim) == damaged
    coord.repair_log(execute=True)
    # every acknowledged commit reads back at its offsets, and the state is the one before the damage
    assert read(backend) == want
    # the state is the one before the damage, except that 'a' is fenced for good: the entry could have held a
    # newer init of 'a' as well (no copy says it did not), whose zombie must not commit; 'b' acted after it
    assert any("fenced for good" in line and "'a'" in line and "'b'" not in line for line in obj.assumed)
    assert fresh_state(backend).to_json() == without(before, "a")
    report = ti.verify(backend.open())
    assert list(report) == [] and victim in report.rebuilt
    # producers commit after it: the one that wrote it (its old epoch is refused; restarted, as the repair
    # procedure has it, it initialises again), and a new one
    ident = a.identity
    assert ident is not None
    with pytest.raises(ProducerFencedError):
        TransactionCoordinator(backend.open()).commit(ident, ident.txn_id(ident.epoch + 99), [])
    commit(producer(backend, "a"), [50], partitions=(0,))
    commit(producer(backend, "c"), [60], partitions=(1,))
    assert read(backend) == sorted([*want, (0, 6, 50), (1, 6, 60)])
    assert list(ti.verify(backend.open())) == []


class KeepsIntents(LostReplyStore):
    """A real store on which deleting an intent fails quietly (a writer that died before its background delete):
    decided intents stay in ``_txn/intents/``."""

    def delete(self, path: str) -> None:
        if not path.startswith("_txn/intents/"):
            self.inner.delete(path)


def test_repair_log_takes_what_only_an_intent_held_when_it_decides_as_the_records_show(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    store = KeepsIntents(backend.open())
    a = Producer(store, "a", coordinator=TransactionCoordinator(store, checkpoint_interval=100))
    a.init_transactions()
    b = producer(backend, "b")
    a.begin_transaction()
    a.send("t", rows([1, 2], "a"), partition=0)
    a.send("t", rows([3], "a"), partition=1)
    a.send_offsets_to_transaction({"t": {0: 7}}, group_id="g")
    a.flush()
    commit(b, [4])  # a's direct try loses the race: a waits as an intent, then decides it itself
    a.commit_transaction()
    before = fresh_state(backend)
    assert before.group_offsets("g") == {"t": {0: 7}} and backend.open().list("_txn/intents")
    want = read(backend)
    flip(backend.open(), txn_log_path(before.seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert any("from its partition records and its intent" in line for line in obj.recovered)
    assert not any(line.startswith("consumer-group offsets committed with") for line in obj.lost)
    assert fresh_state(backend).to_json() == without(before, "a", "b")  # the group offsets included
    assert read(backend) == want


def test_a_rebuilt_last_entry_whose_token_no_copy_held_links_to_the_entry_its_writer_appends_next(
        backend: Backend) -> None:
    _a, b = tail_store(backend)  # b wrote the last entry, and its process still holds that entry's token
    seq = fresh_state(backend).seq
    want = read(backend)
    backend.open().put(txn_log_path(seq), b"")  # nothing legible: no copy holds its writer token
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild" and any(line.startswith("writer token") for line in obj.assumed)
    commit(b, [70], partitions=(1,))  # its entry names the lost token as its predecessor
    commit(producer(backend, "c"), [80], partitions=(0,))
    assert read(backend) == sorted([*want, (1, 6, 70), (0, 6, 80)])
    assert list(ti.verify(backend.open())) == []


def test_repair_log_rebuilds_an_init_only_the_damaged_entry_held_from_the_entry_after_it(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    commit(producer(backend, "a"), [1])  # entries 0, 1
    x = producer(backend, "x")  # entry 2: x's init, held by no other object
    commit(x, [2])  # entry 3: x commits as the epoch entry 2 gave it
    before = fresh_state(backend)
    flip(backend.open(), txn_log_path(2))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert any(line.startswith("init of 'x'") and "proven by entry 3" in line for line in obj.recovered)
    assert any("init of 'x': timeout" in line for line in obj.assumed)
    after = fresh_state(backend)
    got, was = after.producers["x"], before.producers["x"]
    assert (got.pid, got.epoch, got.last_txn, got.last_outcome) == (was.pid, was.epoch, was.last_txn, "committed")
    assert after.next_pid == before.next_pid
    # x commits on from a new process with the identity it had: the rebuilt state knows its epoch
    coord = TransactionCoordinator(backend.open())
    result = coord.commit(ProducerIdentity("x", was.pid, was.epoch), f"p.{was.pid}.{was.epoch}.1", [])
    assert result.commit_seq == 4 and fresh_state(backend).producers["x"].last_txn == 1
    assert [i for _p, _o, i in read(backend)] == [1, 2]


def test_repair_log_names_an_init_no_copy_holds_and_its_producer_is_fenced_after(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    commit(producer(backend, "a"), [1])  # entries 0, 1
    y = producer(backend, "y")  # entry 2, the last: only it holds y's init
    ident = y.identity
    assert ident is not None
    flip(backend.open(), txn_log_path(2))
    coord = TransactionCoordinator(backend.open())
    [obj] = coord.repair_log().objects
    assert obj.action == "rebuild" and obj.recovered == ()
    assert any("transactional id(s) 'y'" in line for line in obj.lost)  # legible in the damaged bytes
    assert any("inits of producers that did nothing since" in line for line in obj.lost)
    coord.repair_log(execute=True)
    # readers and writers go on; y's epoch is lost, so y is refused (never silently taken for current) ...
    assert [i for _p, _o, i in read(backend)] == [1]
    with pytest.raises(ProducerFencedError):
        TransactionCoordinator(backend.open()).commit(ident, ident.txn_id(0), [])
    # ... and initialises again
    commit(producer(backend, "y"), [3])
    assert [i for _p, _o, i in read(backend)] == [1, 3]


def test_repair_log_completes_a_commit_from_its_staged_files_where_its_record_was_never_written(
        backend: Backend) -> None:
    """A commit's writer died after the commit point having written the record of one partition only, and its
    entry (the last) was damaged before anyone wrote the other: the commit's rows there are held by its staged
    files alone. The rebuilt entry publishes them at the offsets they had; no transaction is torn."""
    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p")
    commit(p, [1, 2])
    commit(p, [3, 4, 5, 6], partitions=(0, 1))  # the last entry: 3, 5 in partition 0; 4, 6 in partition 1
    want = read(backend)
    store = backend.open()
    seq = fresh_state(backend).seq
    store.delete(marker_path("t", 1, 0))  # never written
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild"
    assert any("in t/1 [0, 2): from its staged segment files" in line for line in obj.recovered)
    assert read(backend) == want
    commit(producer(backend, "q"), [7], partitions=(1,))
    assert read(backend) == sorted([*want, (1, 2, 7)])
    assert list(ti.verify(backend.open())) == []


def test_repair_log_completes_a_missing_record_the_entries_after_it_continue_from(backend: Backend) -> None:
    """As above, but entries after the damaged one wrote that partition's next record: the commit's part there is
    taken from its staged files only when it ends exactly where the next record's first commit starts."""
    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p")
    commit(p, [1, 2], partitions=(0, 1))
    seq = fresh_state(backend).seq + 1
    commit(p, [3, 4, 5, 6], partitions=(0, 1))  # entry seq: 3, 5 in partition 0; 4, 6 in partition 1
    commit(p, [7], partitions=(1,))  # entry seq + 1: partition 1's next record starts at offset 3
    want = read(backend)
    store = backend.open()
    store.delete(marker_path("t", 1, 1))  # entry seq's record in partition 1: never written
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild", obj.why
    assert any("in t/1 [1, 3): from its staged segment files" in line for line in obj.recovered)
    assert read(backend) == want
    assert list(ti.verify(backend.open())) == []


@pytest.mark.parametrize("later_records", ["written", "missing"])
def test_repair_log_finds_a_commit_no_record_names_from_its_staged_files_and_the_entries_after_it(
        backend: Backend, later_records: str) -> None:
    """Its writer died before writing any of the commit's records, and entries after the damaged one continue both
    partitions (their own records written or not: the entries say where they start): the one staged transaction
    that is its producer's next fills exactly the offsets those entries leave, so the entry is rebuilt with it."""
    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p")
    commit(p, [1, 2], partitions=(0, 1))
    seq = fresh_state(backend).seq + 1
    commit(p, [3, 4, 5, 6], partitions=(0, 1))  # entry seq: 3, 5 in partition 0; 4, 6 in partition 1
    commit(producer(backend, "q"), [7, 8], partitions=(0, 1))  # the entries after it continue both partitions
    want = read(backend)
    store = backend.open()
    for part in (0, 1):
        store.delete(marker_path("t", part, 1))  # entry seq's records: never written
        if later_records == "missing":
            store.delete(marker_path("t", part, 2))
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild", obj.why
    assert any("no partition record of it survived" in line for line in obj.assumed)
    assert read(backend) == want
    assert list(ti.verify(backend.open())) == []


def test_repair_log_keeps_a_lost_compaction_as_a_change_of_no_row(backend: Backend) -> None:
    """A compaction's entry is damaged, its partition record never written, and entries after it go on in that
    partition from the offset it ended at: the entry added no rows there, so it is rebuilt with a retention to the
    partition's start (no row changes; the merged file is left for GC) and every record reads as before."""
    from coordinator.maintenance import compact_partition

    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p")
    for i in range(4):
        commit(p, [i])
    coord = TransactionCoordinator(backend.open())
    assert compact_partition(coord, "t", 0).merged_groups == 1
    seq = fresh_state(backend).seq
    commit(producer(backend, "q"), [9])  # an entry after it, in the same partition
    want = read(backend)
    store = backend.open()
    store.delete(marker_path("t", 0, 4))  # the compaction's record: never written
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild", obj.why
    assert any("a compaction or retention whose record is missing" in line for line in obj.assumed)
    assert read(backend) == want
    assert list(ti.verify(backend.open())) == []


def test_repair_log_takes_a_compacted_part_of_an_unrecorded_commit_from_the_compaction_that_retired_it(
        backend: Backend) -> None:
    """As above, and since then a compaction merged the commit's segment in one partition and GC deleted it: the
    compaction's ``replace`` names the file and the rows its commit had there, so the entry is still rebuilt."""
    from coordinator.maintenance import compact_partition, gc_partition

    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p")
    commit(p, [1, 2], partitions=(0, 1))
    seq = fresh_state(backend).seq + 1
    commit(p, [3, 4, 5, 6], partitions=(0, 1))  # entry seq
    commit(producer(backend, "q"), [7, 8], partitions=(0, 1))
    store = backend.open()
    for part in (0, 1):
        store.delete(marker_path("t", part, 1))  # entry seq's records: never written
    coord = TransactionCoordinator(backend.open())
    assert compact_partition(coord, "t", 1).merged_groups == 1
    gc_partition(TransactionCoordinator(store), "t", 1, grace_ms=0, now=(store.now() + 3600) * 1000)
    assert not [n for n in store.list("topics/t/1/data") if n.startswith("p.0.0.1~")]  # merged, then deleted
    want = read(backend)
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild", obj.why
    assert read(backend) == want
    assert list(ti.verify(backend.open())) == []


def test_repair_log_refuses_staged_files_that_do_not_end_where_the_next_record_starts(backend: Backend) -> None:
    """The same, with one more staged file of the commit in that partition than it published (as a stray file
    would be): the completion would not end where the next record starts, so the entry is not rebuilt from it."""
    from coordinator.layout import data_dir

    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p")
    commit(p, [1, 2], partitions=(0, 1))
    seq = fresh_state(backend).seq + 1
    commit(p, [3, 4, 5, 6], partitions=(0, 1))
    commit(p, [7], partitions=(1,))
    store = backend.open()
    [name] = [n for n in store.list(data_dir("t", 1)) if n.startswith("p.0.0.1~")]
    head, tail = name.split("~")
    stray = f"{head}~{int(tail[:10]) + 1:010d}{tail[10:]}"
    store.put(f"{data_dir('t', 1)}/{stray}", store.get(f"{data_dir('t', 1)}/{name}"))
    store.delete(marker_path("t", 1, 1))
    flip(store, txn_log_path(seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log().objects
    assert obj.action == "cannot" and "is missing: the commits of entry" in obj.why


def test_a_fence_only_the_damaged_entry_held_stays_a_fence_after_repair(backend: Backend) -> None:
    """G3 across a repair: the damaged entry alone held a newer init of 'z', which fenced the epoch a zombie still
    holds. No copy says so, so the rebuilt entry fences 'z' for good: the zombie is refused, never current again."""
    make_topic(backend.open(), partitions=1)
    zombie = producer(backend, "z")
    commit(zombie, [1])
    producer(backend, "z")  # the last entry: z's init at the next epoch, which fences the zombie
    flip(backend.open(), txn_log_path(fresh_state(backend).seq))
    [obj] = TransactionCoordinator(backend.open()).repair_log(execute=True).objects
    assert obj.action == "rebuild" and any("fenced for good" in line and "'z'" in line for line in obj.assumed)
    with pytest.raises(ProducerFencedError):
        commit(zombie, [2])
    assert [i for _p, _o, i in read(backend)] == [1]
    commit(producer(backend, "z"), [3])  # z restarted initialises again
    assert [i for _p, _o, i in read(backend)] == [1, 3]
    assert list(ti.verify(backend.open())) == []


def test_repair_log_rebuilds_a_covered_entry_only_when_its_checkpoint_confirms_it(backend: Backend) -> None:
    make_topic(backend.open(), partitions=2)
    p = producer(backend, "p", interval=8)
    for i in range(7):
        with p.transaction():  # entries 1..7; the checkpoint at 7 covers them
            p.send("t", rows([i], "p"), partition=i % 2)
            if i == 4:
                p.send_offsets_to_transaction({"t": {0: 1}}, group_id="g")  # entry 5
    store = backend.open()
    original = flip(store, txn_log_path(4))
    flip(store, txn_log_path(0))  # p's init: the checkpoint still holds its registration
    plan = TransactionCoordinator(store).repair_log(execute=True)
    assert [(o.seq, o.covered, o.action) for o in plan.objects] == [(0, True, "rebuild"), (4, True, "rebuild")]
    assert all("reproduces the checkpoint at entry 7" in o.why and o.lost == () for o in plan.objects)
    assert any("from the checkpoint at entry 7" in line for line in plan.objects[0].recovered)
    assert store.get(txn_log_path(4)) == original
    assert list(ti.verify(store)) == []
    # a commit's group offsets are in no other copy: the checkpoint proves the rebuild would lose them, so the
    # entry is left to truncation (the checkpoint holds its decisions; nobody reads it)
    flip(store, txn_log_path(5))
    [obj] = TransactionCoordinator(store).repair_log(execute=True).objects
    assert (obj.seq, obj.covered, obj.action) == (5, True, "leave") and "do not reproduce" in obj.why
    [problem] = ti.verify(store)
    assert problem.path == txn_log_path(5) and "the checkpoint at entry 7 covers it" in problem.message
    assert plan.ok and fresh_state(backend).group_offsets("g") == {"t": {0: 1}}
    assert sorted(i for _p, _o, i in read(backend)) == list(range(7))


def test_repair_log_removes_a_covered_entry_it_cannot_rebuild_when_a_numbered_checkpoint_lies_above(
        backend: Backend) -> None:
    """A covered entry whose copies do not reproduce its checkpoint (its group offsets were in no other copy) is
    removed as truncation would remove it, when a numbered checkpoint above it ends at a readable entry: nothing is
    lost (the checkpoint holds its decisions), and ``verify`` is clean after."""
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p", interval=1)
    for i in range(9):  # entries 1..9; numbered checkpoints at 3 and 7, _last.json at 9
        with p.transaction():
            p.send("t", rows([i], "p"), partition=0)
            if i == 4:
                p.send_offsets_to_transaction({"t": {0: 1}}, group_id="g")  # entry 5
    store = backend.open()
    want = read(backend)
    flip(store, txn_log_path(5))
    plan = TransactionCoordinator(store).repair_log()
    [obj] = plan.objects
    assert (obj.seq, obj.covered, obj.action) == (5, True, "remove") and "numbered checkpoint at entry 7" in obj.why
    assert store.get(txn_log_path(5)).startswith(b"#")  # a dry run changes nothing
    TransactionCoordinator(store).repair_log(execute=True)
    with pytest.raises(FileNotFoundError):
        store.get(txn_log_path(5))
    assert list(ti.verify(store)) == []
    assert fresh_state(backend).group_offsets("g") == {"t": {0: 1}} and read(backend) == want
    commit(p, [9])  # writers go on
    assert [i for _p, _o, i in read(backend)] == list(range(10))


def test_repair_log_rewrites_damaged_checkpoints_from_the_entries(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p", interval=1)
    for i in range(9):
        commit(p, [i])  # entries 1..9; numbered checkpoints at 3 and 7, _last.json at 9
    store = backend.open()
    log = TransactionCoordinator(store).log
    numbered = log._decode_checkpoint(store.get(txn_checkpoint_path(7)), "7").to_json()
    last = log._decode_checkpoint(store.get(LAST_CHECKPOINT), "last").to_json()
    flip(store, txn_checkpoint_path(7))
    flip(store, LAST_CHECKPOINT)
    problems = {p.path for p in ti.verify(store) if "txnlog repair --log" in p.message}
    assert problems == {txn_checkpoint_path(7), LAST_CHECKPOINT}
    plan = TransactionCoordinator(store).repair_log(execute=True)
    assert {(o.path, o.action) for o in plan.objects} == {(txn_checkpoint_path(7), "rewrite"),
                                                          (LAST_CHECKPOINT, "rewrite")}
    assert log._decode_checkpoint(store.get(txn_checkpoint_path(7)), "7").to_json() == numbered
    assert log._decode_checkpoint(store.get(LAST_CHECKPOINT), "last").to_json() == last
    assert list(ti.verify(backend.open())) == []


class RefusesRecords(LostReplyStore):
    """A real store that fails every write of a partition record while ``failing`` (a store erring on one kind of
    request for a while)."""

    failing = False

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if self.failing and "/log/" in path and not path.startswith("_txn/"):
            raise StoreError(f"injected: the write of {path} failed")
        return super().put_if_absent(path, data)


def test_a_commit_is_acknowledged_only_once_its_partition_records_hold_a_second_copy(backend: Backend) -> None:
    """The log entry is a commit's only copy until its partition records are written: acknowledged before, one
    damaged entry could take an acknowledged commit away. When the records cannot be written the commit is
    decided but not answered (``CommitStateUnknownError``); committing again writes them and answers, and the
    commit then survives its entry's damage."""
    make_topic(backend.open(), partitions=2)
    store = RefusesRecords(backend.open())
    p = Producer(store, "p", coordinator=TransactionCoordinator(store, checkpoint_interval=100))
    p.init_transactions()
    p.begin_transaction()
    p.send("t", rows([1, 3], "p"), partition=0)
    p.send("t", rows([2], "p"), partition=1)
    store.failing = True
    with pytest.raises(CommitStateUnknownError, match="partition records could not be written"):
        p.commit_transaction()
    store.failing = False
    p.commit_transaction()  # decided already: the records are written now, and the commit answered
    assert all(backend.open().exists(marker_path("t", part, 0)) for part in (0, 1))
    want = read(backend)
    assert [i for _p, _o, i in want] == [1, 3, 2]
    flip(backend.open(), txn_log_path(fresh_state(backend).seq))
    TransactionCoordinator(backend.open()).repair_log(execute=True)
    assert read(backend) == want


def test_a_replay_answered_already_committed_first_secures_the_records_of_the_commit_it_acknowledges(
        backend: Backend) -> None:
    """A streaming driver died between its micro-batch's commit point and the partition records; restarted, it
    replays the batch and is answered "already committed", which acknowledges the first attempt's commit: that
    answer, too, waits for the records, so the commit survives its entry's damage."""
    import pyarrow as pa

    from coordinator.segments import stage_segment

    make_topic(backend.open(), partitions=2)
    store = RefusesRecords(backend.open())
    rows_a = pa.Table.from_pylist(rows([1, 2], "q"))
    segs = [stage_segment(store, "t", part, rows_a, f"a.q1.7.first~{part}") for part in (0, 1)]
    store.failing = True
    with pytest.raises(CommitStateUnknownError, match="partition records could not be written"):
        TransactionCoordinator(store).commit_app("q1", 7, "first", segs)
    store.failing = False
    replay = stage_segment(store, "t", 0, rows_a, "a.q1.7.replay~0")
    assert TransactionCoordinator(backend.open()).commit_app("q1", 7, "replay", [replay]).already_committed
    assert all(backend.open().exists(marker_path("t", part, 0)) for part in (0, 1))
    want = read(backend)
    assert len(want) == 4
    flip(backend.open(), txn_log_path(fresh_state(backend).seq))
    TransactionCoordinator(backend.open()).repair_log(execute=True)
    assert read(backend) == want


def test_a_commit_waiting_as_an_intent_when_the_log_turns_out_damaged_is_unknown_not_failed(
        backend: Backend) -> None:
    """G7: a request published as an intent may be decided once the log is repaired, so the damage it meets while
    waiting is an unknown outcome (``CommitStateUnknownError``), never an error saying it was not decided."""
    make_topic(backend.open(), partitions=1)
    a, b = producer(backend, "a"), producer(backend, "b")
    a.begin_transaction()
    a.send("t", rows([1], "a"), partition=0)
    a.flush()  # a reads the log here ...
    commit(b, [2])  # ... b takes the next entry: a's direct try loses the race and a waits as an intent

    def damage_the_winner(name: str) -> None:
        if name == "intent.after":
            flip(backend.open(), txn_log_path(fresh_state_quietly(backend)))

    with faults.injected(damage_the_winner), pytest.raises(CommitStateUnknownError, match="txnlog repair --log"):
        a.commit_transaction()
    TransactionCoordinator(backend.open()).repair_log(execute=True)
    # it learns its outcome: its intent is decided now, against the rebuilt state, in which 'a' is fenced for good
    # (the damaged entry may have held a newer init of it); nothing acknowledged is lost
    with pytest.raises(ProducerFencedError):
        a.commit_transaction()
    assert sorted(i for _p, _o, i in read(backend)) == [2]
    commit(producer(backend, "a"), [1])
    assert sorted(i for _p, _o, i in read(backend)) == [1, 2]


def fresh_state_quietly(backend: Backend) -> int:
    """The number of the last entry, listed (no entry read)."""
    return max(int(n[:20]) for n in backend.open().list("_txn/log") if n.endswith(".json"))


def test_a_damaged_partition_record_error_says_what_to_run(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p")
    for i in range(3):
        commit(p, [i])
    store = backend.open()
    path = marker_path("t", 0, 1)
    store.put(path, b"{")
    coord = TransactionCoordinator(store)
    coord.log.write_checkpoint()  # readers start after it: nothing to compute the record from
    with pytest.raises(CorruptLogError, match=r"txnlog repair --execute") as err:
        TransactionCoordinator(backend.open()).partition("t", 0)
    assert path in str(err.value)


def test_repair_of_records_skips_a_damaged_entry_instead_of_failing(backend: Backend) -> None:
    make_topic(backend.open(), partitions=1)
    p = producer(backend, "p", interval=4)
    for i in range(5):
        commit(p, [i])  # entries 1..5, checkpoint at 3
    store = backend.open()
    flip(store, txn_log_path(2))
    store.put(marker_path("t", 0, 3), b"")
    plan = ti.repair_plan(store)
    assert plan.damaged_entries == [txn_log_path(2)] and [r.path for r in plan] == [marker_path("t", 0, 3)]
    assert TransactionCoordinator(store).repair_records(damaged=True) == 1


def test_repair_log_on_s3(s3_lake: S3Lake) -> None:
    backend = Backend(s3_lake.url, s3_lake.options)
    _a, _b = tail_store(backend)
    before = fresh_state(backend)
    want = read(backend)
    flip(backend.open(), txn_log_path(before.seq))
    with pytest.raises(CorruptLogError, match="txnlog repair --log"):
        fresh_state(backend)
    TransactionCoordinator(backend.open()).repair_log(execute=True)
    assert read(backend) == want and fresh_state(backend).to_json() == without(before, "a", "b")
    commit(producer(backend, "a"), [70], partitions=(0,))
    assert len(read(backend)) == len(want) + 1

