"""``txnlog produce TOPIC FILE...``: publish JSON Lines, CSV or Parquet files as **one** transaction.

Files are read with the topic's schema (JSON Lines and CSV values are converted to its types, decimals and
timestamps included; Parquet columns are cast safely), split over the partitions (``--partition``, the hash of
``--key`` columns exactly as the producer and the Spark writer hash, or evenly) and staged as segments of the
configured size, each row stamped with the time its chunk was read as its producer time (``_producerTimestamp``);
the commit makes all of it visible at once, or none of it. ``-`` reads standard input
(``--format`` then required). CSV and Parquet are streamed; a JSON Lines file is read whole.

By default the transaction belongs to a one-off producer that its own commit removes (as a Spark batch job's);
``--transactional-id`` uses a named producer instead, which fences any other producer with that id.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from coordinator.cli.badinput import locate
from coordinator.cli.common import EXIT_OK, Output
from coordinator.cli.config import Settings
from coordinator.coordinator import ProducerIdentity, TransactionCoordinator
from coordinator.errors import InvalidOptionError, SchemaMismatchError, TxnLogError
from coordinator.layout import segment_name
from coordinator.producer import hash_partition
from coordinator.records import SegmentRef
from coordinator.segments import now_us, stage_segment, stamp
from coordinator.store import Store
from coordinator.topics import TopicMeta, conform, get_topic

INPUT_FORMATS = ("jsonl", "csv", "parquet")
_BY_EXTENSION = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet",
                 ".pq": "parquet"}
PARQUET_BATCH_ROWS = 65_536


def input_format(path: str, given: str | None) -> str:
    """The format of ``path``: ``given``, or from its extension.

    Raises:
        InvalidOptionError: unknown extension and no ``--format``, or ``-`` without ``--format``.
    """
    if given:
        return given
    fmt = _BY_EXTENSION.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise InvalidOptionError(f"cannot tell the format of {path!r} from its name: give --format "
                                 f"({', '.join(INPUT_FORMATS)})")
    return fmt


def _source(path: str) -> str | BinaryIO:
    return io.BytesIO(sys.stdin.buffer.read()) if path == "-" else path


def read_file(path: str, fmt: str, schema: pa.Schema) -> Iterator[pa.Table]:
    """Tables of ``path`` read as ``fmt`` with the topic's ``schema``.

    Raises:
        SchemaMismatchError: the file does not parse as ``fmt`` or does not fit the schema (naming the file and,
            for JSON Lines and CSV, the 1-based line and the field).
        InvalidOptionError: the file cannot be read.
    """
    import pyarrow.csv as pacsv
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    src = _source(path)
    try:
        if fmt == "parquet":
            pf = pq.ParquetFile(src)
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                yield pa.Table.from_batches([batch])
        elif fmt == "csv":
            reader = pacsv.open_csv(src, convert_options=pacsv.ConvertOptions(
                column_types={f.name: f.type for f in schema}, strings_can_be_null=True))
            for batch in reader:
                yield pa.Table.from_batches([batch])
        else:
            yield pajson.read_json(src, parse_options=pajson.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="error"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        where = None
        if fmt in ("jsonl", "csv"):
            if isinstance(src, str):
                with open(src, "rb") as fh:
                    data = fh.read()
            else:
                data = src.getvalue() if isinstance(src, io.BytesIO) else b""
            where = locate(data, fmt, schema)
        if where is not None:
            raise SchemaMismatchError(f"{path}: {where} (reading it as {fmt} with the topic's schema: {exc})") \
                from None
        raise SchemaMismatchError(f"{path}: cannot be read as {fmt} with the topic's schema: {exc}") from None
    except OSError as exc:
        raise InvalidOptionError(f"input {path!r} cannot be read: {exc}") from None


class _Stager:
    """Buffers rows per partition and stages a segment whenever a partition's buffer reaches the target size."""

    def __init__(self, coord: TransactionCoordinator, meta: TopicMeta, ident: ProducerIdentity, txn: str,
                 target_bytes: int, fmt: str) -> None:
        self.coord, self.meta, self.ident, self.txn = coord, meta, ident, txn
        self.target_bytes, self.fmt = target_bytes, fmt
        self.buffers: dict[int, list[pa.Table]] = {}
        self.sizes: dict[int, int] = {}
        self.seqs: dict[int, int] = {}
        self.staged: list[SegmentRef] = []
        self.opened = False

    def add(self, partition: int, table: pa.Table) -> None:
        self.buffers.setdefault(partition, []).append(table)
        self.sizes[partition] = self.sizes.get(partition, 0) + table.nbytes
        if self.sizes[partition] >= self.target_bytes:
            self.stage(partition)

    def stage(self, partition: int) -> None:
        tables = self.buffers.pop(partition, [])
        self.sizes.pop(partition, None)
        if not tables:
            return
        if not self.opened:
            self.coord.open_transaction(self.ident, 0)
            self.opened = True
        seq = self.seqs.get(partition, 0)
        self.staged.append(stage_segment(self.coord.store, self.meta.name, partition, pa.concat_tables(tables),
                                         segment_name(self.txn, f"{seq:010d}"), seq=seq, fmt=self.fmt))
        self.seqs[partition] = seq + 1

    def flush(self) -> None:
        for p in sorted(self.buffers):
            self.stage(p)


