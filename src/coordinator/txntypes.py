"""The records a :class:`~coordinator.coordinator.TransactionCoordinator` hands out (a producer's identity, a
commit's result, a snapshot), group offsets in their durable form, and the error a requester gets for an outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.decisions import TIMEOUT_REASON, Outcome
from coordinator.errors import (
    CommitStateUnknownError,
    InvalidOptionError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionTimedOutError,
)
from coordinator.layout import check_name
from coordinator.records import producer_txn_id
from coordinator.requests import TxnRequest


@dataclass(frozen=True)
class ProducerIdentity:
    """What ``init_transactions`` hands a producer: its transactional id, producer id and epoch."""

    tid: str
    pid: int
    epoch: int

    def txn_id(self, n: int) -> str:
        """The id of this producer's transaction number ``n``."""
        return producer_txn_id(self.pid, self.epoch, n)


@dataclass(frozen=True)
class CommitResult:
    """The outcome of a commit.

    Attributes:
        txn: the transaction id.
        commit_seq: the transaction-log entry that committed it (-1 when not known to this process).
        offsets: (topic, partition) -> (first offset, end offset) the transaction's records received (empty when
            the commit was learned from the state rather than from its entry).
        already_committed: an application version that was already committed: this call published nothing.
    """

    txn: str
    commit_seq: int
    offsets: Mapping[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    already_committed: bool = False

    @property
    def records(self) -> int:
        return sum(e - b for b, e in self.offsets.values())


@dataclass(frozen=True)
class Snapshot:
    """A transaction-consistent cut: every transaction committed at or before log entry ``seq`` and no other.

    ``ends[topic][partition]`` is the exclusive end offset of the cut in each partition, ``starts`` the log start.
    """

    seq: int
    ends: Mapping[str, Mapping[int, int]]
    starts: Mapping[str, Mapping[int, int]]


def _offsets(offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None) -> dict[str, dict[str, dict[str, int]]]:
    """Group offsets in their durable form.

    Raises:
        InvalidNameError: a bad group name.
        InvalidOptionError: a negative offset (a negative value is how the log records a removed offset).
    """
    offs = {g: {t: {str(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
            for g, ts in (offsets or {}).items()}
    for g, ts in offs.items():
        check_name("group", g)
        for t, ps in ts.items():
            for p, o in ps.items():
                if o < 0:
                    raise InvalidOptionError(f"offset {o} of group {g!r} for {t}/{p} is negative")
    return offs


def _offsets_lenient(offsets: Mapping[str, Mapping[str, Mapping[int, int]]] | None) -> dict[str, dict[str, dict[str,
                                                                                                       int]]]:
    """Group offsets as an abort records them (never applied, so not checked)."""
    return {str(g): {str(t): {str(p): int(o) for p, o in ps.items()} for t, ps in ts.items()}
            for g, ts in (offsets or {}).items()}


def _error(req: TxnRequest, out: Outcome) -> Exception:
    """The error a requester gets for a non-success outcome."""
    if out.status == "rejected":
        if out.code == "fenced":
            return ProducerFencedError(out.reason)
        if out.code == "sequence":
            return OutOfOrderSequenceError(out.reason)
        return InvalidTxnStateError(out.reason)
    if out.status == "aborted":
        if out.reason.startswith(TIMEOUT_REASON):
            return TransactionTimedOutError(f"transaction {req.txn} {out.reason}")
        return TransactionAbortedError(f"transaction {req.txn} was aborted ({out.reason or 'no reason recorded'})")
    if out.status == "committed":
        return InvalidTxnStateError(f"transaction {req.txn} was committed")
    return CommitStateUnknownError(f"the outcome of transaction {req.txn} is not known to this process: {out.reason}")
