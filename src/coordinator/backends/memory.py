"""The memory backend (``memory://name``): objects held for the life of the process, shared by every store opened
on the same URL (tests, notebooks). One lock makes ``put_if_absent`` exclusive; see :mod:`coordinator.store`."""

from __future__ import annotations

import bisect
import builtins
import threading
import time

from coordinator.store import ObjectInfo, Store, check_relative, folder_prefix

__all__ = ["MemoryStore"]


def _now() -> float:
    return time.time()


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
        prefix = folder_prefix(prefix)
        self.counters.add("list")
        with self._lock:
            names = self._bucket.folders.get(prefix, [])
            lo = 0 if start_after is None else bisect.bisect_right(names, start_after)
            return names[lo:] if limit is None else names[lo:lo + limit]

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        prefix = folder_prefix(prefix)
        self.counters.add("list")
        base = prefix + "/" if prefix else ""
        with self._lock:
            rests = [f[len(base):] for f in self._bucket.folders if f.startswith(base) and f != prefix]
        return sorted({r.split("/", 1)[0] for r in rests})

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        prefix = folder_prefix(prefix)
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

