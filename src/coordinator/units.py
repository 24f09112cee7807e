"""Durations and sizes in one syntax, read and written: what txnlog prints is what it accepts.

Durations: one or more ``<number><unit>`` parts, units ``ms``, ``s``, ``m`` (or ``min``), ``h``, ``d``, ``w``
(``850ms``, ``12.5s``, ``15m``, ``4m05s``, ``2d04h``, ``1d``); a plain number is in the caller's default unit
(seconds for ``--grace`` and ``--interval``, milliseconds for ``retention.ms``), so older inputs keep working.
:func:`fmt_duration` prints the same forms.

Sizes: a number with an optional unit, binary ``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB`` or decimal ``kB``/``KB``,
``MB``, ``GB``, ``TB``, with or without a space (``64MiB``, ``35.2 KiB``, ``512 B``); a plain number is bytes.
:func:`fmt_size` prints binary units.

Parsers raise :class:`~coordinator.errors.InvalidOptionError` naming the option (``what``) and the text.
"""

from __future__ import annotations

import math
import re

from coordinator.errors import InvalidOptionError

__all__ = ["DURATION_UNITS_MS", "SIZE_UNITS", "fmt_duration", "fmt_size", "parse_duration_ms", "parse_size"]

#: Duration units and their length in milliseconds.
DURATION_UNITS_MS: dict[str, int] = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000,
                                     "d": 86_400_000, "w": 7 * 86_400_000}
#: Size units and their length in bytes (matched case-sensitively, except ``kB``/``KB``).
SIZE_UNITS: dict[str, int] = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
                              "kB": 1000, "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4}

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*(ms|min|s|m|h|d|w)", re.IGNORECASE)
_PLAIN = re.compile(rf"\s*({_NUMBER})\s*")
_SIZE = re.compile(rf"\s*({_NUMBER})\s*([A-Za-z]*)\s*")


def parse_duration_ms(text: str | int | float, *, what: str, default_unit: str = "ms", zero_ok: bool = False) -> int:
    """The duration ``text`` in whole milliseconds (rounded). A plain number (or an int/float) is in
    ``default_unit`` (a key of :data:`DURATION_UNITS_MS`).

    Raises:
        InvalidOptionError: not a duration, negative, or zero without ``zero_ok``; names ``what``.
    """
    unit_ms = DURATION_UNITS_MS[default_unit]
    kind = "non-negative" if zero_ok else "positive"
    hint = f"{what} must be a {kind} duration such as 15m, 1h, 1d, 4m05s or a number of {_unit_name(default_unit)}"
    if isinstance(text, bool):
        raise InvalidOptionError(f"{hint}, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text) * unit_ms
    else:
        s = str(text).strip()
        plain = _PLAIN.fullmatch(s)
        if plain:
            value = float(plain.group(1)) * unit_ms
        else:
            pos, value = 0, 0.0
            for m in _DURATION_PART.finditer(s):
                if m.start() != pos:
                    break
                value += float(m.group(1)) * DURATION_UNITS_MS[m.group(2).lower()]
                pos = m.end()
            if pos == 0 or s[pos:].strip():
                raise InvalidOptionError(f"{hint}, got {text!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise InvalidOptionError(f"{hint}, got {text!r}")
    return int(round(value))


def parse_size(text: str | int | float, *, what: str, zero_ok: bool = False) -> int:
    """The size ``text`` in whole bytes (rounded). A plain number is bytes.

    Raises:
        InvalidOptionError: not a size, negative, or zero without ``zero_ok``; names ``what``.
    """
    kind = "non-negative" if zero_ok else "positive"
    hint = f"{what} must be a {kind} size such as 64MiB, 512 KiB or a number of bytes"
    if isinstance(text, bool):
        raise InvalidOptionError(f"{hint}, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _SIZE.fullmatch(str(text))
        unit = None if m is None else SIZE_UNITS.get(m.group(2) or "B")
        if m is None or unit is None:
            raise InvalidOptionError(f"{hint}, got {text!r}")
        value = float(m.group(1)) * unit
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise InvalidOptionError(f"{hint}, got {text!r}")
    return int(round(value))


def _unit_name(unit: str) -> str:
    return {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours", "d": "days"}.get(unit, unit)


def fmt_duration(ms: int | float | None) -> str:
    """A duration in ms as a short string :func:`parse_duration_ms` reads back (``850ms``, ``12.5s``, ``4m05s``,
    ``3h12m``, ``2d04h``); ``-`` for None."""
    if ms is None:
        return "-"
    if ms < 0:
        return "-" + fmt_duration(-ms)
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


def fmt_size(n: int | None) -> str:
    """A byte count in binary units (``512 B``, ``1.5 KiB``, ``64.0 MiB``) that :func:`parse_size` reads back;
    ``-`` for None."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover
