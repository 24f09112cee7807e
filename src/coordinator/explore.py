"""Exploring a store in Jupyter: rich HTML views of a store, a topic and a transaction, and pandas DataFrames of
partitions, commits, transactions and lag ready to plot.

```python
from coordinator.explore import StoreView
lake = StoreView.open("file:///data/lake")
lake                          # topics and transactions as HTML tables
lake.topic("orders")          # schema and partitions
lake.commits("orders")        # one row per commit: time, records, partitions
lake.transactions()           # recent transactions: state, duration
lake.lag("etl")               # per-partition lag of a consumer group
```

Everything here is read-only (see :mod:`coordinator.inspect`).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from coordinator import inspect as ti
from coordinator.coordinator import TransactionCoordinator
from coordinator.layout import check_name
from coordinator.store import Store, StoreOptions, open_store
from coordinator.topics import get_topic


def _html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>" for c in columns)
        + "</tr>"
        for r in rows
    )
    cap = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class TopicView:
    """A topic: its schema and per-partition offsets, bytes and segment counts."""

    def __init__(self, store: Store, name: str, coordinator: TransactionCoordinator) -> None:
        self.store, self.name, self.coordinator = store, check_name("topic", name), coordinator
        self.meta = get_topic(store, name)

    def partitions(self) -> pd.DataFrame:
        """One row per partition: start and end offsets, records, bytes, segments."""
        return ti.frame(ti.describe_topic(self.store, self.name, coordinator=self.coordinator)["partition_info"])

    def _repr_html_(self) -> str:
        fields = [{"column": f.name, "type": str(f.type), "nullable": f.nullable} for f in self.meta.schema]
        parts = ti.describe_topic(self.store, self.name, coordinator=self.coordinator)["partition_info"]
        cols = list(parts[0].keys()) if parts else ["partition"]
        return (f"<h4>topic {html.escape(self.name)} ({self.meta.partitions} partitions)</h4>"
                + _html_table(fields, ["column", "type", "nullable"], "schema")
                + _html_table(parts, cols, "partitions"))


class TransactionView:
    """One transaction's status as the durable record tells it."""

    def __init__(self, info: Mapping[str, Any]) -> None:
        self.info = dict(info)

    def _repr_html_(self) -> str:
        rows = [{"field": k, "value": v} for k, v in self.info.items()]
        return _html_table(rows, ["field", "value"], f"transaction {self.info.get('txn')}")

    def __repr__(self) -> str:
        return f"TransactionView({self.info!r})"


class StoreView:
    """A store seen from a notebook."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.coordinator = TransactionCoordinator(store)

    @classmethod
    def open(cls, url: str, options: Mapping[str, str] | StoreOptions | None = None) -> StoreView:
        """Open a store read-only (no conditional-write probe, which would write)."""
        return cls(open_store(url, options, probe=False))

    def topics(self) -> pd.DataFrame:
        """One row per topic: partitions, records, segments, bytes."""
        return ti.frame(ti.topics(self.store, coordinator=self.coordinator))

    def topic(self, name: str) -> TopicView:
        return TopicView(self.store, name, self.coordinator)

    def transaction(self, txn: str) -> TransactionView | None:
        info = ti.find_transaction(self.store, txn, coordinator=self.coordinator)
        return None if info is None else TransactionView(info)

    def producers(self) -> pd.DataFrame:
        """Every transactional id with pid, epoch, state and the age of its open transaction."""
        return ti.frame(ti.transactions(self.store, coordinator=self.coordinator)["producers"])

    def transactions(self, scan: int = 2000) -> pd.DataFrame:
        """Transaction decisions found in the last ``scan`` log entries: outcome (committed, aborted, skipped,
        rejected), decision time, records, partitions touched, groups and reason."""
        entries = ti.log_tail(self.store, scan, self.coordinator.log.refresh().seq)
        rows = [r for e in entries for r in ti.decision_rows(e, e.ts)]
        cols = ["txn", "tid", "app", "outcome", "ts", "records", "partitions", "groups", "reason", "seq"]
        df = pd.DataFrame(rows, columns=cols)
        df["ts"] = pd.to_datetime(df["ts"], unit="ms", utc=True)
        df["partitions"] = df["partitions"].map(lambda v: ",".join(v) if isinstance(v, list) else v)
        df["groups"] = df["groups"].map(lambda v: ",".join(v) if isinstance(v, list) else v)
        return df

    def commits(self, topic: str) -> pd.DataFrame:
        """One row per commit that published to ``topic``: commit time, records, partitions touched."""
        meta = get_topic(self.store, topic)
        rows: dict[str, dict[str, Any]] = {}
        for p in range(meta.partitions):
            plog = self.coordinator.partition(topic, p)
            plog.refresh()
            for seg in plog.segments:
                runs = seg.run_list()
                ends = [r[0] for r in runs[1:]] + [seg.end_offset]
                for (first, ts, seq), end in zip(runs, ends, strict=True):
                    row = rows.setdefault(f"{seq}", {"commit_seq": seq, "time": ts, "records": 0, "partitions": 0})
                    row["records"] += end - first
                    row["partitions"] += 1
        df = pd.DataFrame(sorted(rows.values(), key=lambda r: r["commit_seq"]),
                          columns=["commit_seq", "time", "records", "partitions"])
        df["time"] = pd.to_datetime(df["time"], unit="ms", utc=True)
        return df

    def lag(self, group: str | None = None) -> pd.DataFrame:
        """Per-partition lag of one consumer group (or all)."""
        return ti.frame(ti.lag(self.store, group, coordinator=self.coordinator))

    def _repr_html_(self) -> str:
        tops = ti.topics(self.store, coordinator=self.coordinator)
        tx = ti.transactions(self.store, coordinator=self.coordinator)
        tcols = list(tops[0].keys()) if tops else ["name"]
        pcols = ["tid", "pid", "epoch", "state", "txn", "age_ms"]
        return (f"<h4>txnlog store {html.escape(self.store.url)}</h4>"
                + _html_table(tops, tcols, "topics")
                + _html_table([p for p in tx["producers"] if not p["reserved"]], pcols, "producers")
                + f"<p>{len(tx['open'])} open, {len(tx['waiting'])} waiting, transaction log at entry "
                  f"{tx['log_seq']}</p>")
