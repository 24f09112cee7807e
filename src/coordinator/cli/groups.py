"""``txnlog`` consumer-group commands, as ``kafka-consumer-groups.sh``: ``groups`` (list), ``lag`` (describe),
``reset-offsets`` and ``delete-group`` (dry runs unless ``--execute``). See :mod:`coordinator.cli.topics` for the
``cmd_*`` contract and :mod:`coordinator.groups` for what a reset and a deletion commit.
"""

from __future__ import annotations

import argparse
import datetime as dt

from coordinator import inspect as ti
from coordinator.cli.common import EXIT_OK, Output, render_table
from coordinator.cli.config import Settings
from coordinator.errors import InvalidOptionError
from coordinator.groups import OffsetChange, apply_changes, plan_delete, plan_reset


def cmd_groups(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.groups(store, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(rows)
    else:
        out.emit(render_table([r | {"topics": ",".join(r["topics"])} for r in rows],
                              ["group", "topics", "partitions", "lag"]))
    return EXIT_OK


def cmd_lag(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.lag(store, args.group, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(rows)
    else:
        shown = [{**r, "flag": r.get("out_of_range") or ""} for r in rows]
        out.emit(render_table(shown, ["group", "topic", "partition", "committed", "end_offset", "lag", "flag"],
                              ["GROUP", "TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "OUT OF RANGE"],
                              right=["partition", "committed", "end_offset", "lag"]))
    return EXIT_OK


def parse_topic_partitions(items: list[str] | None) -> dict[str, list[int] | None] | None:
    """``["orders", "payments:0,2"]`` -> ``{"orders": None, "payments": [0, 2]}`` (None: every partition);
    None when no ``--topic`` was given.

    Raises:
        InvalidOptionError: a malformed partition list.
    """
    if not items:
        return None
    out: dict[str, list[int] | None] = {}
    for item in items:
        topic, sep, parts = item.partition(":")
        if not topic:
            raise InvalidOptionError(f"--topic {item!r}: expected TOPIC or TOPIC:P1,P2")
        if not sep:
            out[topic] = None
            continue
        try:
            chosen = [int(p) for p in parts.split(",") if p.strip()]
        except ValueError:
            raise InvalidOptionError(f"--topic {item!r}: partitions must be integers (TOPIC:0,1,2)") from None
        if not chosen or any(p < 0 for p in chosen):
            raise InvalidOptionError(f"--topic {item!r}: expected TOPIC:P1,P2 with non-negative partitions")
        if topic in out and out[topic] is None:
            continue  # every partition already
        out[topic] = sorted({*(out.get(topic) or []), *chosen})
    return out


def parse_time(text: str) -> int:
    """An ISO-8601 time (``2026-11-21T10:00:00Z``, ``2026-11-21``, with an offset or none: UTC) as epoch ms.

    Raises:
        InvalidOptionError: not an ISO-8601 time.
    """
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidOptionError(f"--to-datetime {text!r} is not an ISO-8601 time (e.g. 2026-11-21T10:00:00Z)") \
            from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _emit_changes(out: Output, group: str, changes: list[OffsetChange], *, executed: bool, what: str,
                  done: str) -> None:
    """Print the offset changes; ``what`` is the action for the dry run's advice, ``done`` its past tense for the
    line after ``--execute``."""
    if out.json_mode:
        out.emit_json({"group": group, "dry_run": not executed, "changes": [c.to_json() for c in changes]})
        return
    rows = [{"group": group, "topic": c.topic, "partition": c.partition, "current": c.current,
             "new": "(removed)" if c.new is None else c.new} for c in changes]
    out.emit(render_table(rows, ["group", "topic", "partition", "current", "new"],
                          ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], right=["new"]))
    if executed:
        out.emit(f"\n{done} group {group}: {len(changes)} partition(s) committed")
    else:
        out.emit(f"\ndry run: nothing changed. Stop the group's consumers, then run again with --execute to {what} "
                 f"group {group}")


def cmd_reset_offsets(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    modes = [(m, v) for m, v in (("earliest", args.to_earliest), ("latest", args.to_latest),
                                  ("offset", args.to_offset is not None), ("datetime", args.to_datetime is not None),
                                  ("shift", args.shift_by is not None)) if v]
    if len(modes) != 1:
        raise InvalidOptionError("reset-offsets takes exactly one of --to-earliest, --to-latest, --to-offset, "
                                 "--to-datetime, --shift-by")
    topics = parse_topic_partitions(args.topic)
    if topics is None and not args.all_topics:
        raise InvalidOptionError("reset-offsets needs --topic TOPIC[:P,...] (repeatable) or --all-topics")
    if topics is not None and args.all_topics:
        raise InvalidOptionError("--topic and --all-topics exclude each other")
    mode = modes[0][0]
    offset = args.to_offset if mode == "offset" else args.shift_by
    time_ms = parse_time(args.to_datetime) if mode == "datetime" else None
    store = settings.open(write=args.execute)
    coord = settings.coordinator(store)
    changes = plan_reset(coord, args.group, topics, to=mode, offset=offset, time_ms=time_ms)
    if args.execute:
        apply_changes(coord, args.group, changes)
    _emit_changes(out, args.group, changes, executed=args.execute, what="reset the offsets of",
                  done="changed the offsets of")
    return EXIT_OK


def cmd_delete_group(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=args.execute)
    coord = settings.coordinator(store)
    changes = plan_delete(coord, args.group)
    if args.execute:
        apply_changes(coord, args.group, changes)
    _emit_changes(out, args.group, changes, executed=args.execute, what="delete", done="deleted the offsets of")
    return EXIT_OK
