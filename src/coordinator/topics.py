"""Topics: a name, an Arrow schema, a partition count and a config, kept as versioned JSON in the store.

A topic's definition lives in ``topics/<name>/meta/<version>.json``; creating a topic is a conditional create of
version 0, so two processes creating the same topic at once agree on one definition. Adding partitions writes the
next version. The schema is kept as Arrow IPC bytes (base64) plus a readable field list.

Every definition written carries a fresh writer token, so a conditional create that finds equal bytes is this
writer's own (a retried write), never another writer's identical definition (see :mod:`coordinator.store`): a
deleted topic's ``meta/0.json`` stays, and re-creating its name with the same schema must lose, not "win" and
send writes into a topic no reader sees.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

from coordinator.clock import store_now_ms
from coordinator.errors import (
    CorruptLogError,
    InvalidOptionError,
    SchemaMismatchError,
    TopicExistsError,
    TopicNotFoundError,
)
from coordinator.layout import TOPICS, check_name, topic_meta_dir, topic_meta_path
from coordinator.partitioner import CONFIG_KEY as PARTITIONER_KEY
from coordinator.partitioner import CURRENT as CURRENT_PARTITIONER
from coordinator.partitioner import check_partitioner
from coordinator.records import decode_json, encode_json
from coordinator.store import Store

MAX_PARTITIONS = 10_000
#: A deleted topic's ``meta/`` folder holds this marker: the topic is gone for readers and writers, and its name is
#: not reused (the transaction log still holds its partitions' offsets). See :mod:`coordinator.topic_admin`.
DELETED_MARKER = "deleted.json"


@dataclass(frozen=True)
class TopicMeta:
    """A topic's definition. ``token`` is the writer token of the definition file (empty for definitions not
    written yet, and for those written before tokens existed); it takes no part in equality."""

    name: str
    partitions: int
    schema: pa.Schema
    config: Mapping[str, str] = field(default_factory=dict)
    version: int = 0
    created_ms: int = 0
    token: str = field(default="", compare=False)

    def to_bytes(self) -> bytes:
        return encode_json(
            {
                "v": 1,
                "name": self.name,
                "partitions": self.partitions,
                "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
                "fields": [{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.schema],
                "config": dict(self.config),
                "version": self.version,
                "created_ms": self.created_ms,
                "token": self.token,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> TopicMeta:
        d = decode_json(data, where, "topic definition")
        try:
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
            return cls(
                name=str(d["name"]),
                partitions=int(d["partitions"]),
                schema=schema,
                config={str(k): str(v) for k, v in d.get("config", {}).items()},
                version=int(d["version"]),
                created_ms=int(d.get("created_ms", 0)),
                token=str(d.get("token", "")),
            )
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as exc:
            raise CorruptLogError(f"topic definition {where} is corrupt: {exc}") from exc


def create_definition(store: Store, meta: TopicMeta) -> TopicMeta | None:
    """Conditionally create definition version ``meta.version`` of topic ``meta.name``, stamped with a fresh
    writer token. Returns the definition as written if this call created it; None if the version exists (even with
    the same content: that is another writer's definition, or a deleted topic's).

    Raises:
        CommitStateUnknownError: the create may or may not have happened.
        StoreError: the store failed.
    """
    mine = replace(meta, token=uuid.uuid4().hex)
    return mine if store.put_if_absent(topic_meta_path(meta.name, meta.version), mine.to_bytes()) else None


def _check_partitions(n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_PARTITIONS:
        raise InvalidOptionError(f"numPartitions must be an integer from 1 to {MAX_PARTITIONS}, got {n!r}")
    return n


def _latest_version(names: list[str]) -> int | None:
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions) if versions else None


def get_topic(store: Store, name: str) -> TopicMeta:
    """The latest definition of topic ``name``.

    Raises:
        InvalidNameError: the name is not a valid topic name.
        TopicNotFoundError: no such topic (or it was deleted).
        CorruptLogError: the definition file cannot be decoded.
    """
    check_name("topic", name)
    names = store.list(topic_meta_dir(name))
    if DELETED_MARKER in names:
        raise TopicNotFoundError(f"topic {name!r} was deleted from {store.url} (a deleted topic's name is not "
                                 "reused: write to a topic of another name)")
    version = _latest_version(names)
    if version is None:
        raise TopicNotFoundError(f"topic {name!r} does not exist in {store.url}")
    path = topic_meta_path(name, version)
    return TopicMeta.from_bytes(store.get(path), path)


def check_not_deleted(store: Store, name: str) -> None:
    """Refuse a write to topic ``name`` if it was deleted since the writer read its definition (one read of the
    deleted marker).

    Raises:
        TopicNotFoundError: the topic was deleted, naming it.
        StoreError: the store failed.
    """
    if store.exists(f"{topic_meta_dir(name)}/{DELETED_MARKER}"):
        raise TopicNotFoundError(
            f"topic {name!r} was deleted from {store.url} after this writer read its definition; nothing was "
            "committed (a deleted topic's name is not reused: write to a topic of another name)")


def list_topics(store: Store) -> list[str]:
    """Names of the topics in the store, sorted (deleted topics left out)."""
    out = []
    for n in store.list_dirs(TOPICS):
        names = store.list(topic_meta_dir(n))
        if names and DELETED_MARKER not in names:
            out.append(n)
    return out


def create_topic(
    store: Store,
    name: str,
    schema: pa.Schema,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    *,
    exist_ok: bool = False,
    created_ms: int | None = None,
) -> TopicMeta:
    """Create topic ``name``; with ``exist_ok``, return the existing definition if its schema is the same. The
    name of a deleted topic is never reused: creating it again is refused (its offsets are still in the log).
    ``created_ms`` is the creation time the definition records (default: now, on the store's clock).

    The config records the key partitioner (entry ``partitioner``, :data:`coordinator.partitioner.CURRENT` unless
    ``config`` names one), so keyed writes place keys the same way for the topic's whole life.

    Raises:
        InvalidNameError, InvalidOptionError: bad name, partition count or partitioner.
        TopicExistsError: the topic exists (and ``exist_ok`` is false, or its schema differs), or was deleted.
    """
    check_name("topic", name)
    _check_partitions(partitions)
    for f in schema:
        if f.name.startswith("_"):
            raise InvalidOptionError(
                f"column {f.name!r}: names starting with '_' are reserved for metadata columns"
            )
    cfg = dict(config or {})
    check_partitioner(cfg)
    cfg.setdefault(PARTITIONER_KEY, CURRENT_PARTITIONER)
    from coordinator.probe import probe_conditional_writes
    from coordinator.txnlog import ensure_format

    probe_conditional_writes(store)
    ensure_format(store)
    if created_ms is None:
        created_ms = store_now_ms(store)
    created = create_definition(store, TopicMeta(name, partitions, schema, cfg, 0, created_ms))
    if created is not None:
        return created
    try:
        existing = get_topic(store, name)
    except TopicNotFoundError:
        raise TopicExistsError(
            f"topic {name!r} was deleted and its name is not reused (the transaction log still holds its offsets); "
            "choose another name"
        ) from None
    if exist_ok and existing.schema.equals(schema):
        return existing
    if exist_ok:
        raise TopicExistsError(
            f"topic {name!r} exists with schema {_fmt(existing.schema)}, not {_fmt(schema)}"
        )
    raise TopicExistsError(f"topic {name!r} already exists")


def add_partitions(store: Store, name: str, total: int) -> TopicMeta:
    """Grow topic ``name`` to ``total`` partitions (never shrinks).

    Raises:
        InvalidOptionError: ``total`` is below the current count.
        TopicNotFoundError: no such topic.
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
    """
    from coordinator.probe import probe_conditional_writes

    _check_partitions(total)
    probe_conditional_writes(store)
    while True:
        cur = get_topic(store, name)
        if total < cur.partitions:
            raise InvalidOptionError(f"topic {name!r} has {cur.partitions} partitions; cannot shrink to {total}")
        if total == cur.partitions:
            return cur
        new = create_definition(store, TopicMeta(name, total, cur.schema, cur.config, cur.version + 1,
                                                 cur.created_ms))
        if new is not None:
            return new


def _fmt(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


def conform(table: pa.Table, meta: TopicMeta) -> pa.Table:
    """Return ``table`` with the topic's column order and exact types.

    Columns must match by name; a type may differ only where a safe cast exists (int32 into int64, say). Nulls in
    a non-nullable column are refused.

    Raises:
        SchemaMismatchError: naming the missing, extra or mistyped columns.
    """
    want = meta.schema
    have = {f.name: f for f in table.schema}
    missing = [f.name for f in want if f.name not in have]
    extra = [n for n in have if want.get_field_index(n) < 0]
    if missing or extra:
        raise SchemaMismatchError(
            f"data for topic {meta.name!r} does not match its schema {_fmt(want)}: "
            f"missing columns {missing}, unexpected columns {extra}"
        )
    cols = []
    for f in want:
        col = table.column(f.name)
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"column {f.name!r} of topic {meta.name!r} is {f.type}, data has {have[f.name].type}"
                ) from exc
        if not f.nullable and col.null_count:
            raise SchemaMismatchError(f"column {f.name!r} of topic {meta.name!r} is not nullable but has nulls")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=want)
