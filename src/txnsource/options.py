"""Reader options, parsed once into a frozen :class:`ReadOptions`.

Spark hands a data source a case-insensitive option map of strings. Every option is validated up front, so a bad
value fails at ``load()`` with an :class:`coordinator.InvalidOptionError` naming the key and the value.

Options (keys are case-insensitive):

``path``
    The store root URL (``load(path)``): a local path, ``file://``, ``s3://bucket/prefix``, ``memory://``.
``topic``
    One topic or a comma-separated list (required).
``startingOffsets``
    ``earliest``, ``latest`` or JSON ``{"orders": {"0": 42}}``. Batch default ``earliest``; stream default
    ``latest`` (as Spark's Kafka source). In JSON, ``-2`` means earliest and ``-1`` latest; partitions left out
    start at earliest.
``endingOffsets``
    Batch only (exclusive): ``latest`` (default), ``earliest`` or JSON; partitions left out end at latest.
``isolationLevel``
    ``read_committed`` (default) or ``read_uncommitted`` (batch only).
``maxRecordsPerTrigger``
    Stream only: a positive row limit per micro-batch.
``groupId``
    Stream only: consumer group whose offsets each finished micro-batch records.
``maxPartitionBytes``
    Target size of one Spark input partition (default 128 MiB); one topic partition with many segments is read
    by several tasks.
``minPartitions``
    Optional lower bound on the number of input partitions: shrinks the target size so the data splits at least
    this many ways (segment boundaries permitting).
``readPath``
    ``auto`` (default), ``python`` or ``native``: which reader :func:`txnsource.read` uses (see
    :mod:`txnsource.native`). ``spark.read.format("txnlog")`` is always the Python reader: it takes ``auto`` and
    ``python`` and refuses ``native``, which only :func:`txnsource.read` can give.
``s3.endpoint``, ``s3.key``, ``s3.secret``, ``s3.region``, ``s3.token``
    Store access; never persisted, hidden from ``repr``.

Stream-only options are ignored by batch reads (so one option map can serve both); ``endingOffsets`` and
``read_uncommitted`` are refused by streams. Any other key is refused, so a misspelt option never passes
silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.errors import InvalidOptionError
from coordinator.layout import check_name
from coordinator.reader import READ_COMMITTED, READ_UNCOMMITTED, check_isolation
from coordinator.store import StoreOptions

EARLIEST = "earliest"
LATEST = "latest"
#: Kafka's JSON conventions for "earliest" and "latest" inside an offsets map.
JSON_EARLIEST = -2
JSON_LATEST = -1
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
READ_PATHS = ("auto", "python", "native")

#: An offsets option: ``"earliest"``, ``"latest"``, or topic -> partition -> offset (-2 earliest, -1 latest).
OffsetSpec = str | Mapping[str, Mapping[int, int]]

_STORE_KEYS = StoreOptions.KEYS
_COMMON_KEYS = frozenset({"path", "topic", "startingoffsets", "isolationlevel", "maxpartitionbytes",
                          "minpartitions", "readpath"}) | _STORE_KEYS
_STREAM_ONLY_KEYS = frozenset({"maxrecordspertrigger", "groupid", "failondataloss"})
_BATCH_ONLY_KEYS = frozenset({"endingoffsets"})
_SECRET_KEYS = frozenset({"s3.key", "s3.secret", "s3.token"})
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")


@dataclass(frozen=True)
class ReadOptions:
    """Validated reader options. Picklable; holds no credentials in its ``repr``.

    Attributes:
        path: the store root URL.
        topics: the topics read, in the order given, without duplicates.
        starting: where reading starts (see :data:`OffsetSpec`).
        ending: where a batch read ends (exclusive); ``latest`` for streams.
        isolation: ``read_committed`` or ``read_uncommitted``.
        max_records_per_trigger: stream row limit per micro-batch, or None.
        group_id: stream consumer group, or None.
        fail_on_data_loss: a stream whose next offset was removed by retention fails (True, the default) or skips
            ahead to the log start (False), like Spark's Kafka source.
        max_partition_bytes: target bytes of one Spark input partition.
        min_partitions: lower bound on the number of input partitions, or None.
        read_path: ``auto``, ``python`` or ``native`` (see :func:`txnsource.read`).
        store: store access options (credentials hidden from ``repr``).
    """

    path: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    isolation: str = READ_COMMITTED
    max_records_per_trigger: int | None = None
    group_id: str | None = None
    fail_on_data_loss: bool = True
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    min_partitions: int | None = None
    read_path: str = "auto"
    store: StoreOptions = field(default_factory=StoreOptions, repr=False)


def parse_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Validate Spark reader options.

    Args:
        options: Spark's (case-insensitive) option map.
        streaming: parse for ``readStream`` (True), ``read`` (False), or either (None: the schema lookup, which
            Spark makes before it says which; the stream-or-batch checks then wait for the reader).

    Raises:
        InvalidOptionError: a missing required option, an unknown key, or a bad value; the message names the key
            and the value (secrets are never echoed).
    """
    lower = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    allowed = _COMMON_KEYS | _STREAM_ONLY_KEYS | (frozenset() if streaming else _BATCH_ONLY_KEYS)
    streaming_only = bool(streaming)
    for key in lower:
        if key not in allowed:
            if streaming and key in _BATCH_ONLY_KEYS:
                raise InvalidOptionError(f"option 'endingOffsets' is not supported by streaming reads "
                                         f"(got {lower[key]!r}); a stream reads until it is stopped")
            shown = "***" if _may_be_secret(key) else repr(lower[key])
            raise InvalidOptionError(
                f"unknown option {key!r} (value {shown}); txnlog reads take: "
                f"{', '.join(sorted(allowed - _SECRET_KEYS))}"
            )
    path = lower.get("path", "").strip()
    if not path:
        raise InvalidOptionError("option 'path' is missing: load() the store root URL (a local path, file://, "
                                 "s3://bucket/prefix or memory://)")
    topics = _parse_topics(lower.get("topic"))
    isolation = _parse_isolation(lower.get("isolationlevel"), streaming_only)
    starting = parse_offset_spec("startingOffsets", lower.get("startingoffsets"), topics,
                                 default=LATEST if streaming_only else EARLIEST)
    ending = LATEST if streaming_only else parse_offset_spec("endingOffsets", lower.get("endingoffsets"), topics,
                                                        default=LATEST)
    return ReadOptions(
        path=path,
        topics=topics,
        starting=starting,
        ending=ending,
        isolation=isolation,
        max_records_per_trigger=_positive_int("maxRecordsPerTrigger", lower.get("maxrecordspertrigger")),
        group_id=_parse_group(lower.get("groupid")),
        fail_on_data_loss=_parse_bool("failOnDataLoss", lower.get("failondataloss"), default=True),
        max_partition_bytes=_positive_int("maxPartitionBytes", lower.get("maxpartitionbytes"))
        or DEFAULT_MAX_PARTITION_BYTES,
        min_partitions=_positive_int("minPartitions", lower.get("minpartitions")),
        read_path=_parse_read_path(lower.get("readpath")),
        store=StoreOptions.from_options(lower),
    )


