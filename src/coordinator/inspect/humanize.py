"""Values for people: durations, sizes and instants as every txnlog view shows them (the command line and the
notebook views share these, so both say ``35.2 KiB`` and ``2026-11-21T10:00:01.123Z``)."""

from __future__ import annotations

import datetime as dt


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
    """A byte count in binary units (``512 B``, ``1.5 KiB``, ``64.0 MiB``): the one unit style of every command."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def iso(value: dt.datetime | dt.date | dt.time) -> str:
    """ISO-8601; an aware datetime in UTC with a ``Z`` (milliseconds when it has no finer part)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
        spec = "milliseconds" if value.microsecond % 1000 == 0 else "microseconds"
        return value.replace(tzinfo=None).isoformat(timespec=spec) + "Z"
    return value.isoformat()


def human(column: str, value: object) -> str:
    """One value of a view's row as people read it, by its column's vocabulary (see
    :mod:`coordinator.inspect.common`): instants in ISO-8601 UTC, ``*_ms`` durations and ``bytes`` in human units,
    lists joined, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return iso(value)
    if column.endswith("_ms") and isinstance(value, (int, float)):
        return fmt_age(value)
    if column == "bytes" and isinstance(value, int):
        return fmt_bytes(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)
