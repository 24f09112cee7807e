"""Shared pieces of the ``txnlog`` command line: exit codes, errors, output (aligned tables or JSON) and progress.

Exit codes (documented in ``docs/cli.md``; scripts rely on them):

* ``0`` ok;
* ``1`` problems found, or the operation could not be done (corrupt files, an in-doubt transaction left, ...);
* ``2`` usage error or invalid option;
* ``3`` a named topic, group or transaction does not exist;
* ``4`` the store failed (unreachable, refused, no conditional writes).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from coordinator.errors import (
    CommitStateUnknownError,
    InvalidOptionError,
    StoreError,
    TopicNotFoundError,
    TxnLogError,
)

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_STORE = 4


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
    from coordinator.inspect import GroupNotFoundError

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


def fmt_age(ms: int | float | None) -> str:
    """A duration in ms as a short human string (``850ms``, ``12.5s``, ``4m05s``, ``3h12m``, ``2d04h``)."""
    if ms is None:
        return "-"
    if ms < 0:
        return "-" + fmt_age(-ms)
    if ms < 1000:
        return f"{int(ms)}ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s"
    m, s = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def fmt_bytes(n: int | None) -> str:
    """A byte count in binary units (``512 B``, ``1.5 KiB``, ``64.0 MiB``)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def fmt_ts(ms: int | None) -> str:
    """Epoch milliseconds as ISO-8601 UTC with millisecond precision."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def cell(value: Any) -> str:
    """How one value is shown in a human table."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:g}"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex() if len(value) <= 16 else bytes(value[:16]).hex() + "..."
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=json_default, separators=(",", ":"))
    return str(value)


def render_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None,
                 *, right: Iterable[str] = ()) -> str:
    """An aligned text table: one header line, one line per row; columns named in ``right`` are right-aligned.
    Empty ``rows`` give the header only."""
    heads = list(headers) if headers is not None else [c.upper() for c in columns]
    texts = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(h)] + [len(t[i]) for t in texts]) for i, h in enumerate(heads)]
    right_set = set(right)
    lines = []
    for values in [heads, *texts]:
        parts = []
        for i, (c, v) in enumerate(zip(columns, values, strict=True)):
            last = i == len(columns) - 1
            if c in right_set:
                parts.append(v.rjust(widths[i]))
            else:
                parts.append(v if last else v.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def json_default(value: Any) -> Any:
    """JSON encoding of the non-JSON values commands emit (timestamps, bytes, decimals, numpy scalars)."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def dumps(data: Any) -> str:
    """The JSON text of a command's result (indented, keys in insertion order)."""
    return json.dumps(data, default=json_default, indent=2)


class Output:
    """Where a command writes: ``out`` for results, ``err`` for messages and progress."""

    def __init__(self, out: IO[str], err: IO[str], *, json_mode: bool, progress: bool | None) -> None:
        self.out = out
        self.err = err
        self.json_mode = json_mode
        self.show_progress = bool(err.isatty()) if progress is None else progress

    def emit(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def emit_json(self, data: Any) -> None:
        self.emit(dumps(data))

    def emit_json_line(self, data: Any) -> None:
        """One compact JSON object on one line (streams of events, such as daemon sweeps)."""
        self.emit(json.dumps(data, default=json_default, separators=(",", ":")))

    def warn(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def progress(self, label: str, total: int | None = None) -> Progress:
        return Progress(self.err if self.show_progress else None, label, total)


class Progress:
    """A one-line progress counter on stderr (``verify: 120/400 segments``), redrawn at most ten times a second.
    Writes nothing when ``stream`` is None. Call it as ``progress(n_done)`` and :meth:`close` at the end."""

    def __init__(self, stream: IO[str] | None, label: str, total: int | None = None) -> None:
        self.stream = stream
        self.label = label
        self.total = total
        self.done = 0
        self._last = 0.0
        self._drawn = False

    def set_total(self, total: int) -> None:
        self.total = total

    def __call__(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.stream is not None and (now - self._last >= 0.1 or self.done == self.total):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        assert self.stream is not None
        if self.total:
            width = 24
            filled = int(width * min(self.done, self.total) / self.total)
            bar = "#" * filled + "." * (width - filled)
            text = f"\r{self.label} [{bar}] {self.done}/{self.total}"
        else:
            text = f"\r{self.label} {self.done}"
        self.stream.write(text)
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.stream is not None:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()


def stdout_stderr() -> tuple[IO[str], IO[str]]:
    """The process's current stdout and stderr (looked up at call time so captured streams work)."""
    return sys.stdout, sys.stderr
