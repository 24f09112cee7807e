"""What the object-store backends (:mod:`~coordinator.backends.s3`, :mod:`~coordinator.backends.azure`,
:mod:`~coordinator.backends.gcs`) share: bucket URLs, the retry loop, the resolution of an ambiguous conditional
write, credential scrubbing and request counting.

Each backend keeps what is its own: its client, how a reply or an exception is classified (which failures are
transient, which prove the request was not applied), and the wording of its other errors. It hands the retry loop
one attempt at a time; the attempt raises :class:`TransientFailure` for a failure worth retrying and anything else
to end the operation at once.

The retry loop: every attempt counts one request of its kind in :attr:`Store.counters`; after a transient failure
it sleeps a full-jitter backoff (uniform in ``[0, min(backoff_max, backoff_base * 2 ** (attempt - 1))]``) and tries
again, until ``max_attempts`` attempts were made or the next one would start past ``time_budget`` seconds. Then it
raises :class:`RetriesExhausted`, ``ambiguous`` when the operation is a write and some attempt may have been
applied. The loop's safety rests on no clock: the budget only bounds how long an operation keeps trying.

This module imports only the store contract, :mod:`coordinator.errors` and :mod:`coordinator.redact`, so each
backend's client library is imported only when that backend is.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import ClassVar, TypeVar

from coordinator import redact
from coordinator.errors import InvalidOptionError, StoreError
from coordinator.store import Store, check_relative

__all__ = ["CloudStore", "RetriesExhausted", "TransientFailure", "parse_bucket_url", "root_prefix", "scrub"]

T = TypeVar("T")

#: Secrets shorter than this are not scrubbed: replacing one- to three-character strings would mangle every
#: message and hide nothing real.
MIN_SECRET_LENGTH = 4


class RetriesExhausted(StoreError):
    """The retry budget ran out. ``ambiguous``: some attempt may have been applied by the store."""

    def __init__(self, message: str, ambiguous: bool) -> None:
        super().__init__(message)
        self.ambiguous = ambiguous


class TransientFailure(Exception):
    """One attempt failed in a way that another attempt may not.

    Args:
        detail: the failure as the final error message reports it (scrubbed by the loop).
        maybe_applied: whether the store may have applied the request (only a write's matters).
        name: the failure's short name for the debug log (an exception type, ``HTTP 503``).
    """

    def __init__(self, detail: str, *, maybe_applied: bool, name: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.maybe_applied = maybe_applied
        self.name = name


def root_prefix(prefix: str) -> str:
    """The key prefix of a store root: ``""``, or the path without its outer slashes followed by ``/``.

    Raises:
        InvalidOptionError: the prefix has empty, ``.`` or ``..`` segments.
    """
    prefix = prefix.strip("/")
    if prefix:
        check_relative(prefix)
        prefix += "/"
    return prefix


def parse_bucket_url(url: str, schemes: tuple[str, str], named: str) -> tuple[str, str]:
    """Split ``<scheme>bucket/optional/prefix`` into the bucket and the key prefix (see :func:`root_prefix`).

    Args:
        url: the store root.
        schemes: the accepted schemes with ``://``, the first one the usual (``("s3://", "s3a://")``).
        named: how the error names the schemes (``"an s3:// or s3a://"``).

    Raises:
        InvalidOptionError: none of ``schemes``, no bucket, or a prefix with empty, ``.`` or ``..`` segments.
    """
    for scheme in schemes:
        if url.startswith(scheme):
            rest = url[len(scheme):]
            break
    else:
        raise InvalidOptionError(f"store URL {url!r} is not {named} URL")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidOptionError(f"store URL {url!r} names no bucket (expected {schemes[0]}bucket/prefix)")
    return bucket, root_prefix(prefix)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` replaced by ``***``, the longest first (so a secret that contains
    another is hidden whole)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class CloudStore(Store):
    """The common part of a store on an object service (abstract: the backend gives the contract's operations).

    A subclass sets :attr:`label` (how messages name the service), calls :meth:`_set_limits` and
    :meth:`_set_secrets` from its constructor, sets ``prefix`` (a :func:`root_prefix`) and ``_root`` (the root's
    URL, bucket and prefix, as messages name objects), and sends every request through :meth:`_retry`.
    """

    #: How messages name the service: ``S3``, ``Azure``, ``GCS``.
    label: ClassVar[str]
    clock_resolution = 1.0

    prefix: str
    _root: str
    _closed: bool = False
    _secrets: tuple[str, ...] = ()

    def _set_limits(self, *, max_attempts: int, time_budget: float, connect_timeout: float, read_timeout: float,
                    backoff_base: float, backoff_max: float, list_page_size: int, page_limit: int) -> None:
        """Check and keep the retry budget and the listing page size (capped at ``page_limit``).

        Raises:
            InvalidOptionError: a non-positive limit or timeout, or a negative backoff.
        """
        for name, value in (("max_attempts", max_attempts), ("time_budget", time_budget),
                            ("connect_timeout", connect_timeout), ("read_timeout", read_timeout),
                            ("list_page_size", list_page_size)):
            if value <= 0:
                raise InvalidOptionError(f"{self.label} store option {name} must be positive, got {value!r}")
        if backoff_base < 0 or backoff_max < 0:
            raise InvalidOptionError(f"{self.label} store backoff must not be negative")
        self.max_attempts = max_attempts
        self.time_budget = time_budget
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.list_page_size = min(list_page_size, page_limit)
        self._rng = random.Random()

    def _set_secrets(self, *candidates: str | None) -> None:
        """Keep the credentials that error texts must never show and register them with :mod:`coordinator.redact`
        (for log lines); ``None``, empty and very short values are skipped."""
        self._secrets = tuple(s for s in candidates if s and len(s) >= MIN_SECRET_LENGTH)
        redact.register(*self._secrets)

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secrets)

    def _key(self, path: str) -> str:
        """The object name of a store path.

        Raises:
            InvalidOptionError: ``path`` is not a valid relative path.
        """
        return self.prefix + check_relative(path)

    def _folder(self, prefix: str) -> str:
        """The object name prefix of a store folder (``""`` for the root, else ending in ``/``)."""
        prefix = prefix.strip("/")
        return self.prefix + (check_relative(prefix) + "/" if prefix else "")

    def _where(self, path: str) -> str:
        """The object's URL as messages name it."""
        return f"{self._root}{path}"

    def _check_open(self) -> None:
        """Raises: StoreError: the store was closed."""
        if self._closed:
            raise StoreError(f"{self.label} store {self.url} is closed")

    def _retry(self, kind: str, path: str, attempt: Callable[[], T], *, write: bool = False) -> T:
        """Run ``attempt`` in the retry loop (see the module docstring); one counted ``kind`` request per attempt.

        Raises:
            StoreError: the store is closed.
            RetriesExhausted: transient failures past the budget; ``ambiguous`` when ``write`` and some attempt
                may have been applied. The message names the operation and the object, and is scrubbed.
            Exception: whatever else ``attempt`` raises, at once (a reply for the caller to interpret, a
                credentials error).
        """
        self._check_open()
        start = time.monotonic()
        ambiguous = False
        attempts = 0
        while True:
            attempts += 1
            self.counters.add(kind)
            try:
                return attempt()
            except TransientFailure as exc:
                failure = exc
                ambiguous = ambiguous or (write and exc.maybe_applied)
            elapsed = time.monotonic() - start
            delay = self._rng.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** (attempts - 1)))
            if attempts >= self.max_attempts or elapsed + delay >= self.time_budget:
                unknown = " (it may have been applied)" if ambiguous else ""
                raise RetriesExhausted(self._scrub(
                    f"{self.label} {kind} of {self._where(path)} failed after {attempts} attempts in {elapsed:.1f}s"
                    f"{unknown}; last error: {failure.detail}"), ambiguous) from None
            logging.getLogger(type(self).__module__).debug(
                "%s %s of %s attempt %d failed (%s); retrying", self.label, kind, self._where(path), attempts,
                failure.name)
            time.sleep(delay)

    def _settle(self, path: str, data: bytes, exc: RetriesExhausted) -> bool:
        """The outcome of a conditional write of ``data`` to ``path`` whose retries ran out: when an attempt may
        have been applied, whether the object now holds ``data`` (read back and compared).

        Raises:
            RetriesExhausted: ``exc`` itself, when no attempt can have been applied.
            CommitStateUnknownError: the read-back failed too, or found nothing.
        """
        if not exc.ambiguous:
            raise exc
        return self._read_back_equal(path, data, cause=exc)

    def _clock(self, date: str | None) -> float:
        """The service's clock from a reply's ``Date`` header, in epoch seconds.

        Raises:
            StoreError: no ``Date`` was sent.
        """
        from email.utils import parsedate_to_datetime

        if not date:
            raise StoreError(f"{self.label} endpoint of {self._where('')} sent no Date header to read its clock from")
        return parsedate_to_datetime(date).timestamp()
