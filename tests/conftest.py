"""Shared fixtures: a loopback S3 endpoint (moto's server), a fresh bucket per test, and stores of every backend.

Nothing here imports Spark; Spark fixtures live in ``tests/spark/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from azure_lake import AzureLake, azure_endpoint, azure_lake  # noqa: F401 - fixtures
from coordinator import open_store
from coordinator.store import Store
from core_helpers import Backend
from gcs_lake import FakeGCS, GCSLake, lake_on
from s3_lake import TEST_KEY, TEST_REGION, TEST_SECRET, S3Lake, close_admin, make_bucket
from store_roots import BACKENDS, store_root


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On two workers (``-n 2 --dist loadgroup``, as ``scripts/test.sh`` runs the suite) the Spark tests that use the
    shared SparkSession run as one group on one worker; the rest, Spark tests that start their own applications
    included, spreads over both."""
    spark_dir = Path(__file__).parent / "spark"
    for item in items:
        if spark_dir in item.path.parents and "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))


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
        close_admin(endpoint)
        server.stop()


@pytest.fixture
def s3_lake(s3_endpoint: str) -> S3Lake:
    """A fresh bucket; ``url`` is ``s3://<bucket>/lake`` and ``options`` the ``s3.*`` options to open it."""
    bucket = make_bucket(s3_endpoint)
    options = {"s3.endpoint": s3_endpoint, "s3.key": TEST_KEY, "s3.secret": TEST_SECRET, "s3.region": TEST_REGION}
    return S3Lake(url=f"s3://{bucket}/lake", options=options, bucket=bucket, endpoint=s3_endpoint)


@pytest.fixture(scope="session")
def gcs_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a fake-gcs-server running for the whole test session."""
    server = FakeGCS()
    try:
        yield server.endpoint
    finally:
        server.stop()


@pytest.fixture
def gcs_lake(gcs_endpoint: str) -> GCSLake:
    """A fresh bucket; ``url`` is ``gs://<bucket>/lake`` and ``options`` the ``gcs.*`` options to open it."""
    return lake_on(gcs_endpoint)


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """``(url, options)`` of a fresh, empty store root on each backend (ids memory / local / s3)."""
    yield from store_root(request, tmp_path, request.param)


@pytest.fixture
def store(store_url: tuple[str, dict[str, str]]) -> Iterator[Store]:
    """A freshly opened (and probed) store on each backend of ``store_url``."""
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
