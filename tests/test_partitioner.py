"""The key partitioners (``coordinator.partitioner``): the vectorised ``txnlog-v2`` against a plain-Python reading
of its specification, its fixed placement of known values, the legacy placement of topics that name no
partitioner, and the producer's use of both."""

from __future__ import annotations

import datetime as dt
import math
import struct
import uuid
import zlib
from collections.abc import Iterator
from decimal import Decimal, localcontext
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator import (
    Consumer,
    InvalidOptionError,
    MemoryStore,
    Producer,
    Store,
    TopicMeta,
    add_partitions,
    create_topic,
    get_topic,
    hash_partition,
    open_store,
)
from coordinator import partitioner as part
from coordinator.layout import topic_meta_path
from coordinator.partitioner import CURRENT, LEGACY, hash_columns, partition_for, partitioner_of

MASK = (1 << 64) - 1


# -- the specification, read literally, one value at a time --------------------------------------------------


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    return h ^ (h >> 33)


def words_of(value: Any, typ: pa.DataType) -> list[int]:
    """The 64-bit words of one non-null value, as the module docstring defines them."""
    t = pa.types
    if t.is_boolean(typ):
        return [int(value)]
    if t.is_floating(typ):
        f = float(value)
        f = 0.0 if f == 0.0 else (math.nan if math.isnan(f) else f)
        return [struct.unpack("<Q", struct.pack("<d", f))[0]]
    if t.is_integer(typ):
        return [int(value) & MASK]
    if t.is_decimal(typ):
        with localcontext() as ctx:
            ctx.prec = 100
            unscaled = int(Decimal(value).scaleb(typ.scale))
        nwords = max(1, typ.bit_width // 64)
        return [(unscaled >> (64 * i)) & MASK for i in range(nwords)]
    if t.is_string(typ) or t.is_large_string(typ) or t.is_binary(typ) or t.is_large_binary(typ) \
            or t.is_fixed_size_binary(typ):
        data = value.encode() if isinstance(value, str) else bytes(value)
        poly = sum(b * pow(part.BYTE_MULTIPLIER, i, 1 << 64) for i, b in enumerate(data)) & MASK
        return [poly, len(data)]
    raise AssertionError(f"no reference rule for {typ}")


def ref_value_hash(value: Any, typ: pa.DataType) -> int:
    if value is None:
        return part.NULL_HASH
    h = part.SEED
    for w in words_of(value, typ):
        h = fmix64(h ^ w)
    return h


def ref_column(col: pa.ChunkedArray | pa.Array) -> list[int]:
    typ = col.type
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
        col = col.cast(typ)
    if pa.types.is_temporal(typ):
        # dates, times, timestamps, durations: their integer value in the column's own unit
        ints = col.cast(pa.int32() if typ.bit_width == 32 else pa.int64()).to_pylist()
        return [ref_value_hash(v, pa.int64()) for v in ints]
    return [ref_value_hash(v, typ) for v in col.to_pylist()]


def ref_rows(table: pa.Table, columns: list[str]) -> list[int]:
    rows = [part.SEED] * table.num_rows
    for name in columns:
        for i, c in enumerate(ref_column(table.column(name))):
            rows[i] = fmix64((rows[i] * part.ROW_MULTIPLIER + c) & MASK)
    return rows


# -- data --------------------------------------------------------------------------------------------------------

TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "int8": (pa.int8(), st.integers(-128, 127)),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "int64": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "uint16": (pa.uint16(), st.integers(0, 2**16 - 1)),
    "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "float32": (pa.float32(), st.floats(width=32, allow_nan=True)),
    "float64": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=40)),
    "large_string": (pa.large_string(), st.text(max_size=40)),
    "binary": (pa.binary(), st.binary(max_size=40)),
    "fixed_binary": (pa.binary(3), st.binary(min_size=3, max_size=3)),
    "decimal": (pa.decimal128(12, 2), st.decimals(-(10**9), 10**9, places=2, allow_nan=False)),
    "decimal256": (pa.decimal256(40, 3), st.decimals(-(10**30), 10**30, places=3, allow_nan=False)),
    "date32": (pa.date32(), st.dates()),
    "date64": (pa.date64(), st.dates()),
    "timestamp_us": (pa.timestamp("us", tz="UTC"),
                     st.datetimes(timezones=st.just(dt.UTC), min_value=dt.datetime(1, 1, 2))),
    "timestamp_ns": (pa.timestamp("ns"),
                     st.datetimes(min_value=dt.datetime(1700, 1, 1), max_value=dt.datetime(2200, 1, 1))),
    "time64": (pa.time64("us"), st.times()),
    "duration": (pa.duration("ms"), st.timedeltas(min_value=dt.timedelta(days=-10**6),
                                                  max_value=dt.timedelta(days=10**6))),
}


