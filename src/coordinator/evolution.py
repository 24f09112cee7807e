"""Schema evolution (Delta's ``mergeSchema``): a write may add nullable columns to a topic and widen a column's
numeric type; the topic gets a new definition version (every version stays in ``topics/<name>/meta/``).

A column added this way carries the field metadata :data:`ADDED_IN` (the version that added it), so readers of
segments written before it, which lack the column, read nulls there; a segment lacking a column the topic declared
from the start is still corrupt. A widened column is read from older segments by a lossless cast: integers to a
wider integer (signed to signed, or unsigned to signed or unsigned), integers of at most 32 bits and floats to a
wider float. Nothing else changes: no column is dropped, renamed, narrowed or made NOT NULL.
"""

from __future__ import annotations

import pyarrow as pa

from coordinator.errors import InvalidOptionError
from coordinator.store import Store
from coordinator.topics import TopicMeta, create_definition, get_topic

#: Field metadata key of a column added by schema evolution: the topic definition version that added it.
ADDED_IN = b"txnlog.addedInVersion"


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether a topic column of type ``old`` may become ``new``: every stored value reads exactly as ``new``."""
    t = pa.types
    if t.is_integer(old) and t.is_integer(new):
        if t.is_signed_integer(old) and t.is_unsigned_integer(new):
            return False
        extra = 0 if t.is_signed_integer(old) == t.is_signed_integer(new) else 1
        return bool(old.bit_width + extra <= new.bit_width) and not old.equals(new)
    if t.is_floating(new) and (t.is_floating(old) or t.is_integer(old)):
        limit = new.bit_width if t.is_floating(old) else 32
        return bool(old.bit_width < new.bit_width and old.bit_width <= limit) and new.bit_width == 64
    return False


def merged_schema(meta: TopicMeta, schema: pa.Schema) -> pa.Schema | None:
    """``meta``'s schema with ``schema``'s new columns (matched case-insensitively, appended nullable) and widened
    types; None when ``schema`` needs no change. A column whose type neither equals nor widens the topic's is left
    as it is: the write's own compatibility check reports it.

    Raises:
        InvalidOptionError: a new column's name is reserved (starts with ``_``).
    """
    by_lower = {f.name.lower(): f for f in meta.schema}
    changed: dict[str, pa.Field] = {}
    added: list[pa.Field] = []
    for f in schema:
        have = meta.schema.field(f.name) if meta.schema.get_field_index(f.name) >= 0 \
            else by_lower.get(f.name.lower())
        if have is None:
            if f.name.startswith("_"):
                raise InvalidOptionError(f"column {f.name!r} cannot be added to topic {meta.name!r}: names starting "
                                         "with '_' are reserved")
            added.append(pa.field(f.name, f.type, nullable=True,
                                  metadata={ADDED_IN: str(meta.version + 1).encode()}))
        elif widens(have.type, f.type):
            changed[have.name] = have.with_type(f.type)
    if not added and not changed:
        return None
    return pa.schema([changed.get(f.name, f) for f in meta.schema] + added, metadata=meta.schema.metadata)


def evolve_schema(store: Store, name: str, schema: pa.Schema) -> TopicMeta:
    """Merge ``schema`` into topic ``name`` (see :func:`merged_schema`), writing the next definition version with a
    conditional create; a concurrent change is merged into in turn. Returns the definition to write with.

    Raises:
        InvalidOptionError: as :func:`merged_schema`.
        TopicNotFoundError: no such topic.
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
    """
    from coordinator.probe import probe_conditional_writes

    while True:
        cur = get_topic(store, name)
        merged = merged_schema(cur, schema)
        if merged is None:
            return cur
        probe_conditional_writes(store)
        new = create_definition(store, TopicMeta(name, cur.partitions, merged, cur.config, cur.version + 1,
                                                 cur.created_ms))
        if new is not None:
            return new
