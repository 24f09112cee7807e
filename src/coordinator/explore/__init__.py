"""Exploring a store in Jupyter: readable views of a store, a topic and a transaction (HTML tables with times and
sizes for people), pandas DataFrames ready to analyse and plot, and plot helpers (:mod:`coordinator.explore.plots`).

```python
from coordinator.explore import StoreView
lake = StoreView.open("file:///data/lake")
lake                          # topics, producers and open transactions as HTML tables
lake.partitions()             # every partition, indexed by (topic, partition)
lake.segments("orders")       # live segments: which partitions need compaction
lake.history()                # one row per decision of the log, newest first (like DeltaTable.history())
lake.lag_history("billing")   # lag over time, from the offset commits in the log
lake.read("orders")           # the committed records as pandas (as_arrow=True: a pyarrow Table)
lake.plot_commits("orders")   # records per commit over time
```

DataFrames follow one vocabulary: instants are ``datetime64[ns, UTC]`` columns, durations ``timedelta64`` columns
(a row's ``age_ms`` becomes ``age``), sizes are bytes, no column holds dicts or lists (lists become comma-joined
strings). A notebook shows them with values for people, as the command line does (durations as ``1.6s``,
instants in ISO-8601 UTC, ``-`` for every missing value, text left-aligned: :mod:`coordinator.explore.frames`);
their data keeps the types above. Everything here is read-only (see :mod:`coordinator.inspect`).
"""

from coordinator.explore.frames import Frame
from coordinator.explore.views import StoreView, TopicView, TransactionView, html_table, to_frame

__all__ = ["Frame", "StoreView", "TopicView", "TransactionView", "html_table", "to_frame"]
