"""The native write path (``txnsink.write``): Spark's own Parquet writer writes the segments, one transaction
publishes them; every outcome is read back through the data source, the native read path and the core client."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality

import txnsink
import txnsource
from coordinator import (
    IncompleteWriteError,
    InvalidOptionError,
    Producer,
    TransactionCoordinator,
    create_topic,
    faults,
    get_topic,
    open_store,
    read_snapshot,
)
from coordinator.layout import data_dir
from coordinator.maintenance import compact_partition, gc_partition
from coordinator.partitioner import partition_for
from coordinator.segments import ROW_GROUP_ROWS

pytestmark = pytest.mark.spark

DATA = ("id", "cast(id % 1000 as int) AS category", "cast(id as double) * 1.5 AS amount",
        "concat('c-', cast(id % 97 as string)) AS customer", "timestamp_seconds(1700000000 + id % 5000) AS ts",
        "id % 3 = 0 AS flagged")


def frame(spark: Any, n: int, parts: int = 2) -> Any:
    return spark.range(0, n, 1, parts).selectExpr(*DATA)


def topic_rows(lake: str, topic: str, options: dict[str, str] | None = None) -> pa.Table:
    return read_snapshot(lake, [topic], options=options)[topic]


def data_files(lake: str, topic: str, partitions: int) -> list[str]:
    store = open_store(lake)
    return [n for p in range(partitions) for n in store.list(data_dir(topic, p))]


def same_everywhere(spark: Any, lake: str, topic: str, df: Any) -> pa.Table:
    """Assert the topic holds exactly ``df``'s rows through the data source, the native read path and the core
    client, with dense offsets per partition; return the core client's table."""
    cols = df.columns
    py = spark.read.format("txnlog").option("topic", topic).load(lake)
    assert_df_equality(py.select(*cols), df, ignore_row_order=True, ignore_nullable=True)
    nat = txnsource.read(spark, lake, topic=topic, readPath="native")
    assert nat.inputFiles()
    assert_df_equality(nat.select(*cols), df, ignore_row_order=True, ignore_nullable=True)
    core = topic_rows(lake, topic)
    assert core.num_rows == df.count()
    for p in set(core.column("_partition").to_pylist()):
        offs = [r["_offset"] for r in core.to_pylist() if r["_partition"] == p]
        assert offs == list(range(len(offs)))
    return core


def test_reads_back_identically_through_every_reader(spark: Any, lake: str) -> None:
    df = frame(spark, 3000)
    before = dt.datetime.now(dt.UTC)
    got = txnsink.write(df, lake, "orders", numPartitions=3, writePath="native")
    after = dt.datetime.now(dt.UTC)
    assert (got.path, got.rows, got.skipped) == ("native", 3000, False)
    meta = get_topic(open_store(lake), "orders")
    assert meta.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert all(f.nullable for f in meta.schema)
    same_everywhere(spark, lake, "orders", df)
    # the files are named by the transaction (GC judges them by name) and hold the topic's exact schema
    files = data_files(lake, "orders", 3)
    assert len(files) == got.segments == 6 and all(n.startswith(got.txn + "~") for n in files)  # 2 tasks x 3
    table = topic_rows(lake, "orders")
    stamped = set(table.column("_producerTimestamp").to_pylist())  # every row carries the write's time
    assert len(stamped) == 1 and before - dt.timedelta(seconds=1) <= stamped.pop() <= after
    table = table.drop_columns(["_topic", "_partition", "_offset", "_timestamp", "_producerTimestamp"])
    assert table.schema.equals(meta.schema)
    # one transaction, its ephemeral producer gone; the staging folder removed
    assert len(TransactionCoordinator(open_store(lake)).log.refresh().producers) == 0
    assert not os.path.exists(os.path.join(lake, "_native-staging")) or not os.listdir(
        os.path.join(lake, "_native-staging"))


