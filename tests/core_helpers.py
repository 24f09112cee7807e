"""Shared helpers for the core tests: opening fresh "processes" on one store, and checking a topic's history."""

from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from coordinator import (
    CommitStateUnknownError,
    Store,
    TransactionCoordinator,
    create_topic,
    open_store,
    parallel,
    read_snapshot,
)
from coordinator.store import ObjectInfo

SCHEMA = pa.schema([("id", pa.int64()), ("txn", pa.string())])


@dataclass(frozen=True)
class Backend:
    """How to reach one store: each :meth:`open` is what a new process would get (a new Store object)."""

    url: str
    options: Mapping[str, str]

    def open(self) -> Store:
        return open_store(self.url, self.options)

    def coordinator(self, **kw: int) -> TransactionCoordinator:
        return TransactionCoordinator(self.open(), **kw)


def make_topic(store: Store, name: str = "t", partitions: int = 3) -> None:
    create_topic(store, name, SCHEMA, partitions)


def rows(ids: Iterable[int], label: str) -> list[dict[str, object]]:
    return [{"id": i, "txn": label} for i in ids]


def committed_ids(backend: Backend, topic: str = "t") -> list[int]:
    """All committed ids of a topic at a fresh snapshot, after checking the partition offsets are dense."""
    table = read_snapshot(backend.open(), [topic])[topic]
    check_dense(table)
    return sorted(table.column("id").to_pylist())


def check_dense(table: pa.Table) -> None:
    """Offsets in each partition are consecutive (from the log start, 0 unless retention moved it), no repeats."""
    by_part: dict[int, list[int]] = {}
    for p, o in zip(table.column("_partition").to_pylist(), table.column("_offset").to_pylist(), strict=True):
        by_part.setdefault(p, []).append(o)
    for p, offs in by_part.items():
        first = min(offs)
        dense = list(range(first, first + len(offs)))
        assert sorted(offs) == dense, f"partition {p} offsets not dense: {sorted(offs)[:20]}"


def every_object(store: Store) -> Iterator[tuple[str, bytes]]:
    """Each object of ``store`` with its bytes, once this process's background work is done (a commit deletes its
    open marker, writes records, in the background); an object deleted between the listing and its read is
    skipped."""
    assert parallel.drain(30)
    for info in store.list_info(""):
        try:
            yield info.path, store.get(info.path)
        except FileNotFoundError:
            continue


def duplicates(ids: Iterable[int]) -> list[int]:
    return [i for i, n in Counter(ids).items() if n > 1]


class LostReplyStore(Store):
    """A real store whose conditional writes are applied but whose replies can be lost, as a network partition does
    to a client. :meth:`lose` decides per write: None (the reply arrives), ``"read back"`` (the client reads the
    object to learn the outcome) or ``"unknown"`` (the read-back fails too: ``CommitStateUnknownError``)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner.url)
        self.inner = inner

    def lose(self, path: str) -> str | None:
        return None

    def put_if_absent(self, path: str, data: bytes) -> bool:
        created = self.inner.put_if_absent(path, data)
        outcome = self.lose(path)
        if outcome == "unknown":
            raise CommitStateUnknownError(f"reply of the conditional write of {path} was lost")
        if outcome == "read back":
            return self._read_back_equal(path, data)
        return created

    def put(self, path: str, data: bytes) -> None:
        self.inner.put(path, data)

    def get(self, path: str) -> bytes:
        return self.inner.get(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return self.inner.list(prefix, start_after, limit)

    def now(self) -> float:
        return self.inner.now()

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return self.inner.list_dirs(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        return self.inner.list_info(prefix)

    def delete(self, path: str) -> None:
        self.inner.delete(path)
