"""The local backend (plain paths, ``file:`` URLs): a folder on local disk; see :mod:`coordinator.store` for the
contract and :class:`LocalStore` for how this backend meets it."""

from __future__ import annotations

import builtins
import os
import uuid

from coordinator.errors import StoreError
from coordinator.store import TEMP_PREFIX, ObjectInfo, Store, check_relative, folder_prefix

__all__ = ["LocalStore", "fsync_dir", "make_folder"]


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


    def _write_temp(self, full: str, data: bytes) -> str:
        folder = os.path.dirname(full)
        make_folder(folder)
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
            fsync_dir(os.path.dirname(full))
        except OSError as exc:
            raise StoreError(f"local store write of {path!r} failed: {exc.strerror}") from exc
        return True

    def put(self, path: str, data: bytes) -> None:
        self.counters.add("put")
        full = self._full(path)
        try:
            tmp = self._write_temp(full, data)
            os.replace(tmp, full)
            fsync_dir(os.path.dirname(full))
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
        prefix = folder_prefix(prefix)
        self.counters.add("list")
        folder = self._full(prefix) if prefix else self.root
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = [e.name for e in entries if e.is_file() and not e.name.startswith(TEMP_PREFIX)]
        return _page(names, start_after, limit)

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        prefix = folder_prefix(prefix)
        self.counters.add("list")
        folder = self._full(prefix) if prefix else self.root
        try:
            dirs = [e for e in os.scandir(folder) if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return []
        # Like S3 and memory, a folder exists only while some object is below it.
        return sorted(d.name for d in dirs if _has_files(d.path))

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        prefix = folder_prefix(prefix)
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


def make_folder(folder: str) -> None:
    """Create ``folder`` and its missing parents, each made durable in its parent."""
    if os.path.isdir(folder):
        return
    parent = os.path.dirname(folder)
    if parent != folder:
        make_folder(parent)
    try:
        os.mkdir(folder)
    except FileExistsError:
        return
    fsync_dir(parent)


def fsync_dir(folder: str) -> None:
    """Make a folder's entries (a link, a rename, a new subfolder) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _has_files(folder: str) -> bool:
    return any(not f.startswith(TEMP_PREFIX) for _d, _s, files in os.walk(folder) for f in files)


