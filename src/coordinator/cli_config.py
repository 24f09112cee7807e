"""Settings of the ``txnlog`` command line: built-in defaults, a TOML ``--config`` file, environment, flags.

Precedence, strongest first: flags, environment (``TXNLOG_STORE``, ``TXNLOG_CONFIG``), the config file, the
built-in defaults (mirrored, with comments, in ``conf/txnlog.defaults.toml``). Store credentials come only from
``--s3-key``/``--s3-secret`` or the standard AWS chain; a config file holding credentials is refused, and
credentials are never echoed back in any message.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from coordinator.coordinator import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
    TransactionCoordinator,
)
from coordinator.errors import InvalidOptionError
from coordinator.partition import DEFAULT_CHECKPOINT_INTERVAL
from coordinator.producer import DEFAULT_SEGMENT_BYTES
from coordinator.segments import FORMATS
from coordinator.store import Store, StoreOptions, open_store, probe_conditional_writes

ENV_STORE = "TXNLOG_STORE"
ENV_CONFIG = "TXNLOG_CONFIG"
#: The S3 backend's own defaults (``S3Store(max_attempts=..., time_budget=...)``); local stores do not retry.
DEFAULT_RETRY_ATTEMPTS = 8
DEFAULT_RETRY_TIME_BUDGET_S = 60.0
DEFAULT_SWEEP_INTERVAL_S = 10.0

#: (section, key) in a config file -> Settings attribute.
CONFIG_KEYS: dict[tuple[str, str], str] = {
    ("store", "url"): "store_url",
    ("store", "retry_attempts"): "retry_attempts",
    ("store", "retry_time_budget_s"): "retry_time_budget_s",
    ("s3", "endpoint"): "s3_endpoint",
    ("s3", "region"): "s3_region",
    ("transactions", "timeout_ms"): "transaction_timeout_ms",
    ("transactions", "transactional_id_expiration_ms"): "transactional_id_expiration_ms",
    ("segments", "format"): "segment_format",
    ("segments", "target_bytes"): "segment_target_bytes",
    ("checkpoint", "interval"): "checkpoint_interval",
    ("daemon", "sweep_interval_s"): "sweep_interval_s",
}
CREDENTIAL_KEYS = frozenset({"key", "secret", "token", "access_key", "secret_key", "session_token",
                             "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "password"})


@dataclass(frozen=True)
class Settings:
    """Everything a command needs to reach the store and run sweeps. ``repr`` never shows credentials."""

    store_url: str | None = None
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    retry_time_budget_s: float = DEFAULT_RETRY_TIME_BUDGET_S
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_key: str | None = field(default=None, repr=False)
    s3_secret: str | None = field(default=None, repr=False)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
    segment_format: str = "parquet"
    segment_target_bytes: int = DEFAULT_SEGMENT_BYTES
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    sweep_interval_s: float = DEFAULT_SWEEP_INTERVAL_S

    def secrets(self) -> tuple[str | None, ...]:
        return (self.s3_key, self.s3_secret)

    def store_options(self) -> StoreOptions:
        """The store access options (credentials only when given as flags; otherwise the AWS chain applies)."""
        return StoreOptions(endpoint=self.s3_endpoint, key=self.s3_key, secret=self.s3_secret, region=self.s3_region)

    def open(self, *, write: bool = False) -> Store:
        """Open the store. Read-only commands skip the conditional-write probe (it writes a probe object).

        Raises:
            InvalidOptionError: no store URL was given anywhere, or the URL is not supported.
            StoreError: the store cannot be reached, or (``write``) does not honour conditional writes.
        """
        if not self.store_url:
            raise InvalidOptionError(f"no store given: use --store URL, {ENV_STORE}, or [store] url in --config")
        url = self.store_url.strip()
        if url.startswith(("s3://", "s3a://")):
            # open_store takes no retry budget, so the S3 backend is built here with the configured one.
            from coordinator.s3store import S3Store

            store: Store = S3Store(url, self.store_options(), max_attempts=self.retry_attempts,
                                   time_budget=self.retry_time_budget_s)
            if write:
                probe_conditional_writes(store)
            return store
        return open_store(url, self.store_options(), probe=write)

    def coordinator(self, store: Store) -> TransactionCoordinator:
        """A coordinator on ``store`` using these settings' timeouts and checkpoint interval."""
        return TransactionCoordinator(
            store,
            checkpoint_interval=self.checkpoint_interval,
            transaction_timeout_ms=self.transaction_timeout_ms,
            transactional_id_expiration_ms=self.transactional_id_expiration_ms,
        )

    def public(self) -> dict[str, Any]:
        """The settings as a dict, credentials replaced by whether they are set."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("s3_key", "s3_secret")}
        d["s3_credentials"] = "flags" if self.s3_key or self.s3_secret else "aws-chain"
        return d


def read_config_file(path: str) -> dict[str, Any]:
    """The Settings attributes a TOML config file sets.

    Raises:
        InvalidOptionError: the file is missing or not TOML, has an unknown section or key, holds credentials,
            or a value of the wrong type.
    """
    import tomllib

    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise InvalidOptionError(f"config file {path!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidOptionError(f"config file {path!r} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise InvalidOptionError(f"config file {path!r} cannot be read: {exc.strerror}") from None
    out: dict[str, Any] = {}
    for section, body in doc.items():
        if not isinstance(body, dict):
            raise InvalidOptionError(f"config file {path!r}: top-level key {section!r} must be a [section]")
        for key, value in body.items():
            if key.lower() in CREDENTIAL_KEYS:
                raise InvalidOptionError(
                    f"config file {path!r}: [{section}] {key} looks like a credential; credentials never go in a "
                    "config file (use --s3-key/--s3-secret or the AWS environment/credential chain)"
                )
            attr = CONFIG_KEYS.get((section, key))
            if attr is None:
                known = ", ".join(f"[{s}] {k}" for s, k in CONFIG_KEYS)
                raise InvalidOptionError(f"config file {path!r}: unknown setting [{section}] {key} (known: {known})")
            out[attr] = value
    return out


def _check(settings: Settings) -> Settings:
    """Raises: InvalidOptionError naming the first invalid setting."""
    def positive_int(name: str) -> None:
        v = getattr(settings, name)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InvalidOptionError(f"setting {name} must be a positive integer, got {v!r}")

    for name in ("retry_attempts", "transaction_timeout_ms", "transactional_id_expiration_ms",
                 "segment_target_bytes", "checkpoint_interval"):
        positive_int(name)
    for name in ("sweep_interval_s", "retry_time_budget_s"):
        v = getattr(settings, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise InvalidOptionError(f"setting {name} must be a positive number of seconds, got {v!r}")
    if settings.segment_format not in FORMATS:
        raise InvalidOptionError(f"setting segment_format {settings.segment_format!r} is not one of {FORMATS}")
    for name in ("store_url", "s3_endpoint", "s3_region"):
        val = getattr(settings, name)
        if val is not None and not isinstance(val, str):
            raise InvalidOptionError(f"setting {name} must be a string, got {val!r}")
    return replace(settings, sweep_interval_s=float(settings.sweep_interval_s),
                   retry_time_budget_s=float(settings.retry_time_budget_s))


def load_settings(
    *,
    config: str | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merge defaults, the config file (``config`` or ``$TXNLOG_CONFIG``), ``$TXNLOG_STORE`` and the flags
    (Settings attribute -> value; None values are ignored).

    Raises:
        InvalidOptionError: a bad config file or value.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    path = config or env.get(ENV_CONFIG) or None
    if path:
        values.update(read_config_file(path))
    if env.get(ENV_STORE):
        values["store_url"] = env[ENV_STORE]
    values.update({k: v for k, v in (flags or {}).items() if v is not None})
    return _check(Settings(**values))
