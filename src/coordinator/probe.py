"""The conditional-write probe: before it writes anything, every writing path checks that the store really makes
``put_if_absent`` exclusive (a store or proxy that ignores ``If-None-Match``, or GCS's ``ifGenerationMatch=0``, would
silently break the log: two writers would both "create" the same log entry, and one of them would be lost). It
writes through the backend's own ``put_if_absent``, so it checks the very request kind the backend sends (an
emulator may enforce the condition on one GCS upload kind and not another).

Who probes: the producer (before its first log entry), the Spark batch and stream sinks and the native write
(:func:`txnsink.plan.plan_write`, on the driver, before any task stages a file), topic creation and administration,
the sweeps and maintenance (before they delete or write anything), every CLI command that writes and the daemon,
and, as a last guard, the transaction log before a process's first log entry. Readers never probe: reading needs
no write permission.

What a verdict rests on: this process's own probe, or the verdict object a passed probe left in the store
(``_txn/probe/ok-<hash>.json``, keyed on the store URL and endpoint, so another endpoint in front of the same
bucket is probed on its own). Nothing else vouches for a store: how a store was opened does not, nor does a
checkpoint written by another process. Deleting the verdict objects makes every process probe again.

Beside the probe, :func:`ensure_format` records the store's format (``_txn/format.json``) before the first entry.
"""

from __future__ import annotations

import hashlib
import threading
import uuid

from coordinator.errors import CommitStateUnknownError, StoreError, UnsupportedFormatError, UnsupportedStoreError
from coordinator.layout import FORMAT_PATH
from coordinator.records import FORMAT_VERSION, decode_json, encode_json
from coordinator.store import Store

__all__ = ["PROBE_DIR", "ensure_format", "probe_conditional_writes"]

_PROBED: set[str] = set()
_PROBE_LOCK = threading.Lock()
PROBE_DIR = "_txn/probe"


def _endpoint(store: Store) -> str | None:
    endpoint = getattr(store, "endpoint", None)
    return endpoint if isinstance(endpoint, str) else None


def _probe_key(store: Store) -> str:
    key = f"{store.url} via {_endpoint(store)}"
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def _where(store: Store) -> str:
    endpoint = _endpoint(store)
    return f"{store.url} (endpoint {endpoint})" if endpoint else store.url


def probe_conditional_writes(store: Store) -> None:
    """Check that ``put_if_absent`` really is exclusive, before a writing path writes anything (readers never
    call it, so reading needs no write permission).

    A passed probe is remembered for the life of the process (per store URL and endpoint) and kept in the store
    (``_txn/probe/ok-<hash>.json``), so a fresh process pays one GET, not a probe. A failed probe is never
    remembered: every writing path tries again and is refused again.

    Raises:
        UnsupportedStoreError: a second conditional create of the same path succeeded with different bytes
            (the message names the store and its endpoint).
        StoreError: the store failed while probing.
    """
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
    # A fresh path per probe is the writer token: nobody else ever writes "probe-a" there, so a True from the
    # first create is this process's own object, and a True from the second (other bytes) is a lie.
    path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    try:
        first = store.put_if_absent(path, b"probe-a")
        second = store.put_if_absent(path, b"probe-b")
        held = store.get(path)
    except CommitStateUnknownError as exc:  # of the probe object only: no request of the caller's is in doubt
        raise StoreError(f"could not probe the conditional writes of store {_where(store)}: {exc}") from exc
    finally:
        try:
            store.delete(path)
        except StoreError:
            pass
    if not first or second or held != b"probe-a":
        raise UnsupportedStoreError(
            f"store {_where(store)} does not honour conditional writes: a create-if-absent (S3's If-None-Match: *, "
            "GCS's ifGenerationMatch=0) overwrote an existing object, so two writers could both win the same "
            "transaction-log entry. "
            "txnlog refuses to write to it; use a store or endpoint that enforces the condition"
        )


def ensure_format(store: Store) -> None:
    """Create ``_txn/format.json`` (the store's format) if absent.

    Raises:
        UnsupportedFormatError: the store was created by another format.
    """
    body = encode_json({"format": FORMAT_VERSION})
    # a fact, not a win: equal bytes are the same format whoever wrote them (no writer token needed)
    if store.put_if_absent(FORMAT_PATH, body):
        return
    d = decode_json(store.get(FORMAT_PATH), FORMAT_PATH, "store format file")
    if d.get("format") != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"store {store.url} has txnlog store format {d.get('format')!r}; this txnlog reads format "
            f"{FORMAT_VERSION} only"
        )
