"""The txnlog error hierarchy.

Every error the project raises on purpose derives from :class:`TxnLogError`. Messages name what is wrong (the
file, the option, the transactional id) and never carry credentials.

Like Kafka's client errors (KIP-1050), each error tells a service what to do next through three class attributes
(at most one is true):

* ``retriable``: call the same method again (with backoff); nothing was lost and nothing is half done.
* ``abortable``: the open transaction is lost: call ``abort_transaction()`` (accepted even when the transaction was
  already aborted for you), then start a new one; the producer stays usable.
* ``fatal``: this client (or this producer epoch) can do nothing more: close it and create a new one (or restart
  the service); for a store error, an operator must act first.

An error with none of them is a caller's error (a bad argument, name, state or input): the call changed nothing;
fix the call.
"""

from __future__ import annotations


class TxnLogError(Exception):
    """Root of every txnlog error. ``retriable``, ``abortable`` and ``fatal`` say what to do next (module docstring)."""

    retriable: bool = False
    abortable: bool = False
    fatal: bool = False


class ProducerFencedError(TxnLogError):
    """A newer producer with the same transactional id has initialised (or a timeout sweep or an operator aborted
    the transaction with an epoch bump); this epoch may do nothing more. Fatal: create a new producer (its
    ``init_transactions()`` takes the id over)."""

    fatal = True


class InvalidProducerEpochError(ProducerFencedError):
    """A request carried an epoch older than the current one (Kafka's InvalidProducerEpoch)."""


class InvalidTxnStateError(TxnLogError):
    """A transition was requested that the transaction state machine does not allow from the current state."""


class TransactionAbortedError(InvalidTxnStateError):
    """The transaction was aborted by the coordinator instead of committed. Abortable: nothing of it is visible;
    ``abort_transaction()`` is accepted, then begin a new transaction and send its rows again."""

    abortable = True


class TransactionTimedOutError(TransactionAbortedError):
    """The transaction was aborted at its commit because it had been open longer than its producer's
    ``transaction_timeout_ms``, judged on the store's clock. Abortable (see :class:`TransactionAbortedError`)."""


class ConcurrentCommitError(TxnLogError):
    """Another writer won a conditional write this operation needed; retrying may succeed. Retriable."""

    retriable = True


class CommitStateUnknownError(TxnLogError):
    """The outcome of a commit could not be determined (the store could not be read back); it may or may not
    have happened. Retriable: call ``commit_transaction()`` (or ``abort_transaction()``) again to learn the
    outcome, or ``init_transactions()`` to start over."""

    retriable = True


class CorruptLogError(TxnLogError):
    """A log entry, marker, checkpoint or segment file could not be decoded or failed its checksum. Fatal: an
    operator repairs the store (``txnlog verify`` / ``repair``)."""

    fatal = True


#: What an operator runs about a damaged transaction log entry or coordinator checkpoint (``docs/cli.md``).
REPAIR_LOG_HINT = ("run `txnlog repair --log` to see what the other copies (partition records, checkpoints, later "
                   "entries, intents) hold of it, then `txnlog repair --log --execute` to rebuild it")
#: What an operator runs about a damaged or missing partition record (``docs/cli.md``).
REPAIR_RECORDS_HINT = ("`txnlog repair --execute` rewrites it from the log entry that defines it while that entry is "
                       "retained (`txnlog verify` names every damaged file)")


class TopicNotFoundError(TxnLogError):
    """The named topic does not exist in the store."""


class TopicExistsError(TxnLogError):
    """A topic with this name already exists (with a different definition)."""


class InvalidOptionError(TxnLogError, ValueError):
    """An option or argument has an invalid value; the message names the key and the value."""


class InvalidNameError(InvalidOptionError):
    """A topic, group or transactional-id name is not allowed (bad characters, too long, or leaves the root)."""


class SchemaMismatchError(TxnLogError):
    """Data written to a topic does not match the topic's schema."""


class OutOfOrderSequenceError(TxnLogError):
    """A producer's staged segments skip a sequence number in a partition (a gap). The producer aborts the
    transaction itself: abortable (its staged data was lost; send the rows again in a new transaction)."""

    abortable = True


class StoreError(TxnLogError):
    """The object store failed in a way the store's own retries could not overcome. Retriable (later, with
    backoff): the call either did nothing or is safe to repeat."""

    retriable = True


class UnsupportedFormatError(TxnLogError):
    """The store (or one of its records) was written by another txnlog store format than this version reads.
    Fatal."""

    fatal = True


class NoStoreError(TxnLogError):
    """No txnlog store exists at the given URL (a read-only command never creates one)."""


class UnsupportedStoreError(StoreError):
    """The store does not honour conditional writes (create-if-absent), so it cannot hold a transaction log.
    Fatal (not retriable, unlike other store errors)."""

    retriable = False
    fatal = True


class OffsetOutOfRangeError(TxnLogError):
    """A reader asked for offsets outside the partition's range (below the log start or past its end), or a
    consumer's position is outside it with ``auto_offset_reset="error"``: seek to a valid offset."""


class AlreadyCommittedError(InvalidTxnStateError):
    """An abort (or a second commit) named a transaction that is already committed."""


class ClientClosedError(TxnLogError):
    """A consumer or producer was used after ``close()``. Fatal: create a new one."""

    fatal = True


class GroupNotFoundError(TxnLogError):
    """The named consumer group has no committed offsets in the store."""


class IncompleteWriteError(TxnLogError):
    """A native write's files do not hold the rows its Spark tasks reported writing (some were deleted under the
    running write): nothing was published. Retriable: run the write again."""

    retriable = True
