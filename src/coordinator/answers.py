"""Answers: a waiting request's outcome, written over its intent by the writer of the entry that decided it.

A process whose request waits as an intent (``_txn/intents/<id>.json``) learns its outcome without following the
log: once the entry that decided the request is proven the log's and the partition records of the partitions the
request published rows in exist (its second copy, see ``docs/design.md``, "A commit"), that entry's writer puts the
*answer* (the deciding item and the entry's number) at the intent's path. The waiter reads its own path by name:
the request's bytes mean "not answered yet", an answer means decided.

Contract (the answer is derived data, like a partition record, never a decision):

* An answer is written only for an item of an entry its writer created and proved, after the records that item
  needs exist. So an answer found is the log's decision, and acknowledging it needs nothing more.
* An answer lost, never written (its writer died first, a put failed), deleted by another writer, damaged, or
  naming another request, only delays: the waiter follows the log instead, as it would without answers.
* Answers carry a checksum of their body: bytes damaged into other valid JSON are refused like unreadable ones.
* Only :class:`~coordinator.requests.TxnRequest` intents (commits and aborts) are answered.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

from coordinator.decisions import Outcome, outcome_of_item
from coordinator.records import FORMAT_VERSION, Item, encode_json, item_from_json

#: The ``kind`` of an answer object (an intent's ``kind`` is its request's).
ANSWER = "answer"


@dataclass(frozen=True)
class Look:
    """What a waiter found at its intent's path: ``outcome`` when answered; ``unusable`` when the path holds an
    answer it cannot use (damaged, or another request's): no other will come, so it follows the log."""

    outcome: Outcome | None = None
    unusable: bool = False


def _crc(body: dict[str, Any]) -> int:
    return zlib.crc32(encode_json(body))


def answer_bytes(seq: int, item: Item) -> bytes:
    """The answer to ``item.request``: decided by ``item`` at entry ``seq``."""
    body = {"v": FORMAT_VERSION, "kind": ANSWER, "seq": seq, "item": item.to_json()}
    return encode_json({**body, "crc": _crc(body)})


def is_answer(data: bytes) -> bool:
    """Whether intent bytes are an answer (cheap: a request's ``kind`` never is ``answer``)."""
    return b'"kind":"answer"' in data


def read_answer(data: bytes, rid: str) -> Look:
    """What intent bytes read by request ``rid``'s waiter say (never raises: an answer only ever delays)."""
    if not is_answer(data):
        return Look()
    try:
        d = json.loads(data)
        crc = d.pop("crc")
        if d.get("v") != FORMAT_VERSION or crc != _crc(d):
            return Look(unusable=True)
        item = item_from_json(d["item"])
        if item.request != rid:
            return Look(unusable=True)
        out = outcome_of_item(item, int(d["seq"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return Look(unusable=True)
    return Look(Outcome(out.status, out.item, out.seq, out.code, out.reason, secured=True))
