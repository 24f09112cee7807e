"""GCS credentials through the library's own loading: a service-account file given as ``gcs.token`` (its token
endpoint a loopback server, so the grant really runs), and credentials that cannot be used, which fail at once
without spending the retry budget. No credential ever appears in a message, a ``repr`` or a log line."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from coordinator import open_store
from coordinator.errors import StoreError
from gcs_lake import GCSLake

pytestmark = pytest.mark.gcs

ACCESS_TOKEN = "ya29.loopback-access-token-0123456789abcdef"


class _TokenServer:
    """An OAuth token endpoint on loopback: grants ``ACCESS_TOKEN``, or refuses every grant with 400."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.grants = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Silent."""

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                server.grants += 1
                status, reply = (400, {"error": "invalid_grant", "error_description": "account disabled"}) \
                    if refuse else (200, {"access_token": ACCESS_TOKEN, "expires_in": 3600, "token_type": "Bearer"})
                body = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/token"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _service_account_file(tmp_path: Path, token_uri: str) -> tuple[Path, str]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    path = tmp_path / "service-account.json"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "txnlog-test", "private_key_id": "k0", "private_key": pem,
        "client_email": "txnlog-test@txnlog-test.iam.gserviceaccount.com", "client_id": "1", "token_uri": token_uri,
    }))
    return path, pem


@pytest.fixture
def token_server() -> Iterator[_TokenServer]:
    server = _TokenServer()
    try:
        yield server
    finally:
        server.stop()


def test_service_account_file_as_gcs_token(gcs_lake: GCSLake, token_server: _TokenServer, tmp_path: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    path, pem = _service_account_file(tmp_path, token_server.url)
    options = {"gcs.endpoint": gcs_lake.endpoint, "gcs.token": str(path), "gcs.project": "txnlog-test"}
    caplog.set_level(logging.DEBUG)
    store = open_store(gcs_lake.url, options)
    try:
        assert token_server.grants == 0  # opening reads nothing, not even the credentials
        assert store.put_if_absent("a.json", b"x") and store.get("a.json") == b"x"
        assert token_server.grants == 1  # one grant, kept for the next requests
        assert store.list("") == ["a.json"]
        assert token_server.grants == 1
        texts = [repr(store), caplog.text]
    finally:
        store.close()
    for text in texts:
        assert ACCESS_TOKEN not in text and pem.splitlines()[1] not in text, text


def test_unusable_credentials_fail_at_once_naming_the_option(gcs_lake: GCSLake, tmp_path: Path) -> None:
    refusing = _TokenServer(refuse=True)
    try:
        path, pem = _service_account_file(tmp_path, refusing.url)
        store = open_store(gcs_lake.url, {"gcs.endpoint": gcs_lake.endpoint, "gcs.token": str(path)})
        started = time.monotonic()
        with pytest.raises(StoreError, match="no usable credentials") as err:
            store.put_if_absent("a.json", b"x")
        assert time.monotonic() - started < 10 and store.counters["put_if_absent"] == 1  # not retried
        assert "gcs.token" in str(err.value) and pem.splitlines()[1] not in str(err.value)
        store.close()
    finally:
        refusing.stop()
    bad = tmp_path / "not-credentials.json"
    bad.write_text("{}")
    store = open_store(gcs_lake.url, {"gcs.endpoint": gcs_lake.endpoint, "gcs.token": str(bad)})
    with pytest.raises(StoreError, match="gcs.token"):
        store.get("a.json")
