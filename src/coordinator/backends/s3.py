"""The S3 backend of the store contract (see :mod:`coordinator.store`).

``put_if_absent`` is a ``PutObject`` with ``If-None-Match: *``: S3 (and S3-compatible stores that honour the
condition) creates the object only if no object is at the key, atomically. ``412 PreconditionFailed`` means an
object is there: the store reads it back and compares bytes, so a write of ours that a retry re-sent is reported
as success, not as a conflict. ``409 ConditionalRequestConflict`` (a concurrent conditional write in flight) is
retried.

Retries are owned here, not by s3fs or botocore (both are set to a single attempt): every operation runs in one
bounded loop with exponential backoff and full jitter, limited by an attempt count and a time budget. Transient
failures (``503 SlowDown``, other 5xx, ``409`` conflicts, ``RequestTimeout``, timeouts, resets, refused
connections) are retried; anything else fails at once. Past the budget an operation raises
:class:`~coordinator.errors.StoreError` naming the operation and the object; a conditional write whose outcome
is unknown (an attempt may have been applied) is resolved by reading the object back, and if that fails too,
:class:`~coordinator.errors.CommitStateUnknownError` is raised.

:attr:`Store.counters` counts one request per attempt this store makes. The HTTP layer underneath (aiohttp) may
re-send an idempotent request once on its own when a kept-alive connection turns out to be closed; such a re-send
is not counted, and for a conditional write it is harmless: it meets ``412`` and the read-back decides.

Credentials reach only the s3fs client: they never appear in this object's ``repr``, in log lines or in error
messages (error texts are scrubbed of them before they are raised).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import s3fs
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    PartialCredentialsError,
)
from fsspec.asyn import sync

from coordinator.backends.cloud import CloudStore, RetriesExhausted, TransientFailure, parse_bucket_url
from coordinator.errors import StoreError
from coordinator.store import TEMP_PREFIX, ObjectInfo, StoreOptions

__all__ = ["S3Store"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: S3 error codes that name a transient condition: the request may be sent again.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "InternalError",
        "ServiceUnavailable",
        "RequestTimeout",
        "ConditionalRequestConflict",
        "OperationAborted",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
    }
)
#: Status codes whose request was certainly not applied (the service refused it before acting).
NOT_APPLIED_STATUS = frozenset({409, 429, 503})


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split ``s3://bucket/optional/prefix`` (or ``s3a://``) into the bucket and the key prefix (``""`` or ending
    in ``/``).

    Raises:
        InvalidOptionError: not an s3 URL, no bucket, or a prefix with empty, ``.`` or ``..`` segments.
    """
    return parse_bucket_url(url, ("s3://", "s3a://"), "an s3:// or s3a://")


class S3Store(CloudStore):
    """A store rooted at ``s3://bucket/prefix`` (see the module docstring for retries and failure reporting).

    Args:
        url: ``s3://bucket/optional/prefix`` or ``s3a://...``.
        opts: endpoint, credentials and region; without key and secret the standard AWS chain is used.
        max_attempts: attempts per operation (the first one included) before giving up.
        time_budget: seconds an operation may spend retrying; no new attempt starts past it.
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for a reply (a stalled reply counts as an ambiguous failure).
        backoff_base: the first backoff in seconds; it doubles per attempt, with full jitter.
        backoff_max: the largest backoff in seconds.
        list_page_size: keys per ``ListObjectsV2`` page (at most 1000).

    Raises:
        InvalidOptionError: a malformed URL or a non-positive limit.
    """

    label = "S3"

    def __init__(
        self,
        url: str,
        opts: StoreOptions | None = None,
        *,
        max_attempts: int = 8,
        time_budget: float = 60.0,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        backoff_base: float = 0.05,
        backoff_max: float = 2.0,
        list_page_size: int = 1000,
    ) -> None:
        self.bucket, self.prefix = parse_s3_url(url)  # before stripping: "s3://" names no bucket
        url = url.rstrip("/")
        super().__init__(url)
        self._root = f"s3://{self.bucket}/{self.prefix}"
        opts = opts or StoreOptions()
        self._set_limits(max_attempts=max_attempts, time_budget=time_budget, connect_timeout=connect_timeout,
                         read_timeout=read_timeout, backoff_base=backoff_base, backoff_max=backoff_max,
                         list_page_size=list_page_size, page_limit=1000)
        self.endpoint = opts.endpoint
        self._set_secrets(opts.key, opts.secret, opts.token)
        region = opts.region or ("us-east-1" if opts.endpoint else None)
        client_kwargs: dict[str, Any] = {"region_name": region} if region else {}
        self._fs = s3fs.S3FileSystem(
            key=opts.key,
            secret=opts.secret,
            token=opts.token,
            endpoint_url=opts.endpoint,
            client_kwargs=client_kwargs,
            config_kwargs={
                "connect_timeout": connect_timeout,
                "read_timeout": read_timeout,
                "retries": {"total_max_attempts": 1},
            },
            skip_instance_cache=True,
        )
        self._fs.retries = 1  # s3fs's own retry loop: one attempt; ours decides
        self._closed = False

    def __repr__(self) -> str:
        return f"S3Store({self.url!r}, endpoint={self.endpoint!r})"

    # -- the contract -----------------------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> bool:
        key = self._key(path)
        body = bytes(data)

        async def op(s3: Any) -> None:
            await s3.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")

        try:
            self._call("put_if_absent", path, op, write=True)
        except ClientError as exc:
            if _status(exc) == 412:
                return self._read_back_equal(path, body)
            raise self._failure("put_if_absent", path, exc) from None
        except RetriesExhausted as exc:
            return self._settle(path, body, exc)
        return True

    def put(self, path: str, data: bytes) -> None:
        key = self._key(path)
        body = bytes(data)

        async def op(s3: Any) -> None:
            await s3.put_object(Bucket=self.bucket, Key=key, Body=body)

        try:
            self._call("put", path, op, write=True)
        except ClientError as exc:
            raise self._failure("put", path, exc) from None

    def get(self, path: str) -> bytes:
        key = self._key(path)

        async def op(s3: Any) -> bytes:
            reply = await s3.get_object(Bucket=self.bucket, Key=key)
            async with reply["Body"] as stream:
                data: bytes = await stream.read()
            length = reply.get("ContentLength")
            if length is not None and len(data) != length:
                raise ConnectionResetError(f"reply body cut short ({len(data)} of {length} bytes)")
            return data

        try:
            return self._call("get", path, op)
        except ClientError as exc:
            if _code(exc) == "NoSuchKey" or _status(exc) == 404 and _code(exc) != "NoSuchBucket":
                raise FileNotFoundError(path) from None
            raise self._failure("get", path, exc) from None

    def exists(self, path: str) -> bool:
        """Whether an object is at ``path`` (one ``HeadObject``).

        Raises:
            StoreError: the store failed past the retry budget.
        """
        key = self._key(path)

        async def op(s3: Any) -> None:
            await s3.head_object(Bucket=self.bucket, Key=key)

        try:
            self._call("head", path, op)
        except ClientError as exc:
            if _status(exc) == 404 and _code(exc) != "NoSuchBucket":
                return False
            raise self._failure("head", path, exc) from None
        return True

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        base = self._folder(prefix)
        names: builtins.list[str] = []
        for page in self._pages(prefix, base, delimiter=True, start_after=start_after, limit=limit):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base):]
                if name and "/" not in name and not name.startswith(TEMP_PREFIX):
                    names.append(name)
        out = sorted(n for n in names if start_after is None or n > start_after)
        return out if limit is None else out[:limit]

    def now(self) -> float:
        """The S3 service's clock: the ``Date`` of a one-key listing (one request, no write), in whole seconds.

        Raises:
            StoreError: the store failed past the retry budget, or sent no usable ``Date``.
        """

        async def op(s3: Any) -> dict[str, Any]:
            reply: dict[str, Any] = await s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + "_txn/",
                                                             MaxKeys=1)
            return reply

        try:
            reply = self._call("list", "_txn/", op)
        except ClientError as exc:
            raise self._failure("list", "_txn/", exc) from None
        return self._clock(reply.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date"))

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        base = self._folder(prefix)
        dirs: set[str] = set()
        for page in self._pages(prefix, base, delimiter=True, start_after=None, limit=None):
            for common in page.get("CommonPrefixes", []):
                name = common["Prefix"][len(base):].rstrip("/")
                if name:
                    dirs.add(name)
        return sorted(dirs)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        base = self._folder(prefix)
        out: builtins.list[ObjectInfo] = []
        for page in self._pages(prefix, base, delimiter=False, start_after=None, limit=None):
            for obj in page.get("Contents", []):
                rel = obj["Key"][len(self.prefix):]
                if rel.endswith("/") or rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                    continue
                out.append(ObjectInfo(rel, int(obj["Size"]), obj["LastModified"].timestamp()))
        return sorted(out, key=lambda o: o.path)

    def delete(self, path: str) -> None:
        key = self._key(path)

        async def op(s3: Any) -> None:
            await s3.delete_object(Bucket=self.bucket, Key=key)

        try:
            self._call("delete", path, op, write=True)
        except ClientError as exc:
            if _code(exc) != "NoSuchKey":
                raise self._failure("delete", path, exc) from None

    def close(self) -> None:
        """Close the HTTP connections of this store's client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        creator = getattr(self._fs, "_s3creator", None)
        if getattr(self._fs, "_s3", None) is not None and creator is not None:
            try:
                s3fs.S3FileSystem.close_session(self._fs.loop, creator)
            except Exception as exc:  # closing is best effort
                log.debug("closing the S3 client failed: %s", type(exc).__name__)

    # -- internals --------------------------------------------------------------------------------------------

    def _pages(
        self, prefix: str, base: str, *, delimiter: bool, start_after: str | None, limit: int | None
    ) -> builtins.list[dict[str, Any]]:
        pages: builtins.list[dict[str, Any]] = []
        token: str | None = None
        seen = 0
        while True:
            size = self.list_page_size if limit is None else max(1, min(self.list_page_size, limit - seen))
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": base, "MaxKeys": size}
            if delimiter:
                kwargs["Delimiter"] = "/"
            if token is not None:
                kwargs["ContinuationToken"] = token
            elif start_after is not None:
                kwargs["StartAfter"] = base + start_after

            async def op(s3: Any, kwargs: dict[str, Any] = kwargs) -> dict[str, Any]:
                page: dict[str, Any] = await s3.list_objects_v2(**kwargs)
                return page

            try:
                page = self._call("list", prefix or "/", op)
            except ClientError as exc:
                raise self._failure("list", prefix or "/", exc) from None
            pages.append(page)
            seen += len(page.get("Contents", [])) + len(page.get("CommonPrefixes", []))
            if not page.get("IsTruncated") or (limit is not None and seen >= limit):
                return pages
            token = page.get("NextContinuationToken")
            if not token:
                raise StoreError(f"S3 list of {self._where(prefix)} returned a truncated page without a token")

    def _call(self, kind: str, path: str, op: Callable[[Any], Awaitable[T]], *, write: bool = False) -> T:
        """Run ``op`` against the S3 client in the retry loop (:meth:`CloudStore._retry`).

        Raises:
            StoreError: the store is closed, or no credentials could be found (at once: retrying cannot find them).
            ClientError: a non-retryable error reply (412, 404, 403, ...), for the caller to interpret.
            RetriesExhausted: transient failures past the budget; ``ambiguous`` when ``write`` and some attempt
                may have been applied.
        """

        def attempt() -> T:
            try:
                return sync(self._fs.loop, self._invoke, op)
            except (NoCredentialsError, PartialCredentialsError) as exc:
                # Waiting never makes credentials appear: fail at once, saying where they come from.
                raise StoreError(self._scrub(
                    f"S3 {kind} of {self._where(path)}: no usable credentials ({exc}); give s3.key and s3.secret "
                    "(txnlog: --s3-key/--s3-secret) or set up the AWS credential chain (AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws/credentials, an instance or container role)")) from None
            except ClientError as exc:
                if not _retryable_reply(exc):
                    raise
                raise _transient(exc, _status(exc) not in NOT_APPLIED_STATUS) from None
            except (TimeoutError, BotoCoreError, aiohttp.ClientError, OSError) as exc:
                raise _transient(exc, _maybe_sent(exc)) from None

        return self._retry(kind, path, attempt, write=write)

    async def _invoke(self, op: Callable[[Any], Awaitable[T]]) -> T:
        await self._fs.set_session()
        return await op(await self._fs.get_s3(self.bucket))

    def _failure(self, kind: str, path: str, exc: ClientError) -> StoreError:
        return StoreError(self._scrub(f"S3 {kind} of {self._where(path)} failed: {_describe(exc)}"))


def _status(exc: ClientError) -> int | None:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _retryable_reply(exc: ClientError) -> bool:
    status = _status(exc) or 0
    return status >= 500 or status == 429 or _code(exc) in RETRYABLE_CODES


def _transient(exc: BaseException, maybe_applied: bool) -> TransientFailure:
    return TransientFailure(f"{type(exc).__name__}: {exc}", maybe_applied=maybe_applied, name=type(exc).__name__)


def _maybe_sent(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may have reached the store (only a failed connect proves not)."""
    if isinstance(exc, ConnectTimeoutError):
        return False
    if isinstance(exc, EndpointConnectionError):
        return not isinstance(exc.kwargs.get("error"), aiohttp.ClientConnectorError)
    return True


def _describe(exc: ClientError) -> str:
    error = exc.response.get("Error", {})
    return f"HTTP {_status(exc)} {error.get('Code', '')}: {error.get('Message', '')}".strip()
