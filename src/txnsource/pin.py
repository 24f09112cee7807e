"""The snapshot rule of batch reads: one DataFrame, one snapshot.

``spark.read.format("txnlog")...load(path)`` creates one ``DefaultSource`` instance, which Spark pickles once and
unpickles for every scan of the DataFrame, in every action and every query built on it (a self-join, a union, a
``crossJoin`` of counts). The instance takes its :class:`ReadPin` when it is pickled (:func:`pin_read`): in a classic
session at ``load()`` (right after the schema is read), or, with a user-given schema, when the DataFrame is first
planned; through Spark Connect when the server first analyses the DataFrame. Every scan then plans from that pin, so
all scans and all actions of one DataFrame read one transaction-consistent snapshot (Delta's rule: a DataFrame is
pinned when it is analysed), and a new ``load()`` sees newer commits. The native read rule
(:mod:`txnsource.nativerule`) reads the pin of the same pickled instance, so the rule on or off gives the same rows.

``asOfSeq`` (``versionAsOf``) pins explicitly: the snapshot as of that transaction log entry
(:func:`coordinator.asof.snapshot_at`), the same whenever and however often it is read, for as long as the log and
the data it needs are retained.

A pin holds offsets, not files. The first plan of a DataFrame reads the pinned offset ranges from the partitions'
current index (compaction keeps offsets) and fails, naming them, when retention removed records of the snapshot
since the pin (:func:`check_retained`), never reading another cut. Later actions reuse that first plan (Spark keeps
the data source's; the native path keeps its own under the pin's token), so they read the same files until the
garbage collector deletes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator.errors import OffsetOutOfRangeError
from coordinator.txntypes import Snapshot

if TYPE_CHECKING:
    from coordinator.coordinator import TransactionCoordinator
    from coordinator.store import Store
    from txnsource.options import ReadOptions

__all__ = ["PinFailure", "ReadPin", "check_retained", "pin_read", "take_pin"]


@dataclass(frozen=True)
class ReadPin:
    """The snapshot every scan of one DataFrame reads.

    Attributes:
        topics: the topics read (``subscribePattern`` resolved when the pin was taken).
        snapshot: the cut of every partition of those topics.
        explicit: whether ``asOfSeq`` / ``versionAsOf`` chose it.
        token: tells this pin (one DataFrame's) from every other, equal or not: the native path keeps a
            DataFrame's first plan under it, as Spark keeps the data source's (see :mod:`txnsource.nativerule`).
    """

    topics: tuple[str, ...]
    snapshot: Snapshot
    explicit: bool = False
    token: str = field(default_factory=lambda: uuid.uuid4().hex, compare=False)

    @property
    def seq(self) -> int:
        """The transaction log entry of the snapshot."""
        return self.snapshot.seq


@dataclass(frozen=True)
class PinFailure:
    """Why a pin could not be taken; a batch read raises ``error`` (stream reads take no pin and ignore it)."""

    error: BaseException


def take_pin(store: Store, coord: TransactionCoordinator, opts: ReadOptions) -> ReadPin:
    """Resolve the topics ``opts`` read and pin their snapshot: as of ``opts.as_of_seq``, or now.

    Raises:
        TopicNotFoundError: a topic does not exist, or ``subscribePattern`` matches none.
        InvalidOptionError: ``asOfSeq`` is beyond the log, or log truncation removed what its snapshot needs.
    """
    from coordinator.asof import snapshot_at
    from coordinator.topics import list_topics
    from txnsource.options import with_topics

    topics = with_topics(opts, list_topics(store)).topics if opts.pattern is not None else opts.topics
    if opts.as_of_seq is None:
        return ReadPin(topics, coord.snapshot(topics))
    try:
        snap = snapshot_at(coord, topics, opts.as_of_seq)
    except Exception as exc:
        from coordinator.errors import InvalidOptionError

        if isinstance(exc, InvalidOptionError):
            raise InvalidOptionError(f"option 'asOfSeq' = {opts.as_of_seq}: {exc}") from exc
        raise
    return ReadPin(topics, snap, explicit=True)


def pin_read(options: Mapping[str, str]) -> ReadPin | PinFailure:
    """The pin of a read created with ``options`` (Spark's option map), or why there is none (kept, not raised:
    the same source may serve a stream, which takes no pin)."""
    from coordinator import open_store
    from coordinator.coordinator import TransactionCoordinator
    from txnsource.options import parse_options

    try:
        opts = parse_options(options, streaming=None)
        store = open_store(opts.path, opts.store)
        try:
            return take_pin(store, TransactionCoordinator(store), opts)
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - handed to the batch reader, which raises it
        return PinFailure(exc)


def check_retained(coord: TransactionCoordinator, ranges: Mapping[tuple[str, int], tuple[int, int]],
                   pin: ReadPin) -> None:
    """Raises: OffsetOutOfRangeError when retention removed records of ``ranges`` (offsets of ``pin``'s snapshot)
    after the pin was taken, naming the partition, the offsets and the log entry of the snapshot."""
    for (topic, p), (start, end) in sorted(ranges.items()):
        if end <= start:
            continue
        plog = coord.partition(topic, p)
        plog.refresh()
        if start < plog.start_offset:
            how = "option 'asOfSeq'" if pin.explicit else "this DataFrame (load() again to read the newest)"
            raise OffsetOutOfRangeError(
                f"the snapshot at transaction log entry {pin.seq} read by {how} needs offsets [{start}, {end}) of "
                f"{topic}/{p}, but retention has since removed the records below offset {plog.start_offset}")
