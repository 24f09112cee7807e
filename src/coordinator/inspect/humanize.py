"""Values for people: durations, sizes and instants as every txnlog view shows them (the command line and the
notebook views share these, so both say ``35.2 KiB`` and ``2026-11-21T10:00:01.123Z``; the command line reads
durations and sizes back in the same forms, see :mod:`coordinator.units`)."""

from __future__ import annotations

import datetime as dt

from coordinator.units import fmt_duration, fmt_size

fmt_age = fmt_duration
"""A duration in ms as a short human string (``850ms``, ``12.5s``, ``4m05s``, ``3h12m``, ``2d04h``): see
:func:`coordinator.units.fmt_duration`, which reads it back."""
fmt_bytes = fmt_size
"""A byte count in binary units (``512 B``, ``1.5 KiB``, ``64.0 MiB``): see :func:`coordinator.units.fmt_size`."""


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
