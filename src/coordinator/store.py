"""The object-store layer and its contract.

Everything txnlog does rests on four properties every backend must give, stated the way delta-rs states its log
store contract:

1. **Atomic visibility.** An object written by :meth:`Store.put` or :meth:`Store.put_if_absent` is either absent or
   complete: no reader ever sees a partial object.
2. **Mutual exclusion.** Of any number of concurrent :meth:`Store.put_if_absent` calls on one path, exactly one
   creates the object; every other one learns that the path already holds another writer's bytes. A call whose own
   write succeeded but whose reply was lost (the client retried) still reports success: the store compares the
   bytes it finds with the bytes it sent, and every log record carries a unique writer token, so equal bytes mean
   "mine".
3. **Consistent listing.** Once a write has returned, :meth:`Store.list` shows the object (read-after-write and
   list-after-write consistency, as S3 has given since 2020).
4. **Read-your-writes.** :meth:`Store.get` after a returned write gives its bytes.
5. **Durability.** A write that returned survives the writer's process dying. What each backend adds:
   :class:`MemoryStore` holds objects for the life of the process only (tests, notebooks); :class:`LocalStore`
   fsyncs the file *and the folder entry* (after ``os.link`` / ``os.replace``, and every folder it creates), so a
   returned write also survives power loss on a file system that honours fsync; S3 acknowledges a ``PutObject``
   only once it is stored redundantly.
6. **One clock.** :meth:`Store.now` is the store's own clock, the one that stamps :attr:`ObjectInfo.mtime`: ages
   (GC's grace period, transaction timeouts) are judged on it, never on the caller's clock.

Paths given to a store are relative, ``/``-separated, and never start with ``/`` nor contain ``..``; the store
joins them to its root. Every call counts one request per backend operation kind in :attr:`Store.counters`, so
users and benchmarks can see what an operation costs.

Backends: :class:`MemoryStore` (``memory://``; a lock), :class:`LocalStore` (plain paths and ``file://``; a temp file
in the same folder, then ``os.link`` to the final name, which fails if it exists), and
:class:`coordinator.s3store.S3Store` (``s3://``; ``PutObject`` with ``If-None-Match: *``).
"""

from __future__ import annotations

import bisect
import builtins
import hashlib
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.errors import CommitStateUnknownError, InvalidOptionError, StoreError, UnsupportedStoreError

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectInfo",
    "RequestCounters",
    "Store",
    "StoreOptions",
    "local_path",
    "open_store",
    "probe_conditional_writes",
]

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
                      "s3.timebudget", "s3.connecttimeout", "s3.readtimeout"})

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

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StoreOptions:
        """Pick the ``s3.*`` keys (case-insensitive) out of a Spark-style option map."""
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
        )

    def __repr__(self) -> str:
        hidden = "***" if self.key or self.secret or self.token else None
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


def _folder(prefix: str) -> str:
    """A folder prefix without surrounding slashes, validated (``""`` is the root)."""
    prefix = prefix.strip("/")
    return check_relative(prefix) if prefix else ""