@st.composite
def key_columns(draw: st.DrawFn) -> tuple[pa.Table, list[str]]:
    """A table of 1-3 key columns of random types, with nulls, sliced (non-zero offsets) and split into chunks."""
    n = draw(st.integers(0, 60))
    names = draw(st.lists(st.sampled_from(sorted(TYPES)), min_size=1, max_size=3, unique=True))
    cols = {}
    for name in names:
        typ, values = TYPES[name]
        raw = draw(st.lists(st.none() | values, min_size=n + 4, max_size=n + 4))
        arr = pa.array(raw, type=typ)
        start = draw(st.integers(0, 4))
        arr = arr.slice(start, n)
        if draw(st.booleans()) and pa.types.is_string(typ):
            arr = arr.dictionary_encode()
        cut = draw(st.integers(0, n))
        cols[name] = pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], type=arr.type)
    return pa.table(cols), names


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key_columns())
def test_vectorised_hash_matches_the_specification(data: tuple[pa.Table, list[str]]) -> None:
    table, names = data
    got = hash_columns(table, names)
    assert got.dtype == np.uint64
    assert got.tolist() == ref_rows(table, names)


def test_strings_longer_than_a_hashing_pass_and_across_pass_boundaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(part, "_CHUNK_BYTES", 64)
    values: list[bytes | None] = [bytes([i % 256]) * (i % 50) + str(i).encode() for i in range(300)]
    values[7] = bytes(range(256)) * 3  # one value longer than a pass
    values[8] = b""
    values[9] = None
    table = pa.table({"k": pa.array(values, type=pa.binary())})
    assert table.column("k").chunk(0).nbytes > 100 * 64
    assert hash_columns(table, ["k"]).tolist() == ref_rows(table, ["k"])
    sliced = table.slice(5)
    assert hash_columns(sliced, ["k"]).tolist() == ref_rows(table, ["k"])[5:]


# -- fixed placement: a change of the hash fails here --------------------------------------------------------


def test_placement_of_known_values_never_changes() -> None:
    table = pa.table(
        {
            "s": pa.array(["", "a", "user-42", "Zürich", None]),
            "i": pa.array([0, -1, 42, 2**62, None], type=pa.int64()),
            "f": pa.array([0.0, -0.0, 1.5, float("nan"), None]),
            "d": pa.array([Decimal("0.00"), Decimal("-1.00"), Decimal("12.34"), Decimal("99999.99"), None],
                          type=pa.decimal128(7, 2)),
            "t": pa.array([dt.datetime(1970, 1, 1), dt.datetime(2024, 2, 29, 12), dt.datetime(1999, 12, 31),
                           dt.datetime(2038, 1, 19, 3, 14, 8), None], type=pa.timestamp("us", tz="UTC")),
            "b": pa.array([True, False, True, False, None]),
        }
    )
    expected = {
        "s": [
            15170288471775892731, 7889289971748993868, 5407060808976364824,
            3481392662730660353, 2968214724294222378,
        ],
        "i": [
            17851110465062072234, 9054944106595907298, 13457776007196564446,
            4952487324321388772, 2968214724294222378,
        ],
        "f": [
            17851110465062072234, 17851110465062072234, 2812081855424254743,
            8867559068591543834, 2968214724294222378,
        ],
        "d": [
            15170288471775892731, 8268138973428199966, 3041325846259750861,
            14969692690074005857, 2968214724294222378,
        ],
        "t": [
            17851110465062072234, 5226559563047850485, 18336692777295163552,
            1420689155261949898, 2968214724294222378,
        ],
        "b": [
            2159652923209149627, 17851110465062072234, 2159652923209149627,
            17851110465062072234, 2968214724294222378,
        ],
    }
    got = {c: hash_columns(table, [c]).tolist() for c in table.column_names}
    assert got == expected
    assert hash_columns(table, ["s", "i"]).tolist() == [
        5145234520404978229, 15045567753940036633, 10944011835572632502, 9636517927277008364, 16421988932752785841,
    ]
    meta = TopicMeta("t", 7, table.schema, {"partitioner": CURRENT})
    assert partition_for(table, ["s", "i"], 7, meta).tolist() == [6, 5, 0, 2, 4]


