"""The snapshot rule of batch reads: one DataFrame, one snapshot (``txnsource.pin``).

Every scan and every action of one ``spark.read.format("txnlog")...load(path)`` DataFrame reads the snapshot pinned
when the DataFrame was created, with ``txnsource.enable_native`` on or off: self-joins, unions, a ``crossJoin`` of
counts and repeated actions while another thread commits; ``asOfSeq`` / ``versionAsOf`` pin a log entry
explicitly; a read whose records retention removed after the pin fails naming them. The same queries run on a
``local-cluster`` and through Spark Connect (child processes, ``slow``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_read as base  # tests/spark is on sys.path (rootdir-relative test modules)

import txnsource
from coordinator import Producer, ProducerConfig, create_topic, open_store
from coordinator.coordinator import TransactionCoordinator
from coordinator.maintenance.retention import apply_retention

pytestmark = pytest.mark.spark

produce, rows, reader, ids, SCHEMA = base.produce, base.rows, base.reader, base.ids, base.SCHEMA
orders = base.orders


def log_seq(lake: str) -> int:
    """The transaction log's last entry now."""
    return TransactionCoordinator(open_store(lake)).snapshot([]).seq


def set_native(spark: Any, on: bool) -> None:
    (txnsource.enable_native if on else txnsource.disable_native)(spark)


@pytest.fixture(params=[False, True], ids=["data-source", "native-rule"])
def rule(spark: Any, request: pytest.FixtureRequest) -> Iterator[bool]:
    set_native(spark, request.param)
    try:
        yield request.param
    finally:
        txnsource.disable_native(spark)


class Committer:
    """A thread committing transactions of two records (ids ``n`` in partition 0 and ``-n - 1`` in partition 1,
    name ``k{n % 5}``), one every ``pause`` seconds, until stopped or ``most`` are committed (the topic stays small
    enough for slow clusters to read in time)."""

    def __init__(self, lake: str, tid: str = "busy", *, pause: float = 0.02, most: int = 600) -> None:
        self.lake, self.tid, self.pause, self.most = lake, tid, pause, most
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            producer = Producer(self.lake, self.tid, config=ProducerConfig(segment_target_bytes=1 << 30))
            producer.init_transactions()
            n = 0
            while n < self.most and not self.stop.wait(self.pause):
                with producer.transaction():
                    producer.send("busy", [{"id": n, "name": f"k{n % 5}"}], partition=0)
                    producer.send("busy", [{"id": -n - 1, "name": f"k{n % 5}"}], partition=1)
                n += 1
        except BaseException as exc:  # pragma: no cover - reported by the test
            self.errors.append(exc)

    def __enter__(self) -> Committer:
        create_topic(open_store(self.lake), "busy", SCHEMA, partitions=2)
        produce(self.lake, "busy", [rows(1_000_000, 3)], partition=0, tid="seed")
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.errors, self.errors


def snapshot_queries(spark: Any, lake: str) -> dict[str, Any]:
    """A self-join, "latest per key" (a join with an aggregate of the same DataFrame), a union, a ``crossJoin`` of
    four counts and repeated actions, all on one DataFrame of topic ``busy`` (also run by the child processes)."""
    from pyspark.sql import functions as F

    df = spark.read.format("txnlog").option("topic", "busy").load(lake)
    counts = [df.agg(F.count("*").alias(f"c{i}")) for i in range(4)]
    crossed = counts[0].crossJoin(counts[1]).crossJoin(counts[2]).crossJoin(counts[3]).first()
    a, b = df.alias("a"), df.alias("b")
    unmatched = a.join(b, F.col("a.id") == F.col("b.id"), "full_outer").where("a.id IS NULL OR b.id IS NULL").count()
    latest = df.groupBy("_partition", "name").agg(F.max("_offset").alias("_offset"))
    per_key = df.join(latest, ["_partition", "name", "_offset"]).count()
    keys = df.select("_partition", "name").distinct().count()
    union_not_twice = df.union(df).groupBy("id").count().where("count != 2").count()
    first = sorted(r.id for r in df.select("id").collect())
    again = sorted(r.id for r in df.select("id").collect())
    return {"crossed": list(crossed), "unmatched": unmatched, "per_key": per_key, "keys": keys,
            "union_not_twice": union_not_twice, "first": first, "again": again, "count": df.count()}


def check_one_snapshot(got: dict[str, Any]) -> None:
    """Every scan of the queries read the same rows: the DataFrame's snapshot."""
    n = len(got["first"])
    assert got["crossed"] == [n] * 4, f"the four scans of one query read different snapshots: {got['crossed']} != {n}"
    assert got["unmatched"] == 0, "the two sides of a self-join read different snapshots"
    assert got["per_key"] == got["keys"], "latest per key: the two scans read different snapshots"
    assert got["union_not_twice"] == 0, "the two sides of a union read different snapshots"
    assert got["again"] == got["first"] and got["count"] == n, "a second action read another snapshot"
    # a whole number of transactions: both records of each
    assert sorted(-i - 1 for i in got["first"] if 0 <= i < 1_000_000) == [i for i in got["first"] if i < 0]


# -- local[2] ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [None, "id long, name string, _partition int, _offset long"],
                         ids=["inferred", "given"])
def test_one_dataframe_reads_one_snapshot_with_the_rule_on_and_off(spark: Any, orders: str,
                                                                    schema: str | None) -> None:
    """One DataFrame, actions before and after a commit, with the rule on, off and on again: the same rows (a given
    schema pins at the first plan, an inferred one at load()); a new load() sees the commit."""

    def load() -> Any:
        r = spark.read.format("txnlog").option("topic", "orders")
        return (r.schema(schema) if schema else r).load(orders)

    try:
        df = load()
        set_native(spark, True)
        before = ids(df)
        produce(orders, "orders", [rows(200, 4)], partition=1, tid="later")
        on = ids(df)
        set_native(spark, False)
        off = ids(df)
        assert before == on == off == list(range(10)) + list(range(100, 105))
        assert ids(load()) == off + [200, 201, 202, 203]
    finally:
        txnsource.disable_native(spark)


