"""The Jupyter exploration API (``coordinator.explore``) on a local store made by the real producer: readable
reprs, HTML with times and sizes for people, DataFrames in one vocabulary (UTC datetimes, timedeltas, no dict or
list columns), the helpers (partitions, segments, groups, history, lag over time, read) and the plot helpers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import matplotlib
import pandas as pd
import pyarrow as pa
import pytest

from cli_lake import GROUP, TOPIC, Lake, build_lake
from coordinator import NoStoreError, TransactionCoordinator
from coordinator.explore import StoreView, to_frame

matplotlib.use("Agg")


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return build_lake(str(tmp_path / "lake"))


def _no_dict_or_list_cells(df: pd.DataFrame) -> None:
    for c in df.columns:
        assert not any(isinstance(v, (dict, list, tuple, set)) for v in df[c]), c


def test_views_have_readable_reprs_and_html(lake: Lake) -> None:
    view = StoreView.open(lake.url)
    assert repr(view) == (f"StoreView('file://{lake.url}': 1 topic(s), 3 transactional id(s), 1 consumer group(s), "
                          "transaction log at entry 5)")
    html = view._repr_html_()
    assert "KiB" in html and "object at 0x" not in html and lake.hung_txn in html
    assert "Z</td>" in html  # instants in ISO-8601 UTC, not epoch ms
    topic = view.topic(TOPIC)
    assert repr(topic) == "TopicView('orders', 2 partition(s), schema (id: int64, name: string))"
    assert "2 partition(s), 11 record(s)" in topic._repr_html_()
    txn = view.transaction(lake.aborted_txn)
    assert txn is not None and repr(txn) == f"TransactionView('{lake.aborted_txn}' of 'etl': CompleteAbort)"
    assert "aborted by producer" in txn._repr_html_()
    assert view.transaction("nope") is None


def test_store_view_refuses_what_is_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(NoStoreError):
        StoreView.open(str(tmp_path / "typo"))
    assert not (tmp_path / "typo").exists()


def test_dataframes_share_one_vocabulary(lake: Lake) -> None:
    view = StoreView.open(lake.url)
    frames = {
        "topics": view.topics(), "partitions": view.partitions(), "segments": view.segments(),
        "groups": view.groups(), "lag": view.lag(), "lag_history": view.lag_history(GROUP),
        "producers": view.producers(), "open": view.open_transactions(), "transactions": view.transactions(),
        "history": view.history(), "commits": view.commits(TOPIC),
    }
    for name, df in frames.items():
        assert len(df), name
        _no_dict_or_list_cells(df)
        for c in df.columns:
            assert not str(c).endswith("_ms"), (name, c)
            kind = df[c].dtype.kind
            if kind == "M":
                assert str(df[c].dtype) == "datetime64[ns, UTC]", (name, c)
            if kind == "m":
                assert str(df[c].dtype) == "timedelta64[ns]", (name, c)
    assert list(frames["partitions"].index) == [(TOPIC, 0), (TOPIC, 1)]
    assert frames["topics"].loc[TOPIC, "records"] == 11 and frames["topics"].loc[TOPIC, "created"].year >= 2024
    assert str(frames["topics"]["created"].dtype) == "datetime64[ns, UTC]"
    assert frames["open"].loc[0, "age"] >= pd.Timedelta(0) and frames["open"].loc[0, "partitions"] == f"{TOPIC}/0"
    assert frames["producers"].loc["hung", "state"] == "Ongoing"
    assert str(frames["lag"]["committed"].dtype) == "Int64"  # integers with a gap stay integers
    assert list(frames["transactions"]["state"]) == ["CompleteCommit", "CompleteAbort", "CompleteCommit"]
    assert list(frames["commits"]["records"]) == [10, 1] and frames["segments"]["records"].sum() == 11
    assert list(frames["history"]["operation"])[:2] == ["INIT", "COMMIT"]


def test_read_returns_pandas_or_arrow(lake: Lake) -> None:
    view = StoreView.open(lake.url)
    df = view.read(TOPIC)
    assert sorted(df["id"]) == lake.committed and str(df["_timestamp"].dtype) == "datetime64[ns, UTC]"
    assert list(df.columns) == ["id", "name", "_partition", "_offset", "_timestamp", "_producerTimestamp"]
    assert str(df["_producerTimestamp"].dtype) == "datetime64[ns, UTC]" and df["_producerTimestamp"].notna().all()
    table = view.read(TOPIC, columns=["id", "_offset"], as_arrow=True)
    assert isinstance(table, pa.Table) and table.column_names == ["id", "_offset"] and table.num_rows == 11


def test_lag_history_follows_offset_commits(lake: Lake) -> None:
    store = lake.open()
    TransactionCoordinator(store).commit_group_offsets(GROUP, {TOPIC: {0: 4, 1: 7}})
    hist = StoreView.open(lake.url).lag_history(GROUP)
    totals = hist.groupby("seq")["lag"].sum()
    assert list(totals) == [8, 9, 0] and hist["time"].is_monotonic_increasing  # commit, crashy, caught up


def test_plots_put_time_on_the_x_axis(lake: Lake) -> None:
    view = StoreView.open(lake.url)
    ax = view.plot_commits(TOPIC)
    lo, hi = ax.get_xlim()
    when = matplotlib.dates.num2date(lo).replace(tzinfo=None)
    assert abs(when - dt.datetime.now(dt.UTC).replace(tzinfo=None)) < dt.timedelta(hours=1)  # a time axis
    assert "commit time" in ax.get_xlabel() and "over time" in ax.get_title()
    assert view.plot_lag(GROUP).get_title() == f"lag of group {GROUP} over time"
    assert view.plot_transactions().get_legend() is not None


def test_to_frame_types_empty_time_columns() -> None:
    df = to_frame([{"time": None, "age_ms": 5, "tags": ["a", "b"], "n": 1}, {"time": None, "age_ms": None,
                                                                              "tags": None, "n": None}])
    assert str(df["time"].dtype) == "datetime64[ns, UTC]" and "age_ms" not in df
    assert df.loc[0, "age"] == pd.Timedelta(milliseconds=5) and df.loc[0, "tags"] == "a, b"
    assert str(df["n"].dtype) == "Int64"


def test_frames_show_values_for_people(lake: Lake) -> None:
    view = StoreView.open(lake.url)
    opened = view.open_transactions()
    assert str(opened["timeout"].dtype) == "timedelta64[ns]"  # the data keeps its type
    html = opened._repr_html_()
    assert "1m00s" in html and "days" not in html and "Z</td>" in html
    history = view.history()._repr_html_()
    for marker in (">NaN<", ">NaT<", ">None<", "&lt;NA&gt;", ">nan<"):
        assert marker not in history, marker
    assert ">-</td>" in history
    assert "text-align: left" in history and "text-align: right" in history
    derived = view.transactions()
    assert type(derived[derived.state == "CompleteAbort"]).__name__ == "Frame"


def test_html_tables_align_text_left_and_numbers_right(lake: Lake) -> None:
    html = StoreView.open(lake.url)._repr_html_()
    assert "<td style='text-align:left'>hung</td>" in html
    assert "<th style='text-align:left'>transactional id</th>" in html
    assert "<th style='text-align:right'>size</th>" in html


def test_history_shows_an_aborts_records_and_partitions(lake: Lake) -> None:
    history = StoreView.open(lake.url).history()
    abort = history[history["operation"] == "ABORT"].iloc[0]
    assert abort["txn"] == lake.aborted_txn
    assert abort["records"] > 0 and f"{TOPIC}/" in abort["partitions"]


def test_plots_colour_aborts_red_keep_legends_outside_and_counts_from_zero(lake: Lake) -> None:
    from matplotlib.colors import to_hex

    TransactionCoordinator(lake.open()).commit_group_offsets(GROUP, {TOPIC: {0: 4, 1: 7}})  # no records
    view = StoreView.open(lake.url)
    ax = view.plot_transactions()
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert to_hex(lines["aborted"].get_color()) == "#d62728"  # tab:red
    assert to_hex(lines["committed"].get_color()) != "#d62728"
    legend = ax.get_legend()
    assert legend is not None and legend.get_bbox_to_anchor().x0 >= ax.get_window_extent().x1  # right of the axes
    assert ax.get_ylim()[0] == 0
    committed_counts = [float(y) for y in lines["committed"].get_ydata()]
    assert 0 not in committed_counts  # the group-offset commit is no 0-record commit
    assert "group offsets commit" in lines
    assert view.plot_lag(GROUP).get_ylim()[0] == 0 and view.plot_commits(TOPIC).get_ylim()[0] == 0
