"""Kafka's transaction states and their table of valid previous states (``TransactionState.validPreviousStates``):
the state machine every transactional id of the log follows, persisted by value."""

from __future__ import annotations

from enum import StrEnum


class TxnState(StrEnum):
    """Kafka's transaction states, persisted by value."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"


_READY = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

#: The states a transactional id may be in before each transition (Kafka's ``TransactionState.validPreviousStates``).
#: A commit walks ``Ongoing -> PrepareCommit -> CompleteCommit`` and an abort ``Ongoing -> PrepareAbort ->
#: CompleteAbort`` inside one log entry (see ``docs/design.md``), so between entries a producer is always ready.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _READY | {TxnState.DEAD},
    TxnState.ONGOING: _READY,
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _READY,
}

COMMIT_PATH = (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)
ABORT_PATH = (TxnState.ONGOING, TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT)


def is_ready(state: TxnState) -> bool:
    """Whether a producer in ``state`` may begin a new transaction."""
    return state in _READY


def walk(current: TxnState, path: tuple[TxnState, ...]) -> TxnState:
    """Validate the transitions ``current -> path[0] -> path[1] ...`` against :data:`VALID_PREVIOUS`.

    Returns:
        the final state.
    Raises:
        ValueError: a step is not allowed (callers turn it into a rejection or InvalidTxnStateError).
    """
    for nxt in path:
        if current not in VALID_PREVIOUS[nxt]:
            raise ValueError(f"cannot go from {current.value} to {nxt.value}")
        current = nxt
    return current
