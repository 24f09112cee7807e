"""The views behind :mod:`coordinator.explore`: a store, a topic and a transaction as HTML for people and as pandas
DataFrames."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from coordinator import inspect as ti
from coordinator.consumer import read_snapshot
from coordinator.coordinator import TransactionCoordinator
from coordinator.explore.frames import Frame
from coordinator.inspect.humanize import fmt_bytes, human
from coordinator.layout import check_name
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.topics import get_topic, list_topics

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Instant columns of the inspect rows (typed as datetimes even when every value is missing).
TIME_COLUMNS = frozenset({"time", "created", "started", "first_commit", "last_commit"})


def to_frame(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
             index: str | list[str] | None = None) -> Frame:
    """Rows of :mod:`coordinator.inspect` as a DataFrame in the explore vocabulary (see the module docstring):
    instants to ``datetime64[ns, UTC]``, ``*_ms`` durations to ``timedelta64`` columns without the suffix, lists
    and dicts to strings; ``columns`` picks and orders columns (all present ones when None). A :class:`Frame`:
    a notebook shows its values for people."""
    cols = list(columns) if columns is not None else list(rows[0].keys()) if rows else []
    df = Frame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
    for c in cols:
        values = [v for v in (r.get(c) for r in rows) if v is not None]
        if values and all(isinstance(v, dt.datetime) for v in values) or (c in TIME_COLUMNS and not values):
            df[c] = pd.to_datetime(df[c], utc=True).astype("datetime64[ns, UTC]")
        elif c.endswith("_ms"):
            df[c] = pd.to_timedelta(df[c], unit="ms").astype("timedelta64[ns]")
            df = df.rename(columns={c: c[:-3]})
        elif values and all(isinstance(v, (list, tuple, dict)) for v in values):
            df[c] = [None if not v else human(c, v) for v in df[c]]
        elif values and len(values) < len(df) and all(isinstance(v, int) and not isinstance(v, bool)
                                                      for v in values):
            df[c] = df[c].astype("Int64")  # integers with gaps stay integers
    if index is not None:
        df = df.set_index(index)
    return df


def _is_number_column(rows: Sequence[Mapping[str, Any]], column: str) -> bool:
    if column.endswith("_ms") or column == "bytes":
        return True
    values = [r.get(column) for r in rows if r.get(column) is not None]
    return bool(values) and all(isinstance(v, (int, float, dt.datetime)) and not isinstance(v, bool)
                                for v in values)


def html_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], caption: str = "",
               headers: Sequence[str] | None = None) -> str:
    """An HTML table of rows with values for people (:func:`coordinator.inspect.humanize.human`); columns of
    numbers, durations, sizes and instants right-aligned, text left-aligned (headers with their column)."""
    heads = headers or columns
    aligns = [" style='text-align:right'" if _is_number_column(rows, c) else " style='text-align:left'"
              for c in columns]
    head = "".join(f"<th{a}>{html.escape(h)}</th>" for h, a in zip(heads, aligns, strict=True))
    body = []
    for r in rows:
        cells = [f"<td{a}>{html.escape(human(c, r.get(c)))}</td>" for c, a in zip(columns, aligns, strict=True)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption style='text-align:left'><b>{html.escape(caption)}</b></caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class TopicView:
    """A topic: its schema, config and partitions."""

    def __init__(self, store: Store, name: str, coordinator: TransactionCoordinator) -> None:
        self.store, self.name, self.coordinator = store, check_name("topic", name), coordinator
        self.meta = get_topic(store, name)

    def describe(self) -> dict[str, Any]:
        """:func:`coordinator.inspect.describe_topic` of this topic."""
        return ti.describe_topic(self.store, self.name, coordinator=self.coordinator)

    def partitions(self) -> pd.DataFrame:
        """One row per partition, indexed by partition (see :meth:`StoreView.partitions`)."""
        return to_frame(self.describe()["partition_info"], index="partition").drop(columns="topic")

    def __repr__(self) -> str:
        cols = ", ".join(f"{f.name}: {f.type}" for f in self.meta.schema)
        return f"TopicView({self.name!r}, {self.meta.partitions} partition(s), schema ({cols}))"

    def _repr_html_(self) -> str:
        d = self.describe()
        fields = [{"column": f["name"], "type": f["type"], "nullable": f["nullable"]} for f in d["fields"]]
        head = (f"<h4>topic {html.escape(self.name)}: {d['partitions']} partition(s), {d['records']} record(s), "
                f"{html.escape(fmt_bytes(d['bytes']))}</h4>")
        if d["config"]:
            head += f"<p>config: {html.escape(human('config', d['config']))}</p>"
        cols = ["partition", "start_offset", "end_offset", "records", "segments", "bytes", "staged_files",
                "last_commit", "damaged"]
        return (head + html_table(fields, ["column", "type", "nullable"], "schema")
                + html_table(d["partition_info"], cols, "partitions",
                             ["partition", "start", "end", "records", "segments", "size", "staged files",
                              "last commit", "damaged"]))


class TransactionView:
    """One transaction's story, as the durable record tells it (:func:`coordinator.inspect.find_transaction`)."""

    def __init__(self, info: Mapping[str, Any]) -> None:
        self.info = dict(info)

    @property
    def state(self) -> str:
        return str(self.info["state"])

    def __repr__(self) -> str:
        who = self.info.get("tid") or self.info.get("app") or "?"
        return f"TransactionView({self.info['txn']!r} of {who!r}: {self.state})"

    def _repr_html_(self) -> str:
        rows = [{"field": k, "value": human(k, v)} for k, v in self.info.items()]
        return html_table(rows, ["field", "value"], f"transaction {self.info.get('txn')}")


