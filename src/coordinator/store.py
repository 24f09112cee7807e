"""The object-store layer and its contract.

Everything txnlog does rests on four properties every backend must give, stated the way delta-rs states its log
store contract:

1. **Atomic visibility.** An object written by :meth:`Store.put` or :meth:`Store.put_if_absent` is either absent or
   complete: no reader ever sees a partial object.
2. **Mutual exclusion.** Of any number of concurrent :meth:`Store.put_if_absent` calls on one path, exactly one
   creates the object; every other one learns that the path already holds other bytes. A call whose own write
   succeeded but whose reply was lost (the client retried) still reports success: the store compares the bytes it
   finds with the bytes it sent, on every backend. So ``True`` means "these bytes are there", not "I created
   them", and **a caller takes ``True`` as its own win only if its bytes are unique to it**: every conditionally
   created object carries a unique writer token, or is a pure function of what is already decided, so that equal
   bytes really are the same object. The callers: transaction-log entries (a fresh token per entry); topic
   definitions, every version (a fresh token per definition written, so re-creating a deleted topic's name, or
   a stale administrator writing the same change, loses); probe objects (a fresh path per probe); partition
   records (derived: a pure function of their log entry, so either writer may take them); the store format file
   and a topic's deletion marker (facts whose creator claims nothing: it reads on whatever the answer).
3. **Consistent listing.** Once a write has returned, :meth:`Store.list` shows the object (read-after-write and
   list-after-write consistency, as S3 has given since 2020).
4. **Read-your-writes.** :meth:`Store.get` after a returned write gives its bytes.
5. **Durability.** A write that returned survives the writer's process dying. What each backend adds:
   :class:`MemoryStore` holds objects for the life of the process only (tests, notebooks); :class:`LocalStore`
   fsyncs the file *and the folder entry* (after ``os.link`` / ``os.replace``, and every folder it creates), so a
   returned write also survives power loss on a file system that honours fsync; S3 acknowledges a ``PutObject``
   only once it is stored redundantly.
6. **One clock.** :meth:`Store.now` is the store's own clock, the one that stamps :attr:`ObjectInfo.mtime`: ages
   (GC's grace period, transaction timeouts) are judged on it, never on the caller's clock, and so are the times
   the transaction log records (through a process's reading of it, :mod:`coordinator.clock`).

Paths given to a store are relative, ``/``-separated, and never start with ``/`` nor contain ``..``; the store
joins them to its root. Every call counts one request per backend operation kind in :attr:`Store.counters`, so
users and benchmarks can see what an operation costs.

Backends live in :mod:`coordinator.backends` (memory for ``memory://``, a local folder for plain paths and
``file:``, S3 for ``s3://``, GCS for ``gs://``); :func:`coordinator.store_factory.open_store` picks one from a
URL. This module imports none of them, so the contract reads on its own.
"""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.errors import CommitStateUnknownError, InvalidOptionError, StoreError

__all__ = ["TEMP_PREFIX", "ObjectInfo", "RequestCounters", "Store", "StoreOptions", "check_relative", "folder_prefix"]

TEMP_PREFIX = ".tmp-"


class RequestCounters:
    """Thread-safe counts of store requests, by operation kind (``put_if_absent``, ``put``, ``get``, ``list``,
    ``delete``, ``head``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def snapshot(self) -> dict[str, int]:
        """The counts so far, as a plain dict."""
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def __getitem__(self, kind: str) -> int:
        with self._lock:
            return self._counts[kind]


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its path relative to the store root, size in bytes and modification time (epoch s)."""

    path: str
    size: int
    mtime: float


@dataclass(frozen=True)
class StoreOptions:
    """Store access options, as the Spark options and the CLI take them. Never persisted; ``repr`` hides secrets."""

    #: The option keys (lower case) :meth:`from_options` reads.
    KEYS = frozenset({"s3.endpoint", "s3.key", "s3.secret", "s3.region", "s3.token", "s3.maxattempts",
                      "s3.timebudget", "s3.connecttimeout", "s3.readtimeout",
                      "azure.account", "azure.key", "azure.sastoken", "azure.endpoint",
                      "gcs.project", "gcs.token", "gcs.endpoint"})

    endpoint: str | None = None
    key: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    region: str | None = None
    token: str | None = field(default=None, repr=False)
    #: retry budget and timeouts of the S3 backend (None: its defaults)
    max_attempts: int | None = None
    time_budget: float | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    #: Azure Blob Storage (``az://``, ``abfs://``, ``abfss://``): account name, account key, SAS token, endpoint
    azure_account: str | None = None
    azure_key: str | None = field(default=None, repr=False)
    azure_sas_token: str | None = field(default=None, repr=False)
    azure_endpoint: str | None = None
    #: Google Cloud Storage (``gs://``): project, token (a credentials file path, or ``anon``), endpoint
    gcs_project: str | None = None
    gcs_token: str | None = field(default=None, repr=False)
    gcs_endpoint: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StoreOptions:
        """Pick the ``s3.*``, ``azure.*`` and ``gcs.*`` keys (case-insensitive) out of a Spark-style option map."""
        lower = {k.lower(): v for k, v in options.items()}
        return cls(
            endpoint=lower.get("s3.endpoint") or None,
            key=lower.get("s3.key") or None,
            secret=lower.get("s3.secret") or None,
            region=lower.get("s3.region") or None,
            token=lower.get("s3.token") or None,
            max_attempts=_opt_int(lower, "s3.maxattempts", "s3.maxAttempts"),
            time_budget=_opt_number(lower, "s3.timebudget", "s3.timeBudget", float),
            connect_timeout=_opt_number(lower, "s3.connecttimeout", "s3.connectTimeout", float),
            read_timeout=_opt_number(lower, "s3.readtimeout", "s3.readTimeout", float),
            azure_account=lower.get("azure.account") or None,
            azure_key=lower.get("azure.key") or None,
            azure_sas_token=lower.get("azure.sastoken") or None,
            azure_endpoint=lower.get("azure.endpoint") or None,
            gcs_project=lower.get("gcs.project") or None,
            gcs_token=lower.get("gcs.token") or None,
            gcs_endpoint=lower.get("gcs.endpoint") or None,
        )

    def __repr__(self) -> str:
        hidden = "***" if (self.key or self.secret or self.token or self.azure_key or self.azure_sas_token
                           or self.gcs_token) else None
        return f"StoreOptions(endpoint={self.endpoint!r}, region={self.region!r}, credentials={hidden!r})"


