"""A producer's commits in flight (:meth:`~coordinator.producer.Producer.commit_transaction_async`).

A producer may begin its next transaction while the commits of its earlier ones are still being decided, up to
``max_in_flight`` of them. Each is sent as a pipelined request (:attr:`~coordinator.requests.TxnRequest.after`)
when the one before it is still undecided, so the log decides them in order, and commits each only if the one
before committed: a failed commit aborts every later one in flight, and nothing after a failure becomes visible.

The commits run on threads of the producer's process sharing its :class:`~coordinator.TransactionCoordinator`, so
the commits of one producer (and of the producers sharing the coordinator) go into shared log entries (see
:mod:`coordinator.serving`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, TypeVar

from coordinator import faults
from coordinator.errors import AlreadyCommittedError, CommitStateUnknownError, TxnLogError
from coordinator.records import parse_txn_id
from coordinator.store import StoreError

if TYPE_CHECKING:
    from coordinator.coordinator import ProducerIdentity, TransactionCoordinator
    from coordinator.records import SegmentRef

T = TypeVar("T")

#: A commit in flight whose outcome could not be learned is asked again this many times before its future says so.
UNKNOWN_RETRIES = 3
#: Tries of the abort of a commit in flight refused undecided (the ones behind it wait for its decision).
ABORT_TRIES = 4


class InFlight:
    """The undecided commits of one producer, oldest first, and the first error among them."""

    def __init__(self, max_in_flight: int, name: str) -> None:
        self.max_in_flight = max_in_flight
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._futures: deque[Future[object]] = deque()
        self._lock = threading.Lock()
        self._sent = 0
        #: the error of the earliest commit in flight that failed (every later one is aborted by the log, and may
        #: fail first: the earliest failure is the cause); the producer must resync
        self.failed: BaseException | None = None
        self._failed_at = 0

    def undecided(self) -> bool:
        """Whether a commit sent earlier is still undecided (the next one must then be pipelined)."""
        with self._lock:
            self._drop_done()
            return bool(self._futures)

    def make_room(self) -> None:
        """Wait until fewer than ``max_in_flight`` commits are undecided."""
        while True:
            with self._lock:
                self._drop_done()
                if len(self._futures) < self.max_in_flight:
                    return
                oldest = self._futures[0]
            wait([oldest])

    def submit(self, commit: Callable[[], T]) -> Future[T]:
        """Run ``commit`` on a thread of its own; an outcome not learned is asked again (a request is decided at
        most once, so asking again is safe); the failure of the earliest commit that failed is kept in
        :attr:`failed`. The calling thread's fault injector (:mod:`coordinator.faults`) is carried into the
        commit's thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix=f"txnlog-commit-{self._name}")
        injector = faults.current()
        with self._lock:
            order = self._sent
            self._sent += 1

        def run() -> T:
            with faults.injected(injector):
                return attempts()

        def attempts() -> T:
            for attempt in range(UNKNOWN_RETRIES + 1):
                try:
                    return commit()
                except CommitStateUnknownError as exc:
                    if attempt == UNKNOWN_RETRIES or self.failed is not None:
                        # (after an earlier failure the producer must resync anyway: no point asking again)
                        self._fail(exc, order)
                        raise
                except BaseException as exc:
                    self._fail(exc, order)
                    raise
            raise AssertionError("unreachable")

        fut = self._pool.submit(run)
        with self._lock:
            self._futures.append(fut)  # type: ignore[arg-type]
        return fut

    def drain(self) -> None:
        """Wait until every commit in flight is decided (or failed)."""
        with self._lock:
            pending = list(self._futures)
        wait(pending)
        with self._lock:
            self._drop_done()

    def close(self) -> None:
        """Wait for every commit in flight, then stop the threads."""
        self.drain()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _fail(self, exc: BaseException, order: int) -> None:
        """Keep ``exc``, of the commit sent ``order``-th, unless an earlier commit's failure is kept already."""
        with self._lock:
            if self.failed is None or order < self._failed_at:
                self.failed, self._failed_at = exc, order

    def _drop_done(self) -> None:
        while self._futures and self._futures[0].done():
            self._futures.popleft()


def resync(coordinator: TransactionCoordinator, ident: ProducerIdentity, next_n: int,
           keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """After a commit in flight failed: abort the transactions below ``next_n`` the log left undecided (a commit
    whose outcome was never learned; the pipelined ones after it are then aborted by the log), and return the next
    sequence number of each partition in ``keys`` from what the log committed.

    Raises:
        ProducerFencedError: a newer epoch exists.
        CommitStateUnknownError, StoreError: the store failed (call again).
    """
    meta = coordinator.log.refresh().producers.get(ident.tid)
    if meta is None or (meta.pid, meta.epoch) != (ident.pid, ident.epoch):
        coordinator.check_current(ident)  # raises ProducerFencedError, naming the current producer
    else:
        for k in range(meta.last_txn + 1, next_n):
            try:
                coordinator.abort(ident, ident.txn_id(k), reason="left undecided by a failed commit in flight",
                                  pipelined=True)
            except AlreadyCommittedError:
                pass
            except CommitStateUnknownError:
                # decided meanwhile by its own request (an intent of a commit in flight, served by a writer) and
                # overtaken: the log decides one producer's transactions in order, so a later one decided says so
                now = coordinator.log.refresh().producers.get(ident.tid)
                if now is None or (now.pid, now.epoch) != (ident.pid, ident.epoch) or now.last_txn < k:
                    raise
    st = coordinator.log.refresh()
    return {(t, p): st.last_sequence(ident.tid, t, p) + 1 for t, p in keys}


def abort_undecided(coordinator: TransactionCoordinator, ident: ProducerIdentity, txn: str,
                    staged: list[SegmentRef], *, pipelined: bool) -> None:
    """Abort ``txn``, a commit in flight that was refused without a decision (a sequence gap, a topic gone) or not
    sent (the store failed first), so that the commits pipelined behind it are decided at once instead of waiting
    for it until their budget runs out. A store failure is tried again, with backoff, up to :data:`ABORT_TRIES`
    times. If every try fails, the process gives up on it (:meth:`~coordinator.txnlog.TransactionLog.abandon`):
    the commits behind it wait a little longer (an intent of the abort a try published may still be decided once
    the store lets it), then stop waiting, their futures saying the outcome is unknown, and the producer's resync
    aborts it. Never raises a :class:`TxnLogError`: the commit's own error is what its caller is told."""
    for attempt in range(ABORT_TRIES):
        try:
            coordinator.abort(ident, txn, staged=staged, pipelined=pipelined)
            return
        except (StoreError, CommitStateUnknownError):
            if attempt + 1 < ABORT_TRIES:
                time.sleep(0.05 * 2 ** attempt)
        except TxnLogError:
            return  # decided already, or fenced (so is everything behind it), or the log cannot be read
    ref = parse_txn_id(txn)
    if ref is not None:
        coordinator.log.abandon(ref.pid, ref.epoch, ref.n)
