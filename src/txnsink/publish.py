"""Driver side of the native write path (:mod:`txnsink.native`): turn the Parquet files Spark wrote into a staging
folder into segments of the topic's partitions, and publish them with one transaction.

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

import io
import json
import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.parquet as pq

from coordinator import (
    AlreadyCommittedError,
    InvalidTxnStateError,
    ProducerFencedError,
    ProducerIdentity,
    SegmentRef,
    Store,
    TransactionCoordinator,
    TxnLogError,
    faults,
)
from coordinator.backends.local import fsync_dir, make_folder
from coordinator.layout import NATIVE_STAGING, data_path, segment_name
from coordinator.store_factory import local_path

__all__ = ["SparkFile", "abort_native", "move_files", "spark_files", "staging_folder"]

#: Folder (under the store root) of the Parquet files Spark writes before they are moved into data folders.
STAGING = NATIVE_STAGING
#: The column a keyed write partitions Spark's output by (never stored: Spark encodes it in folder names).
PARTITION_COLUMN = "__txnlog_partition"
#: The name suffix of a file's description written by the task that wrote the file (the jar's ``FileDescription``).
DESCRIPTION = ".txnlog.json"

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


def staging_folder(tag: str) -> str:
    """The staging folder (relative to the store root) of one native write."""
    return f"{STAGING}/{tag}"


def spark_files(store: Store, folder: str, partitions: int, rotation: int, keyed: bool) -> list[SparkFile]:
    """The Parquet files Spark committed under ``folder``, each with its topic partition: by its
    ``__txnlog_partition=<p>`` folder when ``keyed``, else task ``i``'s files go to partition
    ``(rotation + i) % partitions``. Sorted by partition, task and file number (the order offsets follow).

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
