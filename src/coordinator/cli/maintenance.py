"""``txnlog compact`` and ``txnlog gc``: maintenance from the command line (see :mod:`coordinator.maintenance`).
Compaction changes no offset and deletes nothing, so it runs at once; GC deletes files, so it shows what it would
delete unless ``--execute``.
"""

from __future__ import annotations

import argparse
from typing import Any

from coordinator.cli.common import EXIT_OK, Output, fmt_age, fmt_bytes, render_table
from coordinator.cli.config import Settings
from coordinator.errors import InvalidOptionError
from coordinator.maintenance import (
    DEFAULT_GC_GRACE_MS,
    MaintenanceReport,
    compact_partition,
    gc_partition,
    sweep_native_staging,
)
from coordinator.store import Store
from coordinator.topics import get_topic, list_topics

#: Paths listed by a human ``gc`` (all of them with ``--json``).
GC_PATHS_SHOWN = 20


def _partitions(args: argparse.Namespace, store: Store) -> list[tuple[str, int]]:
    names = [args.topic] if args.topic else list_topics(store)
    out = []
    for name in names:
        meta = get_topic(store, name)
        if args.partition is not None and not 0 <= args.partition < meta.partitions:
            raise InvalidOptionError(f"topic {name!r} has no partition {args.partition}")
        parts = [args.partition] if args.partition is not None else list(range(meta.partitions))
        out += [(name, p) for p in parts]
    return out


def cmd_compact(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Merge small segments into segments of about the target size; offsets are unchanged."""
    target = args.target_bytes or settings.segment_target_bytes
    store = settings.open(write=True)
    coord = settings.coordinator(store)
    parts = _partitions(args, store)
    bar = out.progress("compact", len(parts), unit="partitions")
    rows = []
    for topic, p in parts:
        r = compact_partition(coord, topic, p, target_bytes=target, fmt=settings.segment_format)
        coord.partition(topic, p).write_checkpoint()
        rows.append({"topic": topic, "partition": p, "merged_groups": r.merged_groups,
                     "segments_before": r.segments_before, "segments_after": r.segments_after})
        bar()
    bar.close()
    if out.json_mode:
        out.emit_json(rows)
    else:
        out.emit(render_table(rows, ["topic", "partition", "merged_groups", "segments_before", "segments_after"],
                              ["TOPIC", "PARTITION", "MERGED", "SEGMENTS BEFORE", "SEGMENTS AFTER"]))
    return EXIT_OK


def cmd_gc(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """Delete segment files nothing live names, older than the grace period (a dry run unless ``--execute``)."""
    grace_ms = DEFAULT_GC_GRACE_MS if args.grace is None else args.grace
    store = settings.open(write=args.execute)
    coord = settings.coordinator(store)
    parts = _partitions(args, store)
    bar = out.progress("gc", len(parts), unit="partitions")
    total = MaintenanceReport()
    for topic, p in parts:
        total.add(gc_partition(coord, topic, p, grace_ms=grace_ms, dry_run=not args.execute))
        bar()
    bar.close()
    if not args.topic:
        total.add(sweep_native_staging(store, grace_ms=grace_ms, dry_run=not args.execute))
    result: dict[str, Any] = {"dry_run": not args.execute, "grace_ms": grace_ms, "files": len(total.deleted_files),
                              "bytes": total.deleted_bytes, "paths": total.deleted_files}
    if out.json_mode:
        out.emit_json(result)
        return EXIT_OK
    for path in total.deleted_files[:GC_PATHS_SHOWN]:
        out.emit(path)
    if len(total.deleted_files) > GC_PATHS_SHOWN:
        out.emit(f"... and {len(total.deleted_files) - GC_PATHS_SHOWN} more (--json lists them all)")
    verb = "deleted" if args.execute else "would delete"
    out.emit(f"{verb} {result['files']} file(s), {fmt_bytes(result['bytes'])} (retired or written more than "
             f"{fmt_age(grace_ms)} ago)" + ("" if args.execute else "; run again with --execute to delete them"))
    return EXIT_OK
