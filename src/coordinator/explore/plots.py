"""Plots of the explore DataFrames (matplotlib, imported only when a plot is drawn). Each takes the DataFrame a
:class:`~coordinator.explore.StoreView` method returns and an optional ``Axes``, draws on it (a new figure when
None) with time on the x axis, and returns the ``Axes``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from matplotlib.axes import Axes


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
        ax.vlines(times, 0, commits["records"], linewidth=2)
        ax.plot(times, commits["records"], "o", markersize=3)
        _time_axis(ax)
    ax.set_ylabel("records")
    ax.set_title(f"records per commit to {topic} over time")
    return ax


def plot_lag(history: pd.DataFrame, group: str, ax: Axes | None = None) -> Axes:
    """A consumer group's total lag over time, as a step line (``StoreView.lag_history``)."""
    ax = _axes(ax)
    rows = history[history["group"] == group] if len(history) else history
    if len(rows):
        total = rows.groupby("time")["lag"].sum().sort_index()
        ax.step(total.index.tz_convert(None), total.to_numpy(), where="post")
        _time_axis(ax)
    ax.set_ylabel("records behind")
    ax.set_title(f"lag of group {group} over time")
    return ax


def plot_transactions(transactions: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Transaction decisions over time, one marker per decision, by state (``StoreView.transactions``)."""
    ax = _axes(ax)
    if len(transactions):
        for state, rows in transactions.groupby("state"):
            ax.plot(rows["time"].dt.tz_convert(None), rows["records"].fillna(0), "o", label=str(state),
                    markersize=4)
        ax.legend()
        _time_axis(ax)
    ax.set_ylabel("records")
    ax.set_title("transactions by state over time")
    return ax
