"""The parts of a rebuilt commit that only its staged segment files still hold (see :mod:`coordinator.logrebuild`).

A commit's writer publishes its partition records after the commit point; one that fails right after it leaves some
unwritten, and a reader or the next checkpoint writes them from the entry. When that entry is then damaged before
anyone did, the partitions whose records are missing hold nothing of the commit but its staged segment files.

For a Python producer's transaction (``p.<pid>.<epoch>.<n>``) those files are exactly its segments there: the
producer stages each partition's rows under ``<txn>~<sequence number>``, drops them from its buffer only once staged,
restages a failed stage under the same name, and stages everything still buffered before it commits. So a partition
no later entry touched, whose record after the state before the entry is missing, and that holds staged files of a
commit the other records prove, gets those files as the commit's part there, at the partition's end; where entries
after it continue that partition at the next record, the part must end exactly where that record's first commit
starts, else the entry is not rebuilt. Spark's
application commits stage files per task attempt (a failed attempt's files are not committed), so for them the
files prove nothing: they are named as a possible loss instead.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from coordinator import parallel
from coordinator.layout import data_dir
from coordinator.records import LogEntry, MarkerSegment, PartAssign, ReplaceItem
from coordinator.segments import decode_segment
from coordinator.state import CoordinatorState
from coordinator.store import Store

#: A Python producer's segment name: ``<txn>~<sequence number, 10 digits>.<ext>`` (see ``Producer._stage``).
_SEQ_NAME = re.compile(r"^(?P<txn>.+)~(?P<seq>\d{10})\.(parquet|arrow)$")


class StagedCopies:
    """The staged files of the partitions ``unrecorded`` (no record after the state before the entry, and no later
    entry touched them), listed once on first use."""

    def __init__(self, store: Store, unrecorded: Sequence[tuple[str, int]], *, seq: int = -1,
                 later: Sequence[LogEntry] = ()) -> None:
        self.store = store
        self.unrecorded = list(unrecorded)
        self._names: dict[tuple[str, int], list[str]] | None = None
        #: the damaged entry and the readable entries after it: a compaction there may have merged (and GC since
        #: deleted) a staged file, and its ``replace`` names it and the rows its commit had
        self.seq = seq
        self.later = list(later)

    def _listed(self) -> dict[tuple[str, int], list[str]]:
        if self._names is None:
            names = parallel.pmap(lambda tp: self.store.list(data_dir(*tp)), self.unrecorded)
            self._names = dict(zip(self.unrecorded, names, strict=True))
        return self._names

    def files_of(self, txn: str) -> dict[tuple[str, int], list[str]]:
        """The paths of ``txn``'s sequence-numbered staged files in each unrecorded partition, in sequence order."""
        out: dict[tuple[str, int], list[str]] = {}
        for tp, names in self._listed().items():
            mine = sorted(n for n in names if (m := _SEQ_NAME.match(n)) is not None and m.group("txn") == txn)
            if mine:
                out[tp] = [f"{data_dir(*tp)}/{n}" for n in mine]
        return out

    def txns_in(self, partitions: Sequence[tuple[str, int]]) -> set[str]:
        """The transactions with sequence-numbered staged files in ``partitions`` (a subset of the unrecorded)."""
        names = self._listed()
        return {m.group("txn") for tp in partitions for n in names.get(tp, ()) if (m := _SEQ_NAME.match(n))}

    def parts_of(self, txn: str, state: CoordinatorState) -> list[PartAssign]:
        """``txn``'s parts in the unrecorded partitions, at each partition's end in ``state``.

        Raises:
            CorruptLogError: a staged file cannot be decoded (its rows cannot be counted).
            StoreError: the store failed.
        """
        parts = []
        files = self.files_of(txn)
        for (topic, p), paths in sorted(files.items()):
            segments = []
            for path in paths:
                data = self.store.get(path)
                segments.append(MarkerSegment(path, decode_segment(data, path).num_rows, len(data), zlib.crc32(data)))
            parts.append(PartAssign(topic, p, state.partition(topic, p).end, tuple(segments)))
        for tp in self.unrecorded:
            if tp not in files and (merged := self._compacted(txn, tp, state.partition(*tp).end)) is not None:
                parts.append(PartAssign(tp[0], tp[1], state.partition(*tp).end, (merged,)))
        return sorted(parts, key=lambda a: (a.topic, a.partition))

    def _compacted(self, txn: str, tp: tuple[str, int], base: int) -> MarkerSegment | None:
        """``txn``'s one segment in partition ``tp`` as a later compaction names it, when GC has deleted the file
        since: the ``replace`` lists its path, and its run of the damaged entry, starting at ``base``, gives its rows
        (its size and checksum are not known; the replace retires it, so nobody reads it). None when no later
        compaction names exactly one such file."""
        for e in self.later:
            for item in e.items:
                if not isinstance(item, ReplaceItem) or (item.topic, item.partition) != tp:
                    continue
                mine = [path for path in item.replaces
                        if (m := _SEQ_NAME.match(path.rsplit("/", 1)[-1])) is not None and m.group("txn") == txn]
                if not mine:
                    continue
                starts = sorted(r[0] for r in item.runs) + [item.end]
                run = [r for r in item.runs if r[2] == self.seq and r[0] == base]
                if len(mine) != 1 or len(run) != 1:
                    return None
                end = min(x for x in starts if x > base)
                return MarkerSegment(mine[0], end - base, 0, 0)
        return None


def sequences(txn: str, parts: Sequence[PartAssign]) -> dict[str, int]:
    """The producer sequence numbers a commit moves to (``topic|partition`` -> the last), from a Python producer's
    segment names; empty when its segments are not numbered so."""
    seqs: dict[str, int] = {}
    for a in parts:
        for s in a.segments:
            m = _SEQ_NAME.match(s.path.rsplit("/", 1)[-1])
            if m is None or m.group("txn") != txn:
                return {}
            key = f"{a.topic}|{a.partition}"
            seqs[key] = max(seqs.get(key, -1), int(m.group("seq")))
    return seqs


__all__ = ["StagedCopies", "sequences"]
