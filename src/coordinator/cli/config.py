"""Settings of the ``txnlog`` command line: built-in defaults, a TOML ``--config`` file, environment, flags.

Precedence, strongest first: flags, environment (``TXNLOG_STORE``, ``TXNLOG_CONFIG``), the config file, the
built-in defaults (mirrored, with comments, in ``conf/txnlog.defaults.toml``). An invalid value is reported under
the name the user wrote it with (``[transactions] timeout_ms in FILE``, ``--s3-region``, ``$TXNLOG_STORE``).
Store credentials come only from ``--s3-key``/``--s3-secret`` (``--azure-key``/``--azure-sas-token``,
``--gcs-token``) or the standard AWS (Azure, Google) chain; a config file holding credentials is refused, and
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
from coordinator.inspect.common import require_store
from coordinator.partition import DEFAULT_CHECKPOINT_INTERVAL as DEFAULT_PARTITION_CHECKPOINT_INTERVAL
from coordinator.probe import probe_conditional_writes
from coordinator.producer import DEFAULT_SEGMENT_BYTES
from coordinator.segments import FORMATS
from coordinator.store import Store, StoreOptions
from coordinator.store_factory import open_store
from coordinator.txnlog import DEFAULT_CHECKPOINT_INTERVAL as DEFAULT_LOG_CHECKPOINT_INTERVAL
from coordinator.units import parse_duration_ms, parse_size

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
    ("azure", "account"): "azure_account",
    ("azure", "endpoint"): "azure_endpoint",
    ("gcs", "endpoint"): "gcs_endpoint",
    ("gcs", "project"): "gcs_project",
    ("transactions", "timeout_ms"): "transaction_timeout_ms",
    ("transactions", "transactional_id_expiration_ms"): "transactional_id_expiration_ms",
    ("segments", "format"): "segment_format",
    ("segments", "target_bytes"): "segment_target_bytes",
    ("checkpoint", "log_interval"): "log_checkpoint_interval",
    ("checkpoint", "partition_interval"): "partition_checkpoint_interval",
    ("daemon", "sweep_interval_s"): "sweep_interval_s",
}
#: Settings attribute -> the flag that sets it (for messages).
FLAG_NAMES = {"store_url": "--store", "s3_endpoint": "--s3-endpoint", "s3_region": "--s3-region",
              "s3_key": "--s3-key", "s3_secret": "--s3-secret", "azure_account": "--azure-account",
              "azure_endpoint": "--azure-endpoint", "azure_key": "--azure-key", "azure_sas_token": "--azure-sas-token",
              "gcs_endpoint": "--gcs-endpoint", "gcs_project": "--gcs-project", "gcs_token": "--gcs-token"}
CREDENTIAL_KEYS = frozenset({"key", "secret", "token", "access_key", "secret_key", "session_token",
                             "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "password",
                             "sastoken", "sas_token", "account_key", "connection_string"})


@dataclass(frozen=True)
class Settings:
    """Everything a command needs to reach the store and run sweeps. ``repr`` never shows credentials.

    ``origins`` maps a setting to where its value came from (``[section] key in FILE``, a flag, an environment
    variable), so messages name what the user wrote."""

    store_url: str | None = None
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    retry_time_budget_s: float = DEFAULT_RETRY_TIME_BUDGET_S
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_key: str | None = field(default=None, repr=False)
    s3_secret: str | None = field(default=None, repr=False)
    azure_account: str | None = None
    azure_endpoint: str | None = None
    azure_key: str | None = field(default=None, repr=False)
    azure_sas_token: str | None = field(default=None, repr=False)
    gcs_endpoint: str | None = None
    gcs_project: str | None = None
    gcs_token: str | None = field(default=None, repr=False)
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS
    segment_format: str = "parquet"
    segment_target_bytes: int = DEFAULT_SEGMENT_BYTES
    log_checkpoint_interval: int = DEFAULT_LOG_CHECKPOINT_INTERVAL
    partition_checkpoint_interval: int = DEFAULT_PARTITION_CHECKPOINT_INTERVAL
    sweep_interval_s: float = DEFAULT_SWEEP_INTERVAL_S
    origins: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    def secrets(self) -> tuple[str | None, ...]:
        return (self.s3_key, self.s3_secret, self.azure_key, self.azure_sas_token, self.gcs_token)

    def store_options(self) -> StoreOptions:
        """The store access options (credentials only when given as flags; otherwise the AWS or Azure chain
        applies)."""
        return StoreOptions(endpoint=self.s3_endpoint, key=self.s3_key, secret=self.s3_secret, region=self.s3_region,
                            max_attempts=self.retry_attempts, time_budget=self.retry_time_budget_s,
                            azure_account=self.azure_account, azure_endpoint=self.azure_endpoint,
                            azure_key=self.azure_key, azure_sas_token=self.azure_sas_token,
                            gcs_endpoint=self.gcs_endpoint, gcs_project=self.gcs_project, gcs_token=self.gcs_token)

    def open(self, *, write: bool = False, create: bool = False) -> Store:
        """Open the store. Unless ``create``, refuse a URL that holds no txnlog store, writing nothing (read-only
        commands never create anything). With ``write``, probe once that the store honours conditional writes
        (the probe writes and deletes one object; it runs after the store check, so a mistyped URL gets no probe).

        Raises:
            InvalidOptionError: no store URL was given anywhere, or the URL is not supported.
            NoStoreError: no txnlog store at the URL (and not ``create``).
            UnsupportedFormatError: the store was written by another store format.
            StoreError: the store cannot be reached, or (``write``) does not honour conditional writes.
        """
        if not self.store_url:
            raise InvalidOptionError(f"no store given: use --store URL, ${ENV_STORE}, or [store] url in --config")
        store = open_store(self.store_url, self.store_options())
        if not create:
            require_store(store)
        if write:
            probe_conditional_writes(store)
        return store

    def coordinator(self, store: Store) -> TransactionCoordinator:
        """A coordinator on ``store`` using these settings' timeouts and checkpoint intervals."""
        return TransactionCoordinator(
            store,
            checkpoint_interval=self.log_checkpoint_interval,
            partition_checkpoint_interval=self.partition_checkpoint_interval,
            transaction_timeout_ms=self.transaction_timeout_ms,
            transactional_id_expiration_ms=self.transactional_id_expiration_ms,
        )

    def public(self) -> dict[str, Any]:
        """The settings as a dict, credentials replaced by whether they are set."""
        hidden = ("s3_key", "s3_secret", "azure_key", "azure_sas_token", "gcs_token", "origins")
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in hidden}
        d["s3_credentials"] = "flags" if self.s3_key or self.s3_secret else "aws-chain"
        d["azure_credentials"] = "flags" if self.azure_key or self.azure_sas_token else "azure-chain"
        return d


