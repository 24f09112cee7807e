"""Filter pushdown on the metadata columns ``_topic``, ``_partition``, ``_offset`` and ``_timestamp``.

Spark offers the AND-ed filters of a query; :func:`push_filters` keeps ``EqualTo``, ``In`` and the four comparisons
on those columns (with literal values of the right kind) and hands every other filter back to Spark. What it keeps
it applies exactly (never approximately), so a query returns the same rows with and without pushdown:

* ``_topic`` and ``_partition`` skip whole topics and partitions;
* ``_offset`` narrows each partition's offset range (several ranges for ``IN``), so untouched segments are never
  read, and rows of a read segment outside the ranges are dropped;
* ``_timestamp`` (the commit time, one value per segment) skips whole segments.

``_producerTimestamp`` (one value per row) is not pushed: Spark evaluates filters on it.

Records of uncommitted transactions (``read_uncommitted``) have a null ``_offset`` and ``_timestamp``, which no
comparison matches: any pushed ``_offset`` or ``_timestamp`` filter excludes them, as Spark would.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

#: Half-open integer intervals ``[lo, hi)``, sorted and disjoint.
Intervals = tuple[tuple[int, int], ...]

LOW = -(1 << 63)
HIGH = 1 << 63
ALL: Intervals = ((LOW, HIGH),)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_INT_COLUMNS = ("_partition", "_offset")


@dataclass(frozen=True)
class Pushdown:
    """The pushed constraints, as plain data (it travels to executors inside the reader).

    Attributes:
        topics: allowed topic names, or None for all.
        partitions: allowed partition numbers, or None for all.
        offsets: allowed offsets, or None for all.
        timestamps: allowed commit times in microseconds since the epoch, or None for all.
    """

    topics: frozenset[str] | None = None
    partitions: Intervals | None = None
    offsets: Intervals | None = None
    timestamps: Intervals | None = None

    @property
    def excludes_uncommitted(self) -> bool:
        """Whether the constraints exclude rows with a null ``_offset`` / ``_timestamp``."""
        return self.offsets is not None or self.timestamps is not None

    def allows_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def allows_partition(self, partition: int) -> bool:
        return self.partitions is None or contains(self.partitions, partition)

    def allows_timestamp_ms(self, ts_ms: int) -> bool:
        return self.timestamps is None or contains(self.timestamps, ts_ms * 1000)

    def offset_ranges(self, start: int, end: int) -> Intervals:
        """The parts of ``[start, end)`` the offset constraint allows."""
        return intersect(((start, end),), self.offsets if self.offsets is not None else ALL)


def contains(ivs: Intervals, x: int) -> bool:
    """Whether ``x`` lies in one of ``ivs``."""
    return any(lo <= x < hi for lo, hi in ivs)


def normalize(ivs: Iterable[tuple[int, int]]) -> Intervals:
    """Sort, drop empty, and merge overlapping or touching intervals."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(iv for iv in ivs if iv[0] < iv[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two normalized interval sets."""
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _int_value(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _ts_value(v: Any) -> int | None:
    """Microseconds since the epoch of a timezone-aware datetime (Spark sends ``_timestamp`` literals so)."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return (v - _EPOCH) // dt.timedelta(microseconds=1)
    return None


def _intervals_of(kind: str, value: Any, conv: Any) -> Intervals | None:
    """The intervals one comparison allows, or None when it cannot be pushed."""
    if kind == "In":
        if not isinstance(value, (tuple, list)):
            return None
        points = [conv(v) for v in value if v is not None]
        if any(p is None for p in points):
            return None
        return normalize((p, p + 1) for p in points)
    x = conv(value)
    if x is None:
        return None
    return {
        "EqualTo": ((x, x + 1),),
        "GreaterThan": ((x + 1, HIGH),),
        "GreaterThanOrEqual": ((x, HIGH),),
        "LessThan": ((LOW, x),),
        "LessThanOrEqual": ((LOW, x + 1),),
    }.get(kind)


def push_filters(filters: Sequence[Any]) -> tuple[Pushdown, list[Any]]:
    """Split Spark's filters into a :class:`Pushdown` and the filters Spark must still evaluate.

    Returns:
        the pushed constraints, and the unsupported filters (the very objects given, as Spark requires).
    """
    topics: frozenset[str] | None = None
    ivs: dict[str, Intervals] = {}
    rest: list[Any] = []
    for f in filters:
        kind = type(f).__name__
        attr = getattr(f, "attribute", None)
        col = attr[0] if isinstance(attr, tuple) and len(attr) == 1 else None
        value = getattr(f, "value", None)
        if col == "_topic" and kind in ("EqualTo", "In"):
            names = (value,) if kind == "EqualTo" else value
            if isinstance(names, (tuple, list)) and all(isinstance(n, str) or n is None for n in names):
                allowed = frozenset(n for n in names if n is not None)
                topics = allowed if topics is None else topics & allowed
                continue
        elif col in _INT_COLUMNS or col == "_timestamp":
            got = _intervals_of(kind, value, _ts_value if col == "_timestamp" else _int_value)
            if got is not None:
                assert col is not None
                ivs[col] = intersect(ivs.get(col, ALL), got)
                continue
        rest.append(f)
    push = Pushdown(topics, ivs.get("_partition"), ivs.get("_offset"), ivs.get("_timestamp"))
    return push, rest


def offset_mask(offsets: Any, ivs: Intervals) -> Any:
    """A boolean numpy mask: which of ``offsets`` (an int64 array without nulls) lie in ``ivs``."""
    import numpy as np

    arr = np.asarray(offsets, dtype=np.int64)
    top = (1 << 63) - 1
    starts = np.array([max(lo, -top) for lo, _ in ivs], dtype=np.int64)
    ends = np.array([min(hi, top) for _, hi in ivs], dtype=np.int64)
    idx = np.searchsorted(starts, arr, side="right") - 1
    ok = idx >= 0
    return ok & (arr < ends[np.where(ok, idx, 0)])
