"""``txnlog`` record and integrity commands: ``dump`` (committed records, streamed), ``verify`` (every file, read
only) and ``repair`` (rewrite damaged or missing partition records from the log; with ``--log``, rebuild damaged log
entries and checkpoints from the copies; a dry run unless ``--execute``). See :mod:`coordinator.cli.topics` for the
``cmd_*`` contract.
"""

from __future__ import annotations

import argparse

from coordinator import inspect as ti
from coordinator import parallel
from coordinator.cli.common import EXIT_OK, EXIT_PROBLEMS, Output, dumps, render_table
from coordinator.cli.config import Settings
from coordinator.reader import output_schema
from coordinator.topics import get_topic

#: Rows rendered per chunk of ``dump`` output (memory stays bounded whatever the segment size).
DUMP_CHUNK_ROWS = 4096


def cmd_dump(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    meta = get_topic(store, args.topic)
    columns = [n for n in output_schema(meta.schema).names if n != "_topic"]
    bar = out.progress("dump", unit="slices")
    widths: list[int] = []
    n = 0
    try:
        for batch in ti.iter_dump(store, args.topic, partition=args.partition, start=args.start, end=args.end,
                                  limit=args.limit, progress=bar, total=bar.set_total,
                                  coordinator=settings.coordinator(store)):
            for lo in range(0, batch.num_rows, DUMP_CHUNK_ROWS):
                rows = batch.slice(lo, DUMP_CHUNK_ROWS).to_pylist()
                if out.json_mode:
                    out.out.write("".join(_json_line(r) for r in rows))
                    out.out.flush()
                else:
                    out.emit(render_table(rows, columns, widths=widths, header=n == 0))
                n += len(rows)
    finally:
        bar.close()
    if not out.json_mode:
        if n == 0:
            out.emit(render_table([], columns))
        out.warn(f"{n} record(s)")
    return EXIT_OK


def _json_line(row: dict[str, object]) -> str:
    return dumps(row, lines=True) + "\n"


def cmd_verify(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    bar = out.progress("verify", unit="segments")
    report = ti.verify(store, progress=bar, total=bar.set_total)
    bar.close()
    if out.json_mode:
        out.emit_json(report.to_json())
    else:
        if report:
            out.emit(render_table([p.to_json() for p in report], ["path", "kind", "message"]))
            out.emit(f"\n{len(report)} problem(s) found ({report.segments_checked} segment(s) checked)")
        else:
            out.emit(f"ok: no problems ({report.segments_checked} segment(s) checked)")
        if report.pending:
            out.emit(f"{len(report.pending)} partition record(s) not written yet (a writer crashed or is writing): "
                     "readers compute them from the log; the daemon or 'txnlog repair --execute' writes them")
        for path, note in report.rebuilt.items():
            lost = len(note.get("lost", ()))
            out.emit(f"{path} was rebuilt by 'txnlog repair --log' ({len(note.get('assumed', ()))} value(s) "
                     f"assumed, {lost} note(s) of what no copy held; --json lists them)")
    return EXIT_PROBLEMS if report else EXIT_OK


def cmd_repair(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    if args.log:
        return _repair_log(args, settings, out)
    store = settings.open(write=args.execute)
    plan = ti.repair_plan(store)
    for path in plan.damaged_entries:
        out.warn(f"transaction log entry {path} is damaged: its partition records are not checked; "
                 "'txnlog repair --log' rebuilds it from them")
    if args.execute and plan:
        parallel.pmap(lambda r: store.put(r.path, r.data), plan)
    if out.json_mode:
        out.emit_json({"dry_run": not args.execute, "records": [r.to_json() for r in plan]})
        return EXIT_OK
    if not plan:
        out.emit("nothing to repair: every partition record of the retained log entries is as its entry defines it")
        return EXIT_OK
    out.emit(render_table([r.to_json() for r in plan], ["path", "kind", "seq"], ["RECORD", "STATE", "LOG ENTRY"]))
    if args.execute:
        out.emit(f"\nwrote {len(plan)} partition record(s) from the log entries that define them")
    else:
        out.emit(f"\nwould write {len(plan)} partition record(s) from the log entries that define them; run again "
                 "with --execute")
    return EXIT_OK



def _repair_log(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    """``repair --log``: rebuild damaged log entries and checkpoints from the copies (a dry run unless
    ``--execute``); exit 1 when something cannot be repaired."""
    store = settings.open(write=args.execute)
    coord = settings.coordinator(store)
    plan = coord.repair_log(execute=args.execute)
    if out.json_mode:
        out.emit_json(plan.to_json())
        return EXIT_OK if plan.ok else EXIT_PROBLEMS
    if not plan.objects:
        out.emit("nothing to repair: every retained transaction log entry and checkpoint decodes")
        return EXIT_OK
    verbs = {"rebuild": ("would rebuild", "rebuilt"), "rewrite": ("would rewrite", "rewrote"),
             "remove": ("would remove", "removed"), "leave": ("leaves", "left"),
             "cannot": ("cannot repair", "could not repair")}
    for o in plan.objects:
        where = ("checkpoint" if o.kind == "checkpoint" else
                 "entry, covered by a readable checkpoint" if o.covered else "entry, above every readable checkpoint")
        out.emit(f"{o.path} ({where}): {verbs[o.action][1 if plan.executed else 0]}: {o.why}")
        out.emit(f"  damage: {o.damage}")
        for title, lines in (("recovered", o.recovered), ("assumed", o.assumed), ("lost", o.lost)):
            for line in lines:
                out.emit(f"  {title}: {line}")
    done = sum(o.action in ("rebuild", "rewrite", "remove") for o in plan.objects)
    if plan.executed:
        out.emit(f"\nrepaired {done} object(s)" + ("" if plan.ok else "; some could not be repaired (above)"))
    elif done:
        out.emit(f"\nwould repair {done} object(s); stop the store's writers, then run again with --execute")
    return EXIT_OK if plan.ok else EXIT_PROBLEMS