def test_scans_and_actions_of_a_dataframe_read_one_snapshot_under_concurrent_commits(spark: Any, lake: str,
                                                                                     rule: bool) -> None:
    with Committer(lake):
        seen = []
        for _ in range(2):
            got = snapshot_queries(spark, lake)
            check_one_snapshot(got)
            seen.append(len(got["first"]))
        assert seen[1] > seen[0], "a new load() saw no newer commit"


def test_as_of_seq_reads_the_snapshot_at_that_log_entry(spark: Any, orders: str, rule: bool) -> None:
    """``asOfSeq`` (and ``versionAsOf``): commits after the entry are left out, including a transaction staged
    before it and committed after; commits up to it are in."""
    late = Producer(orders, "late")
    late.init_transactions()
    late.begin_transaction()
    late.send("orders", rows(700, 2), partition=0)
    late.flush()
    at = log_seq(orders)
    produce(orders, "orders", [rows(200, 3)], partition=1, tid="after")
    late.commit_transaction()
    then = list(range(10)) + list(range(100, 105))
    assert ids(reader(spark, orders, topic="orders", asOfSeq=str(at))) == then
    assert ids(reader(spark, orders, topic="orders", versionAsOf=str(at))) == then
    assert ids(reader(spark, orders, topic="orders", asOfSeq=str(log_seq(orders)))) == sorted(
        then + [200, 201, 202, 700, 701])
    pinned = reader(spark, orders, topic="orders", asOfSeq=str(at), startingOffsets={"orders": {"0": 5}})
    assert ids(pinned) == list(range(5, 10)) + list(range(100, 105))


def test_as_of_seq_refusals_name_the_option(spark: Any, orders: str, rule: bool) -> None:
    last = log_seq(orders)
    with pytest.raises(Exception, match=rf"option 'asOfSeq' = {last + 10}: log entry {last + 10} is outside"):
        reader(spark, orders, topic="orders", asOfSeq=str(last + 10)).collect()
    with pytest.raises(Exception, match="'asOfSeq' = '1' and 'versionAsOf' = '2' are synonyms: give one"):
        reader(spark, orders, topic="orders", asOfSeq="1", versionAsOf="2").collect()
    with pytest.raises(Exception, match="option 'asOfSeq' = 'x' is not an integer"):
        reader(spark, orders, topic="orders", asOfSeq="x").collect()
    with pytest.raises(Exception, match="option 'asOfSeq' is not supported by streaming reads"):
        spark.readStream.format("txnlog").option("topic", "orders").option("asOfSeq", "1").load(orders) \
            .writeStream.format("noop").start().awaitTermination(30)


def test_records_retention_removed_after_the_pin_fail_the_read_naming_them(spark: Any, orders: str,
                                                                           rule: bool) -> None:
    """A DataFrame planned before retention reads its first plan's files again (until the garbage collector
    deletes them); one pinned but first planned after it fails naming the records, as does ``asOfSeq``."""
    planned = reader(spark, orders, topic="orders")
    unplanned = reader(spark, orders, topic="orders")
    at = log_seq(orders)
    assert planned.count() == 15
    apply_retention(TransactionCoordinator(open_store(orders)), "orders", 0, retention_bytes=0)
    assert planned.count() == 15
    with pytest.raises(Exception, match=r"snapshot at transaction log entry \d+ read by this DataFrame \(load\(\) "
                                        r"again.*needs offsets \[0, 10\) of orders/0, but retention has since removed"):
        unplanned.count()
    with pytest.raises(Exception, match=rf"entry {at} read by option 'asOfSeq' needs offsets \[0, 10\) of orders/0"):
        reader(spark, orders, topic="orders", asOfSeq=str(at)).count()
    assert ids(reader(spark, orders, topic="orders")) == list(range(100, 105))


# -- local-cluster and Spark Connect (child processes) -------------------------------------------------------

CHILD = r'''
import json, os, sys, faulthandler
faulthandler.dump_traceback_later(400, exit=True)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
where, lake = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import test_read_snapshot as t

JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if where == "connect":
    spark = SparkSession.builder.remote("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    modes, rounds = [False], 2
else:
    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", JVM).config("spark.executor.extraJavaOptions", JVM)
             .getOrCreate())
    modes, rounds = [False, True], 1
out = []
# paced to commit all through the queries (a cluster's first query takes tens of seconds)
with t.Committer(lake, pause=0.08):
    for native in modes:
        if native:
            import txnsource
            txnsource.enable_native(spark)
        for _ in range(rounds):
            out.append({"native": native, **t.snapshot_queries(spark, lake)})
print(json.dumps(out), flush=True)
spark.stop()
'''


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local-cluster", "connect"])
def test_one_snapshot_per_dataframe_on_a_cluster_and_through_connect(tmp_path: Path, where: str) -> None:
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    run = subprocess.run([sys.executable, str(child), where, str(tmp_path / "lake"), str(Path(__file__).parent)],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "SPARK_TESTING": "1"})
    assert run.returncode == 0, run.stderr[-4000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(results) == 2  # local-cluster: the data source, then the native rule; Connect: the data source twice
    for got in results:
        check_one_snapshot(got)
    assert len({len(got["first"]) for got in results}) > 1, "no commit happened between the queries"
