"""A store with a known history for the operator-view tests (``test_inspect.py``, ``test_cli.py``,
``test_explore.py``), made by the real producer on any backend:

* topic ``orders`` (2 partitions);
* producer ``etl`` commits ids 0-9 (keyed by id) with offset 2 of partition 0 for group ``billing``, then stages
  id 99 in partition 0 and aborts;
* producer ``crashy`` commits id 50 in partition 1 and dies after the commit point, before writing the partition
  record (the record is *pending*: readers compute it from the log);
* producer ``hung`` stages id 77 in partition 0 and never finishes (an open transaction).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from coordinator import Producer, ProducerConfig, Store, create_topic, faults, open_store, read_snapshot
from coordinator.faults import InjectedCrash
from coordinator.partitioner import LEGACY

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
TOPIC = "orders"
GROUP = "billing"


@dataclass
class Lake:
    """The store and what was done to it (see the module docstring)."""

    url: str
    options: dict[str, str]
    committed: list[int]
    aborted_txn: str
    crashy_txn: str
    hung: Producer
    hung_txn: str

    def open(self) -> Store:
        return open_store(self.url, self.options)


def _crash_before_records(name: str) -> None:
    if name == "record.before":
        raise InjectedCrash(name)


def build_lake(url: str, options: dict[str, str] | None = None, *, hung_timeout_ms: int = 60_000) -> Lake:
    """Fill the store at ``url`` (see the module docstring)."""
    opts = dict(options or {})
    store = open_store(url, opts)
    # the legacy key placement: the figures the CLI tests expect (offsets per partition) were computed with it
    create_topic(store, TOPIC, SCHEMA, 2, config={"partitioner": LEGACY})
    etl = Producer(store, "etl")
    etl.init_transactions()
    with etl.transaction():
        etl.send(TOPIC, [{"id": i, "name": f"n{i}"} for i in range(10)], key="id")
        etl.send_offsets_to_transaction({TOPIC: {0: 2}}, group_id=GROUP)
    aborted = etl.begin_transaction()
    etl.send(TOPIC, [{"id": 99, "name": "aborted"}], partition=0)
    etl.flush()
    etl.abort_transaction()
    crashy = Producer(open_store(url, opts), "crashy")
    crashy.init_transactions()
    # its init may start a background checkpoint; one that ran after the crash would write the pending record
    crashy.coordinator.log.flush()
    crashy_txn = crashy.begin_transaction()
    crashy.send(TOPIC, [{"id": 50, "name": "pending record"}], partition=1)
    with pytest.raises(InjectedCrash), faults.injected(_crash_before_records):
        crashy.commit_transaction()
    hung = Producer(open_store(url, opts), "hung", config=ProducerConfig(transaction_timeout_ms=hung_timeout_ms))
    hung.init_transactions()
    hung_txn = hung.begin_transaction()
    hung.send(TOPIC, [{"id": 77, "name": "hung"}], partition=0)
    hung.flush()
    return Lake(url, opts, sorted([*range(10), 50]), aborted, crashy_txn, hung, hung_txn)


def committed_ids(store: Store) -> list[int]:
    """Committed ids, read by a plain reader."""
    return sorted(read_snapshot(store, [TOPIC])[TOPIC].column("id").to_pylist())


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the command line in-process: (exit code, stdout, stderr)."""
    from coordinator.cli import main

    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run a command with ``--json``, check it exited 0 and parse its output."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)
