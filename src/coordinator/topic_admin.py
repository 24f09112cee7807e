"""Topic administration beyond creation: deleting a topic and changing its config (retention). Adding partitions is
:func:`coordinator.topics.add_partitions`.

**Deletion** marks the topic deleted first (``topics/<t>/meta/deleted.json``, a conditional create), so new readers
and writers get ``TopicNotFoundError`` at once, then deletes its partitions' segments, records and checkpoints.
The definition files stay, and the name is not reused: the transaction log keeps the partitions' offsets, so a new
topic of the same name would not start at offset 0 (creating it is refused, even with the same definition: every
definition carries a writer token, see :mod:`coordinator.topics`), and a write that starts after the deletion
fails naming the topic. A writer that cached the definition before the deletion may still stage files there, but
its commit is refused naming the topic (the coordinator reads the deleted marker before a commit, at most every
:data:`~coordinator.coordinator.DELETED_RECHECK_S` per topic and process); only a commit racing the deletion itself
can land, and deleting again removes what it left. Stop the topic's writers first, as with Kafka.

**Config** changes write the next definition version (a conditional create, retried on a race), like
``add_partitions``: readers pick the latest version up at their next open.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from coordinator import parallel
from coordinator.coordinator import TransactionCoordinator
from coordinator.errors import InvalidOptionError
from coordinator.layout import topic_dir, topic_meta_dir
from coordinator.probe import probe_conditional_writes
from coordinator.store import Store
from coordinator.topics import DELETED_MARKER, TopicMeta, create_definition, get_topic
from coordinator.units import parse_duration_ms, parse_size

#: Topic config keys and what they mean (the retention the maintenance sweep applies).
CONFIG_KEYS: dict[str, str] = {
    "retention.ms": "delete whole segments whose records were all committed more than this many ms ago",
    "retention.bytes": "delete the oldest whole segments while a partition holds more than this many bytes",
}


@dataclass
class TopicDeletion:
    """What deleting a topic removes: every file below ``topics/<name>/`` except its definitions."""

    topic: str
    partitions: int
    paths: list[str] = field(default_factory=list)
    bytes: int = 0
    executed: bool = False


def plan_delete_topic(store: Store, name: str) -> TopicDeletion:
    """What :func:`delete_topic` would remove (reads only).

    Raises:
        TopicNotFoundError: no such topic (or already deleted).
    """
    return _leftovers(store, name, get_topic(store, name).partitions)


def delete_topic(coord: TransactionCoordinator, name: str) -> TopicDeletion:
    """Delete topic ``name`` (see the module docstring): mark it deleted, checkpoint the transaction log (so no
    later checkpoint writer rewrites the topic's partition records), then delete its partitions' files.

    Raises:
        TopicNotFoundError: no such topic (or already deleted).
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written or deleted).
        StoreError: the store failed (the topic is deleted once the marker exists; run again to finish).
    """
    store = coord.store
    plan = plan_delete_topic(store, name)
    probe_conditional_writes(store)
    # The marker is a fact, not a win: whoever created it (this call or a concurrent delete), the topic is deleted.
    store.put_if_absent(f"{topic_meta_dir(name)}/{DELETED_MARKER}",
                        json.dumps({"topic": name, "deleted_ms": int(store.now() * 1000)}).encode())
    coord.log.refresh()
    coord.log.write_checkpoint()
    plan = _leftovers(store, name, plan.partitions)
    parallel.pmap(store.delete, plan.paths)
    plan.executed = True
    return plan


def _leftovers(store: Store, name: str, partitions: int) -> TopicDeletion:
    """Every file below the topic's folder except its definitions."""
    plan = TopicDeletion(name, partitions)
    meta_dir = topic_meta_dir(name) + "/"
    for info in store.list_info(topic_dir(name)):
        if not info.path.startswith(meta_dir):
            plan.paths.append(info.path)
            plan.bytes += info.size
    return plan


def check_config(updates: Mapping[str, str]) -> dict[str, str]:
    """Validate topic config values and return them as stored (whole numbers): ``retention.ms`` a positive
    duration (``1h``, ``7d``, ``4m05s`` or plain milliseconds), ``retention.bytes`` a positive size (``10GiB`` or
    plain bytes); see :mod:`coordinator.units`.

    Raises:
        InvalidOptionError: an unknown key or a bad value, naming the key and the value.
    """
    out = {}
    for key, value in updates.items():
        if key not in CONFIG_KEYS:
            raise InvalidOptionError(f"unknown topic config {key!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        if key == "retention.ms":
            out[key] = str(parse_duration_ms(str(value), what=f"topic config {key}", default_unit="ms"))
        else:
            out[key] = str(parse_size(str(value), what=f"topic config {key}"))
    return out


def set_topic_config(store: Store, name: str, updates: Mapping[str, str], remove: Iterable[str] = ()) -> TopicMeta:
    """Set the ``updates`` config values of topic ``name`` and remove the ``remove`` keys, as the next definition
    version. Returns the new definition (the current one when nothing changes).

    Raises:
        InvalidOptionError: an unknown key or a bad value.
        TopicNotFoundError: no such topic.
        UnsupportedStoreError: the store does not honour conditional writes (nothing is written).
    """
    values = check_config(updates)
    drop = list(remove)
    for key in drop:
        if key not in CONFIG_KEYS:
            raise InvalidOptionError(f"unknown topic config {key!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
    probe_conditional_writes(store)
    while True:
        cur = get_topic(store, name)
        config = {k: v for k, v in cur.config.items() if k not in drop} | values
        if config == dict(cur.config):
            return cur
        new = create_definition(store, replace(cur, config=config, version=cur.version + 1))
        if new is not None:
            return new
