"""What the read-only inspection modules (:mod:`coordinator.inspect`, :mod:`coordinator.inspect.txns`,
:mod:`coordinator.inspect.verify`) share: the store check, time values, and the vocabulary of their rows.

Rows are plain dicts with one vocabulary everywhere (the command line's ``--json`` prints them as they are):

* instants are timezone-aware UTC :class:`datetime.datetime` values (``time``, ``created``, ``started``,
  ``last_commit``), None when unknown; JSON prints them as ISO-8601 UTC (``2026-11-21T10:00:01.123Z``);
* durations are integers of milliseconds with an ``_ms`` suffix (``age_ms``, ``timeout_ms``, ``idle_ms``);
* sizes are integers of bytes (``bytes``);
* transaction and producer states are Kafka's ``TransactionState`` names (:data:`STATES`): ``Ongoing``,
  ``CompleteCommit``, ``CompleteAbort`` (a refused commit is ``CompleteAbort`` with its reason), ``Empty``, and
  ``Unknown`` when the retained log no longer says.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import NoStoreError, UnsupportedFormatError
from coordinator.layout import FORMAT_PATH, TXN, TXN_LOG
from coordinator.records import FORMAT_VERSION, decode_json
from coordinator.store import Store
from coordinator.txnstates import TxnState

#: Called with the number of units just finished (segments read, entries checked) for progress display.
ProgressFn = Callable[[int], None]

ONGOING = TxnState.ONGOING.value
COMMITTED = TxnState.COMPLETE_COMMIT.value
ABORTED = TxnState.COMPLETE_ABORT.value
UNKNOWN = "Unknown"
#: Every state a transaction row may show.
STATES = (ONGOING, COMMITTED, ABORTED, UNKNOWN)


def utc(ms: int | float | None) -> dt.datetime | None:
    """Epoch milliseconds as an aware UTC datetime; None for None and for 0 (the "unknown" of older records)."""
    if not ms:
        return None
    return dt.datetime.fromtimestamp(int(ms) / 1000, tz=dt.UTC)


def coord_for(store: Store, coordinator: TransactionCoordinator | None) -> TransactionCoordinator:
    """``coordinator``, or a new one on ``store`` (opening it reads the log; it writes nothing)."""
    return coordinator if coordinator is not None else TransactionCoordinator(store)


def require_store(store: Store) -> None:
    """Check that ``store`` holds a txnlog store of this format, writing nothing (one GET; one or two LISTs when
    the format file is absent).

    Raises:
        NoStoreError: nothing txnlog wrote is at the store's URL (no ``_txn/`` folder): a typo in the URL, or a
            store not created yet (``create-topic`` or a first write creates one).
        UnsupportedFormatError: the store was written by another txnlog store format.
        CorruptLogError: the format file is damaged.
    """
    try:
        data = store.get(FORMAT_PATH)
    except FileNotFoundError:
        if store.list(TXN_LOG, limit=1) or store.list_dirs(TXN):
            return  # written before the format file existed: reading its entries tells the format
        raise NoStoreError(
            f"no txnlog store at {store.url} (it has no {TXN}/ folder): check the URL; a store is created by "
            "'txnlog create-topic' or by the first write of a producer or Spark job"
        ) from None
    d = decode_json(data, FORMAT_PATH, "store format file")
    if d.get("format") != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"store {store.url} has txnlog store format {d.get('format')!r}; this txnlog reads format "
            f"{FORMAT_VERSION} only"
        )
