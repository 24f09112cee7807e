"""The Azure Blob Storage backend of the store contract (see :mod:`coordinator.store`).

Store roots: ``az://container/prefix``, ``abfs://container/prefix`` and ``abfss://container/prefix``, and as Spark
users write them, ``abfs[s]://container@account.dfs.core.windows.net/prefix`` (the account is taken from the host;
the store talks to the account's Blob endpoint, ``https://account.blob.core.windows.net``, or ``azure.endpoint``).

``put_if_absent`` is a Put Blob with ``If-None-Match: *``: Azure creates the blob only if no blob is at the name,
atomically. ``409 BlobAlreadyExists`` (or ``412 ConditionNotMet``) means a blob is there: the store reads it back
and compares bytes, so a write of ours that a retry re-sent is reported as success, not as a conflict.

The client: adlfs (:class:`adlfs.AzureBlobFileSystem`) resolves the account and the credentials (an account key, a
SAS token, ``AZURE_STORAGE_*`` environment variables, or, when none is given, azure-identity's
``DefaultAzureCredential`` chain) and holds the azure-storage-blob asynchronous service client and the event loop.
The requests themselves go to that service client directly, as the S3 backend sends its own to botocore's client:
adlfs's ``pipe_file`` does send ``If-None-Match: *`` (``overwrite=False``) but folds ``409`` and ``412`` into one
``FileExistsError`` and cannot turn off the SDK's own retries.

Retries are owned here: every request is sent with the SDK's retry policy at zero retries, inside one bounded loop
with exponential backoff and full jitter, limited by an attempt count and a time budget. Transient failures
(``503 ServerBusy``, other 5xx, ``429``, timeouts, resets, refused connections) are retried; anything else fails at
once. Past the budget an operation raises :class:`~coordinator.errors.StoreError` naming the operation and the
object; a conditional write whose outcome is unknown (an attempt may have been applied) is resolved by reading the
blob back, and if that fails too, :class:`~coordinator.errors.CommitStateUnknownError` is raised.

:meth:`AzureStore.now` is the service's clock (the ``Date`` header of a one-blob listing), in whole seconds, like
the blobs' ``Last-Modified`` that :meth:`AzureStore.list_info` reports. Azure's List Blobs has no portable
"start after": ``list(start_after=...)`` pages through the folder and filters here.

Credentials reach only the client: they never appear in this object's ``repr``, in log lines (they are registered
with :mod:`coordinator.redact`) or in error messages (error texts are scrubbed of them before they are raised).
"""

from __future__ import annotations

import builtins
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import aiohttp
from adlfs import AzureBlobFileSystem
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobProperties
from fsspec.asyn import sync

from coordinator.backends.cloud import CloudStore, RetriesExhausted, TransientFailure, root_prefix
from coordinator.errors import InvalidOptionError, StoreError
from coordinator.store import TEMP_PREFIX, ObjectInfo, StoreOptions

__all__ = ["AZURE_SCHEMES", "AzureStore", "parse_azure_url"]

log = logging.getLogger(__name__)

T = TypeVar("T")

AZURE_SCHEMES = ("az://", "abfs://", "abfss://")
#: Azure error codes that name a transient condition: the request may be sent again.
RETRYABLE_CODES = frozenset({"ServerBusy", "InternalError", "OperationTimedOut"})
#: Status codes whose request was certainly not applied (the service refused it before acting).
NOT_APPLIED_STATUS = frozenset({429, 503})
_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_DFS_HOST = re.compile(r"^(?P<account>[a-z0-9]{3,24})\.(?:dfs|blob)\.core\.windows\.net$")


def parse_azure_url(url: str) -> tuple[str, str | None, str]:
    """``(container, account or None, prefix)`` of an ``az://``, ``abfs://`` or ``abfss://`` URL; the prefix is
    ``""`` or ends with ``/``.

    Raises:
        InvalidOptionError: another scheme, no container, an invalid container name, or a host that is neither a
            container nor ``container@account.dfs.core.windows.net``.
    """
    if not url.startswith(AZURE_SCHEMES):
        raise InvalidOptionError(f"not an Azure URL: {url!r} (use az://container/prefix)")
    parts = urlsplit(url)
    host = parts.netloc
    account: str | None = None
    if "@" in host:
        container, _, where = host.partition("@")
        match = _DFS_HOST.match(where.lower())
        if match is None:
            raise InvalidOptionError(
                f"Azure URL {url!r}: {where!r} is not an account host (ACCOUNT.dfs.core.windows.net)")
        account = match.group("account")
    else:
        container = host
    if not container or not _CONTAINER.match(container):
        raise InvalidOptionError(
            f"Azure URL {url!r} names no valid container (3-63 lower-case letters, digits and single dashes)")
    return container, account, root_prefix(parts.path)


