"""Driver side of the native write path (:mod:`txnsink.native`): turn the Parquet files Spark wrote into a staging
folder into segments of the topic's partitions, and publish them with one transaction.

While the write runs, its driver keeps a lease in the staging folder (:class:`StagingLease`), so store-wide GC
leaves the folder alone. The lease only spares work: the commit publishes the files only if they hold exactly the
rows Spark's tasks reported writing (:func:`check_complete`), so files deleted under the write anyway (a driver
paused past its lease, a store clock jumping) fail the write instead of publishing part of it.

Each file's row count, size and CRC-32 (for the segment index) come from the description the task that wrote it
left beside it (``<file>.txnlog.json``, written once the task synced the file: the jar's ``FileDescription``, on
a local store), else from reading the file once on the driver (and syncing it there). Each file is then moved into
its partition's data folder under a name starting with the transaction id (a rename on a local store, made durable
as the local store's own writes are: file data and folder entries synced before the commit; a copy and a delete
elsewhere), so GC judges it like any staged segment. The commit names exactly the moved
files; if anything fails before the commit is decided, the transaction is aborted through the log and the moved
files are deleted, exactly as the batch sink's ``abort`` does.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import pyarrow.parquet as pq

from coordinator import (
    AlreadyCommittedError,
    IncompleteWriteError,
    InvalidTxnStateError,
    ProducerFencedError,
    ProducerIdentity,
    SegmentRef,
    Store,
    StoreError,
    TransactionCoordinator,
    TxnLogError,
    faults,
)
from coordinator.backends.local import fsync_dir, make_folder
from coordinator.layout import NATIVE_LEASE, NATIVE_STAGING, data_path, segment_name, topic_dir
from coordinator.maintenance.common import NATIVE_LEASE_MS
from coordinator.store_factory import local_path

__all__ = ["LEASE_RENEW_S", "SparkFile", "StagingLease", "abort_native", "check_complete", "check_writable",
           "move_files", "output_folder", "spark_files", "staging_folder"]

log = logging.getLogger(__name__)

#: Folder (under the store root) of the Parquet files Spark writes before they are moved into data folders.
STAGING = NATIVE_STAGING
#: The column a keyed write partitions Spark's output by (never stored: Spark encodes it in folder names).
PARTITION_COLUMN = "__txnlog_partition"
#: The name suffix of a file's description written by the task that wrote the file (the jar's ``FileDescription``).
DESCRIPTION = ".txnlog.json"
#: How often a running write renews its lease: GC leaves its folder for NATIVE_LEASE_MS after the last renewal.
LEASE_RENEW_S = NATIVE_LEASE_MS / 1000 / 20

_PART = re.compile(r"^part-(\d+)-.*?(?:-c(\d+))?(?:\.[a-z0-9]+)*\.parquet$")


@dataclass(frozen=True)
class SparkFile:
    """One Parquet file of Spark's output.

    Attributes:
        path: its path relative to the store root.
        partition: the topic partition it belongs to.
        split: the Spark task (partition id) that wrote it.
        part: the file's number among that task's files.
        size: its size as listed.
        description: the path of its description (:data:`DESCRIPTION`), None when its task left none.
    """

    path: str
    partition: int
    split: int
    part: int
    size: int = -1
    description: str | None = None


def check_writable(store_url: str, topic: str | None) -> None:
    """Check, on the driver and before anything is written, that this process may write the folders a native write
    writes in a local store: the root (or, before the store exists, the folder it would be created in), the staging
    folder and the partition folders of ``topic``. Other stores are not checked (their writes report it).

    Raises:
        StoreError: a folder this process has no write permission on (one line naming the store and the folder).
    """
    root = local_path(store_url)
    if root is None:
        return
    folders = [root, f"{root}/{STAGING}"]
    if topic:
        top = f"{root}/{topic_dir(topic)}"
        folders.append(top)
        with contextlib.suppress(OSError):
            folders += [f"{top}/{p}/data" for p in sorted(os.listdir(top)) if p.isdigit()]
    existing = [f for f in folders if os.path.isdir(f)] or [_existing_parent(root)]
    for folder in existing:
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"store {store_url} is read-only for this process: no write permission on folder "
                             f"{folder}, which a write to it needs")


def _existing_parent(path: str) -> str:
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def staging_folder(tag: str) -> str:
    """The staging folder (relative to the store root) of one native write: its lease and Spark's output."""
    return f"{STAGING}/{tag}"


