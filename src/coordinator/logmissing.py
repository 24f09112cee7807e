"""The partition records a damaged transaction log entry wrote (see :mod:`coordinator.logrebuild`), and what the
rest of the store tells where they are missing: the entries after it say where each partition went on, a Python
producer's staged files hold a commit no record names, and an entry that added no rows where its record is missing
made a compaction or a retention there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from coordinator import parallel
from coordinator.errors import CorruptLogError
from coordinator.layout import marker_path
from coordinator.logstaged import StagedCopies
from coordinator.partrecords import CommitOp, PartitionRecord
from coordinator.records import CommitItem, LogEntry, RetainItem, item_partitions, parse_txn_id
from coordinator.state import CoordinatorState
from coordinator.store import Store

__all__ = ["later_base", "layout_only", "next_base", "records_of_entry", "unrecorded_commit"]


def records_of_entry(store: Store, seq: int, before: CoordinatorState, later: Sequence[LogEntry],
                      partitions: Sequence[tuple[str, int]]
                      ) -> tuple[dict[tuple[str, int], PartitionRecord], dict[tuple[str, int], tuple[str, int]]] | str:
    """The partition records entry ``seq`` wrote: in each partition, the record after those ``before`` counts, when
    it names the entry; and the partitions where the entry wrote a record that is missing (the entries after it
    continue at the next record), each with the problem to report and the offset that next record's first commit
    starts at (the partition's end after the entry: a rebuild completing that partition from staged files must end
    there). A string when they cannot be told (a record the entry wrote is damaged, or missing where the next
    record does not start with a commit)."""
    by_later: dict[tuple[str, int], int] = {}
    for e in later:
        for t, p, idx in e.touched:
            by_later.setdefault((t, p), idx)
    cands = sorted(set(partitions) | set(before.partitions))

    def fetch(tp: tuple[str, int]) -> PartitionRecord | CorruptLogError | None:
        path = marker_path(tp[0], tp[1], before.partition(*tp).next_idx)
        try:
            return PartitionRecord.from_bytes(store.get(path), path)
        except FileNotFoundError:
            return None
        except CorruptLogError as exc:
            return exc

    found: dict[tuple[str, int], PartitionRecord] = {}
    lacking: dict[tuple[str, int], tuple[str, int]] = {}
    for tp, rec in zip(cands, parallel.pmap(fetch, cands), strict=True):
        idx = before.partition(*tp).next_idx
        path = marker_path(tp[0], tp[1], idx)
        first_later = by_later.get(tp)
        if isinstance(rec, PartitionRecord):
            if rec.seq == seq and (rec.topic, rec.partition, rec.idx) == (tp[0], tp[1], idx):
                found[tp] = rec
            elif rec.seq <= seq:
                return f"partition record {path} is damaged too: it names entry {rec.seq}"
        elif first_later is not None and first_later > idx:
            what = "missing" if rec is None else f"damaged too ({rec})"
            problem = (f"partition record {path}, which entry {seq} wrote (the entries after it continue at record "
                       f"{first_later}), is {what}: the commits of entry {seq} there have no copy")
            end = later_base(later, tp)
            if end is None and rec is None:
                end = next_base(store, tp, first_later)
            if end is None:
                return problem
            lacking[tp] = (problem, end)
        elif rec is not None and first_later != idx:
            return f"partition record {path} is damaged too ({rec}): whether entry {seq} wrote it cannot be told"
    return found, lacking


def unrecorded_commit(before: CoordinatorState, staged: StagedCopies, lacking: Sequence[tuple[str, int]],
                      named: set[str], assumed: list[str]) -> str | None:
    """A commit no surviving record names, in partitions whose record of the entry is missing while later entries
    continue them: the one Python producer transaction staged there that is its producer's next at its current
    epoch (none, or several: nothing is guessed). Its rows must then fill exactly the offsets the later entries
    leave for the entry there (checked by the caller), else the entry is not rebuilt."""
    found = []
    for txn in sorted(staged.txns_in(lacking) - named):
        ref = parse_txn_id(txn)
        meta = before.producer_by_pid(ref.pid) if ref is not None and ref.kind == "p" else None
        if ref is not None and meta is not None and meta.epoch == ref.epoch and ref.n == meta.last_txn + 1:
            found.append(txn)
    if len(found) != 1:
        return None
    assumed.append(f"commit {found[0]}: no partition record of it survived; taken from its staged segment "
                         "files, whose rows fill exactly the offsets the entries after this one leave for it")
    return found[0]


def layout_only(before: CoordinatorState, lacking: Mapping[tuple[str, int], tuple[str, int]],
                assumed: list[str]) -> list[RetainItem]:
    """For each partition whose record of the entry is missing while the entries after it go on from the very
    offset the partition ended at before it: the entry added no rows there, so its decision there was a compaction
    or a retention (either bumps the layout the later entries were planned against). It is kept as a retention to
    the partition's start, which changes no row and keeps the layout count; a compaction's merged file is left
    for GC. (A segment a lost retention or compaction retired and GC deleted since is named by ``verify``.)"""
    out = []
    for (topic, p), (_problem, end) in sorted(lacking.items()):
        pm = before.partition(topic, p)
        if end != pm.end:
            continue
        out.append(RetainItem(f"rebuilt-layout-{topic}-{p}-{pm.next_idx}", topic=topic, partition=p, start=pm.start))
        assumed.append(f"{topic}/{p}: a compaction or retention whose record is missing (the entries after "
                             f"this one go on from offset {end}, so it added no rows): kept as a retention to the "
                             f"start offset {pm.start}, which changes no row")
    return out


def later_base(later: Sequence[LogEntry], tp: tuple[str, int]) -> int | None:
    """The offset partition ``tp`` ended at before the first of the readable entries ``later`` that touched it,
    when that entry's first decision there is a commit (its base); None otherwise."""
    for e in later:
        for item in e.items:
            if tp not in item_partitions(item):
                continue
            if isinstance(item, CommitItem):
                return next((a.base for a in item.parts if (a.topic, a.partition) == tp), None)
            return None
    return None


def next_base(store: Store, tp: tuple[str, int], idx: int) -> int | None:
    """The offset the first commit of partition record ``idx`` starts at (None: it is missing, damaged, or does not
    start with a commit)."""
    path = marker_path(tp[0], tp[1], idx)
    try:
        rec = PartitionRecord.from_bytes(store.get(path), path)
    except (FileNotFoundError, CorruptLogError):
        return None
    return rec.ops[0].base if rec.ops and isinstance(rec.ops[0], CommitOp) else None
