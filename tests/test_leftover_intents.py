"""Intents left in ``_txn/intents/`` by a process killed after their request was decided, before it deleted them:
a process that never read the deciding entry (it opened the log from a later checkpoint) must not decide them
again."""

from __future__ import annotations

import time

import pytest

from coordinator import Producer, parallel
from coordinator.layout import TXN_INTENTS, intent_path
from coordinator.requests import InitRequest, request_bytes
from core_helpers import Backend, committed_ids, make_topic, rows


def _decided_init(backend: Backend, tid: str, prev: tuple[int, int] | None) -> InitRequest:
    """Init ``tid``; returns the request its init was decided as (the intent a process killed after its init was
    decided, before its intent was deleted, leaves behind)."""
    first = Producer(backend.open(), tid)
    first.init_transactions()
    meta = first.coordinator.log.refresh().producers[tid]
    return InitRequest(id=meta.init_request, tid=tid, prev=prev, timeout_ms=meta.timeout_ms)


@pytest.mark.parametrize("again", [False, True], ids=["first-init", "re-init"])
def test_a_leftover_init_intent_read_from_a_checkpoint_does_not_fence_the_restarted_producer(
    backend: Backend, again: bool
) -> None:
    """G3 (no spurious fencing). The killed process's init named "no producer yet" (first init) or the epoch it
    replaced (re-init). Its producer restarts and inits again (the next epoch); a checkpoint is written; a process
    that opens the log from that checkpoint (so it never read the entry that decided the leftover intent) and
    decides waiting intents must refuse the leftover one as stale: before, it took the first init's missing
    ``prev`` as "anything current" and bumped the epoch, fencing the live producer."""
    make_topic(backend.open())
    prev = None
    if again:
        Producer(backend.open(), "etl").init_transactions()
        meta = backend.coordinator().log.refresh().producers["etl"]
        prev = (meta.pid, meta.epoch)
    req = _decided_init(backend, "etl", prev)
    rid = req.id
    live = Producer(backend.open(), "etl")
    ident = live.init_transactions()  # the restart (it read the deciding entry)
    # the leftover intent: a writer that lists it deletes it, decided, but deletes can fail (or come too early)
    backend.open().put(intent_path(rid), request_bytes(req))
    writer = live.coordinator.log
    writer.write_checkpoint()
    assert writer.last_checkpoint() is not None and writer.last_checkpoint().seq == writer.state.seq  # type: ignore[union-attr]

    other = backend.coordinator()  # opens from the checkpoint: the deciding entry is out of its view
    assert other.log.decision(rid) is None and other.log.refresh().seq == writer.state.seq
    other.init_producer("someone-else")  # its entry decides every waiting intent
    assert parallel.drain(30)  # (the writer serves the queue on a thread of its own after answering its caller)

    meta = backend.coordinator().log.refresh().producers["etl"]
    assert (meta.pid, meta.epoch) == (ident.pid, ident.epoch)
    item, _ = other.log.decision(rid) or (None, 0)
    assert item is not None and getattr(item, "code", "") == "stale", item
    with live.transaction():  # the live producer was not fenced
        live.send("t", rows(range(5), "live"))
    assert committed_ids(backend) == list(range(5))
    for _ in range(200):  # the writer that refused the intent deletes it, in the background
        if f"{rid}.json" not in backend.open().list(TXN_INTENTS):
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"intent {rid} was refused but never deleted")