def _opt_number(lower: Mapping[str, str], key: str, name: str, kind: type) -> float | None:
    """A positive number option, or None when absent.

    Raises:
        InvalidOptionError: naming the option and its value.
    """
    raw = lower.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = kind(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(f"option {name} must be a positive number, got {raw!r}") from None
    if not value > 0:
        raise InvalidOptionError(f"option {name} must be a positive number, got {raw!r}")
    return value


def _opt_int(lower: Mapping[str, str], key: str, name: str) -> int | None:
    value = _opt_number(lower, key, name, int)
    return None if value is None else int(value)


def check_relative(path: str) -> str:
    """Validate a store-relative path.

    Raises:
        InvalidOptionError: the path is absolute, empty, or contains ``..`` / ``.`` / empty segments.
    """
    if not path or path.startswith("/") or "\\" in path:
        raise InvalidOptionError(f"store path {path!r} must be relative and '/'-separated")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise InvalidOptionError(f"store path {path!r} has an empty, '.' or '..' segment")
    if path.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
        raise InvalidOptionError(f"store path {path!r}: names starting with {TEMP_PREFIX!r} are reserved")
    return path


def folder_prefix(prefix: str) -> str:
    """A folder prefix without surrounding slashes, validated (``""`` is the root)."""
    prefix = prefix.strip("/")
    return check_relative(prefix) if prefix else ""


class Store(ABC):
    """An object store rooted at :attr:`url`. See the module docstring for the contract."""

    url: str

    def __init__(self, url: str) -> None:
        self.url = url
        self.counters = RequestCounters()

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` if no object is there.

        Returns:
            True if this call's bytes are now at ``path`` (created now, or equal bytes found there: a retried
            write of its own, or, unless the bytes carry a writer token, anyone's; see the module docstring);
            False if different bytes were already there.
        Raises:
            CommitStateUnknownError: the write may or may not have happened and reading back failed too.
            StoreError: the store failed past the retry budget.
        """

    @abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path``, replacing any object there. Atomic: readers see old or new bytes.

        Raises:
            StoreError: the store failed past the retry budget.
        """

    @abstractmethod
    def get(self, path: str) -> bytes:
        """The bytes at ``path``.

        Raises:
            FileNotFoundError: no object at ``path``.
            StoreError: the store failed past the retry budget.
        """

    @abstractmethod
    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        """Names (not paths) of the objects directly inside folder ``prefix``, sorted; only names greater than
        ``start_after`` when it is given, and at most ``limit`` of them (the first ones). Subfolders are not
        returned. A missing folder lists as empty."""

    @abstractmethod
    def list_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the subfolders directly inside folder ``prefix`` (``""`` is the root), sorted."""

    @abstractmethod
    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        """Every object below folder ``prefix``, recursively, with size and mtime, sorted by path."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove ``path``; a missing object is not an error."""

    #: How coarse :meth:`now` is: it truncates to this many seconds (S3: the whole seconds of a ``Date`` header).
    clock_resolution: float = 0.0

    def now(self) -> float:
        """The store's clock (epoch seconds), the one that stamps object modification times. This default is this
        host's clock, right for stores whose objects this host stamps (memory, a local disk), and costs no request."""
        import time

        return time.time()

    def exists(self, path: str) -> bool:
        """Whether an object is at ``path``."""
        try:
            self.get(path)
        except FileNotFoundError:
            return False
        return True

    def _read_back_equal(self, path: str, data: bytes, cause: BaseException | None = None) -> bool:
        """After a create that reported "exists" or failed ambiguously: are these bytes ours?"""
        try:
            found = self.get(path)
        except FileNotFoundError:
            if cause is not None:
                raise CommitStateUnknownError(
                    f"conditional write of {path!r} failed ambiguously and nothing is there"
                ) from cause
            raise CommitStateUnknownError(f"{path!r} reported as existing but cannot be read") from None
        except StoreError as exc:
            raise CommitStateUnknownError(
                f"could not read {path!r} back to learn the outcome of a conditional write"
            ) from exc
        return found == data

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default holds none."""

