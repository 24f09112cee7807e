"""The conditional-write probe: before its first conditional write, a process checks that the store really makes
``put_if_absent`` exclusive (a store or proxy that ignores ``If-None-Match`` would silently break the log)."""

from __future__ import annotations

import hashlib
import threading
import uuid

from coordinator.errors import StoreError, UnsupportedStoreError
from coordinator.store import Store

__all__ = ["learn_verified", "probe_conditional_writes", "verified_writes"]

_PROBED: set[str] = set()
_PROBE_LOCK = threading.Lock()
PROBE_DIR = "_txn/probe"


def _probe_key(store: Store) -> str:
    key = f"{store.url} via {getattr(store, 'endpoint', None)}"
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def verified_writes() -> list[str]:
    """The (hashed) store URL + endpoint pairs this process verified honour conditional writes; the coordinator's
    checkpoints carry them, so a process opening the log from a checkpoint needs no probe at all."""
    with _PROBE_LOCK:
        return sorted(_PROBED)


def learn_verified(store: Store, keys: object) -> None:
    """Accept the verdicts a checkpoint of ``store`` carries (see :func:`verified_writes`)."""
    if isinstance(keys, list | tuple) and _probe_key(store) in keys:
        with _PROBE_LOCK:
            _PROBED.add(_probe_key(store))


def probe_conditional_writes(store: Store) -> None:
    """Check that ``put_if_absent`` really is exclusive, before the first conditional write of this process (writers
    call it; readers never do, so reading needs no write permission).

    A verdict is cached per process and store URL + endpoint, and kept in the store
    (``_txn/probe/ok-<hash>.json``) once a probe passed, so a fresh process pays one GET, not a probe. A store opened
    with ``probe=False`` is trusted.

    Raises:
        UnsupportedStoreError: a second conditional create of the same path succeeded with different bytes.
    """
    if not getattr(store, "probe_required", True):
        return
    key = _probe_key(store)
    with _PROBE_LOCK:
        if key in _PROBED:
            return
    verdict = f"{PROBE_DIR}/ok-{key}.json"
    try:
        store.get(verdict)
    except FileNotFoundError:
        _probe(store)
        store.put(verdict, b'{"conditional_writes": "verified"}')
    with _PROBE_LOCK:
        _PROBED.add(key)


def _probe(store: Store) -> None:
    path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    try:
        first = store.put_if_absent(path, b"probe-a")
        second = store.put_if_absent(path, b"probe-b")
        held = store.get(path)
    finally:
        try:
            store.delete(path)
        except StoreError:
            pass
    if not first or second or held != b"probe-a":
        raise UnsupportedStoreError(
            f"store {store.url} does not honour conditional writes (create-if-absent overwrote an existing "
            "object); txnlog needs If-None-Match support to keep its transaction log consistent"
        )

