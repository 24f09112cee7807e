"""Shared pieces of the ``txnlog`` command line: exit codes, errors, formatting, output (aligned tables, JSON,
JSON Lines) and progress.

Exit codes (documented in ``docs/cli.md``; scripts rely on them):

* ``0`` ok (a dry run that showed what it would do included);
* ``1`` problems found, or the operation could not be done (damage found, a transaction left open, ...);
* ``2`` usage error or invalid option;
* ``3`` a named topic, group or transaction does not exist;
* ``4`` the store failed (unreachable, refused, no conditional writes);
* ``5`` no txnlog store at the URL.

Human output: instants as ISO-8601 UTC (``2026-11-21T10:00:01.123Z``), durations as ``850ms``/``12.5s``/``4m05s``,
sizes in binary units (``35.2 KiB``), numbers exactly (a float prints its shortest exact form, a decimal all its
digits), numeric columns right-aligned. ``--json`` prints the rows of :mod:`coordinator.inspect` as they are, with
instants as ISO-8601 UTC strings and decimals as strings (exact).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from coordinator.errors import (
    CommitStateUnknownError,
    GroupNotFoundError,
    InvalidOptionError,
    NoStoreError,
    StoreError,
    TopicNotFoundError,
    TxnLogError,
)
from coordinator.inspect.humanize import fmt_age as fmt_age  # re-exported for the commands
from coordinator.inspect.humanize import fmt_bytes as fmt_bytes
from coordinator.inspect.humanize import iso

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_STORE = 4
EXIT_NO_STORE = 5


class CliError(Exception):
    """An error the command line reports as one line on stderr, exiting with :attr:`code`."""

    def __init__(self, message: str, code: int = EXIT_PROBLEMS) -> None:
        super().__init__(message)
        self.code = code


def exit_code_for(exc: BaseException) -> int:
    """The exit code for an exception escaping a command (see the module docstring)."""
    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, InvalidOptionError):
        return EXIT_USAGE
    if isinstance(exc, NoStoreError):
        return EXIT_NO_STORE
    if isinstance(exc, (TopicNotFoundError, GroupNotFoundError)):
        return EXIT_NOT_FOUND
    if isinstance(exc, (StoreError, CommitStateUnknownError, OSError)):
        return EXIT_STORE
    if isinstance(exc, TxnLogError):
        return EXIT_PROBLEMS
    return EXIT_PROBLEMS


def scrub(message: str, secrets: Iterable[str | None]) -> str:
    """``message`` with every non-empty secret replaced by ``***`` (a last line of defence: credentials must
    never reach the terminal or a log)."""
    for s in secrets:
        if s:
            message = message.replace(s, "***")
    return message


# -- formatting ---------------------------------------------------------------------------------------------------


def fmt_time(value: dt.datetime | None) -> str:
    return "-" if value is None else iso(value)


def cell(value: Any) -> str:
    """How one value is shown in a human table: exactly (floats in their shortest exact form, decimals with all
    their digits), instants in ISO-8601 UTC."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex() if len(value) <= 16 else bytes(value[:16]).hex() + "..."
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return iso(value)
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, default=json_default, separators=(",", ":"))
    return str(value)


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float, decimal.Decimal)) and not isinstance(value, bool)


def numeric_columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[str]:
    """The columns whose non-null values are all numbers (right-aligned in tables)."""
    out = []
    for c in columns:
        values = [r.get(c) for r in rows if r.get(c) is not None]
        if values and all(_numeric(v) for v in values):
            out.append(c)
    return out


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None,
                 *, right: Iterable[str] = (), widths: list[int] | None = None, header: bool = True) -> str:
    """An aligned text table: one header line, one line per row. Numeric columns and those named in ``right``
    are right-aligned. ``widths`` (updated in place) keeps columns aligned across chunks of one stream; with
    ``header`` false the header line is left out. Empty ``rows`` give the header only."""
    heads = list(headers) if headers is not None else [c.upper() for c in columns]
    texts = [[cell(r.get(c)) for c in columns] for r in rows]
    w = [max([len(h)] + [len(t[i]) for t in texts]) for i, h in enumerate(heads)]
    if widths is not None:
        if not widths:
            widths.extend(w)
        for i, x in enumerate(w):
            widths[i] = max(widths[i], x)
        w = widths
    right_set = set(right) | set(numeric_columns(rows, columns))
    lines = []
    for values in ([heads] if header else []) + texts:
        parts = []
        for i, (c, v) in enumerate(zip(columns, values, strict=True)):
            last = i == len(columns) - 1
            if c in right_set:
                parts.append(v.rjust(w[i]))
            else:
                parts.append(v if last else v.ljust(w[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def json_default(value: Any) -> Any:
    """JSON encoding of the non-JSON values commands emit: instants as ISO-8601 UTC, decimals as strings (exact),
    bytes as base64, numpy scalars as numbers."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return iso(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.timedelta):
        return int(value.total_seconds() * 1000)
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)


def dumps(data: Any, *, lines: bool = False) -> str:
    """The JSON text of a result: indented, or compact on one line (``lines``: one JSON Lines record). NaN and
    infinities print as ``NaN``/``Infinity`` (Python's and JavaScript's spelling), never rounded."""
    if lines:
        return json.dumps(data, default=json_default, separators=(",", ":"), ensure_ascii=False)
    return json.dumps(data, default=json_default, indent=2, ensure_ascii=False)


class Output:
    """Where a command writes: ``out`` for results, ``err`` for messages and progress."""

    def __init__(self, out: IO[str], err: IO[str], *, json_mode: bool, progress: bool | None) -> None:
        self.out = out
        self.err = err
        self.json_mode = json_mode
        self.show_progress = _isatty(err) if progress is None else progress

    def emit(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def emit_json(self, data: Any) -> None:
        self.emit(dumps(data))

    def emit_json_line(self, data: Any) -> None:
        """One compact JSON object on one line (JSON Lines: dump records, daemon events)."""
        self.emit(dumps(data, lines=True))

    def warn(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def progress(self, label: str, total: int | None = None, unit: str = "it") -> Progress:
        """A progress display on stderr (nothing unless progress is shown; see :class:`Progress`)."""
        return Progress(self.err if self.show_progress else None, label, total, unit)


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """Progress of long work on stderr. On a terminal, a ``tqdm`` bar redrawn in place; elsewhere (a log file, a
    pipe, CI) whole lines, at most one every ``LINE_EVERY_S`` seconds plus the last, so nothing is garbled by
    carriage returns. Writes nothing when ``stream`` is None. Call it as ``progress(n_done)``, tell it the total
    with :meth:`set_total` when known, and :meth:`close` it at the end."""

    LINE_EVERY_S = 2.0

    def __init__(self, stream: IO[str] | None, label: str, total: int | None = None, unit: str = "it") -> None:
        self.stream = stream
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._bar: Any = None
        self._last = 0.0
        self._closed = False
        if stream is not None and _isatty(stream):
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=label, unit=f" {unit}", file=stream, leave=True, dynamic_ncols=True)

    def set_total(self, total: int) -> None:
        self.total = total
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()

    def __call__(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.stream is not None:
            now = time.monotonic()
            if now - self._last >= self.LINE_EVERY_S:
                self._last = now
                self._line()

    def _line(self) -> None:
        assert self.stream is not None
        of = f"/{self.total}" if self.total is not None else ""
        self.stream.write(f"{self.label}: {self.done}{of} {self.unit}\n")
        self.stream.flush()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.stream is not None:
            self._line()
