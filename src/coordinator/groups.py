"""Consumer-group administration, as ``kafka-consumer-groups.sh --reset-offsets`` / ``--delete``: plan a change of a
group's committed offsets (to the earliest or latest offset, a given offset, the first offset committed at or after
a time, or shifted by N), then commit it outside any transaction (``TransactionCoordinator.commit_group_offsets``,
like Kafka's ``commitSync``); or delete the group's offsets.

Deleting commits a negative offset for every partition the group has committed: the coordinator state removes a
partition's committed offset when a commit names a negative one, and a group with none left is gone. There is no
group membership (no rebalancing), so nothing here can tell whether a consumer of the group is running: one that
is will commit its own positions again at its next commit. Stop the group's consumers first, as Kafka requires.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import GroupNotFoundError, InvalidOptionError, TopicNotFoundError
from coordinator.layout import check_name

#: The ways to choose new offsets (``plan_reset(to=...)``).
RESET_MODES = ("earliest", "latest", "offset", "datetime", "shift")


@dataclass(frozen=True)
class OffsetChange:
    """One partition's committed offset now (None: never committed) and after the change (None: removed)."""

    topic: str
    partition: int
    current: int | None
    new: int | None

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition, "current": self.current, "new": self.new}


def _partitions(coord: TransactionCoordinator, group: str, topics: Mapping[str, Sequence[int] | None] | None,
                ) -> list[tuple[str, int]]:
    committed = coord.log.refresh().group_offsets(group)
    if topics is None:
        if not committed:
            raise GroupNotFoundError(f"consumer group {group!r} has no committed offsets in {coord.store.url}")
        topics = dict.fromkeys(committed)
    out: list[tuple[str, int]] = []
    for topic, parts in topics.items():
        n = coord.topic(topic).partitions
        chosen = list(range(n)) if parts is None else list(parts)
        for p in chosen:
            if not 0 <= p < n:
                raise TopicNotFoundError(f"topic {topic!r} has no partition {p} (it has {n})")
        out += [(topic, p) for p in sorted(set(chosen))]
    return out


def plan_reset(
    coord: TransactionCoordinator,
    group: str,
    topics: Mapping[str, Sequence[int] | None] | None,
    *,
    to: str,
    offset: int | None = None,
    time_ms: int | None = None,
) -> list[OffsetChange]:
    """The new committed offsets of ``group`` in ``topics`` (topic -> partitions, None meaning every partition;
    ``topics=None``: every topic the group has committed for). ``to`` is one of :data:`RESET_MODES`:
    ``earliest`` / ``latest`` (the partition's log start / end), ``offset`` (``offset``), ``datetime`` (the first
    offset committed at or after ``time_ms``, the end if none), ``shift`` (current position plus ``offset``,
    which may be negative; the start when the group never committed). New offsets are clamped to each partition's
    ``[start, end]``, as Kafka does. Reads only.

    Raises:
        InvalidOptionError: a bad mode or a missing value. InvalidNameError: a bad group name.
        GroupNotFoundError: ``topics`` is None and the group has no committed offsets.
        TopicNotFoundError: a topic or partition does not exist.
    """
    check_name("group", group)
    if to not in RESET_MODES:
        raise InvalidOptionError(f"reset mode {to!r} is not one of {RESET_MODES}")
    if to in ("offset", "shift") and offset is None:
        raise InvalidOptionError(f"reset to {to} needs an offset")
    if to == "offset" and offset is not None and offset < 0:
        raise InvalidOptionError(f"offset must not be negative, got {offset}")
    if to == "datetime" and time_ms is None:
        raise InvalidOptionError("reset to a datetime needs a time")
    parts = _partitions(coord, group, topics)
    state = coord.log.state
    committed = state.group_offsets(group)
    out = []
    for topic, p in parts:
        pm = state.partition(topic, p)
        cur = committed.get(topic, {}).get(p)
        if to == "earliest":
            new = pm.start
        elif to == "latest":
            new = pm.end
        elif to == "offset":
            new = int(offset or 0)
        elif to == "shift":
            new = (pm.start if cur is None else cur) + int(offset or 0)
        else:
            plog = coord.partition(topic, p)
            plog.refresh()
            new = plog.timestamp_offset(int(time_ms or 0))
        out.append(OffsetChange(topic, p, cur, min(max(new, pm.start), pm.end)))
    return out


def plan_delete(coord: TransactionCoordinator, group: str) -> list[OffsetChange]:
    """Every committed offset of ``group``, each to be removed (reads only).

    Raises:
        GroupNotFoundError: the group has no committed offsets.
    """
    check_name("group", group)
    committed = coord.log.refresh().group_offsets(group)
    if not committed:
        raise GroupNotFoundError(f"consumer group {group!r} has no committed offsets in {coord.store.url}")
    return [OffsetChange(t, p, o, None) for t in sorted(committed) for p, o in sorted(committed[t].items())]


def apply_changes(coord: TransactionCoordinator, group: str, changes: Sequence[OffsetChange]) -> None:
    """Commit ``changes`` (from :func:`plan_reset` or :func:`plan_delete`) as one offset commit of ``group``,
    outside any transaction.

    Raises:
        CommitStateUnknownError: the outcome could not be learned.
    """
    offsets: dict[str, dict[int, int]] = {}
    removed = []
    for c in changes:
        if c.new is None:
            removed.append((c.topic, c.partition))
        else:
            offsets.setdefault(c.topic, {})[c.partition] = c.new
    if offsets or removed:
        coord.commit_group_offsets(group, offsets, remove=removed)