class AzureStore(CloudStore):
    """A store rooted at ``az://container/prefix`` (see the module docstring).

    Args:
        url: the store root.
        opts: ``azure.account`` / ``azure.key`` / ``azure.sasToken`` / ``azure.endpoint`` (the Blob service URL,
            as a connection string's ``BlobEndpoint``: for Azurite ``http://127.0.0.1:10000/devstoreaccount1``).
        max_attempts, time_budget: the retry budget of one operation.
        connect_timeout, read_timeout: of one request, in seconds.

    Raises:
        InvalidOptionError: a bad URL, an account in the URL that differs from ``azure.account``, no account at all,
            both a key and a SAS token, a non-positive limit, or an ``http://`` endpoint without a key or SAS token.
    """

    label = "Azure"

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
        list_page_size: int = 5000,
    ) -> None:
        self.container, url_account, self.prefix = parse_azure_url(url)
        super().__init__(url.rstrip("/"))
        self._root = f"az://{self.container}/{self.prefix}"
        opts = opts or StoreOptions()
        self._set_limits(max_attempts=max_attempts, time_budget=time_budget, connect_timeout=connect_timeout,
                         read_timeout=read_timeout, backoff_base=backoff_base, backoff_max=backoff_max,
                         list_page_size=list_page_size, page_limit=5000)
        if url_account and opts.azure_account and url_account != opts.azure_account.lower():
            raise InvalidOptionError(
                f"Azure URL {url!r} names account {url_account!r} but option azure.account is "
                f"{opts.azure_account!r}")
        if opts.azure_key and opts.azure_sas_token:
            raise InvalidOptionError("give one of azure.key and azure.sasToken, not both")
        self.account = url_account or opts.azure_account
        self.endpoint = opts.azure_endpoint.rstrip("/") if opts.azure_endpoint else None
        sas = opts.azure_sas_token.lstrip("?") if opts.azure_sas_token else None
        signature = parse_qs(sas).get("sig", [""])[0] if sas else ""
        self._set_secrets(opts.azure_key, sas, signature)
        self._request = {"retry_total": 0, "connection_timeout": connect_timeout, "read_timeout": read_timeout}
        self._fs = self._client(opts, sas)
        self._closed = False

    def _client(self, opts: StoreOptions, sas: str | None) -> AzureBlobFileSystem:
        kwargs: dict[str, Any] = {"skip_instance_cache": True}
        if self.endpoint or opts.azure_key or sas:
            if self.account is None:
                raise InvalidOptionError(
                    f"Azure store {self.url}: give the account (azure.account, or container@ACCOUNT.dfs.core."
                    "windows.net in the URL) with azure.key, azure.sasToken or azure.endpoint")
            blob_endpoint = self.endpoint or f"https://{self.account}.blob.core.windows.net"
            if opts.azure_key or sas:
                secret = f"AccountKey={opts.azure_key}" if opts.azure_key else f"SharedAccessSignature={sas}"
                kwargs["connection_string"] = (f"AccountName={self.account};{secret};"
                                               f"BlobEndpoint={blob_endpoint};")
            elif blob_endpoint.startswith("http://"):
                raise InvalidOptionError(
                    f"Azure endpoint {blob_endpoint}: token credentials need https; give azure.key or "
                    "azure.sasToken for a plain-http endpoint")
            else:
                kwargs.update(account_name=self.account, account_host=blob_endpoint.split("://", 1)[1], anon=False)
        elif self.account is not None:
            kwargs.update(account_name=self.account, anon=False)
        try:
            return AzureBlobFileSystem(**kwargs)
        except ValueError as exc:
            raise InvalidOptionError(self._scrub(
                f"Azure store {self.url}: cannot set up the client ({exc}); give azure.account with azure.key or "
                "azure.sasToken, or set up the Azure credential chain (AZURE_STORAGE_CONNECTION_STRING, "
                "AZURE_STORAGE_ACCOUNT_NAME with a key, SAS token or azure-identity login)")) from None

    def __repr__(self) -> str:
        return f"AzureStore({self.url!r}, endpoint={self.endpoint!r})"

    # -- the contract -----------------------------------------------------------------------------------------

    def put_if_absent(self, path: str, data: bytes) -> bool:
        name = self._key(path)
        body = bytes(data)

        async def op(service: Any) -> None:
            blob = service.get_blob_client(self.container, name)
            # overwrite=False is Put Blob with If-None-Match: * (azure-storage-blob adds it when no other
            # condition is given)
            await blob.upload_blob(body, overwrite=False, **self._request)

        try:
            self._call("put_if_absent", path, op, write=True)
        except HttpResponseError as exc:
            if exc.status_code in (409, 412) and _code(exc) in ("BlobAlreadyExists", "ConditionNotMet"):
                return self._read_back_equal(path, body)
            raise self._failure("put_if_absent", path, exc) from None
        except RetriesExhausted as exc:
            return self._settle(path, body, exc)
        return True

    def put(self, path: str, data: bytes) -> None:
        name = self._key(path)
        body = bytes(data)

        async def op(service: Any) -> None:
            await service.get_blob_client(self.container, name).upload_blob(body, overwrite=True, **self._request)

        try:
            self._call("put", path, op, write=True)
        except HttpResponseError as exc:
            raise self._failure("put", path, exc) from None

    def get(self, path: str) -> bytes:
        name = self._key(path)

        async def op(service: Any) -> bytes:
            stream = await service.get_blob_client(self.container, name).download_blob(**self._request)
            data: bytes = await stream.readall()
            if len(data) != stream.size:
                raise ConnectionResetError(f"reply body cut short ({len(data)} of {stream.size} bytes)")
            return data

        try:
            return self._call("get", path, op)
        except HttpResponseError as exc:
            if exc.status_code == 404 and _code(exc) != "ContainerNotFound":
                raise FileNotFoundError(path) from None
            raise self._failure("get", path, exc) from None

    def exists(self, path: str) -> bool:
        """Whether a blob is at ``path`` (one Get Blob Properties).

        Raises:
            StoreError: the store failed past the retry budget, or the container does not exist.
        """
        name = self._key(path)

        async def op(service: Any) -> None:
            await service.get_blob_client(self.container, name).get_blob_properties(**self._request)

        try:
            self._call("head", path, op)
        except HttpResponseError as exc:
            # a HEAD reply has no body: a missing container is told apart by its header only
            if exc.status_code == 404 and _code(exc) != "ContainerNotFound":
                return False
            raise self._failure("head", path, exc) from None
        return True

    def list(self, prefix: str, start_after: str | None = None, limit: int | None = None) -> builtins.list[str]:
        base = self._folder(prefix)
        names = [item["name"][len(base):] for item in self._pages(prefix, base, delimiter=True)
                 if not item["dir"]]
        out = sorted(n for n in names if n and not n.startswith(TEMP_PREFIX)
                     and (start_after is None or n > start_after))
        return out if limit is None else out[:limit]

    def list_dirs(self, prefix: str) -> builtins.list[str]:
        base = self._folder(prefix)
        return sorted({item["name"][len(base):].rstrip("/") for item in self._pages(prefix, base, delimiter=True)
                       if item["dir"]} - {""})

    def list_info(self, prefix: str) -> builtins.list[ObjectInfo]:
        base = self._folder(prefix)
        out: builtins.list[ObjectInfo] = []
        for item in self._pages(prefix, base, delimiter=False):
            rel = item["name"][len(self.prefix):]
            if item["folder"] or rel.endswith("/") or rel.rsplit("/", 1)[-1].startswith(TEMP_PREFIX):
                continue
            out.append(ObjectInfo(rel, item["size"], item["mtime"]))
        return sorted(out, key=lambda o: o.path)

    def now(self) -> float:
        """The Blob service's clock: the ``Date`` of a one-blob listing (one request, no write), in whole seconds.

        Raises:
            StoreError: the store failed past the retry budget, or sent no usable ``Date``.
        """

        async def op(service: Any) -> str | None:
            dates: builtins.list[str] = []

            def hook(response: Any) -> None:
                dates.append(response.http_response.headers.get("Date", ""))

            pages = service.get_container_client(self.container).list_blobs(
                name_starts_with=self.prefix + "_txn/", results_per_page=1, raw_response_hook=hook, **self._request
            ).by_page()
            async for _page in pages:
                break
            return dates[-1] if dates else None

        try:
            date = self._call("list", "_txn/", op)
        except HttpResponseError as exc:
            raise self._failure("list", "_txn/", exc) from None
        return self._clock(date)

    def delete(self, path: str) -> None:
        name = self._key(path)

        async def op(service: Any) -> None:
            await service.get_blob_client(self.container, name).delete_blob(**self._request)

        try:
            self._call("delete", path, op, write=True)
        except HttpResponseError as exc:
            if not (exc.status_code == 404 and _code(exc) == "BlobNotFound"):
                raise self._failure("delete", path, exc) from None

    def close(self) -> None:
        """Close the HTTP connections of this store's client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            sync(self._fs.loop, self._fs.service_client.close)
            credential = getattr(self._fs, "credential", None)
            if credential is not None and hasattr(credential, "close"):
                sync(self._fs.loop, credential.close)
        except Exception as exc:  # closing is best effort
            log.debug("closing the Azure client failed: %s", type(exc).__name__)

    # -- internals --------------------------------------------------------------------------------------------

    def _pages(self, prefix: str, base: str, *, delimiter: bool) -> builtins.list[dict[str, Any]]:
        """Every entry below ``base`` (one level with ``delimiter``), page by page with one counted, retried
        request per page: ``name``, ``dir`` (a virtual folder), ``folder`` (a directory blob of an account with a
        hierarchical namespace), ``size``, ``mtime``."""
        items: builtins.list[dict[str, Any]] = []
        token: str | None = None
        while True:
            async def op(service: Any, token: str | None = token) -> tuple[builtins.list[dict[str, Any]], str | None]:
                container = service.get_container_client(self.container)
                if delimiter:
                    listing = container.walk_blobs(name_starts_with=base, delimiter="/",
                                                   results_per_page=self.list_page_size, **self._request)
                else:
                    listing = container.list_blobs(name_starts_with=base, include=["metadata"],
                                                   results_per_page=self.list_page_size, **self._request)
                pages = listing.by_page(continuation_token=token)
                found: builtins.list[dict[str, Any]] = []
                async for page in pages:
                    async for entry in page:
                        is_dir = not isinstance(entry, BlobProperties)
                        metadata = getattr(entry, "metadata", None) or {}
                        found.append({
                            "name": entry.name,
                            "dir": is_dir,
                            "folder": str(metadata.get("hdi_isfolder", "")).lower() == "true",
                            "size": 0 if is_dir else int(entry.size),
                            "mtime": 0.0 if is_dir else entry.last_modified.timestamp(),
                        })
                    break
                return found, pages.continuation_token

            try:
                page, token = self._call("list", prefix or "/", op)
            except HttpResponseError as exc:
                if exc.status_code == 404 and _code(exc) != "ContainerNotFound":
                    return items
                raise self._failure("list", prefix or "/", exc) from None
            items.extend(page)
            if not token:
                return items

    def _call(self, kind: str, path: str, op: Callable[[Any], Awaitable[T]], *, write: bool = False) -> T:
        """Run ``op`` against the service client in the retry loop (:meth:`CloudStore._retry`).

        Raises:
            StoreError: the store is closed, or the credentials were refused or none could be found (at once:
                retrying cannot help).
            HttpResponseError: a non-retryable error reply (409, 412, 404, 403, ...), for the caller to interpret.
            RetriesExhausted: transient failures past the budget; ``ambiguous`` when ``write`` and some attempt
                may have been applied.
        """

        def attempt() -> T:
            try:
                return sync(self._fs.loop, op, self._fs.service_client)
            except ClientAuthenticationError as exc:
                raise StoreError(self._scrub(
                    f"Azure {kind} of {self._where(path)}: credentials refused or missing "
                    f"({_describe(exc)}); give azure.account with azure.key or azure.sasToken (txnlog: "
                    "--azure-account/--azure-key/--azure-sas-token) or set up the Azure credential chain "
                    "(AZURE_STORAGE_CONNECTION_STRING, azure-identity's DefaultAzureCredential)")) from None
            except HttpResponseError as exc:
                if not _retryable_reply(exc):
                    raise
                raise TransientFailure(_describe(exc), maybe_applied=exc.status_code not in NOT_APPLIED_STATUS,
                                       name=type(exc).__name__) from None
            except (ServiceRequestError, ServiceResponseError, TimeoutError, aiohttp.ClientError, OSError) as exc:
                raise TransientFailure(f"{type(exc).__name__}: {_first_line(exc)}", maybe_applied=_maybe_sent(exc),
                                       name=type(exc).__name__) from None

        return self._retry(kind, path, attempt, write=write)

    def _failure(self, kind: str, path: str, exc: HttpResponseError) -> StoreError:
        hint = "; check the credentials (azure.key, azure.sasToken) and their permissions" if (
            exc.status_code == 403) else ""
        return StoreError(self._scrub(f"Azure {kind} of {self._where(path)} failed: {_describe(exc)}{hint}"))


def _code(exc: HttpResponseError) -> str:
    code = getattr(exc, "error_code", None)
    headers = getattr(exc.response, "headers", None)
    if code is None and headers is not None:
        code = headers.get("x-ms-error-code")
    return str(getattr(code, "value", code) or "")


def _retryable_reply(exc: HttpResponseError) -> bool:
    if exc.status_code is None:  # no reply was read whole (a body cut short): a transport failure
        return True
    return exc.status_code >= 500 or exc.status_code in (408, 429) or _code(exc) in RETRYABLE_CODES


def _maybe_sent(exc: BaseException) -> bool:
    """Whether a request that failed with ``exc`` may have reached the store (only a failed connect proves not)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, aiohttp.ClientConnectorError | ConnectionRefusedError):
            return False
        cause = getattr(cause, "inner_exception", None) or cause.__cause__
    return True


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""


def _describe(exc: HttpResponseError) -> str:
    return f"HTTP {exc.status_code} {_code(exc)}: {_first_line(exc)}".strip()
