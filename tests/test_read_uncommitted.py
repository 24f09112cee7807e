"""read_uncommitted beside maintenance: a compaction's merged file holds committed rows (under their offsets), so
it is never read as staged data, whether its replace decision is published yet or not."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

from coordinator import Consumer, Producer, faults
from coordinator.layout import data_dir
from coordinator.maintenance import compact_partition
from coordinator.reader import uncommitted_paths
from core_helpers import Backend, make_topic, rows


def _topic_with_small_commits_and_staged_data(backend: Backend) -> None:
    """Topic ``t`` (1 partition): ids 0-8 committed in three transactions (three small segments, offsets 0-8),
    ids 100-101 of an aborted transaction and 200-202 of an open one (staged only)."""
    make_topic(backend.open(), partitions=1)
    p = Producer(backend.open(), "small")
    p.init_transactions()
    for first in (0, 3, 6):
        with p.transaction():
            p.send("t", rows(range(first, first + 3), "c"), partition=0)
    aborted = Producer(backend.open(), "aborted")
    aborted.init_transactions()
    aborted.begin_transaction()
    aborted.send("t", rows([100, 101], "x"), partition=0)
    aborted.flush()
    aborted.abort_transaction()
    hung = Producer(backend.open(), "hung")
    hung.init_transactions()
    hung.begin_transaction()
    hung.send("t", rows([200, 201, 202], "o"), partition=0)
    hung.flush()


def _during_compaction(backend: Backend, read: Callable[[], None]) -> None:
    """Compact partition 0 of ``t``, running ``read`` once between the merged file's put and the publication of
    its replace decision (the compaction's log entry), and check the compaction then succeeded."""
    calls: list[str] = []

    def at(name: str) -> None:
        if name == "txnlog.entry.before" and not calls:
            calls.append(name)
            with faults.injected(None):
                read()

    coord = backend.coordinator()
    with faults.injected(at):
        report = compact_partition(coord, "t", 0)
    assert calls and report.merged_groups == 1 and report.segments_after == 1, (calls, report)


def _split(table: pa.Table) -> tuple[list[tuple[int, int]], list[int]]:
    """(id, offset) of the committed rows, ids of the staged rows (null offset)."""
    committed = table.filter(pa.compute.is_valid(table.column("_offset")))
    staged = table.filter(pa.compute.is_null(table.column("_offset")))
    return (sorted(zip(committed.column("id").to_pylist(), committed.column("_offset").to_pylist(), strict=True)),
            sorted(staged.column("id").to_pylist()))


def test_read_uncommitted_never_returns_a_compactions_merged_rows_as_staged(backend: Backend) -> None:
    """A read_uncommitted consumer polling while a compaction has written its merged file but not yet published
    it (and polling on after it published) gets each committed row once, with its offset, and the aborted and
    open transactions' rows once, with a null offset: before, the merged file counted as staged, so the committed
    rows came a second time with null offsets."""
    _topic_with_small_commits_and_staged_data(backend)
    staged = [100, 101, 200, 201, 202]
    committed = [(i, i) for i in range(9)]
    early = Consumer(backend.open(), isolation_level="read_uncommitted")
    early.subscribe(["t"])
    assert _split(early.poll()) == (committed, staged)
    seen: dict[str, tuple[list[tuple[int, int]], list[int]]] = {}
    listed: list[str] = []

    def read() -> None:
        fresh = Consumer(backend.open(), isolation_level="read_uncommitted")
        fresh.subscribe(["t"])
        seen["fresh"] = _split(fresh.poll())
        seen["early"] = _split(early.poll())
        coord = backend.coordinator()
        listed.extend(uncommitted_paths(coord.store, coord.partition("t", 0)))

    _during_compaction(backend, read)
    assert seen["fresh"] == (committed, staged)
    assert seen["early"] == ([], [])  # nothing new: the merged file is not new staged data
    assert len(listed) == 2 and all("~merged" not in p for p in listed), listed
    assert any("~merged" in n for n in backend.open().list(data_dir("t", 0)))
    assert _split(early.poll()) == ([], [])
    after = Consumer(backend.open(), isolation_level="read_uncommitted")
    after.subscribe(["t"])
    assert _split(after.poll()) == (committed, staged)


@pytest.mark.parametrize("name", ["r.0123abcd~merged.parquet", "notes.txt", "x~y.parquet"])
def test_only_files_named_by_a_transaction_count_as_staged(backend: Backend, name: str) -> None:
    """A file in a data folder that no transaction staged (an unpublished merged file, a stray file) is never
    read as uncommitted records, even when it decodes as a segment."""
    _topic_with_small_commits_and_staged_data(backend)
    store = backend.open()
    seg = next(n for n in store.list(data_dir("t", 0)) if n.startswith("p."))
    store.put(f"{data_dir('t', 0)}/{name}", store.get(f"{data_dir('t', 0)}/{seg}"))
    consumer = Consumer(backend.open(), isolation_level="read_uncommitted")
    consumer.subscribe(["t"])
    assert _split(consumer.poll()) == ([(i, i) for i in range(9)], [100, 101, 200, 201, 202])
