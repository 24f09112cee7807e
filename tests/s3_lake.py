"""The loopback S3 endpoint's test helpers: recognisable fake credentials, the bucket handle a test gets, and
bucket creation. Imported by ``conftest.py`` and by tests (import from here, not from ``conftest``: with several
``conftest.py`` files in the tree that name is ambiguous)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import botocore.session

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


def close_admin(endpoint: str) -> None:
    """Close the admin client of ``endpoint`` (when its server stops)."""
    admin = _ADMIN.pop(endpoint, None)
    if admin is not None:
        admin.close()


def bucket_objects(lake: S3Lake) -> dict[str, bytes]:
    """Every object of the lake's bucket: key -> bytes."""
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=lake.endpoint, aws_access_key_id=TEST_KEY, aws_secret_access_key=TEST_SECRET,
        region_name=TEST_REGION,
    )
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=lake.bucket):
        for obj in page.get("Contents", []):
            out[obj["Key"]] = client.get_object(Bucket=lake.bucket, Key=obj["Key"])["Body"].read()
    client.close()
    return out
