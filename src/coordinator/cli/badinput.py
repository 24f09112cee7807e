"""Where a JSON Lines or CSV file given to ``txnlog produce`` stops fitting the topic: the 1-based line and the
field, found after Arrow's reader refused the file (its messages count rows from 0 within a block and seldom name
the field). Only runs on the failure path: it reads the file again, bisecting on prefixes (O(n log n)).
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Callable, Sequence

import pyarrow as pa

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _read_json(data: bytes, schema: pa.Schema) -> None:
    import pyarrow.json as pajson

    pajson.read_json(io.BytesIO(data), parse_options=pajson.ParseOptions(
        explicit_schema=schema, unexpected_field_behavior="error"))


def _read_csv(data: bytes, schema: pa.Schema) -> None:
    import pyarrow.csv as pacsv

    reader = pacsv.open_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(
        column_types={f.name: f.type for f in schema}, strings_can_be_null=True))
    for _batch in reader:
        pass


def _fails(read: Callable[[], None]) -> str | None:
    try:
        read()
    except _ARROW_ERRORS as exc:
        return str(exc)
    return None


def _first_bad(lines: Sequence[bytes], head: bytes, read: Callable[[bytes], None]) -> int | None:
    """The index of the first line ``i`` such that ``head`` + ``lines[:i + 1]`` fails to read; None if all read."""
    if _fails(functools.partial(read, head + b"".join(lines))) is None:
        return None
    lo, hi = 0, len(lines)  # the prefix of length hi fails, that of length lo reads
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fails(functools.partial(read, head + b"".join(lines[:mid]))) is None:
            lo = mid
        else:
            hi = mid
    return hi - 1


def locate(data: bytes, fmt: str, schema: pa.Schema) -> str | None:
    """``line N, field NAME: what is wrong`` for the first line of ``data`` (JSON Lines or CSV, as ``fmt``) that
    does not fit ``schema`` (``line N: ...`` when no single field is at fault); None when it cannot tell."""
    lines = data.splitlines(keepends=True)
    if fmt == "jsonl":
        i = _first_bad(lines, b"", lambda d: _read_json(d, schema))
        if i is None:
            return None
        return f"line {i + 1}" + _json_field(lines[i], schema)
    if fmt == "csv" and lines:
        i = _first_bad(lines[1:], lines[0], lambda d: _read_csv(d, schema))
        if i is None:
            return None
        return f"line {i + 2}" + _csv_field(lines[0], lines[i + 1], schema)
    return None


def _json_field(line: bytes, schema: pa.Schema) -> str:
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as exc:
        return f": not valid JSON ({exc.msg})"
    except ValueError:
        return ": not valid JSON"
    if not isinstance(doc, dict):
        return ": not a JSON object"
    for name, value in doc.items():
        if name not in schema.names:
            return f", field {name!r}: not a column of the topic (columns: {', '.join(schema.names)})"
        field = schema.field(name)
        one = json.dumps({name: value}).encode()
        err = _fails(functools.partial(_read_json, one, pa.schema([field.with_nullable(True)])))
        if err is not None:
            return f", field {name!r}: {json.dumps(value)} is not of type {field.type}"
    missing = [f.name for f in schema if not f.nullable and f.name not in doc]
    if missing:
        return f", field {missing[0]!r}: missing (the column is not nullable)"
    return ""


def _csv_field(header: bytes, line: bytes, schema: pa.Schema) -> str:
    try:
        names = next(csv.reader([header.decode()]))
        values = next(csv.reader([line.decode()]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return ""
    if len(values) != len(names):
        return f": {len(values)} values for {len(names)} columns"
    for name, value in zip(names, values, strict=True):
        if name not in schema.names:
            continue
        field = schema.field(name)
        one = f"{_quote(name)}\n{_quote(value)}\n".encode()
        err = _fails(functools.partial(_read_csv, one, pa.schema([field.with_nullable(True)])))
        if err is not None:
            return f", field {name!r}: {value!r} is not of type {field.type}"
    return ""


def _quote(text: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([text])
    return out.getvalue()
