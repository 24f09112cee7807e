"""The read schema, and shaping record batches to it.

One topic reads as its own columns followed by the metadata columns of
:data:`coordinator.reader.METADATA_FIELDS`. Several topics read as the **union by name** of their columns, in the
order of first appearance: a column some topic lacks is null in that topic's rows (and so becomes nullable); a
column two topics type differently is an error naming both. Batches that ``read()`` yields are cast to the exact
Arrow form of the Spark schema (types and nullability), which Spark requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from coordinator.errors import SchemaMismatchError
from coordinator.reader import METADATA_FIELDS, METADATA_NAMES
from coordinator.segments import HEADERS

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from coordinator.topics import TopicMeta


def union_schema(metas: Sequence[TopicMeta]) -> pa.Schema:
    """The Arrow read schema of ``metas``: their columns united by name, then the metadata columns.

    Raises:
        SchemaMismatchError: two topics give one column different types.
    """
    fields: dict[str, pa.Field] = {}
    owner: dict[str, str] = {}
    for meta in metas:
        for f in meta.schema:
            have = fields.get(f.name)
            if have is None:
                fields[f.name] = f
                owner[f.name] = meta.name
            elif not have.type.equals(f.type):
                raise SchemaMismatchError(
                    f"column {f.name!r} is {have.type} in topic {owner[f.name]!r} but {f.type} in topic "
                    f"{meta.name!r}; read the topics separately"
                )
            elif f.nullable and not have.nullable:
                fields[f.name] = have.with_nullable(True)
    for name in fields:
        if any(m.schema.get_field_index(name) < 0 for m in metas):
            fields[name] = fields[name].with_nullable(True)
    return pa.schema(list(fields.values()) + list(METADATA_FIELDS))


def to_spark_schema(schema: pa.Schema) -> StructType:
    """The Spark form of an Arrow read schema (timezone-less timestamps become ``TimestampNTZType``).

    Raises:
        SchemaMismatchError: a column's Arrow type has no Spark equivalent.
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        return from_arrow_schema(schema)
    except Exception as exc:  # pyspark raises its own PySparkTypeError (among others) for unsupported types
        raise SchemaMismatchError(f"a topic column has no Spark type: {exc}") from exc


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects of batches for ``schema`` (what ``read()`` must yield exactly)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``target``'s columns (by name), types and nullability; missing columns are null.

    Raises:
        SchemaMismatchError: a missing or null-holding column is declared non-nullable, or a value cannot be
            represented in the target type.
    """
    if batch.schema.equals(target):
        return batch
    arrays = []
    n = batch.num_rows
    for f in target:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            if not f.nullable and n:
                raise SchemaMismatchError(f"column {f.name!r} is not nullable but this topic has no such column")
            arrays.append(pa.nulls(n, f.type))
            continue
        col = batch.column(idx)
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=not pa.types.is_timestamp(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(f"column {f.name!r} ({col.type}) cannot be read as {f.type}: {exc}") \
                    from exc
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(f"column {f.name!r} is declared not nullable but holds nulls")
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def check_projection(names: Sequence[str], metas: Sequence[TopicMeta]) -> None:
    """Check that every column a (user-given) read schema names is a metadata column or a column of one of the
    topics read; a user-given schema is a projection, so a misspelt name must fail rather than read as nulls.

    Raises:
        SchemaMismatchError: naming the first unknown column and the topics.
    """
    known = {*METADATA_NAMES, HEADERS}.union(*(m.schema.names for m in metas))
    for name in names:
        if name not in known:
            topics = ", ".join(repr(m.name) for m in metas)
            raise SchemaMismatchError(f"column {name!r} of the given schema is in none of the topics read ({topics})")


def is_metadata(name: str) -> bool:
    """Whether ``name`` is one of the metadata columns."""
    return name in METADATA_NAMES
