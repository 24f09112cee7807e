"""Kafka-style configuration mappings for the Python clients, as confluent-kafka takes them:

```python
Consumer({"store.url": "s3://bucket/lake", "group.id": "etl", "auto.offset.reset": "earliest",
          "s3.endpoint": "http://localhost:9000"})
Producer({"store.url": "file:///data/lake", "transactional.id": "orders-etl", "transaction.timeout.ms": 60000})
```

``store.url`` names the store (there are no brokers: ``bootstrap.servers`` is refused with a word on why); ``s3.*``
keys are store options (never persisted). Every other key must be one the client knows: a misspelt key is an error,
not silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.errors import InvalidOptionError
from coordinator.store import StoreOptions

#: Consumer config keys and the keyword each sets.
CONSUMER_KEYS = {"group.id": "group_id", "isolation.level": "isolation_level",
                 "auto.offset.reset": "auto_offset_reset", "max.poll.records": "max_poll_records",
                 "fail.on.data.loss": "fail_on_data_loss"}
#: Producer config keys and the keyword each sets.
PRODUCER_KEYS = {"transactional.id": "transactional_id", "transaction.timeout.ms": "transaction_timeout_ms",
                 "max.in.flight.requests.per.connection": "max_in_flight"}
_INTS = {"max_poll_records", "transaction_timeout_ms", "max_in_flight"}
_BOOLS = {"fail_on_data_loss"}


def _value(kw: str, key: str, v: Any) -> Any:
    if kw in _INTS:
        try:
            return int(v)
        except (TypeError, ValueError):
            raise InvalidOptionError(f"config {key!r} must be an integer, got {v!r}") from None
    if kw in _BOOLS:
        text = str(v).strip().lower()
        if text not in ("true", "false"):
            raise InvalidOptionError(f"config {key!r} must be true or false, got {v!r}")
        return text == "true"
    return str(v)


def from_config(conf: Mapping[str, Any], keys: Mapping[str, str], client: str) -> tuple[str, dict[str, str],
                                                                                         dict[str, Any]]:
    """``(store url, store options, keyword arguments)`` of a ``client`` ("Consumer" / "Producer") config.

    Raises:
        InvalidOptionError: no ``store.url``, ``bootstrap.servers`` given, an unknown key or a bad value (the
            message names the key; secrets are never quoted).
    """
    url = conf.get("store.url")
    if "bootstrap.servers" in conf:
        raise InvalidOptionError(f"{client} config: txnlog has no brokers; give the store as 'store.url' "
                                 "(e.g. s3://bucket/lake) instead of 'bootstrap.servers'")
    if not isinstance(url, str) or not url:
        raise InvalidOptionError(f"{client} config needs 'store.url' (the store root, e.g. s3://bucket/lake or "
                                 f"file:///data/lake); got keys {sorted(conf)}")
    options: dict[str, str] = {}
    kwargs: dict[str, Any] = {}
    unknown = []
    for key, v in conf.items():
        if key == "store.url":
            continue
        if key.lower() in StoreOptions.KEYS:
            options[key] = str(v)
        elif key in keys:
            kwargs[keys[key]] = _value(keys[key], key, v)
        else:
            unknown.append(key)
    if unknown:
        raise InvalidOptionError(f"{client} config: unknown key(s) {sorted(unknown)}; known: "
                                 f"{sorted(['store.url', *keys, 's3.*'])}")
    return url, options, kwargs
