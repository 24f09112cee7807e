"""The Google Cloud Storage backend of the store contract (see :mod:`coordinator.store`).

``put_if_absent`` is a multipart upload (``uploadType=multipart``) with ``ifGenerationMatch=0``: GCS creates the
object only if no live object has that name, atomically. ``412 Precondition Failed`` means an object is there: the
store reads it back and compares bytes, so a write of ours that a retry re-sent is reported as success, not as a
conflict. Every write is one multipart request, whatever its size (GCS takes up to 5 TiB in one), so the upload
kind the probe checks is the only one this backend sends; some emulators enforce the precondition on one upload
kind and not another.

The requests are GCS JSON API calls sent through gcsfs's HTTP session, which brings the credentials
(``gcs.token``: a credentials file, or ``anon``; otherwise the library's standard chain: application default
credentials, gcloud's, the metadata server) and the endpoint (``gcs.endpoint``; otherwise ``STORAGE_EMULATOR_HOST``
or Google's). Retries are owned here, not by gcsfs: every operation runs in one bounded loop with exponential
backoff and full jitter, limited by an attempt count and a time budget. Transient failures (``429``, ``408``,
5xx, timeouts, resets, refused connections) are retried; anything else fails at once. Past the budget an
operation raises :class:`~coordinator.errors.StoreError` naming the operation and the object; a conditional
write whose outcome is unknown (an attempt may have been applied) is resolved by reading the object back, and if
that fails too, :class:`~coordinator.errors.CommitStateUnknownError` is raised.

:attr:`Store.counters` counts one request per attempt. Credentials never appear in this object's ``repr``, in
log lines or in error messages.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote

import aiohttp
import gcsfs
from fsspec.asyn import sync

from coordinator import redact
from coordinator.backends.cloud import CloudStore, RetriesExhausted, TransientFailure, parse_bucket_url
from coordinator.errors import InvalidOptionError, StoreError
from coordinator.store import TEMP_PREFIX, ObjectInfo, StoreOptions

__all__ = ["GCSStore", "parse_gcs_url"]

log = logging.getLogger(__name__)

#: Status codes of a transient condition: the request may be sent again.
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Status codes whose request was certainly not applied (refused before acting).
NOT_APPLIED_STATUS = frozenset({408, 429})
#: ``gcs.token`` values naming a credential method rather than a file.
TOKEN_METHODS = frozenset({"anon", "google_default", "cloud"})


class _Reply:
    """One HTTP reply: status, headers and the whole body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.body) if self.body else {}
        return out

    def describe(self) -> str:
        """``HTTP <status>: <message>`` from a GCS JSON error body (or its text)."""
        try:
            error = self.json().get("error", {})
            message = error.get("message", "") if isinstance(error, dict) else str(error)
        except (ValueError, AttributeError):
            message = self.body[:200].decode("utf-8", "replace")
        return f"HTTP {self.status}: {message}".strip()


def parse_gcs_url(url: str) -> tuple[str, str]:
    """Split ``gs://bucket/optional/prefix`` (or ``gcs://``) into the bucket and the object name prefix (``""`` or
    ending in ``/``).

    Raises:
        InvalidOptionError: not a gs URL, no bucket, or a prefix with empty, ``.`` or ``..`` segments.
    """
    return parse_bucket_url(url, ("gs://", "gcs://"), "a gs:// or gcs://")


