"""Read-only inspection of a store (the operator views): topics, partitions, segments, consumer groups and lag,
record dumps (:mod:`coordinator.inspect.catalog`), transactions (:mod:`coordinator.inspect.txns`) and integrity checks
(:mod:`coordinator.inspect.verify`). Rows are plain dicts in one vocabulary (:mod:`coordinator.inspect.common`,
:mod:`coordinator.inspect.humanize`): the command line prints them, notebooks turn them into DataFrames
(:mod:`coordinator.explore`).

Nothing here writes to the store: a partition record not yet written is computed from the log entry that defines
it, and offsets come from the log's state. A damaged partition does not stop the views of the others: its row
carries ``damaged`` (the error, naming the file) and the figures it could not read are None.

```python
from coordinator import open_store
from coordinator import inspect as ti
store = open_store("file:///data/lake")
ti.require_store(store)             # NoStoreError when nothing txnlog wrote is there
ti.topics(store)                    # one row per topic
ti.transactions(store)["open"]      # producer transactions that staged data and are not decided
ti.verify(store)                    # [] when every file is sound
```
"""

from coordinator.errors import GroupNotFoundError, InvalidOptionError
from coordinator.inspect.catalog import (
    describe_topic,
    dump,
    groups,
    iter_dump,
    lag,
    partition_info,
    partitions,
    segments,
    topics,
)
from coordinator.inspect.common import (
    ABORTED,
    COMMITTED,
    ONGOING,
    STATES,
    UNKNOWN,
    ProgressFn,
    require_store,
    utc,
)
from coordinator.inspect.txns import (
    decision_rows,
    find_transaction,
    history,
    lag_history,
    log_tail,
    recent_transactions,
    staged_by_txn,
    transactions,
)
from coordinator.inspect.verify import Problem, RecordRepair, VerifyReport, repair_plan, verify

__all__ = [
    "ABORTED", "COMMITTED", "ONGOING", "STATES", "UNKNOWN", "GroupNotFoundError", "InvalidOptionError", "Problem",
    "ProgressFn", "RecordRepair", "VerifyReport", "decision_rows", "describe_topic", "dump", "find_transaction",
    "groups", "history", "iter_dump", "lag", "lag_history", "log_tail", "partition_info", "partitions",
    "recent_transactions", "repair_plan", "require_store", "segments", "staged_by_txn", "topics", "transactions",
    "utc", "verify",
]
