"""Writer options: parsed once, on the driver, into a frozen :class:`SinkOptions`.

Option keys are case-insensitive (Spark lower-cases them anyway). Unknown keys are refused, so a typo never
silently changes what a write does. Store credentials (``s3.*``) live in :class:`coordinator.StoreOptions`, whose
``repr`` hides them; they travel to executors inside the pickled writer (as Spark options do) and are never
written to the store, a commit message or an error message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator import InvalidOptionError, StoreOptions, check_name

__all__ = ["KNOWN_OPTIONS", "MAX_STREAM_ID_CHARS", "WRITE_PATHS", "SinkOptions", "parse_options"]

MAX_PARTITIONS = 10_000
DEFAULT_SINK_TIMEOUT_MS = 24 * 3600 * 1000
#: ``keyedTaskBytes``: the input a keyed native write's task takes at least (Spark's size estimate), 512 MiB.
DEFAULT_KEYED_TASK_BYTES = 512 * 1024 * 1024
#: Values of ``writePath``: who writes a batch append (see :mod:`txnsink.native` and :mod:`txnsink.writerule`).
WRITE_PATHS = ("auto", "native", "python")
#: The longest ``transactionalId`` a streaming write takes: the file names its micro-batches stage hold the id with
#: the query id, the batch id and the task's ids, and stay within the 255 bytes a file name may have (checked with
#: every id at its largest).
MAX_STREAM_ID_CHARS = 96

#: Every option key the writer understands (lower case).
KNOWN_OPTIONS = frozenset(
    {
        "path",
        "topic",
        "numpartitions",
        "partitionkey",
        "transactionalid",
        "checkpointlocation",
        "txnappid",
        "txnversion",
        "transactiontimeoutms",
        "writepath",
        "keyedtaskbytes",
        "mergeschema",
    }
) | StoreOptions.KEYS


@dataclass(frozen=True)
class SinkOptions:
    """The parsed options of one write.

    Attributes:
        root: the store root URL (``save(path)`` / ``start(path)`` or option ``path``).
        topic: the topic written (None: each row names its topic in a ``topic`` column).
        num_partitions: partitions of the topic when this write creates it (None: 1).
        partition_key: columns hashed to choose a row's partition (empty: rows are spread evenly).
        transactional_id: stable transactional id, or None (batch: a fresh id per job; stream: derived from the
            query id).
        checkpoint_location: the streaming query's checkpoint folder, when Spark passes it.
        txn_app_id, txn_version: Delta's idempotent-write options (batch writes): publish only if ``txn_version``
            is above the last version committed for ``txn_app_id``.
        transaction_timeout_ms: how long a batch job's transaction may stay open before the timeout sweep aborts
            it (default 24 hours).
        write_path: ``writePath``: ``auto`` (the native write path where it applies, else the data source),
            ``native`` (the native path or an error) or ``python`` (the data source); the native path writes
            ``format("txnlog")`` appends only in a session with :func:`txnsink.enable_native`.
        keyed_task_bytes: ``keyedTaskBytes``: a keyed write on the native path merges its input's Spark
            partitions into tasks of about this many bytes of input (Spark's estimate), never fewer tasks than
            cores, since each task writes one file per topic partition it touches (0: the input's partitioning).
        merge_schema: ``mergeSchema`` (``true``/``false``): the write adds the DataFrame's new columns to the topic
            (nullable) and widens numeric columns (see :mod:`coordinator.evolution`).
        store: object-store access (credentials hidden from ``repr``).
    """

    root: str
    topic: str | None
    num_partitions: int | None = None
    partition_key: tuple[str, ...] = ()
    transactional_id: str | None = None
    checkpoint_location: str | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    transaction_timeout_ms: int = DEFAULT_SINK_TIMEOUT_MS
    write_path: str = "auto"
    keyed_task_bytes: int = DEFAULT_KEYED_TASK_BYTES
    merge_schema: bool = False
    store: StoreOptions = field(default_factory=StoreOptions)


def _int_option(key: str, value: str, low: int, high: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise InvalidOptionError(f"option {key}={value!r} must be an integer from {low} to {high}") from None
    if not low <= n <= high:
        raise InvalidOptionError(f"option {key}={value!r} must be an integer from {low} to {high}")
    return n


def parse_options(options: Mapping[str, str], *, stream: bool = False) -> SinkOptions:
    """Parse Spark writer options (case-insensitive keys) into :class:`SinkOptions`; ``stream``: for a streaming
    write (its ``transactionalId`` takes at most :data:`MAX_STREAM_ID_CHARS` characters).

    Raises:
        InvalidOptionError: an unknown key, a missing ``topic`` or store path, or a bad value; the message names
            the key and the value (never a credential's value).
    """
    lower: dict[str, str] = {}
    for k, v in options.items():
        lk = str(k).lower()
        if lk not in KNOWN_OPTIONS:
            known = ", ".join(sorted(KNOWN_OPTIONS))
            raise InvalidOptionError(f"unknown txnlog write option {k!r}; known options: {known}")
        lower[lk] = "" if v is None else str(v)
    root = lower.get("path", "").strip()
    if not root:
        raise InvalidOptionError(
            "option path (the store root URL) is missing: use save('<root>') / start('<root>') or option('path', ...)"
        )
    topic = lower.get("topic", "").strip() or None
    if topic is not None:
        try:
            check_name("topic", topic)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"option topic={topic!r} is invalid: {exc}") from None
    num: int | None = None
    if "numpartitions" in lower:
        num = _int_option("numPartitions", lower["numpartitions"], 1, MAX_PARTITIONS)
    key: tuple[str, ...] = ()
    if "partitionkey" in lower:
        parts = [c.strip() for c in lower["partitionkey"].split(",")]
        if not parts or any(not c for c in parts):
            raise InvalidOptionError(
                f"option partitionKey={lower['partitionkey']!r} must be one or more comma-separated column names"
            )
        if len(set(parts)) != len(parts):
            raise InvalidOptionError(f"option partitionKey={lower['partitionkey']!r} names a column twice")
        key = tuple(parts)
    tid: str | None = None
    if "transactionalid" in lower:
        tid = lower["transactionalid"].strip()
        try:
            check_name("transactional id", tid)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"option transactionalId={tid!r} is invalid: {exc}") from None
        if stream and len(tid) > MAX_STREAM_ID_CHARS:
            raise InvalidOptionError(
                f"option transactionalId={tid!r} is {len(tid)} characters; a streaming write takes at most "
                f"{MAX_STREAM_ID_CHARS}, since the file names of its micro-batches hold it with the query id and "
                "the batch id"
            )
    cp = lower.get("checkpointlocation", "").strip() or None
    app = lower.get("txnappid", "").strip() or None
    version: int | None = None
    if app is not None:
        try:
            check_name("txnAppId", app)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"option txnAppId={app!r} is invalid: {exc}") from None
    if "txnversion" in lower:
        version = _int_option("txnVersion", lower["txnversion"], 0, 2**62)
    if (app is None) != (version is None):
        raise InvalidOptionError("options txnAppId and txnVersion go together: give both or neither")
    timeout = DEFAULT_SINK_TIMEOUT_MS
    if "transactiontimeoutms" in lower:
        timeout = _int_option("transactionTimeoutMs", lower["transactiontimeoutms"], 1, 2**62)
    path = lower.get("writepath", "auto").strip().lower()
    if path not in WRITE_PATHS:
        raise InvalidOptionError(f"option writePath={lower['writepath']!r} is not one of {', '.join(WRITE_PATHS)}")
    task_bytes = DEFAULT_KEYED_TASK_BYTES
    if "keyedtaskbytes" in lower:
        task_bytes = _int_option("keyedTaskBytes", lower["keyedtaskbytes"], 0, 2**62)
    merge = lower.get("mergeschema", "false").strip().lower()
    if merge not in ("true", "false"):
        raise InvalidOptionError(f"option mergeSchema={lower['mergeschema']!r} must be 'true' or 'false'")
    return SinkOptions(
        root=root,
        merge_schema=merge == "true",
        topic=topic,
        num_partitions=num,
        partition_key=key,
        transactional_id=tid,
        checkpoint_location=cp,
        txn_app_id=app,
        txn_version=version,
        transaction_timeout_ms=timeout,
        write_path=path,
        keyed_task_bytes=task_bytes,
        store=StoreOptions.from_options(lower),
    )