def read_config_file(path: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The Settings attributes a TOML config file sets, and for each the name it was written under
    (``[transactions] timeout_ms in FILE``).

    Raises:
        InvalidOptionError: the file is missing or not TOML, has an unknown section or key, or holds credentials.
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
    origins: dict[str, str] = {}
    for section, body in doc.items():
        if not isinstance(body, dict):
            raise InvalidOptionError(f"config file {path!r}: top-level key {section!r} must be a [section]")
        for key, value in body.items():
            if key.lower() in CREDENTIAL_KEYS:
                raise InvalidOptionError(
                    f"config file {path!r}: [{section}] {key} looks like a credential; credentials never go in a "
                    "config file (use --s3-key/--s3-secret, --azure-key/--azure-sas-token, or the AWS or Azure "
                    "environment/credential chain)"
                )
            attr = CONFIG_KEYS.get((section, key))
            if attr is None:
                known = ", ".join(f"[{s}] {k}" for s, k in CONFIG_KEYS)
                raise InvalidOptionError(f"config file {path!r}: unknown setting [{section}] {key} (known: {known})")
            out[attr] = value
            origins[attr] = f"[{section}] {key} in {path}"
    return out, origins


def _name(attr: str, origins: Mapping[str, str]) -> str:
    if attr in origins:
        return origins[attr]
    for (section, key), a in CONFIG_KEYS.items():
        if a == attr:
            return f"[{section}] {key}"
    return FLAG_NAMES.get(attr, attr)


#: Settings that also take a duration or size string (``"1m"``, ``"64MiB"``): attribute -> (kind, plain unit).
UNIT_SETTINGS: dict[str, tuple[str, str]] = {
    "transaction_timeout_ms": ("duration", "ms"), "transactional_id_expiration_ms": ("duration", "ms"),
    "sweep_interval_s": ("duration", "s"), "retry_time_budget_s": ("duration", "s"),
    "segment_target_bytes": ("size", "B"),
}


def _units(settings: Settings) -> Settings:
    """``settings`` with duration and size strings (``"1m"``, ``"64MiB"``) turned into the numbers the settings
    hold (ms, s or bytes); numbers are left as they are.

    Raises:
        InvalidOptionError: a string that is not a duration or size, named as the user wrote it.
    """
    changes: dict[str, Any] = {}
    for attr, (kind, unit) in UNIT_SETTINGS.items():
        v = getattr(settings, attr)
        if not isinstance(v, str):
            continue
        what = _name(attr, settings.origins)
        if kind == "size":
            changes[attr] = parse_size(v, what=what)
        elif unit == "s":
            changes[attr] = parse_duration_ms(v, what=what, default_unit="s") / 1000
        else:
            changes[attr] = parse_duration_ms(v, what=what, default_unit="ms")
    return replace(settings, **changes) if changes else settings


def _check(settings: Settings) -> Settings:
    """Raises: InvalidOptionError naming the first invalid setting as the user wrote it."""
    settings = _units(settings)
    origins = settings.origins

    def positive_int(attr: str) -> None:
        v = getattr(settings, attr)
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise InvalidOptionError(f"{_name(attr, origins)} must be a positive integer, got {v!r}")

    for attr in ("retry_attempts", "transaction_timeout_ms", "transactional_id_expiration_ms",
                 "segment_target_bytes", "log_checkpoint_interval", "partition_checkpoint_interval"):
        positive_int(attr)
    for attr in ("sweep_interval_s", "retry_time_budget_s"):
        v = getattr(settings, attr)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise InvalidOptionError(f"{_name(attr, origins)} must be a positive number of seconds, got {v!r}")
    if settings.segment_format not in FORMATS:
        raise InvalidOptionError(f"{_name('segment_format', origins)} {settings.segment_format!r} is not one of "
                                 f"{FORMATS}")
    for attr in ("store_url", "s3_endpoint", "s3_region", "azure_account", "azure_endpoint", "gcs_endpoint",
                 "gcs_project"):
        val = getattr(settings, attr)
        if val is not None and not isinstance(val, str):
            raise InvalidOptionError(f"{_name(attr, origins)} must be a string, got {val!r}")
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
        InvalidOptionError: a bad config file or value, named as the user wrote it.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    path = config or env.get(ENV_CONFIG) or None
    if path:
        values, origins = read_config_file(path)
    if env.get(ENV_STORE):
        values["store_url"] = env[ENV_STORE]
        origins["store_url"] = f"${ENV_STORE}"
    for attr, v in (flags or {}).items():
        if v is not None:
            values[attr] = v
            origins[attr] = FLAG_NAMES.get(attr, attr)
    return _check(Settings(**values, origins=origins))