class GCSStore(CloudStore):
    """A store rooted at ``gs://bucket/prefix`` (see the module docstring for retries and failure reporting).

    Args:
        url: ``gs://bucket/optional/prefix`` or ``gcs://...``.
        opts: ``gcs_project``, ``gcs_token`` (a credentials file, ``anon``, ``google_default`` or ``cloud``;
            without it the library's standard chain) and ``gcs_endpoint``.
        max_attempts: attempts per operation (the first one included) before giving up.
        time_budget: seconds an operation may spend retrying; no new attempt starts past it.
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds to wait for a reply (a stalled reply counts as an ambiguous failure).
        backoff_base: the first backoff in seconds; it doubles per attempt, with full jitter.
        backoff_max: the largest backoff in seconds.
        list_page_size: objects per listing page (at most 1000).

    Raises:
        InvalidOptionError: a malformed URL, a non-positive limit, or a ``gcs.token`` that names no file.
    """

    label = "GCS"

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
        self.bucket, self.prefix = parse_gcs_url(url)
        super().__init__(url.rstrip("/"))
        self._root = f"gs://{self.bucket}/{self.prefix}"
        opts = opts or StoreOptions()
        self._set_limits(max_attempts=max_attempts, time_budget=time_budget, connect_timeout=connect_timeout,
                         read_timeout=read_timeout, backoff_base=backoff_base, backoff_max=backoff_max,
                         list_page_size=list_page_size, page_limit=1000)
        token = opts.gcs_token
        if token is not None and token not in TOKEN_METHODS and not os.path.isfile(token):
            # The value is not echoed: a raw access token pasted here by mistake must not reach a message.
            raise InvalidOptionError("option gcs.token must name a credentials file that exists, or be 'anon'")
        self.endpoint = opts.gcs_endpoint.rstrip("/") if opts.gcs_endpoint else None
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self._set_secrets(token if token not in TOKEN_METHODS else None)
        self._project = opts.gcs_project
        self._token = token
        self._fs: Any = None  # the credential chain runs at the first request, not when the store is opened
        self._closed = False

    def __repr__(self) -> str:
        return f"GCSStore({self.url!r}, endpoint={self.endpoint!r})"

    # -- the contract -----------------------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> bool:
        body = bytes(data)
        try:
            reply = self._upload("put_if_absent", path, body, {"ifGenerationMatch": "0"})
        except RetriesExhausted as exc:
            return self._settle(path, body, exc)
        if reply.status == 412:
            return self._read_back_equal(path, body)
        if reply.status >= 300:
            raise self._failure("put_if_absent", path, reply)
        return True

    def put(self, path: str, data: bytes) -> None:
        reply = self._upload("put", path, bytes(data), {})
        if reply.status >= 300:
            raise self._failure("put", path, reply)

    def get(self, path: str) -> bytes:
        reply = self._call("get", path, "GET", self._object_url(path), {"alt": "media"}, reads_body=True)
        if reply.status == 404 and not self._bucket_missing(reply):
            raise FileNotFoundError(path)
        if reply.status >= 300:
            raise self._failure("get", path, reply)
        return reply.body

    def exists(self, path: str) -> bool:
        """Whether an object is at ``path`` (one metadata request).

        Raises:
            StoreError: the store failed past the retry budget.
        """
        reply = self._call("head", path, "GET", self._object_url(path), {"fields": "name"})
        if reply.status == 404 and not self._bucket_missing(reply):
            return False
        if reply.status >= 300:
            raise self._failure("head", path, reply)
        return True

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        base = self._folder(prefix)
        names: builtins.list[str] = []
        for page in self._pages(prefix, base, delimiter=True, start_after=start_after, limit=limit):
            for obj in page.get("items", []):
                name = obj["name"][len(base):]
                if name and "/" not in name and not name.startswith(TEMP_PREFIX):
                    names.append(name)
        out = sorted(n for n in names if start_after is None or n > start_after)
        return out if limit is None else out[:limit]

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        base = self._folder(prefix)
        dirs: set[str] = set()
        for page in self._pages(prefix, base, delimiter=True, start_after=None, limit=None):
            for common in page.get("prefixes", []):
                name = common[len(base):].rstrip("/")
                if name:
                    dirs.add(name)
        return sorted(dirs)

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        base = self._folder(prefix)
        out: builtins.list[ObjectInfo] = []
        for page in self._pages(prefix, base, delimiter=False, start_after=None, limit=None):
            for obj in page.get("items", []):
                rel = obj["name"][len(self.prefix):]
                if rel.endswith("/") or rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                    continue
                out.append(ObjectInfo(rel, int(obj["size"]), _timestamp(obj["updated"])))
        return sorted(out, key=lambda o: o.path)

    def delete(self, path: str) -> None:
        reply = self._call("delete", path, "DELETE", self._object_url(path), {}, write=True)
        if reply.status >= 300 and not (reply.status == 404 and not self._bucket_missing(reply)):
            raise self._failure("delete", path, reply)

    def now(self) -> float:
        """The GCS service's clock: the ``Date`` of a one-object listing (one request, no write), in whole seconds.

        Raises:
            StoreError: the store failed past the retry budget, or sent no usable ``Date``.
        """
        params = {"prefix": self.prefix + "_txn/", "maxResults": "1", "fields": "kind"}
        reply = self._call("list", "_txn/", "GET", self._bucket_url() + "/o", params)
        if reply.status >= 300:
            raise self._failure("list", "_txn/", reply)
        return self._clock(reply.headers.get("Date"))

    def close(self) -> None:
        """Close the HTTP connections of this store's client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        session = getattr(self._fs, "_session", None)
        if session is not None:
            try:
                gcsfs.GCSFileSystem.close_session(self._fs.loop, session)
            except Exception as exc:  # closing is best effort
                log.debug("closing the GCS client failed: %s", type(exc).__name__)

    # -- internals --------------------------------------------------------------------------------------------

    def _location(self) -> str:
        return str(self._client()._location).rstrip("/")

    def _bucket_url(self) -> str:
        return f"{self._location()}/storage/v1/b/{quote(self.bucket, safe='')}"

    def _object_url(self, path: str) -> str:
        return f"{self._bucket_url()}/o/{quote(self._key(path), safe='')}"

    def _bucket_missing(self, reply: _Reply) -> bool:
        """Whether a 404 names the bucket, not the object (GCS: "The specified bucket does not exist."; listings
        never 404 otherwise, so :meth:`_pages` takes every 404 as a missing bucket)."""
        return "bucket does not exist" in reply.describe().lower()

    def _upload(self, kind: str, path: str, body: bytes, conditions: dict[str, str]) -> _Reply:
        """One multipart upload of ``body`` to ``path`` (the only upload kind this backend sends)."""
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": self._key(path)}).encode()
        payload = b"".join((
            b"--", boundary.encode(), b"\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n", meta,
            b"\r\n--", boundary.encode(), b"\r\nContent-Type: application/octet-stream\r\n\r\n", body,
            b"\r\n--", boundary.encode(), b"--\r\n",
        ))
        url = f"{self._location()}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o"
        params = {"uploadType": "multipart", **conditions}
        headers = {"Content-Type": f'multipart/related; boundary="{boundary}"'}
        return self._call(kind, path, "POST", url, params, data=payload, headers=headers, write=True)

    def _pages(self, prefix: str, base: str, *, delimiter: bool, start_after: str | None,
               limit: int | None) -> builtins.list[dict[str, Any]]:
        pages: builtins.list[dict[str, Any]] = []
        token: str | None = None
        seen = 0
        while True:
            size = self.list_page_size if limit is None else max(1, min(self.list_page_size, limit - seen))
            params = {"prefix": base, "maxResults": str(size),
                      "fields": "items(name,size,updated),prefixes,nextPageToken"}
            if delimiter:
                params["delimiter"] = "/"
            if token is not None:
                params["pageToken"] = token
            if start_after is not None:
                params["startOffset"] = base + start_after
            reply = self._call("list", prefix or "/", "GET", self._bucket_url() + "/o", params)
            if reply.status == 404:
                raise StoreError(f"GCS list of {self._where(prefix)} failed: bucket {self.bucket!r} does not exist "
                                 f"({reply.describe()})")
            if reply.status >= 300:
                raise self._failure("list", prefix or "/", reply)
            page = reply.json()
            pages.append(page)
            seen += len(page.get("items", [])) + len(page.get("prefixes", []))
            token = page.get("nextPageToken")
            if not token or (limit is not None and seen >= limit):
                return pages

    def _client(self) -> Any:
        """The gcsfs file system whose session and credentials carry the requests (made on first use).

        Raises:
            StoreError: the credentials could not be loaded.
        """
        if self._fs is None:
            try:
                self._fs = gcsfs.GCSFileSystem(project=self._project or gcsfs.core.DEFAULT_PROJECT,
                                               token=self._token, endpoint_url=self.endpoint,
                                               skip_instance_cache=True)
            except Exception as exc:
                raise StoreError(self._scrub(
                    f"GCS store {self.url}: cannot load credentials ({type(exc).__name__}: {exc}); give gcs.token "
                    "(a credentials file, or anon) or set up Google's credential chain "
                    "(GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, the metadata "
                    "server)")) from None
        return self._fs

    def _call(self, kind: str, path: str, method: str, url: str, params: dict[str, str], *,
              data: bytes | None = None, headers: dict[str, str] | None = None, write: bool = False,
              reads_body: bool = False) -> _Reply:
        """Send one request in the retry loop (:meth:`CloudStore._retry`).

        Returns:
            The reply of the first attempt whose status is not transient (2xx, 404, 412, 403, ...), for the
            caller to interpret.
        Raises:
            StoreError: the store is closed, or the credentials cannot be loaded or refreshed (at once).
            RetriesExhausted: transient failures past the budget; ``ambiguous`` when ``write`` and some attempt
                may have been applied.
        """
        self._check_open()
        fs = self._client()

        def attempt() -> _Reply:
            try:
                reply = sync(fs.loop, self._send, fs, method, url, params, data, headers, reads_body)
            except _CredentialsFailed as exc:
                raise StoreError(self._scrub(
                    f"GCS {kind} of {self._where(path)}: no usable credentials ({exc}); give gcs.token (a "
                    "credentials file, or anon) or set up Google's credential chain")) from None
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise TransientFailure(f"{type(exc).__name__}: {exc}", maybe_applied=_maybe_sent(exc),
                                       name=type(exc).__name__) from None
            if reply.status in RETRYABLE_STATUS:
                detail = reply.describe()
                raise TransientFailure(detail, maybe_applied=reply.status not in NOT_APPLIED_STATUS,
                                       name=detail.split(":", 1)[0])
            return reply

        return self._retry(kind, path, attempt, write=write)

    async def _send(self, fs: Any, method: str, url: str, params: dict[str, str], data: bytes | None,
                    headers: dict[str, str] | None, reads_body: bool) -> _Reply:
        await fs._set_session()
        try:
            all_headers = fs._get_headers(headers)  # adds the Authorization header, refreshing it when stale
        except Exception as exc:  # google.auth's and gcsfs's refresh errors have no common base
            raise _CredentialsFailed(f"{type(exc).__name__}: {exc}") from None
        async with fs._session.request(method, url, params=params, data=data, headers=all_headers,
                                       timeout=self._timeout) as r:
            body = await r.read()
            length = r.headers.get("Content-Length")
            if reads_body and r.status < 300 and length is not None and len(body) != int(length):
                raise ConnectionResetError(f"reply body cut short ({len(body)} of {length} bytes)")
            return _Reply(r.status, r.headers, body)

    def _failure(self, kind: str, path: str, reply: _Reply) -> StoreError:
        return StoreError(self._scrub(f"GCS {kind} of {self._where(path)} failed: {reply.describe()}"))

    def _scrub(self, text: str) -> str:
        return redact.scrub(super()._scrub(text))


class _CredentialsFailed(Exception):
    """Loading or refreshing the credentials failed (retrying cannot fix it)."""


def _timestamp(text: str) -> float:
    """Epoch seconds of an RFC 3339 time as GCS writes it (``2026-01-02T03:04:05.678Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _maybe_sent(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may have reached the store (only a failed connect proves not)."""
    connect_timeout = getattr(aiohttp, "ConnectionTimeoutError", None)
    if connect_timeout is not None and isinstance(exc, connect_timeout):
        return False
    return not isinstance(exc, (aiohttp.ClientConnectorError, ConnectionRefusedError))
