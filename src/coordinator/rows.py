"""What the producer's ``send`` accepts as rows, and the rows' producer times: turning a list of dicts, a pandas
DataFrame or Arrow data into an Arrow table (a value that fits no column type is refused naming its column), and
splitting the producer times off it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from coordinator.errors import InvalidOptionError, SchemaMismatchError
from coordinator.segments import now_us
from coordinator.topics import TopicMeta

__all__ = ["producer_times", "to_table"]

#: What pyarrow raises when a Python or pandas value fits no Arrow type it can infer or was given.
_CONVERSION_ERRORS = (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def to_table(data: Any, meta: TopicMeta | None = None) -> pa.Table:
    """Accept an Arrow table or record batch, a pandas DataFrame, or a list of dicts. A list of dicts or a
    DataFrame whose values pyarrow cannot convert on its own (an integer beyond 64 bits, mixed types) is converted
    column by column, each column to the type topic ``meta`` gives it when ``meta`` has it (so a ``uint64`` column
    takes integers above ``2**63``).

    Raises:
        InvalidOptionError: anything else.
        SchemaMismatchError: a column's values fit no Arrow type (or not the topic's type for it); the message
            names the column and the first value that does not fit.
    """
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, list) and all(isinstance(r, Mapping) for r in data):
        try:
            return pa.Table.from_pylist(data)
        except _CONVERSION_ERRORS:
            names = list(dict.fromkeys(k for r in data for k in r))
            return _by_column({n: [r.get(n) for r in data] for n in names}, meta)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover
        pd = None
    if pd is not None and isinstance(data, pd.DataFrame):
        try:
            return pa.Table.from_pandas(data, preserve_index=False)
        except _CONVERSION_ERRORS:
            return _by_column({str(c): data[c] for c in data.columns}, meta, from_pandas=True)
    raise InvalidOptionError(
        f"send() takes a pyarrow Table or RecordBatch, a pandas DataFrame or a list of dicts, not {type(data).__name__}"
    )


def _by_column(columns: Mapping[str, Any], meta: TopicMeta | None, *, from_pandas: bool = False) -> pa.Table:
    """The table of ``columns`` converted one by one (to the topic's type where the topic has the column).

    Raises:
        SchemaMismatchError: naming the first column that does not convert.
    """
    arrays = []
    for name, values in columns.items():
        want = meta.schema.field(name).type if meta is not None and meta.schema.get_field_index(name) >= 0 else None
        try:
            arrays.append(pa.array(values, type=want, from_pandas=from_pandas))
        except _CONVERSION_ERRORS as exc:
            where = f"column {name!r}" + (f" of topic {meta.name!r}" if meta is not None else "")
            raise SchemaMismatchError(f"{where}: {_why(list(values), want, exc)}") from exc
    return pa.table(arrays, names=list(columns))


def _why(values: list[Any], want: pa.DataType | None, exc: BaseException) -> str:
    """Why ``values`` do not convert: the first integer out of the column type's range when there is one."""
    target = want if want is not None and pa.types.is_integer(want) else pa.int64()
    if want is None or pa.types.is_integer(want):
        bits = target.bit_width
        signed = pa.types.is_signed_integer(target)
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        for v in values:
            if isinstance(v, int) and not isinstance(v, bool) and not low <= v <= high:
                return f"value {v} is out of the range of {target} ({low} to {high})"
    return f"its values do not convert to {want if want is not None else 'one Arrow type'}: {exc}"


def producer_times(table: pa.Table, timestamp: dt.datetime | int | str | None,
                   keep: Sequence[str] = ()) -> tuple[pa.Table, int | pa.Array]:
    """Split the producer times off ``table`` as :func:`coordinator.segments.stamp` takes them: the time now
    (``None``), a timezone-aware datetime or epoch milliseconds for every row, or the values of the column named
    ``timestamp`` (timestamps, or integers as epoch milliseconds; nulls become the time now), which is dropped
    unless ``keep`` (the topic's columns) names it.

    Raises:
        InvalidOptionError: a naive datetime, a column the data lacks or of another type, or another kind of value.
    """
    if timestamp is None:
        return table, now_us()
    if isinstance(timestamp, dt.datetime):
        if timestamp.tzinfo is None:
            raise InvalidOptionError(f"timestamp {timestamp!r} has no time zone; give an aware datetime")
        return table, (timestamp - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        return table, timestamp * 1000
    if isinstance(timestamp, str):
        idx = table.schema.get_field_index(timestamp)
        if idx < 0:
            raise InvalidOptionError(f"timestamp column {timestamp!r} is not a column of the data")
        col = table.column(idx).combine_chunks()
        if pa.types.is_integer(col.type):
            col = col.cast(pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        elif not pa.types.is_timestamp(col.type):
            raise InvalidOptionError(f"timestamp column {timestamp!r} is {col.type}, not a timestamp or epoch ms")
        return (table if timestamp in keep else table.remove_column(idx)), col
    raise InvalidOptionError(f"timestamp must be a datetime, epoch milliseconds or a column name, not {timestamp!r}")
