"""Shared fixtures: a loopback S3 endpoint (moto's server), a fresh bucket per test, and stores of every backend.

Nothing here imports Spark; Spark fixtures live in ``tests/spark/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from moto.server import ThreadedMotoServer

from coordinator.store import MemoryStore, Store, open_store
from core_helpers import Backend

#: Fake credentials for the loopback endpoint; long enough to be recognisable if they ever leak into a message.
TEST_KEY = "AKIATESTKEY0TXNLOG00"
TEST_SECRET = "txnlog-test-secret-0123456789abcdefghijkl"
TEST_REGION = "us-east-1"


@dataclass(frozen=True)
class S3Lake:
    """A fresh bucket on the loopback endpoint: the store root URL and the Spark-style options to open it."""

    url: str
    options: dict[str, str]
    bucket: str
    endpoint: str

    def options_for(self, endpoint: str) -> dict[str, str]:
        """The same options pointing at another endpoint (e.g. a fault proxy in front of this one)."""
        return {**self.options, "s3.endpoint": endpoint}

    def __iter__(self) -> Iterator[object]:
        """Unpacks as ``url, options``."""
        return iter((self.url, self.options))


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server running for the whole test session."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        yield endpoint
    finally:
        admin = _ADMIN.pop(endpoint, None)
        if admin is not None:
            admin.close()
        server.stop()


_ADMIN: dict[str, Any] = {}


def make_bucket(endpoint: str) -> str:
    """Create a bucket with a fresh name on ``endpoint`` and return its name (one admin client per endpoint)."""
    client = _ADMIN.get(endpoint)
    if client is None:
        client = _ADMIN[endpoint] = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=TEST_KEY,
            aws_secret_access_key=TEST_SECRET,
            region_name=TEST_REGION,
        )
    name = f"txnlog-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_lake(s3_endpoint: str) -> S3Lake:
    """A fresh bucket; ``url`` is ``s3://<bucket>/lake`` and ``options`` the ``s3.*`` options to open it."""
    bucket = make_bucket(s3_endpoint)
    options = {"s3.endpoint": s3_endpoint, "s3.key": TEST_KEY, "s3.secret": TEST_SECRET, "s3.region": TEST_REGION}
    return S3Lake(url=f"s3://{bucket}/lake", options=options, bucket=bucket, endpoint=s3_endpoint)


BACKENDS = ["memory", "local", "s3"]


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``(url, options)`` of a fresh, empty store root on each backend (ids memory / local / s3)."""
    backend = request.param
    if backend == "memory":
        url = f"memory://test-{uuid.uuid4().hex}"
        try:
            yield url, {}
        finally:
            MemoryStore.drop(url)
    elif backend == "local":
        yield f"file://{tmp_path / 'lake'}", {}
    else:
        lake: S3Lake = request.getfixturevalue("s3_lake")
        yield lake.url, dict(lake.options)


@pytest.fixture
def store(store_url: tuple[str, dict[str, str]]) -> Iterator[Store]:
    """A freshly opened (and probed) store on each backend (ids memory / local / s3)."""
    url, options = store_url
    st = open_store(url, options)
    try:
        yield st
    finally:
        st.close()


@pytest.fixture
def backend(store_url: tuple[str, dict[str, str]]) -> Backend:
    """How a new process reaches a fresh store, on each backend (the core guarantee tests run on all three)."""
    return Backend(*store_url)
