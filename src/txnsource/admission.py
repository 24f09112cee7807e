"""Admission control of the stream reader: how far one micro-batch may go.

Four limits, applied in this order (Spark's Kafka source has the last three; Spark's file source and Delta the
first):

* files (``maxFilesPerTrigger``, or the engine's ``ReadMaxFiles``): the backlog's oldest segment files in commit
  order, whole (:func:`files_grant`); a micro-batch then ends at file ends and reads no file in part;
* rows (``maxRecordsPerTrigger`` / ``maxOffsetsPerTrigger``, or the engine's ``ReadMaxRows``): shared among
  partitions in proportion to their backlog (:func:`allocate`);
* bytes (``maxBytesPerTrigger``): the budget is shared in proportion to each partition's backlog bytes, and each
  partition's share is turned into rows by walking its segments (a partial segment counts its rows' share of the
  segment's size): approximate, and at least one record per micro-batch, so a stream always makes progress
  (:func:`bytes_grant`);
* minimum (``minOffsetsPerTrigger`` with ``maxTriggerDelay``): no micro-batch until at least that many records
  are available, or until the delay has passed since the last micro-batch (:class:`TriggerDelay`).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Mapping, Sequence

#: (rows, bytes) of each segment slice of a partition's backlog, in offset order.
SliceSizes = Sequence[tuple[int, float]]
#: (commit seq, rows) of each segment slice of a partition's backlog, in offset order.
SliceSeqs = Sequence[tuple[int, int]]


def files_grant(slices: Mapping[tuple[str, int], SliceSeqs], max_files: int) -> dict[tuple[str, int], int]:
    """Rows each partition may take when a micro-batch reads at most ``max_files`` segment files: the backlog's
    files taken whole, oldest commit first (files of one commit in turn across partitions, then by topic and
    partition), each partition's files from its start offset on, so every grant is a prefix of its backlog.

    Args:
        slices: (commit seq, rows) of each slice of each partition's backlog, in offset order; the first may be
            the rest of a file an earlier micro-batch read in part (it counts as one file).
        max_files: the limit (at least 1: a micro-batch with backlog always takes a file).
    """
    out = dict.fromkeys(slices, 0)
    heads = [(sl[0][0], 0, tp) for tp, sl in slices.items() if sl]
    heapq.heapify(heads)
    for _ in range(max(1, max_files)):
        if not heads:
            break
        seq, i, tp = heapq.heappop(heads)
        out[tp] += slices[tp][i][1]
        if i + 1 < len(slices[tp]):
            # a later file of a partition is never older than an earlier one (offsets follow commit order)
            heapq.heappush(heads, (max(slices[tp][i + 1][0], seq), i + 1, tp))
    return out


def allocate(lags: Mapping[tuple[str, int], int], max_rows: int) -> dict[tuple[str, int], int]:
    """Share ``max_rows`` among partitions in proportion to their backlog (``lags``), deterministically; every
    row of the limit is used while backlog remains."""
    total = sum(lags.values())
    if total <= max_rows:
        return dict(lags)
    grant = {tp: lag * max_rows // total for tp, lag in lags.items()}
    left = max_rows - sum(grant.values())
    # largest remainder first, so the shares stay as close to proportional as whole rows allow
    for tp in sorted(lags, key=lambda tp: (-(lags[tp] * max_rows % total), tp)):
        if left <= 0:
            break
        if grant[tp] < lags[tp]:
            grant[tp] += 1
            left -= 1
    return grant


def rows_within(sizes: SliceSizes, budget: float) -> int:
    """How many leading rows of slices ``sizes`` fit in ``budget`` bytes (rows of a slice count evenly)."""
    rows = 0
    for n, size in sizes:
        if size <= budget:
            rows += n
            budget -= size
            continue
        if n and size > 0:
            rows += int(n * budget / size)
        break
    return rows


def bytes_grant(grant: Mapping[tuple[str, int], int], sizes: Mapping[tuple[str, int], SliceSizes],
                max_bytes: int) -> dict[tuple[str, int], int]:
    """Cap row ``grant`` so the micro-batch holds about ``max_bytes``, and at least one record when ``grant`` has
    any: the budget is shared by the partitions in proportion to the bytes of their granted rows.

    Args:
        grant: rows each partition may take (after the row limit).
        sizes: (rows, bytes) of the slices of each partition's backlog, in offset order, covering its grant.
    """
    wanted = {tp: _head(sizes.get(tp, ()), n) for tp, n in grant.items()}
    total = sum(sum(b for _n, b in s) for s in wanted.values())
    if total <= max_bytes:
        return dict(grant)
    out = {tp: min(n, rows_within(wanted[tp], max_bytes * sum(b for _n, b in wanted[tp]) / total))
           for tp, n in grant.items()}
    if not any(out.values()):
        # progress: the partition with the most granted rows takes one record
        tp = max((tp for tp, n in grant.items() if n > 0), key=lambda tp: (grant[tp], tp), default=None)
        if tp is not None:
            out[tp] = 1
    return out


def _head(sizes: SliceSizes, rows: int) -> list[tuple[int, float]]:
    """The first ``rows`` rows of ``sizes``."""
    out: list[tuple[int, float]] = []
    for n, size in sizes:
        if rows <= 0:
            break
        take = min(n, rows)
        out.append((take, size * take / n if n else 0.0))
        rows -= take
    return out


class TriggerDelay:
    """Kafka's ``minOffsetsPerTrigger`` / ``maxTriggerDelay``: whether a micro-batch waits for more records.

    As in Spark's Kafka source the delay counts from the last micro-batch this reader let through, and a reader
    that has let none through yet does not wait (the first micro-batch after a (re)start runs at once).
    """

    def __init__(self, min_rows: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_rows = min_rows
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._last_ms: float | None = None

    def wait(self, available: int) -> bool:
        """True when a micro-batch of ``available`` records should wait for more; False (and the clock restarts)
        when it runs."""
        now = self._clock() * 1000.0
        if self._last_ms is None or now - self._last_ms >= self.max_delay_ms or available >= self.min_rows:
            self._last_ms = now
            return False
        return True
