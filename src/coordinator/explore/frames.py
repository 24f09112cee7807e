"""The DataFrames of :mod:`coordinator.explore` as a notebook shows them: :class:`Frame` is a pandas DataFrame (the
values and dtypes stay what the explore vocabulary says) whose HTML shows values for people, as the command line
does: durations as ``1.6s`` rather than ``0 days 00:00:01.624000``, instants in ISO-8601 UTC, one marker (``-``)
for every kind of missing value (None, NaN, NaT, <NA>), text left-aligned and numbers right-aligned."""

from __future__ import annotations

from typing import Any

import pandas as pd
from pandas.api.types import is_bool_dtype, is_datetime64_any_dtype, is_numeric_dtype, is_timedelta64_dtype

from coordinator.inspect.humanize import fmt_age, iso

#: What every missing value shows as (the command line's and the HTML tables' marker too).
MISSING = "-"


def _missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list-like cell: not a missing scalar
        return False


def _cell(value: Any, kind: str) -> str:
    if _missing(value):
        return MISSING
    if kind == "duration":
        return fmt_age(value / pd.Timedelta(milliseconds=1))
    if kind == "instant":
        return iso(pd.Timestamp(value).to_pydatetime())
    if isinstance(value, float):
        return str(round(value, 6))
    return str(value)


def _kind(series: pd.Series) -> str:
    dtype = series.dtype
    if is_timedelta64_dtype(dtype):
        return "duration"
    if is_datetime64_any_dtype(dtype):
        return "instant"
    if is_numeric_dtype(dtype) and not is_bool_dtype(dtype):
        return "number"
    return "text"


def frame_html(df: pd.DataFrame) -> str:
    """``df`` as HTML for people (see the module docstring); longer than pandas' ``display.max_rows``, its first
    and last ``display.min_rows // 2`` rows and a line giving its size, as pandas shows a long frame."""
    shown = df
    truncated = len(df) > (pd.get_option("display.max_rows") or len(df))
    if truncated:
        half = max(1, (pd.get_option("display.min_rows") or 10) // 2)
        shown = pd.concat([df.iloc[:half], df.iloc[-half:]])
    shown = pd.DataFrame(shown)
    kinds = {c: _kind(shown[c]) for c in shown.columns}
    styler = shown.style.format({c: (lambda v, k=k: _cell(v, k)) for c, k in kinds.items()})
    styler = styler.format_index(lambda v: MISSING if _missing(v) else str(v), axis=0)
    text = [c for c, k in kinds.items() if k == "text"]
    others = [c for c, k in kinds.items() if k != "text"]
    if text:
        styler = styler.set_properties(subset=text, **{"text-align": "left"})
    if others:
        styler = styler.set_properties(subset=others, **{"text-align": "right"})
    heads = [{"selector": f"th.col_heading.col{shown.columns.get_loc(c)}", "props": "text-align: left"}
             for c in text]
    styler = styler.set_table_styles([*heads, {"selector": "th.row_heading", "props": "text-align: left"}],
                                     overwrite=False)
    out = styler.to_html()
    if truncated:
        out += f"<p>{len(df)} rows × {len(df.columns)} columns (first and last {len(shown) // 2} shown)</p>"
    return out


class Frame(pd.DataFrame):
    """A pandas DataFrame that shows itself in a notebook as :func:`frame_html` renders it; everything else, and
    what pandas operations derive from it, is the DataFrame's."""

    @property
    def _constructor(self) -> type[Frame]:
        return Frame

    def _repr_html_(self) -> str:
        return frame_html(self)
