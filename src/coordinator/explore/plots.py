"""Plots of the explore DataFrames (matplotlib, imported only when a plot is drawn). Each takes the DataFrame a
:class:`~coordinator.explore.StoreView` method returns and an optional ``Axes``, draws on it (a new figure when
None) with time on the x axis, and returns the ``Axes``. Counts start their axis at 0; aborts are red, commits
blue; legends sit outside the plotted area, to the right, so they never hide data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from coordinator.coordinator import GROUP_TID_PREFIX

if TYPE_CHECKING:
    from matplotlib.axes import Axes

COMMIT_COLOR = "tab:blue"
ABORT_COLOR = "tab:red"
OFFSETS_COLOR = "tab:gray"


def _axes(ax: Axes | None, size: tuple[float, float] = (8, 3)) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _fig, new = plt.subplots(figsize=size)
    return new


def _time_axis(ax: Axes) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_xlabel("commit time (UTC)")


def plot_commits(commits: pd.DataFrame, topic: str, ax: Axes | None = None) -> Axes:
    """Records per commit over time: one stem per commit at its commit time (``StoreView.commits``)."""
    ax = _axes(ax)
    if len(commits):
        times = commits["time"].dt.tz_convert(None)
        ax.vlines(times, 0, commits["records"], linewidth=2, color=COMMIT_COLOR)
        ax.plot(times, commits["records"], "o", markersize=3, color=COMMIT_COLOR)
        _time_axis(ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("records")
    ax.set_title(f"records per commit to {topic} over time")
    return ax


def plot_lag(history: pd.DataFrame, group: str, ax: Axes | None = None) -> Axes:
    """A consumer group's total lag over time, as a step line (``StoreView.lag_history``)."""
    ax = _axes(ax)
    rows = history[history["group"] == group] if len(history) else history
    if len(rows):
        total = rows.groupby("time")["lag"].sum().sort_index()
        ax.step(total.index.tz_convert(None), total.to_numpy(), where="post", color=COMMIT_COLOR)
        _time_axis(ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("records behind")
    ax.set_title(f"lag of group {group} over time")
    return ax


def plot_transactions(transactions: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Transaction decisions over time (``StoreView.transactions``): one marker per commit (blue) or abort (red,
    with the records it had staged while GC has not deleted them) at its record count; a refused commit in black.
    Group-offset commits (consumer positions, no records) are grey vertical lines, not 0-record commits."""
    ax = _axes(ax)
    if len(transactions):
        tids = transactions["tid"].fillna("").astype(str)
        offsets = transactions[tids.str.startswith(GROUP_TID_PREFIX)]
        producers = transactions[~tids.str.startswith(GROUP_TID_PREFIX)]
        styles = {"CompleteCommit": ("committed", "o", COMMIT_COLOR),
                  "CompleteAbort": ("aborted", "x", ABORT_COLOR)}
        for state, rows in producers.groupby("state"):
            label, marker, color = styles.get(str(state), (str(state), "s", "black"))
            ax.plot(rows["time"].dt.tz_convert(None), rows["records"].astype("Float64").fillna(0).to_numpy(),
                    marker, label=label, markersize=5, color=color, linestyle="none")
        for i, when in enumerate(offsets["time"].dt.tz_convert(None)):
            ax.axvline(when, color=OFFSETS_COLOR, linestyle=":", linewidth=1,
                       label="group offsets commit" if i == 0 else None)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
        _time_axis(ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("records")
    ax.set_title("transactions by state over time")
    return ax