def test_per_partition_order_follows_tasks_and_row_groups_are_bounded(spark: Any, lake: str) -> None:
    n = 2 * ROW_GROUP_ROWS + 10000
    txnsink.write(spark.range(0, n, 1, 1).selectExpr("id"), lake, "big", numPartitions=2, writePath="native")
    core = topic_rows(lake, "big")
    for p in range(2):  # one task dealing its rows over both partitions, each partition's in the task's order
        ids = [r["id"] for r in core.to_pylist() if r["_partition"] == p]
        assert len(ids) == n // 2 and ids == sorted(ids)
    import pyarrow.parquet as pq

    for p in range(2):
        (name,) = os.listdir(os.path.join(lake, data_dir("big", p)))
        meta = pq.ParquetFile(os.path.join(lake, data_dir("big", p), name)).metadata
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [ROW_GROUP_ROWS, 5000]


@pytest.mark.parametrize("key", [None, "customer"])
def test_each_file_chooses_its_dictionaries_once_from_its_first_rows(spark: Any, tmp_path: Any,
                                                                     key: str | None) -> None:
    """A column whose first rows in a file (Parquet's first page, 20,000 rows) are distinct is written without a
    dictionary in every row group of that file, even a later one whose values repeat (Parquet alone would try a
    dictionary again per row group and keep it there); a column of few values keeps its dictionary throughout."""
    import pyarrow.parquet as pq

    lake = str(tmp_path / "lake")
    half = 700_000  # per task: keyed over 2 partitions, each file still spans two row groups
    df = spark.range(0, 2 * half, 1, 2).selectExpr(
        "id", f"CASE WHEN id % {half} < 60000 THEN id ELSE id % 7 END AS x", "concat('c-', id % 30) AS customer")
    got = txnsink.write(df, lake, "dict", key=key, numPartitions=2, writePath="native")
    assert got.path == "native" and got.rows == 2 * half
    files = [os.path.join(lake, data_dir("dict", p), n) for p in range(2)
             for n in os.listdir(os.path.join(lake, data_dir("dict", p))) if n.endswith(".parquet")]
    assert len(files) == 4  # 2 tasks x 2 partitions, keyed or spread
    for f in files:
        meta = pq.ParquetFile(f).metadata
        assert meta.num_row_groups >= 2
        for g in range(meta.num_row_groups):
            assert meta.row_group(g).num_rows <= ROW_GROUP_ROWS
            chunks = {meta.row_group(g).column(c).path_in_schema: meta.row_group(g).column(c)
                      for c in range(meta.num_columns)}
            assert not chunks["id"].has_dictionary_page, (f, g)
            assert not chunks["x"].has_dictionary_page, (f, g, chunks["x"].encodings)
            assert chunks["customer"].has_dictionary_page, (f, g)
    table = topic_rows(lake, "dict")
    assert sorted(table.column("id").to_pylist()) == list(range(2 * half))
    if key:
        placed = {r["customer"]: r["_partition"] for r in table.select(["customer", "_partition"]).to_pylist()}
        expected = partition_for(pa.table({"customer": list(placed)}), ["customer"], 2,
                                 get_topic(open_store(lake), "dict"))
        assert list(placed.values()) == list(expected)


