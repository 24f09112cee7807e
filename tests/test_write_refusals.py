"""Every path that writes refuses a store that ignores conditional writes, before it writes anything, with an error
naming the store: a real S3 endpoint (moto's server) reached through :mod:`s3faults`'s proxy stripping
``If-None-Match``, in front of a lake filled through the honest endpoint. Readers still never write, not even the
probe."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cli_lake import GROUP, SCHEMA, TOPIC, Lake, build_lake, run
from coordinator import (
    Consumer,
    Producer,
    Store,
    TransactionCoordinator,
    UnsupportedStoreError,
    add_partitions,
    create_topic,
    open_store,
    parallel,
    read_snapshot,
)
from coordinator import probe as probe_module
from coordinator.maintenance import (
    apply_retention,
    compact_partition,
    gc_partition,
    maintain,
    sweep_native_staging,
    truncate_partition,
)
from coordinator.topic_admin import delete_topic, set_topic_config
from s3_lake import TEST_KEY, TEST_REGION, TEST_SECRET, S3Lake, bucket_objects, make_bucket
from s3faults import FaultProxy

pytestmark = pytest.mark.s3

REFUSED = "does not honour conditional writes"


@dataclass
class Lying:
    """A lake filled through the honest endpoint, and the same lake's options through a proxy that ignores the
    condition headers."""

    s3: S3Lake
    lake: Lake
    proxy: FaultProxy
    options: dict[str, str]

    def store(self) -> Store:
        return open_store(self.s3.url, self.options)

    def flags(self) -> list[str]:
        return ["--store", self.s3.url, "--s3-endpoint", self.proxy.endpoint, "--s3-region", "us-east-1",
                "--s3-key", TEST_KEY, "--s3-secret", TEST_SECRET]


@pytest.fixture(scope="module")
def lying(s3_endpoint: str) -> Iterator[Lying]:
    """One lake for the module: every test leaves it as it found it (that is what each one checks)."""
    bucket = make_bucket(s3_endpoint)
    options = {"s3.endpoint": s3_endpoint, "s3.key": TEST_KEY, "s3.secret": TEST_SECRET, "s3.region": TEST_REGION}
    s3 = S3Lake(url=f"s3://{bucket}/lake", options=options, bucket=bucket, endpoint=s3_endpoint)
    lake = build_lake(s3.url, dict(options), hung_timeout_ms=1)
    lake.hung.coordinator.log.flush()
    with FaultProxy(s3_endpoint, strip_conditional=True) as proxy:
        yield Lying(s3, lake, proxy, s3.options_for(proxy.endpoint))


def _settled(s3: S3Lake) -> dict[str, bytes]:
    parallel.drain(30)
    return bucket_objects(s3)


def _assert_refused_and_unchanged(lying: Lying, action: Callable[[], object]) -> None:
    before = _settled(lying.s3)
    with pytest.raises(UnsupportedStoreError, match=REFUSED) as err:
        action()
    assert lying.s3.url in str(err.value) and lying.proxy.endpoint in str(err.value)
    assert _settled(lying.s3) == before  # nothing written (the probe deleted its object again)


# -- the Python API: producer, topic administration, sweeps, maintenance ------------------------------------------


def _coord(lying: Lying) -> TransactionCoordinator:
    return TransactionCoordinator(lying.store())


API_PATHS: dict[str, Callable[[Lying], object]] = {
    "producer": lambda ly: Producer(ly.store(), "new").init_transactions(),
    # a store opened without the probe is probed all the same: how it was opened vouches for nothing
    "producer-on-a-store-opened-without-probe": lambda ly: Producer(
        open_store(ly.s3.url, ly.options, probe=False), "new").init_transactions(),
    "create-topic": lambda ly: create_topic(ly.store(), "other", SCHEMA),
    "add-partitions": lambda ly: add_partitions(ly.store(), TOPIC, 3),
    "set-config": lambda ly: set_topic_config(ly.store(), TOPIC, {"retention.ms": "1000"}),
    "delete-topic": lambda ly: delete_topic(_coord(ly), TOPIC),
    "group-offsets": lambda ly: _coord(ly).commit_group_offsets(GROUP, {TOPIC: {0: 5}}),
    "abort-timed-out": lambda ly: _coord(ly).abort_timed_out(),
    "expire": lambda ly: _coord(ly).expire_transactional_ids(now=2**62),
    "repair-records": lambda ly: _coord(ly).repair_records(),
    "abort-open": lambda ly: _coord(ly).abort_open(ly.lake.hung_txn),
    "maintain": lambda ly: maintain(_coord(ly), grace_ms=0),
    "compact": lambda ly: compact_partition(_coord(ly), TOPIC, 0),
    "retention": lambda ly: apply_retention(_coord(ly), TOPIC, 0, retention_bytes=1),
    "gc": lambda ly: gc_partition(_coord(ly), TOPIC, 0, grace_ms=0, now=2**62),
    "truncate": lambda ly: truncate_partition(_coord(ly), TOPIC, 0, grace_ms=0, now=2**62),
    "sweep-native-staging": lambda ly: sweep_native_staging(ly.store(), grace_ms=0, now=2**62),
}


@pytest.mark.parametrize("path", sorted(API_PATHS))
def test_every_writing_api_refuses_a_store_ignoring_conditional_writes(lying: Lying, path: str) -> None:
    _assert_refused_and_unchanged(lying, lambda: API_PATHS[path](lying))


def test_readers_still_never_write_nor_probe(lying: Lying) -> None:
    before = _settled(lying.s3)
    requests = lying.proxy.log.requests
    store = lying.store()
    assert sorted(read_snapshot(store, [TOPIC])[TOPIC].column("id").to_pylist()) == lying.lake.committed
    consumer = Consumer(store)
    consumer.subscribe([TOPIC])
    assert sorted(consumer.poll().column("id").to_pylist()) == lying.lake.committed
    assert gc_partition(_coord(lying), TOPIC, 0, grace_ms=0, dry_run=True).deleted_files  # a dry run reads only
    assert lying.proxy.log.requests > requests  # they did go through the lying endpoint
    assert _settled(lying.s3) == before


def test_a_checkpoint_vouches_for_no_store(s3_lake: S3Lake) -> None:
    """A verdict reaches a process only through its own probe or the verdict object a passed probe left, never
    through a coordinator checkpoint: a checkpoint copied every verdict its writer knew into every later
    checkpoint, so removing the verdict objects (after an endpoint changed) could never make anyone probe again."""
    with FaultProxy(s3_lake.endpoint) as proxy:
        options = s3_lake.options_for(proxy.endpoint)
        store = open_store(s3_lake.url, options)
        create_topic(store, "t", pa.schema([("id", pa.int64())]))
        p = Producer(store, "w")
        p.init_transactions()
        for i in range(6):  # past a coordinator checkpoint (every 4th entry)
            with p.transaction():
                p.send("t", [{"id": i}])
        p.coordinator.log.flush()
        parallel.drain(30)
        assert store.list("_txn/checkpoint")
        # the endpoint starts ignoring the condition headers; the operator removes the verdicts it had earned
        proxy.strip_conditional = True
        for name in store.list(probe_module.PROBE_DIR):
            store.delete(f"{probe_module.PROBE_DIR}/{name}")
        probe_module._PROBED.clear()  # a fresh process
        before = _settled(s3_lake)
        with pytest.raises(UnsupportedStoreError, match=REFUSED):
            Producer(open_store(s3_lake.url, options), "w2").init_transactions()
        assert _settled(s3_lake) == before


# -- the Spark sinks, driven as Spark drives them --------------------------------------------------------------


def _spark_schema() -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    return StructType([StructField("id", LongType()), StructField("name", StringType())])


def _rows() -> Iterator[pa.RecordBatch]:
    return iter([pa.record_batch({"id": pa.array([1000, 1001], pa.int64()), "name": pa.array(["a", "b"])})])


def test_the_batch_sink_refuses_a_store_ignoring_conditional_writes(lying: Lying) -> None:
    from txnsink import make_writer
    from txnsink.staging import TaskIds, stage_batches

    def job() -> None:
        w = make_writer({"path": lying.s3.url, "topic": TOPIC, **lying.options}, _spark_schema(), False)
        w.commit([stage_batches(lying.store(), w.plan, _rows(), TaskIds(0, 0, 0), w.txn)])

    _assert_refused_and_unchanged(lying, job)


def test_the_stream_sink_refuses_a_store_ignoring_conditional_writes(lying: Lying, tmp_path: Path) -> None:
    """The driver refuses the store when Spark asks for the micro-batch's writer, before any task stages a file
    (it used to open every store without the probe: micro-batches committed, and some were lost)."""
    from txnsink import make_stream_writer
    from txnsink.staging import TaskIds

    opts = {"path": lying.s3.url, "topic": TOPIC, "checkpointLocation": str(tmp_path / "cp"), **lying.options}

    def micro_batch() -> None:
        w = make_stream_writer(opts, _spark_schema(), False)
        message = w.stage(_rows(), TaskIds(0, 0, 0, "q-lying", 0))
        w.commit([message], 0)

    _assert_refused_and_unchanged(lying, micro_batch)


# -- the command line and the daemon -----------------------------------------------------------------------------

CLI_WRITES = {
    "create-topic": ["create-topic", "other", "--schema", "id BIGINT"],
    "delete-topic": ["delete-topic", TOPIC, "--execute"],
    "add-partitions": ["add-partitions", TOPIC, "--partitions", "3"],
    "set-config": ["set-config", TOPIC, "--set", "retention.ms=1000"],
    "produce": ["produce", TOPIC, "{input}"],
    "compact": ["compact", TOPIC],
    "gc": ["gc", "--grace", "0", "--execute"],
    "repair": ["repair", "--execute"],
    "reset-offsets": ["reset-offsets", GROUP, "--all-topics", "--to-latest", "--execute"],
    "delete-group": ["delete-group", GROUP, "--execute"],
    "resolve-abort": ["resolve", "{hung}", "--abort", "--execute"],
    "expire": ["expire"],
    "daemon": ["coordinator", "run", "--once"],
}


@pytest.mark.parametrize("command", sorted(CLI_WRITES))
def test_every_cli_command_that_writes_refuses_a_store_ignoring_conditional_writes(
        lying: Lying, command: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 500, "name": "x"}\n')
    argv = [a.format(input=source, hung=lying.lake.hung_txn) for a in CLI_WRITES[command]]
    before = _settled(lying.s3)
    code, _out, err = run(capsys, *lying.flags(), *argv)
    assert code == 4 and REFUSED in err and lying.s3.url in err, (code, err)
    assert _settled(lying.s3) == before
