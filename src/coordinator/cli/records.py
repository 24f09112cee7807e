"""``txnlog`` record and integrity commands: ``dump`` (committed records, streamed), ``verify`` (every file, read
only) and ``repair`` (rewrite damaged or missing partition records from the log; with ``--log``, rebuild damaged log
entries and checkpoints from the copies; a dry run unless ``--execute``). See :mod:`coordinator.cli.topics` for the
``cmd_*`` contract.
"""

from __future__ import annotations

import argparse

import pyarrow as pa

from coordinator import inspect as ti
from coordinator import parallel
from coordinator.cli.common import EXIT_OK, EXIT_PROBLEMS, Output, cell, dumps, render_table
from coordinator.cli.config import Settings
from coordinator.reader import output_schema
from coordinator.topics import get_topic

#: Rows rendered per chunk of ``dump`` output (memory stays bounded whatever the segment size).
DUMP_CHUNK_ROWS = 4096
#: Widest a ``dump`` column of unbounded values (strings, lists, ...) gets; a longer value is cut with ``…`` in
#: the table (``--json`` prints every value whole). The last column is never cut.
DUMP_CELL_MAX = 60
_INT_WIDTHS = {8: 4, 16: 6, 32: 11, 64: 20}
_UINT_WIDTHS = {8: 3, 16: 5, 32: 10, 64: 20}


def type_width(t: pa.DataType) -> int | None:
    """The widest :func:`~coordinator.cli.common.cell` text a value of type ``t`` prints as; None when values of
    ``t`` have no bound (strings, nested types, durations)."""
    if pa.types.is_boolean(t):
        return 5
    if pa.types.is_signed_integer(t):
        return _INT_WIDTHS[t.bit_width]
    if pa.types.is_unsigned_integer(t):
        return _UINT_WIDTHS[t.bit_width]
    if pa.types.is_floating(t):
        return 24  # -1.7976931348623157e+308, the longest shortest-exact float
    if pa.types.is_decimal(t):
        return t.precision + 3  # sign, point, a leading 0
    if pa.types.is_timestamp(t):
        return {"s": 24, "ms": 24, "us": 27, "ns": 30}[t.unit]
    if pa.types.is_date(t):
        return 10
    if pa.types.is_time(t):
        return 18
    if pa.types.is_fixed_size_binary(t):
        return min(2 * t.byte_width, 35)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return 35  # 16 bytes in hex and "..."
    if pa.types.is_null(t):
        return 1
    return None


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


class DumpTable:
    """The human ``dump`` table: column widths fixed from the schema before the first row (numbers by their
    type, ``_offset`` by the largest offset shown), so every chunk lines up under the one header; unbounded
    columns take the width of the first chunk (at most :data:`DUMP_CELL_MAX`) and cut longer values."""

    def __init__(self, schema: pa.Schema, columns: list[str], partitions: int, end_offset: int) -> None:
        self.columns = columns
        self.types = [schema.field(c).type for c in columns]
        bounds = {"_partition": len(str(max(partitions - 1, 0))), "_offset": len(str(max(end_offset - 1, 0)))}
        self.widths: list[int | None] = [
            max(len(c), bounds[c] if c in bounds else (type_width(t) or 0)) if c in bounds or type_width(t)
            else None for c, t in zip(columns, self.types, strict=True)]
        self.right = [_numeric(t) for t in self.types]

    def render(self, rows: list[dict[str, object]], *, header: bool) -> str:
        texts = [[cell(r.get(c)) for c in self.columns] for r in rows]
        for i, w in enumerate(self.widths):
            if w is None:
                self.widths[i] = min(DUMP_CELL_MAX, max([len(self.columns[i])] + [len(t[i]) for t in texts]))
        lines = []
        for values in ([[c.upper() for c in self.columns]] if header else []) + texts:
            parts = []
            for i, v in enumerate(values):
                w = self.widths[i] or 0
                if i == len(values) - 1:
                    parts.append(v.rjust(w) if self.right[i] else v)
                    continue
                if len(v) > w:
                    v = v[:w - 1] + "…"
                parts.append(v.rjust(w) if self.right[i] else v.ljust(w))
            lines.append("  ".join(parts).rstrip())
        return "\n".join(lines)


def cmd_dump(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    store = settings.open()
    meta = get_topic(store, args.topic)
    schema = output_schema(meta.schema)
    columns = [n for n in schema.names if n != "_topic"]
    coord = settings.coordinator(store)
    state = coord.log.refresh()
    table = DumpTable(schema, columns, meta.partitions,
                      max([state.partition(meta.name, p).end for p in range(meta.partitions)], default=0))
    bar = out.progress(f"dump {meta.name}", unit="records")
    n = 0
    try:
        for batch in ti.iter_dump(store, args.topic, partition=args.partition, start=args.start, end=args.end,
                                  limit=args.limit, progress=bar, total=bar.set_total, coordinator=coord):
            for lo in range(0, batch.num_rows, DUMP_CHUNK_ROWS):
                rows = batch.slice(lo, DUMP_CHUNK_ROWS).to_pylist()
                if out.json_mode:
                    out.out.write("".join(_json_line(r) for r in rows))
                    out.out.flush()
                else:
                    out.emit(table.render(rows, header=n == 0))
                n += len(rows)
    finally:
        bar.close()
    if not out.json_mode and n == 0:
        out.emit(table.render([], header=True))
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


#: Why ``repair`` leaves a problem ``verify`` finds, by its kind (``_txn/`` objects go to ``repair --log``).
CANNOT_REPAIR = {
    "segment": "segment data has no other copy to rebuild it from: the partition stays unreadable from here "
               "(restore the file from a backup)",
    "record": "no retained log entry defines this partition record any more, so it cannot be rebuilt",
    "log": "a transaction-log object: 'txnlog repair --log' repairs it",
    "topic": "a topic definition: no copy to rebuild it from",
}


def _cannot(problem: ti.Problem) -> str:
    """Which of :data:`CANNOT_REPAIR` applies to a problem ``repair`` does not fix."""
    if problem.path.startswith("_txn/"):
        return "log"
    if problem.kind in ("truncated", "checksum", "undecodable") or "/data/" in problem.path:
        return "segment"
    if "/meta/" in problem.path:
        return "topic"
    return "record"


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
    bar = out.progress("repair: checking what it cannot repair", unit="segments")
    fixed = set() if args.execute else {r.path for r in plan}
    left = [p for p in ti.verify(store, progress=bar, total=bar.set_total) if p.path not in fixed]
    bar.close()
    cannot = [p.to_json() | {"why": CANNOT_REPAIR[_cannot(p)]} for p in left]
    code = EXIT_PROBLEMS if cannot else EXIT_OK
    if out.json_mode:
        out.emit_json({"dry_run": not args.execute, "records": [r.to_json() for r in plan], "cannot": cannot})
        return code
    if not plan:
        out.emit("nothing to repair: every partition record of the retained log entries is as its entry defines it")
    else:
        out.emit(render_table([r.to_json() for r in plan], ["path", "kind", "seq"],
                              ["RECORD", "STATE", "LOG ENTRY"]))
        if args.execute:
            out.emit(f"\nwrote {len(plan)} partition record(s) from the log entries that define them")
        else:
            out.emit(f"\nwould write {len(plan)} partition record(s) from the log entries that define them; run "
                     "again with --execute")
    if cannot:
        out.emit(f"\ncannot repair {len(cannot)} problem(s):")
        for c in cannot:
            out.emit(f"  {c['path']} ({c['kind']}): {c['why']}")
    return code


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
