"""``txnlog`` topic commands: ``topics``, ``describe``, ``create-topic``, ``delete-topic``, ``add-partitions``,
``set-config``. Each ``cmd_*`` takes the parsed arguments, the merged settings and an
:class:`~coordinator.cli.common.Output`, prints a human table or JSON, and returns the exit code; errors are raised
and mapped to exit codes by :func:`coordinator.cli.main`.
"""

from __future__ import annotations

import argparse
from typing import Any

from coordinator import inspect as ti
from coordinator.cli.common import EXIT_OK, EXIT_PROBLEMS, Output, fmt_bytes, fmt_time, render_table
from coordinator.cli.config import Settings
from coordinator.cli.schema import parse_schema
from coordinator.clock import store_now_ms
from coordinator.errors import InvalidOptionError
from coordinator.topic_admin import check_config, delete_topic, plan_delete_topic, set_topic_config
from coordinator.topics import TopicMeta, add_partitions, create_topic, get_topic


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """``["retention.ms=604800000", ...]`` as a dict.

    Raises:
        InvalidOptionError: an item without ``=``.
    """
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidOptionError(f"{item!r} is not KEY=VALUE (e.g. retention.ms=604800000)")
        out[key.strip()] = value.strip()
    return out


def _meta_json(meta: TopicMeta) -> dict[str, Any]:
    return {"name": meta.name, "partitions": meta.partitions, "version": meta.version,
            "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in meta.schema],
            "config": dict(meta.config)}


def cmd_topics(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    rows = ti.topics(store, coordinator=settings.coordinator(store))
    damaged = [r for r in rows if r["damaged"]]
    if out.json_mode:
        out.emit_json(rows)
    else:
        shown = [r | {"size": fmt_bytes(r["bytes"]), "created_at": fmt_time(r["created"]),
                      "status": "DAMAGED" if r["damaged"] else "ok"} for r in rows]
        out.emit(render_table(shown, ["name", "partitions", "records", "segments", "size", "created_at", "status"],
                              ["NAME", "PARTITIONS", "RECORDS", "SEGMENTS", "SIZE", "CREATED", "STATUS"],
                              right=["size"]))
    for r in damaged:
        out.warn(f"txnlog: topic {r['name']} is damaged: {r['damaged']}")
    return EXIT_PROBLEMS if damaged else EXIT_OK


def cmd_describe(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    d = ti.describe_topic(store, args.topic, coordinator=settings.coordinator(store))
    if out.json_mode:
        out.emit_json(d)
    else:
        cols = ", ".join(f"{f['name']}: {f['type']}{'' if f['nullable'] else ' not null'}" for f in d["fields"])
        config = ", ".join(f"{k}={v}" for k, v in sorted(d["config"].items())) or "-"
        out.emit(f"topic      {d['name']}\nschema     {cols}\npartitions {d['partitions']}\n"
                 f"records    {d['records']}\nsegments   {d['segments'] if d['segments'] is not None else '-'}\n"
                 f"size       {fmt_bytes(d['bytes'])}\nconfig     {config}\ncreated    {fmt_time(d['created'])}\n")
        rows = [p | {"size": fmt_bytes(p["bytes"]), "last": fmt_time(p["last_commit"]),
                     "status": "DAMAGED" if p["damaged"] else "ok"} for p in d["partition_info"]]
        out.emit(render_table(
            rows, ["partition", "start_offset", "end_offset", "records", "segments", "size", "staged_files", "last",
                   "status"],
            ["PARTITION", "START", "END", "RECORDS", "SEGMENTS", "SIZE", "STAGED", "LAST COMMIT", "STATUS"],
            right=["size"]))
    for p in d["partition_info"]:
        if p["damaged"]:
            out.warn(f"txnlog: partition {d['name']}/{p['partition']} is damaged: {p['damaged']}")
    return EXIT_PROBLEMS if d["damaged"] else EXIT_OK


def cmd_create_topic(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    schema = parse_schema(args.schema)
    config = check_config(parse_assignments(args.config_items))
    store = settings.open(write=True, create=True)
    meta = create_topic(store, args.topic, schema, args.partitions, config, exist_ok=args.if_not_exists,
                        created_ms=store_now_ms(store))
    if out.json_mode:
        out.emit_json(_meta_json(meta))
    else:
        out.emit(f"topic {meta.name}: {meta.partitions} partition(s), schema "
                 + ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in meta.schema))
    return EXIT_OK


def cmd_delete_topic(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=args.execute)
    if args.execute:
        plan = delete_topic(settings.coordinator(store), args.topic)
    else:
        plan = plan_delete_topic(store, args.topic)
    if out.json_mode:
        out.emit_json({"topic": plan.topic, "dry_run": not plan.executed, "partitions": plan.partitions,
                       "files": len(plan.paths), "bytes": plan.bytes})
    elif plan.executed:
        out.emit(f"deleted topic {plan.topic}: {plan.partitions} partition(s), {len(plan.paths)} file(s) "
                 f"({fmt_bytes(plan.bytes)}); its name is not reused")
    else:
        out.emit(f"would delete topic {plan.topic}: {plan.partitions} partition(s), {len(plan.paths)} file(s) "
                 f"({fmt_bytes(plan.bytes)}); its name would not be reusable. Stop its producers and consumers, "
                 "then run again with --execute")
    return EXIT_OK


def cmd_add_partitions(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=True)
    before = get_topic(store, args.topic).partitions
    meta = add_partitions(store, args.topic, args.partitions)
    if out.json_mode:
        out.emit_json(_meta_json(meta) | {"partitions_before": before})
    else:
        out.emit(f"topic {meta.name}: {before} -> {meta.partitions} partition(s)"
                 + ("" if meta.partitions != before else " (unchanged)"))
    return EXIT_OK


def cmd_set_config(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    updates = parse_assignments(args.assignments)
    if not updates and not args.unset:
        raise InvalidOptionError("set-config needs --set KEY=VALUE or --unset KEY")
    check_config(updates)
    store = settings.open(write=True)
    meta = set_topic_config(store, args.topic, updates, args.unset or ())
    if out.json_mode:
        out.emit_json(_meta_json(meta))
    else:
        config = ", ".join(f"{k}={v}" for k, v in sorted(meta.config.items())) or "(none)"
        out.emit(f"topic {meta.name} config (version {meta.version}): {config}")
    return EXIT_OK
