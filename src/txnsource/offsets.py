"""Offsets: resolving the starting / ending options against a snapshot, and the streaming offset form.

Streaming offsets are ``{topic: {partition: next_offset}}`` with string partition keys (Spark keeps offsets as
JSON), written in a canonical order (topics as named, partitions numerically) so equal positions serialise
identically. Precedence of the options is Spark's Kafka source's: ``startingTimestamp`` >
``startingOffsetsByTimestamp`` > ``startingOffsets`` (and the same for the ending ones). Timestamps are commit times
(``_timestamp``), looked up in each partition's index (:meth:`coordinator.PartitionLog.timestamp_offset`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from coordinator.errors import InvalidOptionError
from txnsource.optvalues import EARLIEST, JSON_EARLIEST, JSON_LATEST, LATEST, OffsetSpec, TimestampSpec

if TYPE_CHECKING:
    from coordinator.coordinator import Snapshot, TransactionCoordinator
    from txnsource.options import ReadOptions

#: (topic, partition) -> offset.
Positions = dict[tuple[str, int], int]


def _spec_text(spec: OffsetSpec | TimestampSpec) -> str:
    return spec if isinstance(spec, str) else json.dumps({t: {str(p): o for p, o in ps.items()}
                                                           for t, ps in spec.items()})


def take_snapshot(coord: TransactionCoordinator, opts: ReadOptions, pinned: Snapshot | None = None) -> Snapshot:
    """A snapshot of the topics ``opts`` reads (``pinned``, or one taken now), narrowed to the ``assign`` partitions
    when given.

    Raises:
        TopicNotFoundError: a topic does not exist.
        InvalidOptionError: ``assign`` names a partition its topic lacks.
    """
    from coordinator.coordinator import Snapshot

    snap = pinned if pinned is not None else coord.snapshot(opts.topics)
    if opts.assign is None:
        return snap
    ends: dict[str, dict[int, int]] = {}
    starts: dict[str, dict[int, int]] = {}
    for topic, parts in opts.assign.items():
        missing = [p for p in parts if p not in snap.ends[topic]]
        if missing:
            raise InvalidOptionError(f"{opts.subscription} names partition {missing[0]} of topic {topic!r}, which "
                                     f"has {len(snap.ends[topic])} partitions")
        ends[topic] = {p: snap.ends[topic][p] for p in parts}
        starts[topic] = {p: snap.starts[topic][p] for p in parts}
    return Snapshot(snap.seq, ends, starts)


def _check_complete(key: str, spec: Mapping[str, Mapping[int, int]], snap: Snapshot, opts: ReadOptions) -> None:
    """With ``assign``, a JSON map naming a topic must name every assigned partition of it, and no other."""
    if opts.assign is None:
        return
    for topic, given in spec.items():
        extra = sorted(p for p in given if p not in opts.assign.get(topic, ()))
        if extra:
            raise InvalidOptionError(
                f"option {key!r} = {_spec_text(spec)!r} names partition {extra[0]} of topic {topic!r}, which "
                f"{opts.subscription} does not read")
        left_out = [p for p in sorted(snap.ends.get(topic, {})) if p not in given]
        if left_out:
            raise InvalidOptionError(
                f"option {key!r} = {_spec_text(spec)!r} leaves out partitions {left_out} of topic {topic!r}; with "
                f"{opts.subscription} a map naming a topic must name every assigned partition (-2 earliest, -1 "
                "latest)")


def resolve(key: str, spec: OffsetSpec, snap: Snapshot, topics: tuple[str, ...], *, default: str,
            fail_on_data_loss: bool = True) -> Positions:
    """The offset ``spec`` picks in every partition of ``topics`` at ``snap``.

    Args:
        key: the option name, for error messages.
        default: ``earliest`` or ``latest``, for partitions a JSON spec leaves out.
        fail_on_data_loss: an offset below the log start fails (True) or moves up to the log start (False).

    Raises:
        InvalidOptionError: a JSON spec names a partition the topic lacks, or an offset outside the partition's
            ``[log start, snapshot end]`` (below the start only when ``fail_on_data_loss``); the message names the
            option, its value, the topic, partition and offsets.
    """
    out: Positions = {}
    for topic in topics:
        starts, ends = snap.starts[topic], snap.ends[topic]
        given: Mapping[int, int] = {}
        if isinstance(spec, Mapping):
            given = spec.get(topic, {})
            missing = sorted(p for p in given if p not in ends)
            if missing:
                raise InvalidOptionError(f"option {key!r} = {_spec_text(spec)!r} names partition {missing[0]} of "
                                         f"topic {topic!r}, which has {len(ends)} partitions")
        for p in sorted(ends):
            word = spec if isinstance(spec, str) else default
            off = given.get(p)
            if off == JSON_EARLIEST:
                word, off = EARLIEST, None
            elif off == JSON_LATEST:
                word, off = LATEST, None
            if off is None:
                out[(topic, p)] = starts[p] if word == EARLIEST else ends[p]
                continue
            if off > ends[p]:
                raise InvalidOptionError(
                    f"option {key!r} = {_spec_text(spec)!r}: offset {off} of {topic}/{p} is outside the "
                    f"partition's offsets [{starts[p]}, {ends[p]}] (above its end)"
                )
            if off < starts[p]:
                if not fail_on_data_loss:
                    off = starts[p]
                else:
                    raise InvalidOptionError(
                        f"option {key!r} = {_spec_text(spec)!r}: offset {off} of {topic}/{p} is outside the "
                        f"partition's offsets [{starts[p]}, {ends[p]}]: below the log start, retention removed "
                        "those records. Set option failOnDataLoss=false to start at the log start"
                    )
            out[(topic, p)] = off
    return out


def by_timestamp(key: str, spec: TimestampSpec, snap: Snapshot, coord: TransactionCoordinator,
                 topics: tuple[str, ...], *, default: str, ending: bool, strategy: str = "error") -> Positions:
    """The first offset committed at or after each partition's timestamp in ``spec``, at ``snap``.

    A partition ``spec`` leaves out takes ``default``. A timestamp after every commit in the snapshot gives the
    partition's end when ``ending`` or ``strategy`` is ``latest``, and fails otherwise.

    Raises:
        InvalidOptionError: a partition the topic lacks, or (``strategy`` ``error``) a starting timestamp no
            commit reaches; the message names the option, topic, partition and timestamp.
    """
    out = resolve(key, {}, snap, topics, default=default)
    for topic, parts in spec.items():
        ends, starts = snap.ends[topic], snap.starts[topic]
        for p, ts in parts.items():
            if p not in ends:
                raise InvalidOptionError(f"option {key!r} = {_spec_text(spec)!r} names partition {p} of topic "
                                         f"{topic!r}, which has {len(ends)} partitions")
            plog = coord.partition(topic, p)
            if plog.end_offset < ends[p]:
                plog.refresh()
            off = max(plog.timestamp_offset(ts), starts[p])
            if off >= ends[p]:
                if not ending and strategy == "error":
                    raise InvalidOptionError(
                        f"option {key!r}: no record of {topic}/{p} was committed at or after {ts} ms (the "
                        f"partition's offsets end at {ends[p]}); set option startingOffsetsByTimestampStrategy="
                        "latest to start such partitions at their latest offset")
                off = ends[p]
            out[(topic, p)] = off
    return out


def starting_positions(opts: ReadOptions, snap: Snapshot, coord: TransactionCoordinator, *,
                       default: str) -> Positions:
    """Where a read starts: ``startingTimestamp``, else ``startingOffsetsByTimestamp``, else ``startingOffsets``.

    Raises:
        InvalidOptionError: as :func:`resolve` and :func:`by_timestamp`, or (``assign``) a map leaving out an
            assigned partition.
    """
    if opts.starting_ts is not None:
        every = {t: dict.fromkeys(snap.ends[t], opts.starting_ts) for t in opts.topics}
        return by_timestamp("startingTimestamp", every, snap, coord, opts.topics, default=default, ending=False,
                            strategy=opts.ts_strategy)
    if opts.starting_by_ts is not None:
        _check_complete("startingOffsetsByTimestamp", opts.starting_by_ts, snap, opts)
        return by_timestamp("startingOffsetsByTimestamp", opts.starting_by_ts, snap, coord, opts.topics,
                            default=default, ending=False, strategy=opts.ts_strategy)
    if isinstance(opts.starting, Mapping):
        _check_complete("startingOffsets", opts.starting, snap, opts)
    return resolve("startingOffsets", opts.starting, snap, opts.topics, default=default,
                   fail_on_data_loss=opts.fail_on_data_loss)


def ending_positions(opts: ReadOptions, snap: Snapshot, coord: TransactionCoordinator) -> Positions:
    """Where a batch read ends (exclusive): ``endingTimestamp``, else ``endingOffsetsByTimestamp``, else
    ``endingOffsets``.

    Raises:
        InvalidOptionError: as :func:`starting_positions`.
    """
    if opts.ending_ts is not None:
        every = {t: dict.fromkeys(snap.ends[t], opts.ending_ts) for t in opts.topics}
        return by_timestamp("endingTimestamp", every, snap, coord, opts.topics, default=LATEST, ending=True)
    if opts.ending_by_ts is not None:
        _check_complete("endingOffsetsByTimestamp", opts.ending_by_ts, snap, opts)
        return by_timestamp("endingOffsetsByTimestamp", opts.ending_by_ts, snap, coord, opts.topics,
                            default=LATEST, ending=True)
    if isinstance(opts.ending, Mapping):
        _check_complete("endingOffsets", opts.ending, snap, opts)
    return resolve("endingOffsets", opts.ending, snap, opts.topics, default=LATEST)


def batch_ranges(opts: ReadOptions, snap: Snapshot, coord: TransactionCoordinator
                 ) -> dict[tuple[str, int], tuple[int, int]]:
    """``[start, end)`` per partition for a batch read at ``snap``.

    Raises:
        InvalidOptionError: as :func:`starting_positions`, or a start past its end.
    """
    lo = starting_positions(opts, snap, coord, default=EARLIEST)
    hi = ending_positions(opts, snap, coord)
    for tp, start in lo.items():
        if start > hi[tp]:
            raise InvalidOptionError(
                f"option 'startingOffsets' = {_spec_text(opts.starting)!r} starts {tp[0]}/{tp[1]} at {start}, after "
                f"option 'endingOffsets' = {_spec_text(opts.ending)!r} ends it at {hi[tp]}"
            )
    return {tp: (lo[tp], hi[tp]) for tp in lo}


def to_json(pos: Positions, topics: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """The streaming offset form of ``pos``, canonically ordered."""
    out: dict[str, dict[str, int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in pos if t == topic)
        out[topic] = {str(p): int(pos[(topic, p)]) for p in parts}
    return out


def from_json(doc: Mapping[str, object], opts: ReadOptions) -> Positions:
    """Parse a streaming offset Spark hands back (possibly from an older checkpoint). With ``subscribePattern``
    it may name any topic the pattern matches (one listed earlier and deleted since, or not listed yet) and leave
    out topics created after it was written.

    Raises:
        InvalidOptionError: the offset is not a map of topic -> partition -> offset, or names a topic the query
            does not read (the checkpoint belongs to a query over other topics).
    """
    out: Positions = {}
    if not isinstance(doc, Mapping):
        raise InvalidOptionError(f"streaming offset {doc!r} is not a map of topic -> partition -> offset")
    for topic, parts in doc.items():
        if topic not in opts.topics and not (opts.pattern is not None and re.fullmatch(opts.pattern, topic)):
            raise InvalidOptionError(
                f"the checkpoint holds offsets of topic {topic!r}, which {opts.subscription} does not read; use a "
                "new checkpoint location to change a query's topics"
            )
        if not isinstance(parts, Mapping):
            raise InvalidOptionError(f"streaming offset of topic {topic!r} is not a map: {parts!r}")
        for p, off in parts.items():
            try:
                out[(topic, int(p))] = int(off)
            except (TypeError, ValueError):
                raise InvalidOptionError(f"streaming offset {topic}/{p} = {off!r} is not an integer") from None
    return out