def output_folder(tag: str) -> str:
    """The folder (relative to the store root) Spark writes one native write's files into."""
    return f"{STAGING}/{tag}/out"


class StagingLease:
    """A running native write's claim on its staging folder: ``_native-staging/<write id>/_lease.json``, put on
    entering and again every ``renew_s`` seconds by a background thread until exit. Store-wide GC leaves a folder
    whose lease is younger than ``NATIVE_LEASE_MS`` on the store's clock (:func:`~coordinator.maintenance.gc.
    sweep_native_staging`). Liveness only: whether the files survived is the commit's check
    (:func:`check_complete`), never the lease's.

    Raises:
        StoreError: (on entering) the first put failed; a failed renewal is only logged.
    """

    def __init__(self, store: Store, tag: str, renew_s: float = LEASE_RENEW_S) -> None:
        self.store = store
        self.path = f"{staging_folder(tag)}/{NATIVE_LEASE}"
        self.renew_s = renew_s
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _put(self) -> None:
        self.store.put(self.path, json.dumps({"renewals": self.renewals}).encode())
        self.renewals += 1

    def _run(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                self._put()
            except (StoreError, OSError) as exc:
                log.warning("could not renew native write lease %s: %s (GC may delete the write's files; its "
                            "commit then fails)", self.path, exc)

    def __enter__(self) -> StagingLease:
        self._put()
        self._thread = threading.Thread(target=self._run, name="txnlog-native-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def check_complete(segs: Sequence[SegmentRef], reported_rows: int, folder: str) -> None:
    """Check that the files a native write is about to publish hold exactly the rows its Spark tasks reported
    writing (Spark's own count, returned to the driver with the tasks' results, so independent of the store).

    Raises:
        IncompleteWriteError: they hold fewer (or more) rows, naming the staging ``folder``: files were deleted
            under the running write (store-wide GC of ``_native-staging/`` while its lease had lapsed).
    """
    found = sum(s.rows for s in segs)
    if found != reported_rows:
        raise IncompleteWriteError(
            f"native write {folder}: Spark's tasks reported writing {reported_rows} rows, but the {len(segs)} files "
            f"left in its staging folder hold {found}: files were deleted under the running write (store-wide GC "
            f"of {NATIVE_STAGING}/ after the write's lease lapsed); nothing was published")


def spark_files(store: Store, folder: str, partitions: int, rotation: int, keyed: bool) -> list[SparkFile]:
    """The Parquet files Spark committed under ``folder``, each with its topic partition: by its
    ``__txnlog_partition=<p>`` folder when ``keyed`` (a keyed or spread write: one folder per partition), else task
    ``i``'s files go to partition ``(rotation + i) % partitions``. Sorted by partition, task and file number (the
    order offsets follow).

    Raises:
        TxnLogError: a file Spark wrote has a name or folder this path does not expect.
    """
    out = []
    infos = store.list_info(folder)
    described = {i.path[:-len(DESCRIPTION)] for i in infos if i.path.endswith(DESCRIPTION)}
    for info in infos:
        rel = info.path[len(folder) + 1:]
        name = rel.rsplit("/", 1)[-1]
        if not name.endswith(".parquet"):
            continue  # _SUCCESS, checksums, descriptions
        m = _PART.match(name)
        if m is None:
            raise TxnLogError(f"unexpected file {rel!r} in Spark's output")
        split, part = int(m.group(1)), int(m.group(2) or 0)
        if keyed:
            head = rel.split("/", 1)[0]
            if not head.startswith(PARTITION_COLUMN + "="):
                raise TxnLogError(f"unexpected file {rel!r} in Spark's keyed output")
            p = int(head.split("=", 1)[1])
        else:
            p = (rotation + split) % partitions
        out.append(SparkFile(info.path, p, split, part, info.size,
                             info.path + DESCRIPTION if info.path in described else None))
    return sorted(out, key=lambda f: (f.partition, f.split, f.part, f.path))


def _describe(store: Store, f: SparkFile) -> tuple[int, int, int] | None:
    """``f``'s rows, size and CRC-32 as its task described it; None without a description, or one that does not
    match the file as listed."""
    if f.description is None:
        return None
    try:
        d = json.loads(store.get(f.description))
        got = (int(d["rows"]), int(d["size"]), int(d["crc32"]))
    except (ValueError, KeyError, TypeError):
        return None
    return got if got[1] == f.size else None


def _move(store: Store, topic: str, txn: str, tag: str, f: SparkFile, index: int, ptime: int | None) -> SegmentRef:
    """Describe ``f`` (rows, size, CRC-32; ``ptime`` the producer time of its rows when it has no such column) and
    move it into its partition's data folder."""
    dst = data_path(topic, f.partition, segment_name(txn, f"spark-{f.split:05d}-{f.part:03d}-{tag}-{index:05d}")
                    + ".parquet")
    root = local_path(store.url)
    described = _describe(store, f) if root is not None else None
    synced = described is not None  # its task synced it before describing it
    data = b""
    if described is None:
        data = store.get(f.path)
        described = (pq.ParquetFile(io.BytesIO(data)).metadata.num_rows, len(data), zlib.crc32(data))
    rows, size, crc = described
    ref = SegmentRef(topic, f.partition, dst, rows, size, crc, ptime=ptime)
    faults.point("native.move")

    if root is not None:
        target = os.path.join(root, dst)
        make_folder(os.path.dirname(target))
        source = os.path.join(root, f.path)
        if not synced:
            fd = os.open(source, os.O_RDONLY)
            try:
                os.fsync(fd)  # Spark's writer does not sync; a committed segment must survive a machine crash
            finally:
                os.close(fd)
        os.replace(source, target)
    else:
        store.put(dst, data)
        store.delete(f.path)
    return ref


def move_files(store: Store, topic: str, txn: str, tag: str, files: Sequence[SparkFile],
               ptime: int | None = None) -> list[SegmentRef]:
    """Move every file into its partition's data folder (concurrently); the segment references, in ``files``
    order, each with ``ptime``, the producer time of every row, when the files store no producer-time column.
    Files already moved when one move fails are returned by none: the caller's abort finds them through
    :func:`moved` names.

    Raises:
        StoreError, OSError: the store failed.
    """
    from coordinator import parallel

    refs = parallel.pmap(lambda item: _move(store, topic, txn, tag, item[1], item[0], ptime), list(enumerate(files)))
    root = local_path(store.url)
    if root is not None:
        # the renames, as the local store's own writes, are durable before the commit names them
        parallel.pmap(lambda folder: fsync_dir(os.path.join(root, folder)),
                      sorted({os.path.dirname(r.path) for r in refs}))
    return refs


def moved(store: Store, topic: str, partitions: int, txn: str, tag: str) -> list[SegmentRef]:
    """The files this write already moved into data folders (found by name, for the abort after a failed move)."""
    out = []
    prefix = segment_name(txn, "spark-")
    for p in range(partitions):
        for info in store.list_info(data_path(topic, p, "")):
            name = info.path.rsplit("/", 1)[-1]
            if name.startswith(prefix) and f"-{tag}-" in name:
                out.append(SegmentRef(topic, p, info.path, 0, info.size, 0))
    return out


def abort_native(coord: TransactionCoordinator, ident: ProducerIdentity, txn: str, ephemeral: bool,
                 segs: Sequence[SegmentRef]) -> bool:
    """Decide ``txn`` as aborted through the log and delete ``segs``, as the batch sink's ``abort`` does: nothing
    is deleted when the commit won or when the outcome cannot be learned (GC removes the files once the log shows
    the transaction was never committed).

    Returns:
        True if the files were deleted.
    """
    try:
        coord.abort(ident, txn, reason="native write failed", end_producer=ephemeral, staged=segs)
    except AlreadyCommittedError:
        return False
    except (ProducerFencedError, InvalidTxnStateError):
        try:
            if coord.txn_status(txn) != "aborted":
                return False
        except TxnLogError:
            return False
    except TxnLogError:
        return False
    coord.close_transaction(txn)
    for s in segs:
        try:
            coord.store.delete(s.path)
        except Exception:  # noqa: BLE001 - best effort: a leftover staged file of an aborted txn is GC's
            pass
    return True