# -- rules ---------------------------------------------------------------------------------------------------


def test_values_not_representation_decide_the_hash() -> None:
    ints = [1, -5, None, 2**31 - 1]
    by_type = [hash_columns(pa.table({"k": pa.array(ints, type=t)}), ["k"]).tolist()
               for t in (pa.int32(), pa.int64())]
    assert by_type[0] == by_type[1]
    words = ["a", None, "bc", ""]
    as_types = [pa.array(words, type=t) for t in (pa.string(), pa.large_string(), pa.binary())]
    as_types.append(pa.array(words).dictionary_encode())
    hashes = [hash_columns(pa.table({"k": a}), ["k"]).tolist() for a in as_types]
    assert all(h == hashes[0] for h in hashes)
    floats = hash_columns(pa.table({"k": pa.array([0.0, -0.0, float("nan"), -float("nan")])}), ["k"]).tolist()
    assert floats[0] == floats[1] and floats[2] == floats[3]


def test_null_is_its_own_key_and_column_order_matters() -> None:
    table = pa.table({"a": pa.array(["", None, "x"]), "b": pa.array([0, 0, None], type=pa.int64())})
    h = hash_columns(table, ["a"]).tolist()
    assert h[0] != h[1]
    assert hash_columns(table, ["a", "b"]).tolist() != hash_columns(table, ["b", "a"]).tolist()


def test_partitions_spread_evenly() -> None:
    n = 200_000
    table = pa.table({"id": pa.array(np.arange(n)), "s": pa.array([f"user-{i}" for i in range(n)])})
    meta = TopicMeta("t", 16, table.schema, {"partitioner": CURRENT})
    for cols in (["id"], ["s"], ["id", "s"]):
        counts = np.bincount(partition_for(table, cols, 16, meta), minlength=16)
        assert counts.min() > 0.95 * n / 16 and counts.max() < 1.05 * n / 16, (cols, counts)


def test_bad_keys_and_partition_counts_are_refused_naming_them() -> None:
    table = pa.table({"l": pa.array([[1], [2]]), "k": pa.array([1, 2])})
    meta = TopicMeta("t", 2, table.schema, {"partitioner": CURRENT})
    with pytest.raises(InvalidOptionError, match="key column 'l' has type list<item: int64>"):
        partition_for(table, ["l"], 2, meta)
    with pytest.raises(InvalidOptionError, match="key column 'nope'"):
        partition_for(table, ["nope"], 2, meta)
    with pytest.raises(InvalidOptionError, match="partitions must be a positive integer"):
        partition_for(table, ["k"], 0, meta)
    with pytest.raises(InvalidOptionError, match="non-empty list"):
        partition_for(table, [], 2, meta)
    assert partition_for(table.slice(0, 0), ["k"], 2, meta).tolist() == []


# -- topics record their partitioner; legacy topics keep theirs --------------------------------------------------


@pytest.fixture
def mem() -> Iterator[Store]:
    url = f"memory://part-{uuid.uuid4().hex}"
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()
        MemoryStore.drop(url)


SCHEMA = pa.schema([("id", pa.int64()), ("user", pa.string())])


def legacy_topic(store: Store, name: str, partitions: int) -> TopicMeta:
    """A topic as versions before ``txnlog-v2`` wrote it: no ``partitioner`` entry in its config."""
    meta = TopicMeta(name, partitions, SCHEMA, {}, 0, 0)
    assert store.put_if_absent(topic_meta_path(name, 0), meta.to_bytes())
    return get_topic(store, name)