@pytest.mark.parametrize("key", [None, "customer"])
def test_tasks_describe_and_sync_their_files_so_the_driver_reads_no_data(spark: Any, lake: str, monkeypatch: Any,
                                                                          key: str | None) -> None:
    """On a local store each task syncs its files and describes them (rows, size, CRC-32): the driver reads the
    descriptions, never a data file, and the index says exactly what each file holds. A description that does
    not match its file (here: every size off by one) is ignored, and the driver reads and syncs the files."""
    import zlib

    import pyarrow.parquet as pq

    import txnsink.publish as publish
    from coordinator.backends.local import LocalStore

    reads: list[str] = []
    synced: list[int] = []
    get = LocalStore.get
    monkeypatch.setattr(LocalStore, "get", lambda self, path: (reads.append(path), get(self, path))[1])
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), fsync(fd))[0])

    def check(topic: str) -> None:
        store = open_store(lake)
        refs = []
        for p in range(2):
            plog = TransactionCoordinator(store).partition(topic, p)
            plog.refresh()
            refs += plog.segments
        assert refs and sum(r.rows for r in refs) == 5000
        for r in refs:
            data = get(store, r.path)  # type: ignore[arg-type]
            assert (r.rows, r.size, r.crc32) == (pq.ParquetFile(pa.BufferReader(data)).metadata.num_rows,
                                                 len(data), zlib.crc32(data))

    got = txnsink.write(frame(spark, 5000), lake, "described", key=key, numPartitions=2, writePath="native")
    assert got.path == "native" and got.segments
    assert not [p for p in reads if p.endswith(".parquet")], reads
    assert len([p for p in reads if p.endswith(".txnlog.json")]) == got.segments
    files_synced = len(synced)
    check("described")

    listed = publish.spark_files
    monkeypatch.setattr(txnsink.native, "spark_files", lambda *a: [
        dataclasses.replace(f, size=f.size + 1) for f in listed(*a)])
    reads.clear()
    got = txnsink.write(frame(spark, 5000), lake, "undescribed", key=key, numPartitions=2, writePath="native")
    assert len([p for p in reads if p.endswith(".parquet")]) == got.segments
    assert len(synced) - files_synced >= got.segments  # the driver synced each file it read
    check("undescribed")


def test_non_null_columns_are_written_nullable_into_an_existing_python_topic(spark: Any, lake: str) -> None:
    create_topic(open_store(lake), "mixed", pa.schema([("id", pa.int64()), ("name", pa.string())]), 1)
    prod = Producer(lake, "p")
    prod.init_transactions()
    with prod.transaction():
        prod.send("mixed", pa.table({"id": pa.array([-1], pa.int64()), "name": ["py"]}))
    df = spark.range(0, 10, 1, 2).selectExpr("cast(id as int) as ID", "cast(id as string) as name")
    got = txnsink.write(df, lake, "mixed", writePath="native")
    assert got.path == "native"
    table = topic_rows(lake, "mixed")
    assert sorted(table.column("id").to_pylist()) == list(range(-1, 10))
    assert table.schema.field("id").type == pa.int64()


def test_keyed_placement_equals_the_producers(spark: Any, lake: str) -> None:
    df = frame(spark, 2000)
    got = txnsink.write(df, lake, "keyed", key="ts", numPartitions=4, writePath="native")
    assert got.path == "native"
    core = same_everywhere(spark, lake, "keyed", df)
    meta = get_topic(open_store(lake), "keyed")
    assert core.column("_partition").to_pylist() == partition_for(core, ["ts"], 4, meta).tolist()
    assert len(set(core.column("_partition").to_pylist())) == 4
    prod = Producer(lake, "py")
    prod.init_transactions()
    sample = core.slice(0, 50).select(list(meta.schema.names))
    with prod.transaction():
        prod.send("keyed", sample, key="ts")
    again = topic_rows(lake, "keyed")
    placed = {(r["id"], r["_offset"] >= 0): r["_partition"] for r in again.to_pylist()}
    native_at = dict(zip(core.column("id").to_pylist(), core.column("_partition").to_pylist(), strict=True))
    produced = [r for r in again.to_pylist() if r["_offset"] >= 0]
    by_id: dict[int, set[int]] = {}
    for r in produced:
        by_id.setdefault(r["id"], set()).add(r["_partition"])
    assert all(by_id[i] == {native_at[i]} for i in sample.column("id").to_pylist()) and placed


def test_multi_column_key_matches_the_data_source(spark: Any, tmp_path: Any) -> None:
    df = frame(spark, 500)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    txnsink.write(df, a, "t", key=["customer", "category"], numPartitions=3, writePath="native")
    txnsink.write(df, b, "t", key=["customer", "category"], numPartitions=3, writePath="python")
    place_a = {r["id"]: r["_partition"] for r in topic_rows(a, "t").to_pylist()}
    place_b = {r["id"]: r["_partition"] for r in topic_rows(b, "t").to_pylist()}
    assert place_a == place_b and len(place_a) == 500


