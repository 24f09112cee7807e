"""Parsers of single reader option values (used by :mod:`txnsource.options`).

Every parser takes the option's text as Spark gave it (or None when absent) and raises
:class:`coordinator.InvalidOptionError` naming the option and the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from coordinator.errors import InvalidOptionError
from coordinator.layout import check_name
from coordinator.reader import READ_COMMITTED, READ_UNCOMMITTED, check_isolation

EARLIEST = "earliest"
LATEST = "latest"
#: Kafka's JSON conventions for "earliest" and "latest" inside an offsets map.
JSON_EARLIEST = -2
JSON_LATEST = -1
READ_PATHS = ("auto", "python", "native")
#: ``startingOffsetsByTimestampStrategy`` values, as Spark's Kafka source.
TS_STRATEGIES = ("error", "latest")

#: An offsets option: ``"earliest"``, ``"latest"``, or topic -> partition -> offset (-2 earliest, -1 latest).
OffsetSpec = str | Mapping[str, Mapping[int, int]]
#: A by-timestamp option: topic -> partition -> epoch milliseconds.
TimestampSpec = Mapping[str, Mapping[int, int]]

_DURATION_UNITS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000, "second": 1000,
                   "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
                   "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000, "day": 86_400_000,
                   "days": 86_400_000}


def parse_read_path(raw: str | None) -> str:
    """Raises: InvalidOptionError: not one of :data:`READ_PATHS`."""
    if raw is None or not raw.strip():
        return "auto"
    word = raw.strip().lower()
    if word not in READ_PATHS:
        raise InvalidOptionError(f"option 'readPath' = {raw!r} is not one of {', '.join(READ_PATHS)}")
    return word


def parse_topics(raw: str) -> tuple[str, ...]:
    """The topics of a comma-separated ``topic`` option, in order, without duplicates.

    Raises:
        InvalidOptionError: an empty or invalid name.
    """
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


def parse_pattern(raw: str) -> str:
    """A ``subscribePattern`` regular expression (matched against whole topic names).

    Raises:
        InvalidOptionError: an empty or invalid regular expression.
    """
    text = raw.strip()
    if not text:
        raise InvalidOptionError("option 'subscribePattern' is empty: give a regular expression over topic names")
    try:
        re.compile(text)
    except re.error as exc:
        raise InvalidOptionError(f"option 'subscribePattern' = {raw!r} is not a regular expression: {exc}") \
            from None
    return text


def parse_assign(raw: str) -> dict[str, tuple[int, ...]]:
    """An ``assign`` option: JSON ``{"orders": [0, 1]}`` (topic -> partitions).

    Raises:
        InvalidOptionError: not a JSON object of topic -> non-empty list of partition numbers.
    """
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError(f"option 'assign' = {raw!r} must be JSON like {{\"orders\": [0, 1]}}")
    out: dict[str, tuple[int, ...]] = {}
    for topic, parts in doc.items():
        try:
            check_name("topic", topic)
        except InvalidOptionError as exc:
            raise InvalidOptionError(f"option 'assign' = {raw!r}: {exc}") from None
        if not isinstance(parts, list) or not parts or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise InvalidOptionError(f"option 'assign' = {raw!r}: topic {topic!r} must map to a non-empty list "
                                     "of partition numbers >= 0")
        out[topic] = tuple(sorted(set(parts)))
    return out


def parse_isolation(raw: str | None, streaming: bool) -> str:
    """Raises: InvalidOptionError: an unknown level, or ``read_uncommitted`` for a stream."""
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


def parse_bool(key: str, raw: str | None, *, default: bool) -> bool:
    """Raises: InvalidOptionError: neither ``true`` nor ``false``."""
    if raw is None or not raw.strip():
        return default
    word = raw.strip().lower()
    if word not in ("true", "false"):
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be 'true' or 'false'")
    return word == "true"


def positive_int(key: str, raw: str | None) -> int | None:
    """Raises: InvalidOptionError: not an integer > 0."""
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"option {key!r} = {raw!r} is not an integer") from None
    if value <= 0:
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be a positive integer")
    return value


def parse_timestamp(key: str, raw: str | None) -> int | None:
    """An epoch-milliseconds option (``startingTimestamp``, ``endingTimestamp``).

    Raises:
        InvalidOptionError: not an integer >= 0.
    """
    if raw is None or not raw.strip():
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be epoch milliseconds (an integer >= 0)")
    return value


def parse_duration_ms(key: str, raw: str | None, *, default: int) -> int:
    """A duration like ``15m``, ``30s``, ``500ms`` or ``1h`` (a bare number is milliseconds), as milliseconds.

    Raises:
        InvalidOptionError: not a non-negative number with a known unit.
    """
    if raw is None or not raw.strip():
        return default
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    unit = m.group(2).lower() if m else ""
    if m is None or (unit and unit not in _DURATION_UNITS):
        raise InvalidOptionError(f"option {key!r} = {raw!r} is not a duration like '15m', '30s', '500ms' or '1h'")
    return int(m.group(1)) * _DURATION_UNITS.get(unit, 1)


def parse_strategy(raw: str | None) -> str:
    """Raises: InvalidOptionError: not one of :data:`TS_STRATEGIES`."""
    if raw is None or not raw.strip():
        return "error"
    word = raw.strip().lower()
    if word not in TS_STRATEGIES:
        raise InvalidOptionError(f"option 'startingOffsetsByTimestampStrategy' = {raw!r} is not one of "
                                 f"{', '.join(TS_STRATEGIES)}")
    return word


def parse_group(raw: str | None) -> str | None:
    """Raises: InvalidOptionError: an invalid group name."""
    if raw is None or not raw.strip():
        return None
    try:
        return check_name("group", raw.strip())
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"option 'groupId' = {raw!r}: {exc}") from None


def _partition_map(key: str, raw: str, doc: object, topics: tuple[str, ...] | None,
                   what: str) -> dict[str, dict[int, int]]:
    """topic -> partition -> integer of a parsed JSON option; ``topics`` (None: any) limits the topics named."""
    if not isinstance(doc, dict):
        raise InvalidOptionError(f"option {key!r} = {raw!r} must be a JSON object of topic -> partition -> {what}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if topics is not None and topic not in topics:
            raise InvalidOptionError(f"option {key!r} = {raw!r} names topic {topic!r}, which the read does not "
                                     f"subscribe to ({', '.join(topics)})")
        if not isinstance(parts, dict):
            raise InvalidOptionError(f"option {key!r} = {raw!r}: topic {topic!r} must map partitions to {what}s")
        out[topic] = {}
        for p, value in parts.items():
            try:
                pnum = int(p)
            except (TypeError, ValueError):
                pnum = -1
            if pnum < 0 or str(pnum) != str(p).strip():
                raise InvalidOptionError(f"option {key!r} = {raw!r}: partition {p!r} of {topic!r} is not a "
                                         "non-negative integer")
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidOptionError(f"option {key!r} = {raw!r}: {what} {value!r} of {topic}/{p} is not an "
                                         "integer")
            out[topic][pnum] = value
    return out


def parse_offset_spec(key: str, raw: str | None, topics: tuple[str, ...] | None, *, default: str) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or a JSON offsets map naming only ``topics`` (None: topics are checked when
    the read resolves them, as for ``subscribePattern``).

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
    out = _partition_map(key, raw, doc, topics, "offset")
    for topic, parts in out.items():
        for p, off in parts.items():
            if off < JSON_EARLIEST:
                raise InvalidOptionError(f"option {key!r} = {raw!r}: offset {off!r} of {topic}/{p} must be an "
                                         "integer >= 0 (or -2 for earliest, -1 for latest)")
    return out


def parse_timestamp_spec(key: str, raw: str | None, topics: tuple[str, ...] | None) -> TimestampSpec | None:
    """Parse a by-timestamp map: JSON ``{"orders": {"0": 1700000000000}}`` (epoch milliseconds).

    Raises:
        InvalidOptionError: not a JSON map of topic -> partition -> milliseconds >= 0, or a topic not read.
    """
    if raw is None or not raw.strip():
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise InvalidOptionError(f"option {key!r} = {raw!r} is not JSON like {{\"orders\": {{\"0\": 1700000000000}}}}"
                                 ) from None
    out = _partition_map(key, raw, doc, topics, "timestamp")
    for topic, parts in out.items():
        for p, ts in parts.items():
            if ts < 0:
                raise InvalidOptionError(f"option {key!r} = {raw!r}: timestamp {ts} of {topic}/{p} must be epoch "
                                         "milliseconds >= 0")
    return out
