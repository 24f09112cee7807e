"""Offsets: resolving ``startingOffsets`` / ``endingOffsets`` against a snapshot, and the streaming offset form.

Streaming offsets are ``{topic: {partition: next_offset}}`` with string partition keys (Spark keeps offsets as
JSON), written in a canonical order (topics as named, partitions numerically) so equal positions serialise
identically.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from coordinator.errors import InvalidOptionError
from txnsource.options import EARLIEST, JSON_EARLIEST, JSON_LATEST, LATEST, OffsetSpec

if TYPE_CHECKING:
    from coordinator.coordinator import Snapshot

#: (topic, partition) -> offset.
Positions = dict[tuple[str, int], int]


def _spec_text(spec: OffsetSpec) -> str:
    return spec if isinstance(spec, str) else json.dumps({t: {str(p): o for p, o in ps.items()}
                                                           for t, ps in spec.items()})


def resolve(key: str, spec: OffsetSpec, snap: Snapshot, topics: tuple[str, ...], *, default: str) -> Positions:
    """The offset ``spec`` picks in every partition of ``topics`` at ``snap``.

    Args:
        key: the option name, for error messages.
        default: ``earliest`` or ``latest``, for partitions a JSON spec leaves out.

    Raises:
        InvalidOptionError: a JSON spec names a partition the topic lacks, or an offset outside the partition's
            ``[log start, snapshot end]``; the message names the option and its value.
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
            if not starts[p] <= off <= ends[p]:
                raise InvalidOptionError(
                    f"option {key!r} = {_spec_text(spec)!r}: offset {off} of {topic}/{p} is outside the "
                    f"partition's offsets [{starts[p]}, {ends[p]}]"
                )
            out[(topic, p)] = off
    return out


def batch_ranges(
    starting: OffsetSpec, ending: OffsetSpec, snap: Snapshot, topics: tuple[str, ...]
) -> dict[tuple[str, int], tuple[int, int]]:
    """``[start, end)`` per partition for a batch read at ``snap``.

    Raises:
        InvalidOptionError: as :func:`resolve`, or a start past its end.
    """
    lo = resolve("startingOffsets", starting, snap, topics, default=EARLIEST)
    hi = resolve("endingOffsets", ending, snap, topics, default=LATEST)
    for tp, start in lo.items():
        if start > hi[tp]:
            raise InvalidOptionError(
                f"option 'startingOffsets' = {_spec_text(starting)!r} starts {tp[0]}/{tp[1]} at {start}, after "
                f"option 'endingOffsets' = {_spec_text(ending)!r} ends it at {hi[tp]}"
            )
    return {tp: (lo[tp], hi[tp]) for tp in lo}


def to_json(pos: Positions, topics: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """The streaming offset form of ``pos``, canonically ordered."""
    out: dict[str, dict[str, int]] = {}
    for topic in topics:
        parts = sorted(p for t, p in pos if t == topic)
        out[topic] = {str(p): int(pos[(topic, p)]) for p in parts}
    return out


def from_json(doc: Mapping[str, object], topics: tuple[str, ...]) -> Positions:
    """Parse a streaming offset Spark hands back (possibly from an older checkpoint).

    Raises:
        InvalidOptionError: the offset is not a map of topic -> partition -> offset, or names a topic the
            ``topic`` option does not list (the checkpoint belongs to a query over other topics).
    """
    out: Positions = {}
    if not isinstance(doc, Mapping):
        raise InvalidOptionError(f"streaming offset {doc!r} is not a map of topic -> partition -> offset")
    for topic, parts in doc.items():
        if topic not in topics:
            raise InvalidOptionError(
                f"the checkpoint holds offsets of topic {topic!r}, which option 'topic' = {','.join(topics)!r} "
                "does not list; use a new checkpoint location to change a query's topics"
            )
        if not isinstance(parts, Mapping):
            raise InvalidOptionError(f"streaming offset of topic {topic!r} is not a map: {parts!r}")
        for p, off in parts.items():
            try:
                out[(topic, int(p))] = int(off)
            except (TypeError, ValueError):
                raise InvalidOptionError(f"streaming offset {topic}/{p} = {off!r} is not an integer") from None
    return out
