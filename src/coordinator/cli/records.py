"""``txnlog`` record and integrity commands: ``dump`` (committed records, streamed), ``verify`` (every file, read
only) and ``repair`` (rewrite damaged or missing partition records from the log; a dry run unless ``--execute``).
See :mod:`coordinator.cli.topics` for the ``cmd_*`` contract.
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
    return EXIT_PROBLEMS if report else EXIT_OK


def cmd_repair(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open(write=args.execute)
    plan = ti.repair_plan(store)
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

