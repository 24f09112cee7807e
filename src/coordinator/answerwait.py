"""How a request waiting as an intent looks for its answer (:mod:`coordinator.answers`): when to look, for how
long before it follows the log instead, and whether its process was answered lately (the log is then busy with
another writer serving it). Liveness only: an answer found is the log's decision whenever it is read, and a request
that stops looking learns its outcome from the log. A mixin of :class:`~coordinator.txnlog.TransactionLog`."""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING

from coordinator.answers import read_answer
from coordinator.decisions import Outcome
from coordinator.errors import StoreError
from coordinator.layout import intent_path
from coordinator.requests import Request
from coordinator.serving import POLL_S

if TYPE_CHECKING:
    from coordinator.store import Store

log = logging.getLogger(__name__)

#: The time from an intent's put to its answer assumed before any was measured (see :mod:`coordinator.answers`).
ANSWER_WAIT_S = 0.15
#: A waiting request looks for its answer for four times the recent time answers took, within these bounds, then
#: follows the log (the writer that would answer died, stopped serving, or could not write the answer).
ANSWER_PATIENCE_S = (0.5, 5.0)
#: A process that learned an outcome from an answer this recently (or within three times the recent time answers
#: took, if longer) sends its next transaction request straight to the queue as an intent: the log is busy with
#: another writer serving it, and a direct try (which reads every entry since the view) would only find intents
#: waiting. Its producers skip reading the log for their epoch meanwhile (the entry deciding their request checks it).
QUIET_S = 1.0


class AnswerWaits:
    """The pacing of a waiting request's looks for its answer; a mixin of
    :class:`~coordinator.txnlog.TransactionLog`."""

    if TYPE_CHECKING:
        store: Store
        #: when this process last learned an outcome from an answer (monotonic)
        _answered_at: float
        #: the recent time from an intent's put to its outcome (a moving average, seconds)
        _answer_wait: float

    @property
    def answered_lately(self) -> bool:
        """Whether this process learned an outcome from an answer within :data:`QUIET_S` (read without a lock: a
        hint): the log is busy, served by another writer."""
        return time.monotonic() - self._answered_at < max(QUIET_S, 3 * self._answer_wait)

    def _answer_patience(self) -> float:
        """How long a waiting request looks for its answer before it follows the log (seconds)."""
        return min(ANSWER_PATIENCE_S[1], max(ANSWER_PATIENCE_S[0], 4 * self._answer_wait))

    def _answered(self, waited: float, *, from_answer: bool) -> None:
        """A request that waited as an intent for ``waited`` seconds learned its outcome (``from_answer``: from its
        answer; else from the log, its answer late or lost): what it waited counts either way, or answers slower
        than the patience would never be waited for."""
        if from_answer:
            self._answered_at = time.monotonic()
        self._answer_wait += 0.2 * (waited - self._answer_wait)

    def _look_for_answer(self, req: Request) -> tuple[Outcome | None, bool]:
        """Read ``req``'s intent for its answer (see :mod:`coordinator.answers`). Returns the outcome if answered,
        and whether to keep looking: not once the intent is gone (a writer deleted it, decided, or its put never
        landed) or holds an answer that cannot be used; the log says then."""
        try:
            data = self.store.get(intent_path(req.id))
        except FileNotFoundError:
            return None, False
        except StoreError as exc:
            log.debug("looking for the answer to %s: %s", req.id, exc)
            return None, False
        look = read_answer(data, req.id)
        return look.outcome, look.outcome is None and not look.unusable

    def _pause_before_look(self, waited: float) -> None:
        """Sleep until a request that has waited ``waited`` seconds for its answer looks again: the first look a
        little before answers recently came, the next ones at a tenth of that (jittered)."""
        pace = max(0.8 * self._answer_wait - waited, 0.1 * self._answer_wait, POLL_S)
        time.sleep(random.uniform(0.8, 1.2) * pace)
