"""Spark schema to Arrow schema, and the driver-side check that a DataFrame fits an existing topic.

A topic created by a Spark write gets the DataFrame's schema mapped the way Spark's own Arrow conversion maps it
(``TimestampType`` becomes ``timestamp[us, tz=UTC]``, ``TimestampNTZType`` ``timestamp[us]``, decimals
``decimal128``, arrays, maps and structs their Arrow counterparts), with Spark's nullability. Writing to an
existing topic needs the same column names; a column's type may differ only by a lossless widening (``int`` into
``bigint``, ``float`` into ``double``, a timestamp's time zone, string and binary offsets) or, for nested types,
where Arrow can cast the nested type. Each batch is then conformed to the topic's exact types by the executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from coordinator import SchemaMismatchError, TopicMeta

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["check_compatible", "match_columns", "nullable", "spark_to_arrow"]


def spark_to_arrow(schema: StructType) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType``, with Spark's nullability.

    Raises:
        SchemaMismatchError: a column's Spark type has no Arrow mapping txnlog can store (the message names it).
    """
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import VariantType

    for f in schema.fields:
        if isinstance(f.dataType, VariantType):
            raise SchemaMismatchError(f"column {f.name!r} has type variant, which txnlog topics cannot store")
    try:
        return to_arrow_schema(schema, timezone="UTC")
    except Exception as exc:  # pyspark raises several types for unsupported types
        raise SchemaMismatchError(f"the DataFrame schema {schema.simpleString()} has no Arrow mapping: {exc}") from exc


def _widens(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether values of type ``have`` fit type ``want`` without loss (so conforming a batch cannot fail)."""
    t = pa.types
    if have.equals(want):
        return True
    if t.is_integer(have) and t.is_integer(want):
        if t.is_signed_integer(have) and t.is_unsigned_integer(want):
            return False
        extra = 0 if t.is_signed_integer(have) == t.is_signed_integer(want) else 1
        return bool(have.bit_width + extra <= want.bit_width)
    if t.is_floating(have) and t.is_floating(want):
        return bool(have.bit_width <= want.bit_width)
    if t.is_integer(have) and t.is_floating(want):
        return bool(have.bit_width <= 32 and want.bit_width == 64)
    if t.is_timestamp(have) and t.is_timestamp(want):
        # Spark holds microseconds; a topic of nanoseconds (pandas' default) takes them exactly (years 1678-2262)
        units = ("s", "ms", "us", "ns")
        return (have.tz is None) == (want.tz is None) and units.index(have.unit) <= units.index(want.unit)
    if (t.is_string(have) or t.is_large_string(have)) and (t.is_string(want) or t.is_large_string(want)):
        return True
    if (t.is_binary(have) or t.is_large_binary(have)) and (t.is_binary(want) or t.is_large_binary(want)):
        return True
    if t.is_nested(have) and have.id == want.id:
        try:
            pa.array([], type=have).cast(want, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return False
        return True
    return False


def _fmt(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


def nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every column nullable: a topic a Spark write creates accepts nulls later, as Spark's own file
    sources do (a DataFrame's nullability says what it holds now, not what the topic will)."""
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def match_columns(have: pa.Schema, meta: TopicMeta) -> dict[str, str]:
    """DataFrame column -> topic column, matching names exactly or else case-insensitively as Spark resolves them.

    Raises:
        SchemaMismatchError: two DataFrame columns match one topic column ignoring case.
    """
    want = {f.name.lower(): f.name for f in meta.schema}
    out: dict[str, str] = {}
    taken: dict[str, str] = {}
    for f in have:
        target = f.name if meta.schema.get_field_index(f.name) >= 0 else want.get(f.name.lower(), f.name)
        if target in taken:
            raise SchemaMismatchError(
                f"DataFrame columns {taken[target]!r} and {f.name!r} both match column {target!r} of topic "
                f"{meta.name!r} (names are resolved case-insensitively)"
            )
        taken[target] = f.name
        out[f.name] = target
    return out


def check_compatible(have: pa.Schema, meta: TopicMeta) -> dict[str, str]:
    """Check, before any task runs, that data of schema ``have`` can be written to topic ``meta``.

    Column names match as Spark resolves them (case-insensitively when no exact match exists). A column the topic
    declares NOT NULL takes only a DataFrame column Spark also knows to hold no nulls.

    Returns:
        DataFrame column -> topic column (the renames the tasks apply).
    Raises:
        SchemaMismatchError: naming the missing, unexpected, mistyped and possibly-null columns and the topic's
            schema.
    """
    want = meta.schema
    renames = match_columns(have, meta)
    names = [renames[f.name] for f in have]
    missing = [f.name for f in want if f.name not in names]
    extra = [f.name for f in have if want.get_field_index(renames[f.name]) < 0]
    mistyped = [
        f"{f.name} ({f.type}, topic has {want.field(renames[f.name]).type})"
        for f in have
        if want.get_field_index(renames[f.name]) >= 0 and not _widens(f.type, want.field(renames[f.name]).type)
    ]
    nulls = [
        f.name for f in have
        if want.get_field_index(renames[f.name]) >= 0 and f.nullable and not want.field(renames[f.name]).nullable
    ]
    if missing or extra or mistyped or nulls:
        problems = []
        if missing:
            problems.append(f"missing columns {missing}")
        if extra:
            problems.append(f"unexpected columns {extra}")
        if mistyped:
            problems.append(f"mistyped columns {mistyped}")
        if nulls:
            problems.append(f"columns {nulls} may hold nulls but the topic declares them NOT NULL (filter the nulls "
                            "out and cast, e.g. coalesce, or write to a topic whose columns are nullable)")
        raise SchemaMismatchError(
            f"DataFrame schema {_fmt(have)} does not match topic {meta.name!r} schema {_fmt(want)}: "
            + "; ".join(problems)
        )
    return {k: v for k, v in renames.items() if k != v}