def test_new_topics_record_the_current_partitioner_and_keep_it(mem: Store) -> None:
    meta = create_topic(mem, "t", SCHEMA, 3)
    assert meta.config == {"partitioner": CURRENT}
    assert get_topic(mem, "t").config["partitioner"] == CURRENT
    assert add_partitions(mem, "t", 5).config["partitioner"] == CURRENT
    old = create_topic(mem, "old-style", SCHEMA, 3, {"partitioner": LEGACY})
    assert partitioner_of(old) == LEGACY
    with pytest.raises(InvalidOptionError, match="partitioner='murmur9'"):
        create_topic(mem, "bad", SCHEMA, 3, {"partitioner": "murmur9"})


def test_topic_of_a_newer_version_is_refused_not_guessed(mem: Store) -> None:
    meta = TopicMeta("future", 3, SCHEMA, {"partitioner": "txnlog-v9"}, 0, 0)
    assert mem.put_if_absent(topic_meta_path("future", 0), meta.to_bytes())
    p = Producer(mem, "p")
    p.init_transactions()
    p.begin_transaction()
    with pytest.raises(InvalidOptionError, match="partitioner 'txnlog-v9'.*upgrade"):
        p.send("future", [{"id": 1, "user": "a"}], key="user")
    p.send("future", [{"id": 1, "user": "a"}])  # unkeyed sends need no partitioner
    p.abort_transaction()


def test_legacy_topics_keep_the_crc32_placement(mem: Store) -> None:
    meta = legacy_topic(mem, "legacy", 7)
    assert partitioner_of(meta) == LEGACY
    rows = [{"id": i, "user": None if i % 11 == 0 else f"user-{i % 13}"} for i in range(300)]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    crc = [zlib.crc32(("" if r["user"] is None else r["user"]).encode()) % 7 for r in rows]
    assert partition_for(table, ["user"], 7, meta).tolist() == crc == hash_partition(table, ["user"], 7)
    two = [zlib.crc32(f"{r['id']}\x1f{'' if r['user'] is None else r['user']}".encode()) % 7 for r in rows]
    assert partition_for(table, ["id", "user"], 7, meta).tolist() == two
    assert partition_for(table, ["user"], 7, meta).tolist() != \
        partition_for(table, ["user"], 7, TopicMeta("legacy", 7, SCHEMA, {"partitioner": CURRENT})).tolist()


@pytest.mark.parametrize("legacy", [True, False], ids=["legacy-topic", "new-topic"])
def test_producer_places_keys_by_the_topics_partitioner(mem: Store, legacy: bool) -> None:
    meta = legacy_topic(mem, "t", 5) if legacy else create_topic(mem, "t", SCHEMA, 5)
    p = Producer(mem, "p")
    p.init_transactions()
    with p.transaction():
        p.send("t", [{"id": i, "user": f"user-{i % 17}"} for i in range(400)], key="user")
    c = Consumer(mem, group_id="g")
    c.subscribe(["t"])
    out = c.poll()
    assert out.num_rows == 400
    expected = partition_for(out.select(["id", "user"]), ["user"], 5, meta).tolist()
    assert out.column("_partition").to_pylist() == expected
    if legacy:
        assert expected == hash_partition(out, ["user"], 5)
    else:
        assert expected == (hash_columns(out, ["user"]) % np.uint64(5)).astype(np.int64).tolist()


def test_key_check_refuses_what_the_topics_partitioner_cannot_hash() -> None:
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string()))])
    current = TopicMeta("t", 3, schema, {"partitioner": CURRENT})
    part.check_key(current, ["id"])
    with pytest.raises(InvalidOptionError, match="key column 'tags' has type list<item: string>"):
        part.check_key(current, ["id", "tags"])
    with pytest.raises(InvalidOptionError, match="key column 'nope'"):
        part.check_key(current, ["nope"])
    part.check_key(TopicMeta("t", 3, schema, {}), ["tags"])  # the legacy text hash takes any type