class Store(ABC):
    """An object store rooted at :attr:`url`. See the module docstring for the contract."""

    url: str

    def __init__(self, url: str) -> None:
        self.url = url
        self.counters = RequestCounters()
        #: check conditional writes before the first one (see probe_conditional_writes)
        self.probe_required = True

    @abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` if no object is there.

        Returns:
            True if this call's bytes are now at ``path`` (created now, or found there after a retried write of
            the same bytes); False if another writer's different bytes were already there.
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

    def now(self) -> float:
        """The store's clock (epoch seconds), the one that stamps object modification times."""
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


class _Bucket:
    """The objects of one memory bucket, with a sorted name index per folder (listing costs O(log n + page))."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, float]] = {}
        self.folders: dict[str, builtins.list[str]] = {}

    def put(self, path: str, data: bytes) -> None:
        if path not in self.objects:
            folder, _, name = path.rpartition("/")
            bisect.insort(self.folders.setdefault(folder, []), name)
        self.objects[path] = (data, _now())

    def delete(self, path: str) -> None:
        if self.objects.pop(path, None) is not None:
            folder, _, name = path.rpartition("/")
            names = self.folders[folder]
            del names[bisect.bisect_left(names, name)]
            if not names:
                del self.folders[folder]


class MemoryStore(Store):
    """An in-process store; every ``memory://NAME`` URL names one shared bucket for the life of the process."""

    _buckets: dict[str, _Bucket] = {}
    _global_lock = threading.Lock()

    def __init__(self, url: str) -> None:
        super().__init__(url)
        with MemoryStore._global_lock:
            self._bucket = MemoryStore._buckets.setdefault(url.rstrip("/"), _Bucket())
        self._objects = self._bucket.objects
        self._lock = MemoryStore._global_lock

    def put_if_absent(self, path: str, data: bytes) -> bool:
        check_relative(path)
        self.counters.add("put_if_absent")
        with self._lock:
            if path in self._objects:
                return self._objects[path][0] == data
            self._bucket.put(path, bytes(data))
            return True

    def put(self, path: str, data: bytes) -> None:
        check_relative(path)
        self.counters.add("put")
        with self._lock:
            self._bucket.put(path, bytes(data))

    def get(self, path: str) -> bytes:
        check_relative(path)
        self.counters.add("get")
        with self._lock:
            try:
                return self._objects[path][0]
            except KeyError:
                raise FileNotFoundError(path) from None

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        prefix = _folder(prefix)
        self.counters.add("list")
        with self._lock:
            names = self._bucket.folders.get(prefix, [])
            lo = 0 if start_after is None else bisect.bisect_right(names, start_after)
            return names[lo:] if limit is None else names[lo:lo + limit]

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        prefix = _folder(prefix)
        self.counters.add("list")
        base = prefix + "/" if prefix else ""
        with self._lock:
            rests = [f[len(base):] for f in self._bucket.folders if f.startswith(base) and f != prefix]
        return sorted({r.split("/", 1)[0] for r in rests})

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        prefix = _folder(prefix)
        self.counters.add("list")
        base = prefix + "/" if prefix else ""
        with self._lock:
            out = []
            for folder, names in self._bucket.folders.items():
                if folder == prefix or folder.startswith(base):
                    for n in names:
                        path = f"{folder}/{n}" if folder else n
                        data, mtime = self._objects[path]
                        out.append(ObjectInfo(path, len(data), mtime))
        return sorted(out, key=lambda o: o.path)

    def delete(self, path: str) -> None:
        check_relative(path)
        self.counters.add("delete")
        with self._lock:
            self._bucket.delete(path)

    @classmethod
    def drop(cls, url: str) -> None:
        """Forget the bucket behind ``url`` (tests)."""
        with cls._global_lock:
            cls._buckets.pop(url.rstrip("/"), None)


class LocalStore(Store):
    """A folder on local disk. ``put_if_absent`` writes a temp file in the target folder and ``os.link``s it to the
    final name, which fails atomically if the name exists; ``put`` writes a temp file and ``os.replace``s it.

    Opening creates nothing: the root folder (and its missing parents) is created by the first write, so reading
    a path that holds no store leaves the disk as it was (a missing folder lists as empty)."""

    def __init__(self, url: str, root: str) -> None:
        super().__init__(url)
        self.root = os.path.abspath(root)

    def _full(self, path: str) -> str:
        return os.path.join(self.root, *check_relative(path).split("/"))

    def _make_folder(self, folder: str) -> None:
        """Create ``folder`` and its missing parents, each made durable in its parent."""
        if os.path.isdir(folder):
            return
        parent = os.path.dirname(folder)
        if parent != folder:
            self._make_folder(parent)
        try:
            os.mkdir(folder)
        except FileExistsError:
            return
        _fsync_dir(parent)

    def _write_temp(self, full: str, data: bytes) -> str:
        folder = os.path.dirname(full)
        self._make_folder(folder)
        tmp = os.path.join(folder, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return tmp

    def put_if_absent(self, path: str, data: bytes) -> bool:
        self.counters.add("put_if_absent")
        full = self._full(path)
        try:
            tmp = self._write_temp(full, data)
            try:
                os.link(tmp, full)
            except FileExistsError:
                return self._read_back_equal(path, data)
            finally:
                os.unlink(tmp)
            _fsync_dir(os.path.dirname(full))
        except OSError as exc:
            raise StoreError(f"local store write of {path!r} failed: {exc.strerror}") from exc
        return True

    def put(self, path: str, data: bytes) -> None:
        self.counters.add("put")
        full = self._full(path)
        try:
            tmp = self._write_temp(full, data)
            os.replace(tmp, full)
            _fsync_dir(os.path.dirname(full))
        except OSError as exc:
            raise StoreError(f"local store write of {path!r} failed: {exc.strerror}") from exc

    def get(self, path: str) -> bytes:
        self.counters.add("get")
        try:
            with open(self._full(path), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise FileNotFoundError(path) from None

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        prefix = _folder(prefix)
        self.counters.add("list")
        folder = self._full(prefix) if prefix else self.root
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = [e.name for e in entries if e.is_file() and not e.name.startswith(TEMP_PREFIX)]
        return _page(names, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        prefix = _folder(prefix)
        self.counters.add("list")
        folder = self._full(prefix) if prefix else self.root
        try:
            dirs = [e for e in os.scandir(folder) if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        # Like S3 and memory, a folder exists only while some object is below it.
        return sorted(d.name for d in dirs if _has_files(d.path))

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        prefix = _folder(prefix)
        self.counters.add("list")
        folder = self._full(prefix) if prefix else self.root
        out: builtins.list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(folder):
            for name in files:
                if name.startswith(TEMP_PREFIX):
                    continue
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                out.append(ObjectInfo(rel, st.st_size, st.st_mtime))
        return sorted(out, key=lambda o: o.path)

    def delete(self, path: str) -> None:
        self.counters.add("delete")
        try:
            os.unlink(self._full(path))
        except FileNotFoundError:
            pass


def _page(names: builtins.list[str], start_after: str | None, limit: int | None) -> builtins.list[str]:
    out = sorted(n for n in names if start_after is None or n > start_after)
    return out if limit is None else out[:limit]


def _fsync_dir(folder: str) -> None:
    """Make a folder's entries (a link, a rename, a new subfolder) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _has_files(folder: str) -> bool:
    return any(not f.startswith(TEMP_PREFIX) for _d, _s, files in os.walk(folder) for f in files)


def _now() -> float:
    import time

    return time.time()


_PROBED: set[str] = set()
_PROBE_LOCK = threading.Lock()
PROBE_DIR = "_txn/probe"


def _probe_key(store: Store) -> str:
    key = f"{store.url} via {getattr(store, 'endpoint', None)}"
    return hashlib.sha1(key.encode()).hexdigest()[:20]


def verified_writes() -> list[str]:
    """The (hashed) store URL + endpoint pairs this process verified honour conditional writes; the coordinator's
    checkpoints carry them, so a process opening the log from a checkpoint needs no probe at all."""
    with _PROBE_LOCK:
        return sorted(_PROBED)


def learn_verified(store: Store, keys: object) -> None:
    """Accept the verdicts a checkpoint of ``store`` carries (see :func:`verified_writes`)."""
    if isinstance(keys, list | tuple) and _probe_key(store) in keys:
        with _PROBE_LOCK:
            _PROBED.add(_probe_key(store))


def probe_conditional_writes(store: Store) -> None:
    """Check that ``put_if_absent`` really is exclusive, before the first conditional write of this process (writers
    call it; readers never do, so reading needs no write permission).

    A verdict is cached per process and store URL + endpoint, and kept in the store
    (``_txn/probe/ok-<hash>.json``) once a probe passed, so a fresh process pays one GET, not a probe. A store opened
    with ``probe=False`` is trusted.

    Raises:
        UnsupportedStoreError: a second conditional create of the same path succeeded with different bytes.
    """
    if not getattr(store, "probe_required", True):
        return
    key = _probe_key(store)
    with _PROBE_LOCK:
        if key in _PROBED:
            return
    verdict = f"{PROBE_DIR}/ok-{key}.json"
    try:
        store.get(verdict)
    except FileNotFoundError:
        _probe(store)
        store.put(verdict, b'{"conditional_writes": "verified"}')
    with _PROBE_LOCK:
        _PROBED.add(key)


def _probe(store: Store) -> None:
    path = f"{PROBE_DIR}/{uuid.uuid4().hex}"
    try:
        first = store.put_if_absent(path, b"probe-a")
        second = store.put_if_absent(path, b"probe-b")
        held = store.get(path)
    finally:
        try:
            store.delete(path)
        except StoreError:
            pass
    if not first or second or held != b"probe-a":
        raise UnsupportedStoreError(
            f"store {store.url} does not honour conditional writes (create-if-absent overwrote an existing "
            "object); txnlog needs If-None-Match support to keep its transaction log consistent"
        )


def local_path(url: str) -> str | None:
    """The absolute local folder a ``file:`` URL or a plain path names; None for any other scheme.

    Accepted: plain paths (relative ones are made absolute), ``file:/abs/path``, ``file:///abs/path`` and
    ``file://localhost/abs/path``; ``%xx`` escapes in ``file:`` URLs are decoded. A Windows drive letter is not a
    scheme.

    Raises:
        InvalidOptionError: a ``file:`` URL naming another host, or a relative one (``file:data``).
    """
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        if "://" in url or (parts.scheme and len(parts.scheme) > 1):
            return None
        return os.path.abspath(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidOptionError(
            f"store URL {url!r} names host {parts.netloc!r}: file URLs must be local (file:///abs/path or "
            "file:/abs/path)"
        )
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise InvalidOptionError(f"store URL {url!r} is not an absolute path (use file:///abs/path or a plain path)")
    return os.path.normpath(path)


def open_store(
    url: str, options: Mapping[str, str] | StoreOptions | None = None, *, probe: bool = True
) -> Store:
    """Open the store rooted at ``url``: a plain path, ``file:/abs``, ``file:///abs``, ``memory://name`` or
    ``s3://bucket/prefix``.

    Opening reads and writes nothing. With ``probe`` (the default) the store is checked to honour conditional
    writes before the first one this process makes (:func:`probe_conditional_writes`); ``probe=False`` trusts it.

    Raises:
        InvalidOptionError: the URL scheme is not supported, or a ``file:`` URL is not a local absolute path.
    """
    opts = options if isinstance(options, StoreOptions) else StoreOptions.from_options(options or {})
    if not isinstance(url, str) or not url.strip():
        raise InvalidOptionError(f"store path {url!r} is empty; give a local folder, file://, s3:// or memory://")
    url = url.strip()
    store: Store
    if url.startswith("memory://"):
        store = MemoryStore(url)
    elif (folder := local_path(url)) is not None:
        store = LocalStore("file://" + folder, folder)
    elif url.startswith(("s3://", "s3a://")):
        from coordinator.s3store import S3Store

        tuning = {k: v for k, v in (("max_attempts", opts.max_attempts), ("time_budget", opts.time_budget),
                                    ("connect_timeout", opts.connect_timeout), ("read_timeout", opts.read_timeout))
                  if v is not None}
        store = S3Store(url, opts, **tuning)  # type: ignore[arg-type]
    else:
        raise InvalidOptionError(f"store URL scheme of {url!r} is not supported (use a path, file://, s3://, memory://)")
    store.probe_required = probe
    return store
