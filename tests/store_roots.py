"""Fresh store roots on every backend for the tests' ``store_url`` fixtures (import from here, not from
``conftest``: with several ``conftest.py`` files in the tree that name is ambiguous)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from azure_lake import AzureLake
from coordinator import MemoryStore
from gcs_lake import GCSLake
from s3_lake import S3Lake

#: The backends the core tests run on; the store contract (``tests/test_store_contract.py``) runs on every one.
BACKENDS = ["memory", "local", "s3"]
ALL_BACKENDS = [*BACKENDS, "azure", "gcs"]


def store_root(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> Iterator[tuple[str, dict[str, str]]]:
    """``(url, options)`` of a fresh, empty store root on ``backend`` (one of :data:`ALL_BACKENDS`)."""
    if backend == "memory":
        url = f"memory://test-{uuid.uuid4().hex}"
        try:
            yield url, {}
        finally:
            MemoryStore.drop(url)
    elif backend == "local":
        yield f"file://{tmp_path / 'lake'}", {}
    elif backend == "azure":
        az: AzureLake = request.getfixturevalue("azure_lake")
        yield az.url, dict(az.options)
    elif backend == "gcs":
        gcs: GCSLake = request.getfixturevalue("gcs_lake")
        yield gcs.url, dict(gcs.options)
    else:
        lake: S3Lake = request.getfixturevalue("s3_lake")
        yield lake.url, dict(lake.options)