def test_a_failure_after_spark_wrote_leaves_nothing_visible(spark: Any, lake: str) -> None:
    txnsink.write(frame(spark, 10), lake, "t", numPartitions=2, writePath="native")

    def crash(name: str) -> None:
        if name == "native.before_commit":
            raise RuntimeError("driver failed before the commit")

    with faults.injected(crash), pytest.raises(RuntimeError, match="before the commit"):
        txnsink.write(frame(spark, 500), lake, "t", writePath="native")
    assert topic_rows(lake, "t").num_rows == 10
    assert len(data_files(lake, "t", 2)) == 4  # the failed write's files are deleted, the first write's kept
    assert os.listdir(os.path.join(lake, "_native-staging")) == []
    assert len(TransactionCoordinator(open_store(lake)).log.refresh().producers) == 0


def test_a_failure_while_moving_files_leaves_nothing_visible(spark: Any, lake: str) -> None:
    calls = []

    def crash(name: str) -> None:
        if name == "native.move":
            calls.append(name)
            if len(calls) == 2:
                raise RuntimeError("store failed")

    with faults.injected(crash), pytest.raises(RuntimeError, match="store failed"):
        txnsink.write(frame(spark, 500, parts=3), lake, "t", numPartitions=3, writePath="native")
    assert topic_rows(lake, "t").num_rows == 0
    assert data_files(lake, "t", 3) == []


def test_txn_app_id_and_version_publish_once(spark: Any, lake: str) -> None:
    df = frame(spark, 100)
    first = txnsink.write(df, lake, "t", txnAppId="job", txnVersion=3, writePath="native")
    again = txnsink.write(df, lake, "t", txnAppId="job", txnVersion=3, writePath="native")
    older = txnsink.write(df, lake, "t", txnAppId="job", txnVersion=2, writePath="native")
    assert (first.skipped, again.skipped, older.skipped) == (False, True, True)
    assert again.rows == 0 and topic_rows(lake, "t").num_rows == 100
    assert txnsink.write(df, lake, "t", txnAppId="job", txnVersion=4).rows == 100
    assert topic_rows(lake, "t").num_rows == 200
    # the data source honours the native path's version, and the other way round
    w = df.write.format("txnlog").mode("append").option("topic", "t").option("txnAppId", "job")
    w.option("txnVersion", "4").save(lake)
    assert topic_rows(lake, "t").num_rows == 200


def test_a_version_committed_while_spark_wrote_is_skipped_by_the_commit(spark: Any, lake: str) -> None:
    df = frame(spark, 50)
    txnsink.write(df, lake, "t", writePath="native")

    def race(name: str) -> None:
        if name == "native.before_commit":
            df.write.format("txnlog").mode("append").option("topic", "t").option("txnAppId", "a") \
                .option("txnVersion", "0").save(lake)

    with faults.injected(race):
        got = txnsink.write(df, lake, "t", txnAppId="a", txnVersion=0, writePath="native")
    assert got.skipped and topic_rows(lake, "t").num_rows == 100
    assert len(data_files(lake, "t", 1)) == 4  # two files per write that published; the skipped write's are gone


def test_foreach_batch(spark: Any, lake: str, tmp_path: Any) -> None:
    src = str(tmp_path / "src")
    frame(spark, 300, parts=3).write.parquet(src)
    results: list[Any] = []

    def sink(batch: Any, batch_id: int) -> None:
        results.append(txnsink.write(batch, lake, "fb", txnAppId="fb-query", txnVersion=batch_id,
                                     numPartitions=2, writePath="native"))

    stream = spark.readStream.schema(spark.read.parquet(src).schema).option("maxFilesPerTrigger", 1).parquet(src)
    q = stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck")) \
        .trigger(availableNow=True).start()
    q.awaitTermination()
    assert len(results) == 3 and all(r.path == "native" and not r.skipped for r in results)
    same_everywhere(spark, lake, "fb", spark.read.parquet(src))
    # a replayed micro-batch (same batch id) publishes nothing
    again = txnsink.write(spark.read.parquet(src), lake, "fb", txnAppId="fb-query", txnVersion=2)
    assert again.skipped and topic_rows(lake, "fb").num_rows == 300


