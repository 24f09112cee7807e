"""txnlog core: the transactional, partitioned log on object storage. Never imports pyspark."""

from coordinator import faults
from coordinator.backends.local import LocalStore
from coordinator.backends.memory import MemoryStore
from coordinator.consumer import Consumer, read_snapshot
from coordinator.coordinator import (
    CommitResult,
    ProducerIdentity,
    Snapshot,
    TransactionCoordinator,
)
from coordinator.errors import (
    AlreadyCommittedError,
    ClientClosedError,
    CommitStateUnknownError,
    ConcurrentCommitError,
    CorruptLogError,
    GroupNotFoundError,
    IncompleteWriteError,
    InvalidNameError,
    InvalidOptionError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NoStoreError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    SchemaMismatchError,
    StoreError,
    TopicExistsError,
    TopicNotFoundError,
    TransactionAbortedError,
    TransactionTimedOutError,
    TxnLogError,
    UnsupportedFormatError,
    UnsupportedStoreError,
)
from coordinator.layout import check_name
from coordinator.partition import IndexedSegment, PartitionLog, SegmentSlice
from coordinator.producer import Producer, ProducerConfig, hash_partition, to_table
from coordinator.reader import METADATA_FIELDS, METADATA_NAMES, check_isolation, output_schema, read_slices
from coordinator.records import SegmentRef, app_txn_id, producer_txn_id
from coordinator.segments import stage_segment
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import TopicMeta, add_partitions, conform, create_topic, get_topic, list_topics
from coordinator.txnstates import TxnState

__all__ = [
    "AlreadyCommittedError", "ClientClosedError", "CommitResult", "CommitStateUnknownError", "ConcurrentCommitError",
    "Consumer", "CorruptLogError", "GroupNotFoundError", "IncompleteWriteError", "IndexedSegment", "InvalidNameError",
    "InvalidOptionError", "InvalidProducerEpochError",
    "InvalidTxnStateError", "LocalStore", "METADATA_FIELDS", "METADATA_NAMES", "MemoryStore",
    "NoStoreError", "OffsetOutOfRangeError", "OutOfOrderSequenceError", "PartitionLog", "Producer", "ProducerConfig",
    "ProducerFencedError", "ProducerIdentity", "SchemaMismatchError", "SegmentRef", "SegmentSlice", "Snapshot",
    "Store", "StoreError", "StoreOptions", "TopicExistsError", "TopicMeta", "TopicNotFoundError",
    "TransactionAbortedError", "TransactionCoordinator", "TransactionTimedOutError",
    "TxnLogError", "TxnState", "UnsupportedFormatError", "UnsupportedStoreError",
    "add_partitions", "app_txn_id", "check_isolation", "check_name", "conform", "faults", "create_topic", "get_topic",
    "hash_partition", "list_topics", "open_store", "output_schema", "producer_txn_id", "read_slices", "read_snapshot",
    "stage_segment", "to_table",
]
