"""The txnlog error hierarchy.

Every error the project raises on purpose derives from :class:`TxnLogError`. Messages name what is wrong (the
file, the option, the transactional id) and never carry credentials.
"""

from __future__ import annotations


class TxnLogError(Exception):
    """Root of every txnlog error."""


class ProducerFencedError(TxnLogError):
    """A newer producer with the same transactional id has initialised; this epoch may do nothing more."""


class InvalidProducerEpochError(ProducerFencedError):
    """A request carried an epoch older than the current one (Kafka's InvalidProducerEpoch)."""


class InvalidTxnStateError(TxnLogError):
    """A transition was requested that the transaction state machine does not allow from the current state."""


class ConcurrentCommitError(TxnLogError):
    """Another writer won a conditional write this operation needed; retrying may succeed."""


class CommitStateUnknownError(TxnLogError):
    """The outcome of a commit could not be determined (the store could not be read back); it may or may not
    have happened. Call ``init_transactions`` (or read the transaction log) to learn the outcome."""


class CorruptLogError(TxnLogError):
    """A log entry, marker, checkpoint or segment file could not be decoded or failed its checksum."""


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
    """A producer's staged segments skip a sequence number in a partition (a gap): fatal for the producer."""


class StoreError(TxnLogError):
    """The object store failed in a way retries could not overcome."""


class UnsupportedFormatError(TxnLogError):
    """The store (or one of its records) was written by another txnlog store format than this version reads."""


class NoStoreError(TxnLogError):
    """No txnlog store exists at the given URL (a read-only command never creates one)."""


class UnsupportedStoreError(StoreError):
    """The store does not honour conditional writes (create-if-absent), so it cannot hold a transaction log."""


class OffsetOutOfRangeError(TxnLogError):
    """A reader asked for offsets outside the partition's range (below the log start or past its end)."""


class AlreadyCommittedError(InvalidTxnStateError):
    """An abort (or a second commit) named a transaction that is already committed."""


class ClientClosedError(TxnLogError):
    """A consumer was used after ``close()``."""


class GroupNotFoundError(TxnLogError):
    """The named consumer group has no committed offsets in the store."""


class IncompleteWriteError(TxnLogError):
    """A native write's files do not hold the rows its Spark tasks reported writing (some were deleted under the
    running write): nothing was published."""