class StoreView:
    """A store seen from a notebook (see the module docstring). Read-only.

    Raises (constructor):
        NoStoreError: nothing txnlog wrote is at the store's URL.
    """

    def __init__(self, store: Store, coordinator: TransactionCoordinator | None = None) -> None:
        ti.require_store(store)
        self.store = store
        self.coordinator = coordinator or TransactionCoordinator(store)

    @classmethod
    def open(cls, url: str, options: Mapping[str, str] | StoreOptions | None = None) -> StoreView:
        """Open a store to read it (reading never writes, not even the conditional-write probe).

        Raises:
            NoStoreError: nothing txnlog wrote is at ``url``.
        """
        return cls(open_store(url, options))

    def __repr__(self) -> str:
        st = self.coordinator.log.refresh()
        users = sum(1 for tid in st.producers if not tid.startswith("__"))
        return (f"StoreView({self.store.url!r}: {len(list_topics(self.store))} topic(s), {users} transactional "
                f"id(s), {len(st.groups)} consumer group(s), transaction log at entry {st.seq})")

    # -- tables -----------------------------------------------------------------------------------------------

    def topics(self) -> pd.DataFrame:
        """One row per topic, indexed by name: partitions, records, segments, bytes, created, damaged."""
        return to_frame(ti.topics(self.store, coordinator=self.coordinator),
                        ["name", "partitions", "records", "segments", "bytes", "created", "damaged"], index="name")

    def topic(self, name: str) -> TopicView:
        return TopicView(self.store, name, self.coordinator)

    def partitions(self, topic: str | None = None) -> pd.DataFrame:
        """Every partition of the store (or of ``topic``), indexed by (topic, partition): start and end offsets,
        records, segments, bytes, staged files, last commit, damaged."""
        cols = ["topic", "partition", "start_offset", "end_offset", "records", "segments", "bytes", "staged_files",
                "last_commit", "damaged"]
        return to_frame(ti.partitions(self.store, topic, coordinator=self.coordinator), cols,
                        index=["topic", "partition"])

    def segments(self, topic: str | None = None) -> pd.DataFrame:
        """Every live segment: offsets, records, bytes, transactions it holds, commit times, compacted; many
        small segments in a partition are what ``txnlog compact`` merges."""
        cols = ["topic", "partition", "path", "base_offset", "end_offset", "records", "bytes", "transactions",
                "first_commit", "last_commit", "compacted"]
        return to_frame(ti.segments(self.store, topic, coordinator=self.coordinator), cols)

    def groups(self) -> pd.DataFrame:
        """One row per consumer group, indexed by group: topics, partitions with committed offsets, total lag."""
        return to_frame(ti.groups(self.store, coordinator=self.coordinator), ["group", "topics", "partitions", "lag"],
                        index="group")

    def lag(self, group: str | None = None) -> pd.DataFrame:
        """Per-partition lag of one consumer group (or all): committed offset, end offset, lag."""
        return to_frame(ti.lag(self.store, group, coordinator=self.coordinator),
                        ["group", "topic", "partition", "committed", "end_offset", "lag"])

    def lag_history(self, group: str | None = None, scan: int = 2000) -> pd.DataFrame:
        """Lag over time, rebuilt from the offset commits in the last ``scan`` log entries (see
        :func:`coordinator.inspect.lag_history`): time, seq, group, topic, partition, committed, end_offset,
        lag."""
        return to_frame(ti.lag_history(self.store, group, scan=scan, coordinator=self.coordinator),
                        ["time", "seq", "group", "topic", "partition", "committed", "end_offset", "lag"])

    def producers(self) -> pd.DataFrame:
        """Every transactional id (the reserved ones of group commits left out), indexed by it: pid, epoch,
        state (``Ongoing`` while a transaction is open), open transaction, last decision, idle, timeout."""
        rows = [p for p in ti.transactions(self.store, recent=0, staged=False, coordinator=self.coordinator)
                ["producers"] if not p["reserved"]]
        return to_frame(rows, ["tid", "pid", "epoch", "state", "open_txn", "last_txn", "last_state", "idle_ms",
                               "timeout_ms", "ephemeral"], index="tid")

    def open_transactions(self) -> pd.DataFrame:
        """Producer transactions that staged data and are not decided: started, age, timeout, what they staged."""
        rows = ti.transactions(self.store, recent=0, coordinator=self.coordinator)["open"]
        return to_frame(rows, ["txn", "tid", "state", "started", "age_ms", "timeout_ms", "timed_out", "partitions",
                               "records", "bytes"])

    def transactions(self, recent: int = 1000, scan: int = 2000) -> pd.DataFrame:
        """The last ``recent`` transaction decisions among the last ``scan`` log entries, oldest first: time,
        seq, txn, tid, app, version, state, records, partitions, groups, reason (aborted ones show what they had
        staged, while GC has not deleted it)."""
        rows = ti.transactions(self.store, recent=recent, scan=scan, coordinator=self.coordinator)["recent"]
        return to_frame(list(reversed(rows)), ["time", "seq", "txn", "tid", "app", "version", "state", "records",
                                               "partitions", "groups", "reason"])

    def transaction(self, txn: str) -> TransactionView | None:
        """One transaction's story; None if ``txn`` is not a transaction id."""
        info = ti.find_transaction(self.store, txn, coordinator=self.coordinator)
        return None if info is None else TransactionView(info)

    def history(self, limit: int = 100) -> pd.DataFrame:
        """The last ``limit`` log entries' decisions, newest first, like ``DeltaTable.history()``: seq (the
        store's version), time, operation, txn, tid, app, records, partitions, groups, detail. An abort shows the
        records and partitions its transaction had staged, while GC has not deleted them (as
        :meth:`transactions`)."""
        rows = ti.history(self.store, limit=limit, coordinator=self.coordinator)
        aborts = [r for r in rows if r["operation"] == "ABORT" and r["txn"] and r["partitions"] is None]
        staged = ti.staged_by_txn(self.store, [r["txn"] for r in aborts])
        for r in aborts:
            s = staged.get(r["txn"])
            if s is not None:
                r.update(records=s["records"], partitions=s["partitions"])
        return to_frame(rows,
                        ["seq", "time", "operation", "txn", "tid", "app", "records", "partitions", "groups",
                         "detail"])

    def commits(self, topic: str) -> pd.DataFrame:
        """One row per commit that published to ``topic`` and is still retained, in commit order: commit_seq,
        time, records, partitions touched (from the partitions' indexes, so compaction keeps it)."""
        meta = get_topic(self.store, topic)
        self.coordinator.log.refresh()
        rows: dict[int, dict[str, Any]] = {}
        for p in range(meta.partitions):
            plog = self.coordinator.partition(topic, p)
            plog.refresh()
            for s in plog.segments:
                runs = s.run_list()
                ends = [r[0] for r in runs[1:]] + [s.end_offset]
                for (first, ts, seq), end in zip(runs, ends, strict=True):
                    row = rows.setdefault(seq, {"commit_seq": seq, "time": ti.utc(ts), "records": 0,
                                                "partitions": set()})
                    row["records"] += end - first
                    row["partitions"].add(p)
        out = [r | {"partitions": len(r["partitions"])} for r in sorted(rows.values(), key=lambda r: r["commit_seq"])]
        return to_frame(out, ["commit_seq", "time", "records", "partitions"])

    def read(self, topic: str, *, columns: Sequence[str] | None = None, as_arrow: bool = False,
             ) -> pd.DataFrame | pa.Table:
        """Every committed record of ``topic`` at one transaction-consistent snapshot, with ``_partition``,
        ``_offset``, ``_timestamp`` and ``_producerTimestamp``: a pandas DataFrame (a :class:`Frame`; times as
        ``datetime64[ns, UTC]``), or with ``as_arrow`` a pyarrow Table. ``columns`` selects columns.

        Raises:
            TopicNotFoundError: no such topic. CorruptLogError: a segment is damaged.
        """
        table = read_snapshot(self.store, [topic], coordinator=self.coordinator)[topic]
        table = table.sort_by([("_partition", "ascending"), ("_offset", "ascending")]).drop_columns(["_topic"])
        if columns is not None:
            table = table.select(list(columns))
        if as_arrow:
            return table
        df = Frame(table.to_pandas())
        for name in ("_timestamp", "_producerTimestamp"):
            if name in df:
                df[name] = df[name].astype("datetime64[ns, UTC]")
        return df

    # -- plots ------------------------------------------------------------------------------------------------

    def plot_commits(self, topic: str, ax: Axes | None = None) -> Axes:
        """Records per commit over time (see :func:`coordinator.explore.plots.plot_commits`)."""
        from coordinator.explore.plots import plot_commits

        return plot_commits(self.commits(topic), topic, ax)

    def plot_lag(self, group: str, ax: Axes | None = None) -> Axes:
        """A group's total lag over time (see :func:`coordinator.explore.plots.plot_lag`)."""
        from coordinator.explore.plots import plot_lag

        return plot_lag(self.lag_history(group), group, ax)

    def plot_transactions(self, ax: Axes | None = None) -> Axes:
        """Transactions by state over time (see :func:`coordinator.explore.plots.plot_transactions`)."""
        from coordinator.explore.plots import plot_transactions

        return plot_transactions(self.transactions(), ax)

    # -- display ----------------------------------------------------------------------------------------------

    def _repr_html_(self) -> str:
        tops = ti.topics(self.store, coordinator=self.coordinator)
        tx = ti.transactions(self.store, recent=0, coordinator=self.coordinator)
        producers = [p for p in tx["producers"] if not p["reserved"]]
        return (f"<h4>txnlog store {html.escape(self.store.url)}</h4>"
                f"<p>transaction log at entry {tx['log_seq']}; {len(tx['open'])} open transaction(s); "
                f"{len(tx['waiting'])} request(s) waiting for group commit</p>"
                + html_table(tops, ["name", "partitions", "records", "segments", "bytes", "created", "damaged"],
                             "topics", ["topic", "partitions", "records", "segments", "size", "created", "damaged"])
                + html_table(producers, ["tid", "pid", "epoch", "state", "open_txn", "last_state", "idle_ms",
                                         "timeout_ms"], "producers",
                             ["transactional id", "pid", "epoch", "state", "open txn", "last decision", "idle",
                              "timeout"])
                + html_table(tx["open"], ["txn", "tid", "started", "age_ms", "timeout_ms", "partitions", "records",
                                          "bytes"], "open transactions",
                             ["txn", "transactional id", "started", "age", "timeout", "partitions", "records",
                              "size"]))
