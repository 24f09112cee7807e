"""Opening a store that ignores conditional writes through the writing paths of the system: each must refuse it
before its first conditional write.

A :class:`history.stores.LyingStore` is a gateway in front of a scratch copy of the history's store (a sibling
root holding the same topics and a few commits, so that every path has work to do): ``put_if_absent`` overwrites
and reports success. :func:`open_lying` drives one writing path through it, opened the way that path opens its
stores (the sinks' ``open_store(..., probe=False)`` included), and records what happened as a ``lying-store``
operation: the conditional writes that reached the lie (``accepted``) and the path's outcome. The checker's rule
``lying-store-accepted`` fires unless the path failed saying the store does not honour conditional writes, with no
conditional write of its own done.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from coordinator import MemoryStore, Producer, Store, TransactionCoordinator, open_store
from history.checker import OK, UNKNOWN, MiscOp
from history.stores import LyingStore

#: The writing paths, in the order a history's seed picks them.
PATHS = ("producer", "batch-sink", "stream-sink", "maintenance", "cli")
#: Commands of the operator's command line that write (``FILE``: a JSON Lines file of one record).
CLI_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("compact", "a", "--target-bytes", "1048576"),
    ("produce", "a", "FILE", "--partition", "0"),
    ("expire",),
    ("repair", "--execute"),
    ("coordinator", "run", "--once"),
)
#: What a refusal says (``UnsupportedStoreError``).
REFUSAL = "does not honour conditional writes"
TOPIC, SINK = "a", "s"


def scratch_url(url: str) -> str:
    """A sibling root of the history's store (same backend, same options)."""
    return url.rstrip("/") + "-lying"


@contextlib.contextmanager
def _lying_opens(stores: list[LyingStore]) -> Iterator[None]:
    """While in the block, the sinks and the command line open their stores through the lying gateway (with the
    probe setting they ask for); every store opened is added to ``stores``."""
    import coordinator.cli.config
    import txnsink.batch
    import txnsink.plan
    import txnsink.stream

    def lying_open_store(url: str, options: Any = None, *, probe: bool = True) -> Store:
        store = LyingStore(open_store(url, options, probe=probe))
        stores.append(store)
        return store

    mods = (txnsink.batch, txnsink.plan, txnsink.stream, coordinator.cli.config)
    saved = [m.open_store for m in mods]
    for m in mods:
        m.open_store = lying_open_store  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, f in zip(mods, saved, strict=True):
            m.open_store = f  # type: ignore[attr-defined]


def _prepare(url: str, options: dict[str, str], setup: Callable[[str, dict[str, str]], None]) -> None:
    """The scratch store, honestly: the topics, and three commits to ``a/0`` (work for compaction)."""
    setup(url, options)
    producer = Producer(open_store(url, options), "honest")
    producer.init_transactions()
    for i in range(3):
        producer.begin_transaction()
        producer.send(TOPIC, [{"v": f"honest/0/{i}/0"}], partition=0)
        producer.commit_transaction()


def _drive(path: str, url: str, options: dict[str, str], cli: tuple[str, ...], stores: list[LyingStore],
           spark_schema: Callable[[], Any], schema: pa.Schema) -> str:
    """Run one writing path against the gateway; returns what it did (raises what it raised)."""
    row = pa.RecordBatch.from_pylist([{"v": "liar/0/0/0"}], schema=schema)
    if path == "producer":
        store = LyingStore(open_store(url, options))
        stores.append(store)
        producer = Producer(store, "liar")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, [{"v": "liar/0/0/0"}], partition=0)
        producer.commit_transaction()
        return "committed a transaction"
    if path == "maintenance":
        from coordinator import maintenance

        store = LyingStore(open_store(url, options))
        stores.append(store)
        maintenance.maintain(TransactionCoordinator(store), grace_ms=0, target_bytes=1 << 20)
        return "ran a maintenance pass"
    if path == "batch-sink":
        from txnsink import make_writer
        from txnsink.staging import TaskIds, stage_batches

        writer = make_writer({"path": url, "topic": SINK, **options}, spark_schema(), False)
        import txnsink.batch

        task = txnsink.batch.open_store(url, options, probe=False)  # what a task opens (TxnBatchWriter.write)
        msg = stage_batches(task, writer.plan, iter([row]), TaskIds(0, 0, 1), writer.txn)
        writer.commit([msg])
        return "committed a batch job"
    if path == "stream-sink":
        from txnsink import make_stream_writer
        from txnsink.staging import TaskIds

        streaming = make_stream_writer({"path": url, "topic": SINK, **options}, spark_schema(), False)
        message = streaming.stage(iter([row]), TaskIds(0, 0, 1, "liar-query", 0))
        streaming.commit([message], 0)
        return "committed a micro-batch"
    return _cli(url, options, cli)


def cli_store_flags(url: str, options: dict[str, str]) -> list[str]:
    """The command line's store flags for ``url`` and the history's store options."""
    flags = ["--store", url]
    for key, flag in (("s3.endpoint", "--s3-endpoint"), ("s3.region", "--s3-region"), ("s3.key", "--s3-key"),
                      ("s3.secret", "--s3-secret"), ("azure.account", "--azure-account"),
                      ("azure.endpoint", "--azure-endpoint"), ("azure.key", "--azure-key"),
                      ("azure.sasToken", "--azure-sas-token"), ("gcs.endpoint", "--gcs-endpoint"),
                      ("gcs.project", "--gcs-project"), ("gcs.token", "--gcs-token")):
        if options.get(key):
            flags += [flag, options[key]]
    return flags


def run_cli(url: str, options: dict[str, str], args: list[str]) -> tuple[int, str]:
    """Run ``txnlog ARGS`` on the store at ``url`` in this process; returns the exit code and what it printed."""
    from coordinator.cli import main

    out, errs = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(errs):
        code = main([*cli_store_flags(url, options), *args])
    return code, (out.getvalue() + errs.getvalue()).strip()


def _cli(url: str, options: dict[str, str], command: tuple[str, ...]) -> str:
    with tempfile.TemporaryDirectory(prefix="txnlog-lying-") as tmp:
        data = os.path.join(tmp, "one.jsonl")
        with open(data, "w", encoding="utf-8") as fh:
            fh.write('{"v": "liar/0/0/0"}\n')
        code, said = run_cli(url, options, [data if a == "FILE" else a for a in command])
    if code != 0:
        raise RuntimeError(f"txnlog {' '.join(command)} exited {code}: {said}")
    return "exited 0"


def open_lying(op: MiscOp, url: str, options: dict[str, str], path: str, cli: tuple[str, ...],
               setup: Callable[[str, dict[str, str]], None], spark_schema: Callable[[], Any],
               schema: pa.Schema) -> MiscOp:
    """Drive writing ``path`` (with the command line: ``cli``) against a lying gateway to a scratch copy of the store
    at ``url``, filling in ``op``: outcome ``ok`` when the path went through, else its error; ``accepted``, the
    conditional writes that reached the gateway."""
    scratch = scratch_url(url)
    stores: list[LyingStore] = []
    op.detail = path if path != "cli" else f"cli: txnlog {' '.join(cli)}"
    try:
        _prepare(scratch, options, setup)
        with _lying_opens(stores):
            op.detail += f" -> {_drive(path, scratch, options, cli, stores, spark_schema, schema)}"
        op.outcome = OK
    except Exception as exc:
        op.outcome, op.error = UNKNOWN, f"{type(exc).__name__}: {exc}"
    finally:
        op.accepted = sorted({p for s in stores for p in s.accepted})
        if scratch.startswith("memory://"):
            MemoryStore.drop(scratch)
    return op