def test_fallbacks_say_why(spark: Any, lake: str) -> None:
    nanos = pa.table({"t": pa.array([1], pa.timestamp("ns"))})
    create_topic(open_store(lake), "nanos", nanos.schema, 1)
    prod = Producer(lake, "p")
    prod.init_transactions()
    with prod.transaction():
        prod.send("nanos", nanos)
    df = spark.range(2).selectExpr("cast(timestamp_seconds(id) as timestamp_ntz) as t")
    got = txnsink.write(df, lake, "nanos")
    assert got.path == "python" and "timestamp[ns]" in (got.reason or "")
    assert topic_rows(lake, "nanos").num_rows == 3
    with pytest.raises(InvalidOptionError, match=r"'writePath' = 'native' cannot write this: column 't'"):
        txnsink.write(df, lake, "nanos", writePath="native")
    keyed = txnsink.write(frame(spark, 20), lake, "auto-keyed", key="ts", numPartitions=2)
    assert keyed.path == "native" and keyed.reason is None  # the JVM partitioner: see test_write_keyed_jvm
    assert topic_rows(lake, "auto-keyed").num_rows == 20
    with pytest.raises(InvalidOptionError, match=r"'writePath' = 'fast' is not one of auto, native, python"):
        txnsink.write(df, lake, "nanos", writePath="fast")


@pytest.mark.s3
def test_s3_without_hadoop_aws_falls_back_and_native_says_why(spark: Any, s3_lake: Any) -> None:
    url, options = s3_lake.url, dict(s3_lake.options)
    df = frame(spark, 20)
    got = txnsink.write(df, url, "s3t", **options)
    assert got.path == "python" and "hadoop-aws" in (got.reason or "")
    assert topic_rows(url, "s3t", options).num_rows == 20
    with pytest.raises(InvalidOptionError, match=r"no file system for s3a:// \(for s3a, put hadoop-aws") as err:
        txnsink.write(df, url, "s3t", writePath="native", **options)
    assert options["s3.secret"] not in str(err.value)
    assert topic_rows(url, "s3t", options).num_rows == 20


def test_gc_and_compaction_accept_native_files(spark: Any, lake: str) -> None:
    for i in range(3):
        txnsink.write(frame(spark, 100 * (i + 1)).selectExpr("id + 1000 * " + str(i) + " as id", "ts"), lake, "m",
                      numPartitions=1, writePath="native")
    before = topic_rows(lake, "m").sort_by("_offset")
    coord = TransactionCoordinator(open_store(lake))
    assert compact_partition(coord, "m", 0).merged_groups >= 1
    future = coord.store.now() * 1000 + 10 * 24 * 3600 * 1000
    report = gc_partition(coord, "m", 0, grace_ms=0, now=future)
    assert report.deleted_files  # the compacted-away native files
    after = topic_rows(lake, "m").sort_by("_offset")
    assert after.select(["id", "_offset"]).equals(before.select(["id", "_offset"]))
    assert len(data_files(lake, "m", 1)) == 1
    nat = txnsource.read(spark, lake, topic="m", readPath="native")
    assert nat.count() == 600


