"""Where things live in the store, and which names are allowed.

```
_txn/format.json                              store format (created with the store)
_txn/log/<seq:020d>.json                      transaction log entries (create-if-absent, dense from 0)
_txn/checkpoint/<seq:020d>.json               coordinator state as of log entry <seq>
_txn/checkpoint/_last.json                    the newest checkpoint again
_txn/intents/<request id>.json                requests waiting for group commit
_txn/open/<txn id>.json                       producer transactions that staged data
topics/<topic>/meta/<version:08d>.json        topic definition (schema, partitions, config); latest wins
topics/<topic>/<p>/log/<idx:020d>.json        partition records (derived from log entries, dense from 0)
topics/<topic>/<p>/checkpoint/<idx:020d>.json partition index as of record <idx>
topics/<topic>/<p>/data/<name>                segment files (unique names, plain puts, invisible until named)
_native-staging/<write id>/out/...            Spark's output of a running native write (moved out by its driver)
_native-staging/<write id>/_lease.json        that write's lease, renewed while it runs (GC leaves the folder)
```
"""

from __future__ import annotations

import re

from coordinator.errors import InvalidNameError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,248}$")
NAME_RULE = "1-249 characters from [A-Za-z0-9._-], starting with a letter or digit"

TXN = "_txn"
TXN_LOG = "_txn/log"
TXN_CHECKPOINT = "_txn/checkpoint"
LAST_CHECKPOINT = "_txn/checkpoint/_last.json"
TXN_INTENTS = "_txn/intents"
TXN_OPEN = "_txn/open"
FORMAT_PATH = "_txn/format.json"
TOPICS = "topics"
#: Parquet files Spark writes for a native batch write (txnsink.write) before they are moved into data folders
#: (``<write id>/out/``); never read; GC deletes folders whose files are all older than its grace period, unless
#: their lease is younger than ``coordinator.maintenance.common.NATIVE_LEASE_MS``.
NATIVE_STAGING = "_native-staging"
#: The lease a running native write keeps renewing in its staging folder (``<write id>/_lease.json``).
NATIVE_LEASE = "_lease.json"


def check_name(kind: str, name: object) -> str:
    """Validate a topic, group or transactional-id name.

    Raises:
        InvalidNameError: the name is not a string matching :data:`NAME_RULE` (so it can never leave the store
            root or clash with the layout).
    """
    if not isinstance(name, str) or not NAME_RE.match(name) or name in (".", ".."):
        raise InvalidNameError(f"invalid {kind} name {name!r}: use {NAME_RULE}")
    return name


def seq_name(n: int) -> str:
    return f"{n:020d}.json"


def parse_seq(name: str) -> int | None:
    """The number in a ``<seq:020d>.json`` name, or None for any other name."""
    if len(name) == 25 and name.endswith(".json") and name[:20].isdigit():
        return int(name[:20])
    return None


def txn_log_path(seq: int) -> str:
    return f"{TXN_LOG}/{seq_name(seq)}"


def txn_checkpoint_path(seq: int) -> str:
    return f"{TXN_CHECKPOINT}/{seq_name(seq)}"


def topic_dir(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_meta_dir(topic: str) -> str:
    return f"{TOPICS}/{topic}/meta"


def topic_meta_path(topic: str, version: int) -> str:
    return f"{TOPICS}/{topic}/meta/{version:08d}.json"


def partition_dir(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/{partition}"


def marker_dir(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/log"


def marker_path(topic: str, partition: int, idx: int) -> str:
    return f"{marker_dir(topic, partition)}/{seq_name(idx)}"


def partition_checkpoint_dir(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/checkpoint"


def partition_checkpoint_path(topic: str, partition: int, idx: int) -> str:
    return f"{partition_checkpoint_dir(topic, partition)}/{seq_name(idx)}"


def data_dir(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/data"


def data_path(topic: str, partition: int, name: str) -> str:
    return f"{data_dir(topic, partition)}/{name}"


def intent_path(request_id: str) -> str:
    return f"{TXN_INTENTS}/{request_id}.json"


def open_path(txn: str) -> str:
    return f"{TXN_OPEN}/{txn}.json"


#: Separates a staged segment file's transaction id from the rest of its name.
TXN_SEP = "~"


def segment_name(txn: str, rest: str) -> str:
    """A staged segment's file name (without extension): its transaction id first, so GC can judge it by name."""
    return f"{txn}{TXN_SEP}{rest}"


def txn_of_file(name: str) -> str | None:
    """The transaction id a segment file name starts with, or None."""
    head, sep, _rest = name.partition(TXN_SEP)
    return head if sep else None
