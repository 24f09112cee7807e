"""Schema evolution (Delta's ``mergeSchema``): new nullable columns and widened numeric types make a new topic
definition version; segments written before read the added columns as null and widened ones by a lossless cast."""

from __future__ import annotations

import pyarrow as pa
import pytest

from coordinator import CorruptLogError, InvalidOptionError, Producer, create_topic, open_store, read_snapshot
from coordinator.evolution import evolve_schema, widens
from coordinator.layout import topic_meta_dir


def test_old_segments_read_added_columns_as_null_and_every_version_stays(tmp_path: object) -> None:
    lake = f"{tmp_path}/lake"
    store = open_store(lake)
    create_topic(store, "t", pa.schema([("id", pa.int32()), ("x", pa.float32())]))
    producer = Producer(lake, "p")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", [{"id": 1, "x": 0.5}], partition=0)
    meta = evolve_schema(store, "t", pa.schema([("id", pa.int64()), ("x", pa.float64()), ("tag", pa.string())]))
    assert meta.version == 1
    assert [(f.name, f.type, f.nullable) for f in meta.schema] == [
        ("id", pa.int64(), True), ("x", pa.float64(), True), ("tag", pa.string(), True)]
    assert sorted(store.list(topic_meta_dir("t"))) == ["00000000.json", "00000001.json"]
    # the same merge again changes nothing
    assert evolve_schema(store, "t", pa.schema([("ID", pa.int64()), ("tag", pa.string())])).version == 1
    fresh = Producer(lake, "p2")
    fresh.init_transactions()
    with fresh.transaction():
        fresh.send("t", [{"id": 2**40, "x": 1.25, "tag": "new"}], partition=0)
    table = read_snapshot(lake, ["t"])["t"]
    assert table.schema.field("id").type == pa.int64()
    assert table.select(["id", "x", "tag"]).to_pylist() == [
        {"id": 1, "x": 0.5, "tag": None}, {"id": 2**40, "x": 1.25, "tag": "new"}]


def test_a_segment_lacking_an_original_column_is_still_corrupt(tmp_path: object) -> None:
    lake = f"{tmp_path}/lake"
    store = open_store(lake)
    create_topic(store, "t", pa.schema([("id", pa.int64())]))
    producer = Producer(lake, "p")
    producer.init_transactions()
    with producer.transaction():
        producer.send("t", [{"id": 1}], partition=0)
    # a definition that declares a column without the added-column mark: segments must hold it
    from dataclasses import replace

    from coordinator.topics import create_definition, get_topic

    cur = get_topic(store, "t")
    create_definition(store, replace(cur, schema=cur.schema.append(pa.field("y", pa.int64())), version=1))
    with pytest.raises(CorruptLogError, match="has no column 'y'"):
        read_snapshot(lake, ["t"])


def test_reserved_names_and_what_widens(tmp_path: object) -> None:
    store = open_store(f"{tmp_path}/lake")
    create_topic(store, "t", pa.schema([("id", pa.int64())]))
    with pytest.raises(InvalidOptionError, match="column '_x' cannot be added to topic 't'"):
        evolve_schema(store, "t", pa.schema([("_x", pa.int64())]))
    assert widens(pa.int8(), pa.int64()) and widens(pa.uint16(), pa.int32()) and widens(pa.int32(), pa.float64())
    assert widens(pa.float32(), pa.float64())
    assert not widens(pa.int64(), pa.int32()) and not widens(pa.int32(), pa.uint64())
    assert not widens(pa.int64(), pa.float64()) and not widens(pa.int64(), pa.int64())
    assert not widens(pa.string(), pa.large_string()) and not widens(pa.float64(), pa.float32())


def test_compaction_merges_segments_from_before_and_after_an_evolution(tmp_path: object) -> None:
    from coordinator import TransactionCoordinator
    from coordinator.maintenance.compaction import compact_partition

    lake = f"{tmp_path}/lake"
    store = open_store(lake)
    create_topic(store, "t", pa.schema([("id", pa.int32())]))
    old = Producer(lake, "p")
    old.init_transactions()
    with old.transaction():
        old.send("t", [{"id": 1}], partition=0)
    evolve_schema(store, "t", pa.schema([("id", pa.int64()), ("tag", pa.string())]))
    new = Producer(lake, "p2")
    new.init_transactions()
    with new.transaction():
        new.send("t", [{"id": 2**40, "tag": "x"}], partition=0, headers=[("k", b"v")])
    report = compact_partition(TransactionCoordinator(store), "t", 0)
    assert report.segments_before == 2 and report.segments_after == 1
    table = read_snapshot(lake, ["t"])["t"]
    assert table.select(["id", "tag"]).to_pylist() == [{"id": 1, "tag": None}, {"id": 2**40, "tag": "x"}]