def _parse_read_path(raw: str | None) -> str:
    if raw is None or not raw.strip():
        return "auto"
    word = raw.strip().lower()
    if word not in READ_PATHS:
        raise InvalidOptionError(f"option 'readPath' = {raw!r} is not one of {', '.join(READ_PATHS)}")
    return word


def _may_be_secret(key: str) -> bool:
    """Whether an option's value must not be echoed (credentials, or a misspelling of one)."""
    return key.startswith(("s3.", "fs.", "aws")) or any(w in key for w in _SECRET_WORDS)


def _parse_topics(raw: str | None) -> tuple[str, ...]:
    if raw is None or not raw.strip():
        raise InvalidOptionError("option 'topic' is missing: name one topic or a comma-separated list")
    names: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if not name:
            raise InvalidOptionError(f"option 'topic' has an empty name in {raw!r}")
        try:
            check_name("topic", name)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"option 'topic' = {raw!r}: {exc}") from None
        if name not in names:
            names.append(name)
    return tuple(names)


def _parse_isolation(raw: str | None, streaming: bool) -> str:
    if raw is None or not raw.strip():
        return READ_COMMITTED
    try:
        level = check_isolation(raw)
    except InvalidOptionError:
        raise InvalidOptionError(
            f"option 'isolationLevel' = {raw!r} is not one of {READ_COMMITTED!r}, {READ_UNCOMMITTED!r}"
        ) from None
    if streaming and level == READ_UNCOMMITTED:
        raise InvalidOptionError(
            f"option 'isolationLevel' = {raw!r} is not supported by streaming reads: uncommitted records have no "
            "offsets, so a stream could not track or replay them; use a batch read"
        )
    return level


def _parse_bool(key: str, raw: str | None, *, default: bool) -> bool:
    if raw is None or not raw.strip():
        return default
    word = raw.strip().lower()
    if word not in ("true", "false"):
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be 'true' or 'false'")
    return word == "true"


def _positive_int(key: str, raw: str | None) -> int | None:
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"option {key!r} = {raw!r} is not an integer") from None
    if value <= 0:
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be a positive integer")
    return value


def _parse_group(raw: str | None) -> str | None:
    if raw is None or not raw.strip():
        return None
    try:
        return check_name("group", raw.strip())
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"option 'groupId' = {raw!r}: {exc}") from None


def parse_offset_spec(key: str, raw: str | None, topics: tuple[str, ...], *, default: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or a JSON offsets map naming only ``topics``.

    Raises:
        InvalidOptionError: naming ``key`` and ``raw`` when the text is neither keyword nor a valid JSON map of
            topic -> partition -> offset (offsets >= 0, or -2 / -1 for earliest / latest).
    """
    if raw is None or not raw.strip():
        return default
    text = raw.strip()
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    try:
        doc = json.loads(text)
    except ValueError:
        raise InvalidOptionError(
            f"option {key!r} = {raw!r} is not 'earliest', 'latest' or JSON like {{\"orders\": {{\"0\": 42}}}}"
        ) from None
    if not isinstance(doc, dict):
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be a JSON object of topic -> partition -> offset")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if topic not in topics:
            raise InvalidOptionError(f"option {key!r} = {raw!r} names topic {topic!r}, which option 'topic' "
                                     f"does not list ({', '.join(topics)})")
        if not isinstance(parts, dict):
            raise InvalidOptionError(f"option {key!r} = {raw!r}: topic {topic!r} must map partitions to offsets")
        out[topic] = {}
        for p, off in parts.items():
            try:
                pnum = int(p)
            except (TypeError, ValueError):
                pnum = -1
            if pnum < 0 or str(pnum) != str(p).strip():
                raise InvalidOptionError(f"option {key!r} = {raw!r}: partition {p!r} of {topic!r} is not a "
                                         "non-negative integer")
            if isinstance(off, bool) or not isinstance(off, int) or off < JSON_EARLIEST:
                raise InvalidOptionError(f"option {key!r} = {raw!r}: offset {off!r} of {topic}/{p} must be an "
                                         "integer >= 0 (or -2 for earliest, -1 for latest)")
            out[topic][pnum] = off
    return out
