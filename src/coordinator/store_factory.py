"""Opening a store from a URL: the one place that knows every backend (see :mod:`coordinator.backends`). No backend
imports this module; the S3 backend (s3fs, botocore) is imported only when an ``s3://`` URL is opened, the Azure
one (adlfs, the optional ``azure`` extra) only when an ``az://`` / ``abfs[s]://`` URL is, the GCS one (gcsfs, the
``gcs`` extra) only for ``gs://``."""

from __future__ import annotations

import os
from collections.abc import Mapping

from coordinator.backends.local import LocalStore
from coordinator.backends.memory import MemoryStore
from coordinator.errors import InvalidOptionError
from coordinator.store import Store, StoreOptions

__all__ = ["HadoopUnreachable", "hadoop_s3a_options", "hadoop_url", "local_path", "missing_file_system", "open_store"]


def local_path(url: str) -> str | None:
    """The absolute local folder a ``file:`` URL or a plain path names; None for any other scheme.

    Accepted: plain paths (relative ones are made absolute), ``file:/abs/path``, ``file:///abs/path`` and
    ``file://localhost/abs/path``; ``%xx`` escapes in ``file:`` URLs are decoded. A Windows drive letter is not a
    scheme.

    Raises:
        InvalidOptionError: a ``file:`` URL naming another host, or a relative one (``file:data``).
    """
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    if parts.scheme.lower() != "file":
        if "://" in url or (parts.scheme and len(parts.scheme) > 1):
            return None
        return os.path.abspath(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidOptionError(
            f"store URL {url!r} names host {parts.netloc!r}: file URLs must be local (file:///abs/path or "
            "file:/abs/path)"
        )
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise InvalidOptionError(f"store URL {url!r} is not an absolute path (use file:///abs/path or a plain path)")
    return os.path.normpath(path)


def open_store(
    url: str, options: Mapping[str, str] | StoreOptions | None = None, *, probe: bool = True
) -> Store:
    """Open the store rooted at ``url``: a plain path, ``file:/abs``, ``file:///abs``, ``memory://name``,
    ``s3://bucket/prefix``, ``az://container/prefix`` (also ``abfs://`` / ``abfss://``) or ``gs://bucket/prefix``
    (also ``gcs://``).

    Opening reads and writes nothing. Every writing path probes the store before it writes anything
    (:func:`coordinator.probe.probe_conditional_writes`) and every reading path never does, whatever ``probe``
    says: the argument is kept for callers that pass it, and no store is trusted unprobed.

    Raises:
        InvalidOptionError: the URL scheme is not supported, a ``file:`` URL is not a local absolute path, or a
            ``gs://`` URL without gcsfs installed.
    """
    opts = options if isinstance(options, StoreOptions) else StoreOptions.from_options(options or {})
    if not isinstance(url, str) or not url.strip():
        raise InvalidOptionError(
            f"store path {url!r} is empty; give a local folder, file://, s3://, az:// or memory://")
    url = url.strip()
    store: Store
    if url.startswith("memory://"):
        store = MemoryStore(url)
    elif (folder := local_path(url)) is not None:
        store = LocalStore("file://" + folder, folder)
    elif url.startswith(("s3://", "s3a://")):
        from coordinator.backends.s3 import S3Store

        store = S3Store(url, opts, **_tuning(opts))  # type: ignore[arg-type]
    elif url.startswith(("az://", "abfs://", "abfss://")):
        from coordinator.backends.azure import AzureStore

        store = AzureStore(url, opts, **_tuning(opts))  # type: ignore[arg-type]
    elif url.startswith(("gs://", "gcs://")):
        try:
            from coordinator.backends.gcs import GCSStore
        except ImportError as exc:
            raise InvalidOptionError(
                f"store URL {url!r}: gs:// stores need gcsfs ({exc}); install txnlog[gcs]") from None
        store = GCSStore(url, opts, **_tuning(opts))  # type: ignore[arg-type]
    else:
        raise InvalidOptionError(f"store URL scheme of {url!r} is not supported (use a path, file://, s3://, az://, "
                                 "abfss://, gs://, memory://)")
    del probe  # accepted for compatibility; see above
    return store


def _tuning(opts: StoreOptions) -> dict[str, float]:
    """The retry budget and timeouts the options set (the rest keep the backend's defaults)."""
    return {k: v for k, v in (("max_attempts", opts.max_attempts), ("time_budget", opts.time_budget),
                              ("connect_timeout", opts.connect_timeout), ("read_timeout", opts.read_timeout))
            if v is not None}


class HadoopUnreachable(ValueError):  # noqa: N818 - a reason, for callers that fall back
    """Spark's (Hadoop's) file system cannot name this store root."""


def missing_file_system(error: str, url: str) -> str | None:
    """Why Spark cannot reach ``url`` when ``error`` (a Spark error's text) says it has no file system for its
    scheme; None for any other error."""
    if "No FileSystem for scheme" in error or ("FileSystem" in error and "ClassNotFoundException" in error):
        return (f"Spark has no file system for {url.split(':', 1)[0]}:// (for s3a, put hadoop-aws on Spark's "
                "classpath)")
    return None


def hadoop_url(url: str) -> str:
    """The store root ``url`` as Spark's file system names it: ``s3a://bucket/prefix`` for ``s3://`` and
    ``s3a://`` URLs, ``file:///abs/path`` for plain paths and ``file:`` URLs (see :func:`local_path`).

    Raises:
        HadoopUnreachable: an in-memory store, an Azure or ``gs://`` store (not yet through hadoop-azure or the
            GCS connector), another scheme, or a path holding characters Spark reads as a glob pattern or a path list
            (``*?[]{}\\,``).
        InvalidOptionError: a ``file:`` URL that is not a local absolute path.
    """
    url = url.strip()
    if url.startswith("memory://"):
        raise HadoopUnreachable("an in-memory store is out of Spark's reach")
    if any(c in url for c in "*?[]{}\\,"):
        raise HadoopUnreachable("the store path holds characters Spark reads as a glob pattern or a path list")
    if url.startswith(("s3://", "s3a://")):
        return "s3a://" + url.split("://", 1)[1].rstrip("/")
    if url.startswith(("az://", "abfs://", "abfss://")):
        raise HadoopUnreachable(
            "Spark's own file system for Azure stores (hadoop-azure's abfss://) is not set up by txnlog yet: "
            "the Python data source reads and writes them")
    if url.startswith(("gs://", "gcs://")):
        # The GCS connector would need the gcs.* options as fs.gs.* settings; without them it could reach another
        # endpoint than the store's, so the native paths stay off and the Python data source serves gs:// stores.
        raise HadoopUnreachable("Spark's native paths do not reach gs:// stores (the GCS connector is not given "
                                "the gcs.* options); the Python data source reads and writes them")
    folder = local_path(url)
    if folder is None:
        raise HadoopUnreachable(f"Spark has no file system for {url.split(':', 1)[0]}://")
    return "file://" + folder


def hadoop_s3a_options(url: str, s3: StoreOptions) -> dict[str, str]:
    """The Hadoop ``fs.s3a.*`` options equivalent to the ``s3.*`` store options, for Spark's own file system to
    reach an ``s3://`` / ``s3a://`` store (empty for any other URL). Callers pass them with one read or write
    only, never into a session's configuration (they may hold credentials)."""
    if not url.strip().startswith(("s3://", "s3a://")):
        return {}
    out: dict[str, str] = {}
    if s3.endpoint:
        out["fs.s3a.endpoint"] = s3.endpoint
        out["fs.s3a.path.style.access"] = "true"
        out["fs.s3a.connection.ssl.enabled"] = str(s3.endpoint.startswith("https")).lower()
    if s3.region:
        out["fs.s3a.endpoint.region"] = s3.region
    if s3.key and s3.secret:
        out["fs.s3a.access.key"] = s3.key
        out["fs.s3a.secret.key"] = s3.secret
        if s3.token:
            out["fs.s3a.session.token"] = s3.token
            out["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return out