def split(table: pa.Table, partitions: int, *, partition: int | None, key: Sequence[str] | None,
          turn: int) -> list[tuple[int, pa.Table]]:
    """``table``'s rows per partition: all in ``partition``; by the hash of the ``key`` columns (the producer's
    partitioner, keeping input order within a partition); or in contiguous near-equal slices starting at
    partition ``turn``."""
    if partition is not None:
        return [(partition, table)]
    if key:
        parts = np.asarray(hash_partition(table, list(key), partitions), dtype=np.int64)
        order = np.argsort(parts, kind="stable")
        counts = np.bincount(parts, minlength=partitions)
        ordered = table.take(pa.array(order))
        out, pos = [], 0
        for p in range(partitions):
            if counts[p]:
                out.append((p, ordered.slice(pos, int(counts[p]))))
            pos += int(counts[p])
        return out
    step = -(-table.num_rows // partitions)
    return [((turn + i) % partitions, table.slice(i * step, step)) for i in range(partitions)
            if table.slice(i * step, step).num_rows]


def produce(store: Store, coord: TransactionCoordinator, meta: TopicMeta, sources: Sequence[tuple[str, str]], *,
            partition: int | None, key: Sequence[str] | None, tid: str | None, target_bytes: int, seg_fmt: str,
            progress: Any = None) -> dict[str, Any]:
    """Publish every row of ``sources`` ((path, format) pairs) to ``meta``'s topic in one transaction. Returns
    ``{"topic", "txn", "tid", "records", "seq", "partitions": [{"partition", "first_offset", "end_offset"}]}``.

    Raises:
        SchemaMismatchError: a file does not fit the topic (nothing is published; staged files are deleted).
        ProducerFencedError: with ``tid``, another producer with that id initialised meanwhile.
        CommitStateUnknownError: the outcome could not be learned.
    """
    ephemeral = tid is None
    ident = coord.init_producer(tid or f"txnlog-produce-{uuid.uuid4().hex[:12]}", ephemeral=ephemeral)
    txn = ident.txn_id(0)
    stager = _Stager(coord, meta, ident, txn, target_bytes, seg_fmt)
    records = 0
    try:
        turn = 0
        for path, fmt in sources:
            for table in read_file(path, fmt, meta.schema):
                table = stamp(conform(table, meta), now_us())
                for p, part in split(table, meta.partitions, partition=partition, key=key, turn=turn):
                    stager.add(p, part)
                turn += 1
                records += table.num_rows
                if progress is not None:
                    progress(table.num_rows)
        stager.flush()
        result = coord.commit(ident, txn, stager.staged, end_producer=ephemeral)
    except BaseException as exc:
        _abort(coord, ident, txn, stager, ephemeral, _reason(exc))
        raise
    if stager.opened:
        coord.close_transaction(txn)
    return {"topic": meta.name, "txn": txn, "tid": None if ephemeral else ident.tid, "records": records,
            "seq": result.commit_seq,
            "partitions": [{"partition": p, "first_offset": b, "end_offset": e}
                           for (_t, p), (b, e) in sorted(result.offsets.items())]}


#: Longest reason a failed ``produce`` records in its abort (the log entry stays small).
REASON_CHARS = 300


def _reason(exc: BaseException) -> str:
    """The reason a failed ``produce`` records in the log: the input error itself (it names the file, line and
    field); for any other failure only its kind, since a store error's text has no place in the store."""
    if isinstance(exc, (SchemaMismatchError, InvalidOptionError)):
        text = str(exc)
        return "txnlog produce failed: " + (text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + "...")
    return f"txnlog produce failed: {type(exc).__name__}"


def _abort(coord: TransactionCoordinator, ident: ProducerIdentity, txn: str, stager: _Stager, ephemeral: bool,
           reason: str) -> None:
    """Best effort: decide the transaction as aborted with ``reason``, then delete what it staged (GC removes any
    leftover)."""
    try:
        coord.abort(ident, txn, reason=reason, end_producer=ephemeral)
    except TxnLogError:
        return  # committed, fenced or unknown: never delete what a decision may name
    for ref in stager.staged:
        try:
            coord.store.delete(ref.path)
        except TxnLogError:
            pass
    coord.close_transaction(txn)


def cmd_produce(args: argparse.Namespace, settings: Settings, out: Output) -> int:
    sources = [(path, input_format(path, args.format)) for path in args.files]
    for path, _fmt in sources:
        if path != "-" and not os.path.isfile(path):
            raise InvalidOptionError(f"input file {path!r} does not exist")
    if sum(p == "-" for p, _ in sources) > 1:
        raise InvalidOptionError("standard input ('-') can be read once")
    key = [c.strip() for c in args.key.split(",") if c.strip()] if args.key else None
    if key is not None and args.partition is not None:
        raise InvalidOptionError("--key and --partition exclude each other")
    store = settings.open(write=True)
    meta = get_topic(store, args.topic)
    if args.partition is not None and not 0 <= args.partition < meta.partitions:
        raise InvalidOptionError(f"topic {meta.name!r} has no partition {args.partition} (it has {meta.partitions})")
    for c in key or []:
        if c not in meta.schema.names:
            raise InvalidOptionError(f"--key column {c!r} is not a column of topic {meta.name!r}")
    coord = settings.coordinator(store)
    coord.know_topic(meta)
    bar = out.progress(f"produce {meta.name}", unit="records")
    try:
        result = produce(store, coord, meta, sources, partition=args.partition, key=key,
                         tid=args.transactional_id, target_bytes=settings.segment_target_bytes,
                         seg_fmt=settings.segment_format, progress=bar)
    finally:
        bar.close()
    if out.json_mode:
        out.emit_json(result)
    else:
        where = ", ".join(f"{meta.name}/{r['partition']} [{r['first_offset']}, {r['end_offset']})"
                          for r in result["partitions"]) or "-"
        out.emit(f"produced {result['records']} record(s) to {meta.name} in one transaction {result['txn']} "
                 f"(log entry {result['seq']}): {where}")
    return EXIT_OK
