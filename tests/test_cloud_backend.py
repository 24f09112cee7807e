"""The parts the object-store backends share (:mod:`coordinator.backends.cloud`): the retry loop's budget,
counting and ambiguity, the read-back that settles an ambiguous conditional write, and credential scrubbing."""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Callable

import pytest

from coordinator.backends.cloud import CloudStore, RetriesExhausted, TransientFailure, scrub
from coordinator.backends.memory import MemoryStore
from coordinator.backends.s3 import S3Store
from coordinator.errors import CommitStateUnknownError
from coordinator.store import ObjectInfo, StoreOptions


class _Objects(CloudStore):
    """A CloudStore whose objects live in a MemoryStore, to drive the shared loop with scripted attempts."""

    label = "Test"

    def __init__(self, max_attempts: int = 3) -> None:
        super().__init__("test://bucket")
        self.prefix = ""
        self._root = "test://bucket/"
        self._set_limits(max_attempts=max_attempts, time_budget=60.0, connect_timeout=1.0, read_timeout=1.0,
                         backoff_base=0.0, backoff_max=0.0, list_page_size=10, page_limit=10)
        self._objects = MemoryStore(f"memory://cloud-test-{uuid.uuid4().hex}")

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return self._objects.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        self._objects.put(path, data)

    def get(self, path: str) -> bytes:
        return self._objects.get(path)

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        return self._objects.list(prefix, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        return self._objects.list_dirs(prefix)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        return self._objects.list_info(prefix)

    def delete(self, path: str) -> None:
        self._objects.delete(path)


def _failing(*maybe_applied: bool) -> Callable[[], None]:
    """An attempt that fails transiently, the n-th time with ``maybe_applied[n]`` (the last one repeating)."""
    calls = iter(maybe_applied)
    last = [maybe_applied[-1]]

    def attempt() -> None:
        last[0] = next(calls, last[0])
        raise TransientFailure("HTTP 503 SlowDown: slow down", maybe_applied=last[0], name="HTTP 503")

    return attempt


def test_retry_counts_every_attempt_and_stops_at_max_attempts() -> None:
    store = _Objects(max_attempts=3)
    with pytest.raises(RetriesExhausted) as caught:
        store._retry("get", "a/b", _failing(False))
    assert not caught.value.ambiguous
    assert str(caught.value).startswith("Test get of test://bucket/a/b failed after 3 attempts in ")
    assert str(caught.value).endswith("; last error: HTTP 503 SlowDown: slow down")
    assert store.counters.snapshot().get("get") == 3


def test_retry_write_is_ambiguous_once_any_attempt_may_have_been_applied() -> None:
    store = _Objects(max_attempts=3)
    with pytest.raises(RetriesExhausted) as caught:
        store._retry("put_if_absent", "x", _failing(True, False), write=True)
    assert caught.value.ambiguous
    assert "(it may have been applied)" in str(caught.value)
    with pytest.raises(RetriesExhausted) as read:
        store._retry("get", "x", _failing(True))
    assert not read.value.ambiguous, "a read is never ambiguous"


def test_retry_returns_the_first_success_and_passes_other_errors_at_once() -> None:
    store = _Objects(max_attempts=5)
    outcomes = iter([True, False])

    def flaky() -> str:
        if next(outcomes):
            raise TransientFailure("reset", maybe_applied=True, name="ConnectionResetError")
        return "done"

    assert store._retry("head", "x", flaky) == "done"

    def refused() -> None:
        raise PermissionError("403")

    with pytest.raises(PermissionError):
        store._retry("list", "x", refused)
    assert store.counters.snapshot().get("head") == 2
    assert store.counters.snapshot().get("list") == 1


def test_settle_reads_an_ambiguous_write_back() -> None:
    store = _Objects()
    ambiguous = RetriesExhausted("Test put_if_absent of x failed", ambiguous=True)
    with pytest.raises(CommitStateUnknownError, match="failed ambiguously and nothing is there"):
        store._settle("x", b"ours", ambiguous)
    store.put("x", b"ours")
    assert store._settle("x", b"ours", ambiguous) is True
    assert store._settle("x", b"theirs", ambiguous) is False
    certain = RetriesExhausted("Test put_if_absent of x failed", ambiguous=False)
    with pytest.raises(RetriesExhausted) as caught:
        store._settle("x", b"ours", certain)
    assert caught.value is certain


def test_closed_store_refuses_before_counting() -> None:
    store = _Objects()
    store._closed = True
    with pytest.raises(Exception, match=r"Test store test://bucket is closed"):
        store._retry("get", "x", lambda: None)
    assert not store.counters.snapshot().get("get")


def test_scrub_hides_a_secret_that_contains_another_whole() -> None:
    assert scrub("key=AKIA1234 secret=AKIA1234-more-secret", ["AKIA1234", "AKIA1234-more-secret"]) == (
        "key=*** secret=***")


def test_s3_scrubs_a_secret_that_contains_the_key() -> None:
    store = S3Store("s3://bucket/p", StoreOptions(key="AKIA1234", secret="AKIA1234-more-secret"))
    try:
        assert "more-secret" not in store._scrub("signature of AKIA1234-more-secret refused")
    finally:
        store.close()