def _gc_when_task_0_committed(lake: str, later_ms: int) -> Any:
    """A mapInArrow function that, in Spark task 1 only, waits until task 0 has written and committed its file
    (Spark's committer moved it out of its attempt folder), then runs store-wide GC of native staging with a zero
    grace period on the store's clock moved ``later_ms`` on (0: now), before passing its own rows on: a GC running
    while a slow task still writes."""

    def run(batches: Any) -> Any:
        import glob
        import time

        from pyspark import TaskContext

        from coordinator import open_store as _open
        from coordinator.maintenance import sweep_native_staging

        if TaskContext.get().partitionId() == 1:  # type: ignore[union-attr]
            for _ in range(600):
                done = [p for p in glob.glob(f"{lake}/_native-staging/**/part-00000-*.parquet", recursive=True)
                        if "/_temporary/0/_temporary/" not in p]
                if done:
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError("task 0 never committed its file")
            store = _open(lake)
            sweep_native_staging(store, grace_ms=0, now=store.now() * 1000 + later_ms)
        yield from batches

    return run


@pytest.mark.parametrize("lease", ["held", "expired"])
def test_gc_during_the_write_never_publishes_part_of_it(spark: Any, lake: str, lease: str) -> None:
    """Store-wide GC with a zero grace period runs while task 1 of a 100,000-row write has not written yet, after
    task 0 committed its 50,000 rows. Before, GC deleted task 0's file and the write published the other half
    (``rows=50000``). The running write's lease keeps GC away from its staging folder (``held``); when GC runs
    past the lease's expiry (``expired``: a driver paused that long), the commit finds fewer rows than Spark's
    tasks reported and fails, publishing nothing."""
    df = frame(spark, 100_000, parts=2)
    later = 0 if lease == "held" else 24 * 3600 * 1000
    slow = df.mapInArrow(_gc_when_task_0_committed(lake, later), df.schema)
    if lease == "held":
        got = txnsink.write(slow, lake, "orders", numPartitions=2, writePath="native")
        assert (got.rows, got.segments) == (100_000, 4)
        assert topic_rows(lake, "orders").num_rows == 100_000
    else:
        with pytest.raises(IncompleteWriteError, match="Spark's tasks reported writing 100000 rows"):
            txnsink.write(slow, lake, "orders", numPartitions=2, writePath="native")
        assert topic_rows(lake, "orders").num_rows == 0
        assert data_files(lake, "orders", 2) == []
    assert os.listdir(os.path.join(lake, "_native-staging")) == []


def test_odd_column_names_and_the_producer_time_column_go_through_the_jvm_projection(spark: Any, lake: str) -> None:
    # the projection onto the topic's columns is built by the jar from names and types given as JSON: names that
    # need quoting, a rename by case, casts, non-null columns and producer times with nulls among them
    df = spark.range(0, 40, 1, 2).selectExpr(
        "id AS `we``ird.na me`", "cast(id AS int) AS Small", "cast(id * 1.5 AS decimal(9, 2)) AS amount",
        "CASE WHEN id % 2 = 0 THEN timestamp_seconds(1767323045) END AS _producerTimestamp")
    create_topic(open_store(lake), "odd", pa.schema([("we`ird.na me", pa.int64()), ("small", pa.int64()),
                                                     ("amount", pa.decimal128(9, 2))]), 2)
    before = dt.datetime.now(dt.UTC)
    got = txnsink.write(df, lake, "odd", writePath="native")
    assert (got.path, got.rows) == ("native", 40)
    table = topic_rows(lake, "odd")
    rows = sorted(table.to_pylist(), key=lambda r: r["we`ird.na me"])
    assert [r["we`ird.na me"] for r in rows] == list(range(40))
    assert [r["small"] for r in rows] == list(range(40)) and table.schema.field("small").type == pa.int64()
    assert [r["amount"] for r in rows][:3] == [Decimal("0.00"), Decimal("1.50"), Decimal("3.00")]
    stamps = [r["_producerTimestamp"] for r in rows]
    given = dt.datetime.fromtimestamp(1767323045, dt.UTC)
    assert all(s == given for s in stamps[0::2])  # the column's time
    assert all(s >= before - dt.timedelta(seconds=1) and s != given for s in stamps[1::2])  # null: the write's
