"""Reader options, parsed once into a frozen :class:`ReadOptions`.

Spark hands a data source a case-insensitive option map of strings. Every option is validated up front, so a bad
value fails at ``load()`` with an :class:`coordinator.InvalidOptionError` naming the key and the value. Value
parsers live in :mod:`txnsource.optvalues`. The options follow Spark's Kafka source where it has an equivalent.

What to read (exactly one of):

``topic``
    One topic or a comma-separated list.
``subscribePattern``
    A regular expression matched against whole topic names (Python :func:`re.fullmatch`). The topics are listed
    when the read is planned (a stream: at every micro-batch; a topic created later is read from its earliest offset).
``assign``
    JSON ``{"orders": [0, 1]}``: only these partitions (a stream then never picks up partitions added later).

Where to start and end (timestamp options win over offset options, as in Spark's Kafka source:
``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets``, and the same for the ending ones):

``startingOffsets``
    ``earliest``, ``latest`` or JSON ``{"orders": {"0": 42}}``. Batch default ``earliest``; stream default
    ``latest``. In JSON, ``-2`` means earliest and ``-1`` latest.
``endingOffsets``
    Batch only (exclusive): ``latest`` (default), ``earliest`` or JSON.
``asOfSeq`` (synonym ``versionAsOf``; not both)
    Batch only: read the snapshot as of transaction log entry N (every transaction committed at or before it, no
    other; :mod:`coordinator.asof`). Without it a DataFrame reads the snapshot taken when it was created
    (:mod:`txnsource.pin`). Refused, naming the reason, when N is beyond the log, when log truncation removed what
    rebuilding it needs, or when retention since removed records the read needs.
``startingTimestamp`` / ``endingTimestamp``
    Epoch milliseconds, for every partition read: the first offset committed at or after that time (``_timestamp``
    is the commit time; records carry no producer time, so this is Kafka's ``LogAppendTime``).
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
    JSON ``{"orders": {"0": 1700000000000}}``: the same per partition.
``startingOffsetsByTimestampStrategy``
    ``error`` (default): a starting timestamp after every commit fails the read; ``latest``: such a partition
    starts at its latest offset. An ending timestamp after every commit ends at the latest offset.

Partial JSON maps (offsets or timestamps): with ``topic`` or ``subscribePattern``, a partition a map leaves out
takes the option's default (``startingOffsets``: earliest for batch, latest for streams; ``endingOffsets``:
latest), for batch and stream reads alike. With ``assign``, a map that names a topic must name every assigned
partition of it (Spark's Kafka source requires all assigned partitions); the error names the missing ones.

Other options:

``isolationLevel``
    ``read_committed`` (default) or ``read_uncommitted`` (batch only).
``failOnDataLoss``
    ``true`` (default): an offset below the log start (removed by retention) or above the log end (the topic was
    re-created) fails the read naming the topic, partition and offsets; ``false``: skip to the log start. Batch and
    stream reads.
``maxRecordsPerTrigger`` (synonym ``maxOffsetsPerTrigger``; not both)
    Stream only: a positive row limit per micro-batch.
``minOffsetsPerTrigger``, ``maxTriggerDelay``
    Stream only: a micro-batch waits until at least this many records are available, or until ``maxTriggerDelay``
    (default ``15m``) has passed since the last micro-batch (ignored by ``Trigger.AvailableNow``).
``maxBytesPerTrigger``
    Stream only: approximate bytes per micro-batch (estimated from segment sizes); a micro-batch always takes at
    least one record, so a stream makes progress.
``maxFilesPerTrigger``
    Stream only: at most this many segment files per micro-batch (as Spark's file source and Delta), the oldest
    first in commit order; a file a micro-batch reads part of counts as one. Micro-batches then end at file ends,
    so each reads whole files.
``groupId``
    Stream only: consumer group whose offsets each finished micro-batch records.
``maxPartitionBytes``
    Target size of one Spark input partition (default 128 MiB).
``maxRecordsPerPartition``
    Optional: at most this many records per Spark input partition (a big topic partition is read by more tasks).
``minPartitions``
    Optional lower bound on the number of input partitions (segment boundaries permitting).
``readPath``
    ``auto`` (default), ``python`` or ``native``: which reader :func:`txnsource.read` uses.
``s3.endpoint``, ``s3.key``, ``s3.secret``, ``s3.region``, ``s3.token``, ...
    Store access; never persisted, hidden from ``repr``.

Record timestamps: ``_timestamp`` is the commit time of the record's transaction (Kafka's ``LogAppendTime``; all
records of one transaction share it), ``_producerTimestamp`` the producer's time of the record (Kafka's
``CreateTime``; null for records written before segments stored it). The timestamp options go by ``_timestamp``.
``includeHeaders`` (``true``/``false``, default false) adds ``_headers``, each record's Kafka-style headers
(``array<struct<key:string,value:binary>>``; null where none were written). A ``map<string,binary>`` column named
``headers`` is an ordinary topic column, written and read end to end.

Batch reads refuse the stream-only options (they say so), streams refuse the batch-only ones; any other key is
refused, so a misspelt option never passes silently.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from coordinator.errors import InvalidOptionError
from coordinator.reader import READ_COMMITTED
from coordinator.store import StoreOptions
from txnsource.optvalues import (
    EARLIEST,
    JSON_EARLIEST,
    JSON_LATEST,
    LATEST,
    OffsetSpec,
    TimestampSpec,
    parse_assign,
    parse_bool,
    parse_duration_ms,
    parse_group,
    parse_isolation,
    parse_offset_spec,
    parse_pattern,
    parse_read_path,
    parse_strategy,
    parse_timestamp,
    parse_timestamp_spec,
    parse_topics,
    positive_int,
)

__all__ = ["DEFAULT_MAX_PARTITION_BYTES", "DEFAULT_MAX_TRIGGER_DELAY_MS", "EARLIEST", "JSON_EARLIEST",
           "JSON_LATEST", "LATEST", "OffsetSpec", "ReadOptions", "TimestampSpec", "parse_options", "with_topics"]

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

_STORE_KEYS = StoreOptions.KEYS
_SUBSCRIBE_KEYS = ("topic", "subscribepattern", "assign")
_COMMON_KEYS = frozenset({*_SUBSCRIBE_KEYS, "path", "startingoffsets", "startingtimestamp",
                          "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "isolationlevel",
                          "failondataloss", "maxpartitionbytes", "maxrecordsperpartition", "minpartitions",
                          "readpath", "includeheaders"}) | _STORE_KEYS
#: Options only ``readStream`` takes (a batch read refuses them).
STREAM_ONLY_KEYS = frozenset({"maxrecordspertrigger", "maxoffsetspertrigger", "minoffsetspertrigger",
                              "maxtriggerdelay", "maxbytespertrigger", "maxfilespertrigger", "groupid"})
#: Options only ``read`` takes (a stream refuses them).
BATCH_ONLY_KEYS = frozenset({"endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp", "asofseq",
                             "versionasof"})
_SPELLING = {k.lower(): k for k in (
    "maxRecordsPerTrigger", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "maxBytesPerTrigger", "maxFilesPerTrigger", "groupId", "endingOffsets", "endingTimestamp",
    "endingOffsetsByTimestamp", "asOfSeq", "versionAsOf")}
_SECRET_KEYS = frozenset({"s3.key", "s3.secret", "s3.token"})
_SECRET_WORDS = ("key", "secret", "token", "password", "credential")


@dataclass(frozen=True)
class ReadOptions:
    """Validated reader options. Picklable; holds no credentials in its ``repr``.

    Attributes:
        path: the store root URL.
        topics: the topics read, in order, without duplicates (empty for ``subscribePattern`` until
            :func:`with_topics` resolves the pattern).
        pattern: the ``subscribePattern`` regular expression, or None.
        assign: the ``assign`` partitions (topic -> partitions), or None (every partition).
        starting, ending: the offsets options (see :data:`OffsetSpec`); ``ending`` is ``latest`` for streams.
        starting_ts, ending_ts: ``startingTimestamp`` / ``endingTimestamp`` (epoch ms), or None.
        starting_by_ts, ending_by_ts: the by-timestamp maps, or None.
        ts_strategy: ``error`` or ``latest`` (``startingOffsetsByTimestampStrategy``).
        isolation: ``read_committed`` or ``read_uncommitted``.
        max_records_per_trigger: stream row limit per micro-batch, or None.
        min_records_per_trigger: stream minimum rows per micro-batch, or None.
        max_trigger_delay_ms: how long a stream waits for ``min_records_per_trigger`` rows.
        max_bytes_per_trigger: approximate stream bytes per micro-batch, or None.
        max_files_per_trigger: stream segment files per micro-batch, or None.
        group_id: stream consumer group, or None.
        fail_on_data_loss: an offset outside the log fails the read (True, the default) or skips to the log start.
        max_partition_bytes: target bytes of one Spark input partition.
        max_records_per_partition: at most this many records per Spark input partition, or None.
        min_partitions: lower bound on the number of input partitions, or None.
        read_path: ``auto``, ``python`` or ``native`` (see :func:`txnsource.read`).
        as_of_seq: ``asOfSeq`` / ``versionAsOf``: the log entry whose snapshot a batch read takes, or None.
        include_headers: the read adds the ``_headers`` column (``includeHeaders``).
        store: store access options (credentials hidden from ``repr``).
    """

    path: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    pattern: str | None = None
    assign: Mapping[str, tuple[int, ...]] | None = None
    starting_ts: int | None = None
    ending_ts: int | None = None
    starting_by_ts: TimestampSpec | None = None
    ending_by_ts: TimestampSpec | None = None
    ts_strategy: str = "error"
    isolation: str = READ_COMMITTED
    max_records_per_trigger: int | None = None
    min_records_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes_per_trigger: int | None = None
    max_files_per_trigger: int | None = None
    group_id: str | None = None
    fail_on_data_loss: bool = True
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    max_records_per_partition: int | None = None
    min_partitions: int | None = None
    read_path: str = "auto"
    as_of_seq: int | None = None
    include_headers: bool = False
    store: StoreOptions = field(default_factory=StoreOptions, repr=False)

    @property
    def subscription(self) -> str:
        """The option naming what is read, with its value, for error messages."""
        if self.pattern is not None:
            return f"option 'subscribePattern' = {self.pattern!r}"
        if self.assign is not None:
            return f"option 'assign' = {json.dumps({t: list(ps) for t, ps in self.assign.items()})!r}"
        return f"option 'topic' = {','.join(self.topics)!r}"


def parse_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Validate Spark reader options.

    Args:
        options: Spark's (case-insensitive) option map.
        streaming: parse for ``readStream`` (True), ``read`` (False), or either (None: the schema lookup, which
            Spark makes before it says which; the stream-or-batch checks then wait for the reader).

    Raises:
        InvalidOptionError: a missing required option, an unknown key, a bad value, or an option the read kind
            does not take; the message names the key and the value (secrets are never echoed).
    """
    lower = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    allowed = _COMMON_KEYS | STREAM_ONLY_KEYS | (frozenset() if streaming else BATCH_ONLY_KEYS)
    streaming_only = bool(streaming)
    for key in lower:
        if key not in allowed:
            if streaming and key in BATCH_ONLY_KEYS:
                raise InvalidOptionError(f"option {_SPELLING[key]!r} is not supported by streaming reads "
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
    topics, pattern, assign = _parse_subscription(lower)
    known = None if pattern is not None else topics
    isolation = parse_isolation(lower.get("isolationlevel"), streaming_only)
    starting = parse_offset_spec("startingOffsets", lower.get("startingoffsets"), known,
                                 default=LATEST if streaming_only else EARLIEST)
    ending = LATEST if streaming_only else parse_offset_spec("endingOffsets", lower.get("endingoffsets"), known,
                                                             default=LATEST)
    max_rows = _max_records(lower)
    min_rows = positive_int("minOffsetsPerTrigger", lower.get("minoffsetspertrigger"))
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise InvalidOptionError(f"option 'minOffsetsPerTrigger' = {min_rows} is above the per-trigger maximum "
                                 f"{max_rows} (maxRecordsPerTrigger / maxOffsetsPerTrigger)")
    opts = ReadOptions(
        path=path,
        topics=topics,
        starting=starting,
        ending=ending,
        pattern=pattern,
        assign=assign,
        starting_ts=parse_timestamp("startingTimestamp", lower.get("startingtimestamp")),
        ending_ts=parse_timestamp("endingTimestamp", lower.get("endingtimestamp")),
        starting_by_ts=parse_timestamp_spec("startingOffsetsByTimestamp", lower.get("startingoffsetsbytimestamp"),
                                            known),
        ending_by_ts=parse_timestamp_spec("endingOffsetsByTimestamp", lower.get("endingoffsetsbytimestamp"),
                                          known),
        ts_strategy=parse_strategy(lower.get("startingoffsetsbytimestampstrategy")),
        isolation=isolation,
        max_records_per_trigger=max_rows,
        min_records_per_trigger=min_rows,
        max_trigger_delay_ms=parse_duration_ms("maxTriggerDelay", lower.get("maxtriggerdelay"),
                                               default=DEFAULT_MAX_TRIGGER_DELAY_MS),
        max_bytes_per_trigger=positive_int("maxBytesPerTrigger", lower.get("maxbytespertrigger")),
        max_files_per_trigger=positive_int("maxFilesPerTrigger", lower.get("maxfilespertrigger")),
        group_id=parse_group(lower.get("groupid")),
        fail_on_data_loss=parse_bool("failOnDataLoss", lower.get("failondataloss"), default=True),
        include_headers=parse_bool("includeHeaders", lower.get("includeheaders"), default=False),
        max_partition_bytes=positive_int("maxPartitionBytes", lower.get("maxpartitionbytes"))
        or DEFAULT_MAX_PARTITION_BYTES,
        max_records_per_partition=positive_int("maxRecordsPerPartition", lower.get("maxrecordsperpartition")),
        min_partitions=positive_int("minPartitions", lower.get("minpartitions")),
        read_path=parse_read_path(lower.get("readpath")),
        as_of_seq=_as_of_seq(lower),
        store=StoreOptions.from_options(lower),
    )
    if streaming is False:
        stream_only = sorted(_SPELLING[k] for k in lower if k in STREAM_ONLY_KEYS)
        if stream_only:
            shown = ", ".join(f"{k!r} = {lower[k.lower()]!r}" for k in stream_only)
            raise InvalidOptionError(f"option {shown} applies to readStream only; a batch read (spark.read) "
                                     "takes no trigger or consumer-group options: remove it")
    return opts


def resolve_pattern(opts: ReadOptions) -> ReadOptions:
    """``opts`` with ``subscribePattern`` resolved against the topics in its store (unchanged, and the store not
    opened, without a pattern).

    Raises:
        TopicNotFoundError, InvalidOptionError: as :func:`with_topics`.
    """
    if opts.pattern is None:
        return opts
    from coordinator import open_store
    from coordinator.topics import list_topics

    store = open_store(opts.path, opts.store)
    try:
        return with_topics(opts, list_topics(store))
    finally:
        store.close()


def with_topics(opts: ReadOptions, names: list[str]) -> ReadOptions:
    """``opts`` with ``subscribePattern`` resolved against the store's topic ``names`` (unchanged otherwise).

    Raises:
        TopicNotFoundError: the pattern matches no topic (a read needs one for its schema).
        InvalidOptionError: a JSON offsets or timestamps option names a topic the pattern does not match.
    """
    if opts.pattern is None:
        return opts
    from coordinator.errors import TopicNotFoundError

    matched = tuple(n for n in names if re.fullmatch(opts.pattern, n))
    if not matched:
        raise TopicNotFoundError(f"option 'subscribePattern' = {opts.pattern!r} matches no topic "
                                 f"(topics: {', '.join(names) or 'none'})")
    for key, spec in (("startingOffsets", opts.starting), ("endingOffsets", opts.ending),
                      ("startingOffsetsByTimestamp", opts.starting_by_ts),
                      ("endingOffsetsByTimestamp", opts.ending_by_ts)):
        if isinstance(spec, Mapping):
            for topic in spec:
                if topic not in matched:
                    raise InvalidOptionError(f"option {key!r} names topic {topic!r}, which option "
                                             f"'subscribePattern' = {opts.pattern!r} does not match")
    return replace(opts, topics=matched)


def _parse_subscription(lower: Mapping[str, str]) -> tuple[tuple[str, ...], str | None,
                                                           dict[str, tuple[int, ...]] | None]:
    given = [k for k in _SUBSCRIBE_KEYS if lower.get(k, "").strip()]
    if len(given) != 1:
        names = {"topic": "topic", "subscribepattern": "subscribePattern", "assign": "assign"}
        if not given:
            raise InvalidOptionError("option 'topic' is missing: name one topic or a comma-separated list (or give "
                                     "'subscribePattern' or 'assign' instead)")
        shown = ", ".join(f"{names[k]!r} = {lower[k]!r}" for k in given)
        raise InvalidOptionError(f"options {shown} conflict: give exactly one of 'topic', 'subscribePattern' and "
                                 "'assign'")
    key = given[0]
    if key == "topic":
        return parse_topics(lower[key]), None, None
    if key == "subscribepattern":
        return (), parse_pattern(lower[key]), None
    assign = parse_assign(lower[key])
    return tuple(assign), None, assign


def _max_records(lower: Mapping[str, str]) -> int | None:
    rows = positive_int("maxRecordsPerTrigger", lower.get("maxrecordspertrigger"))
    offsets = positive_int("maxOffsetsPerTrigger", lower.get("maxoffsetspertrigger"))
    if rows is not None and offsets is not None:
        raise InvalidOptionError(f"options 'maxRecordsPerTrigger' = {rows} and 'maxOffsetsPerTrigger' = {offsets} "
                                 "are synonyms: give one")
    return rows if rows is not None else offsets


def _as_of_seq(lower: Mapping[str, str]) -> int | None:
    given = {k: lower[k] for k in ("asofseq", "versionasof") if lower.get(k, "").strip()}
    if len(given) > 1:
        raise InvalidOptionError(f"options 'asOfSeq' = {given['asofseq']!r} and 'versionAsOf' = "
                                 f"{given['versionasof']!r} are synonyms: give one")
    for key, raw in given.items():
        try:
            value = int(raw.strip())
        except ValueError:
            raise InvalidOptionError(f"option {_SPELLING[key]!r} = {raw!r} is not an integer (a transaction log "
                                     "entry number)") from None
        if value < 0:
            raise InvalidOptionError(f"option {_SPELLING[key]!r} = {raw!r} must be a log entry number >= 0")
        return value
    return None


def _may_be_secret(key: str) -> bool:
    """Whether an option's value must not be echoed (credentials, or a misspelling of one)."""
    return key.startswith(("s3.", "fs.", "aws")) or any(w in key for w in _SECRET_WORDS)
