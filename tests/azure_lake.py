"""The loopback Azure Blob endpoint of the tests: Azurite (Microsoft's Azure Storage emulator, from the npm registry,
installed by ``scripts/_setup.sh`` into ``$VENV/azurite``), one server per test session on ``127.0.0.1`` with a port
the system picks, and a fresh container per test. ``conftest.py`` imports the fixtures; tests import the helpers
from here (not from ``conftest``: with several ``conftest.py`` files in the tree that name is ambiguous)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

#: Azurite's well-known development account (public, the same in every Azurite).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: The Azurite release the tests run (scripts/_setup.sh installs it).
AZURITE_VERSION = "3.37.0"
_LISTENING = re.compile(r"listens on (http://127\.0\.0\.1:\d+)")


@dataclass(frozen=True)
class AzureLake:
    """A fresh container on the loopback Blob endpoint: the store root URL and the Spark-style options to open it."""

    url: str
    options: dict[str, str]
    container: str
    endpoint: str

    def options_for(self, endpoint: str) -> dict[str, str]:
        """The same options pointing at another Blob endpoint (e.g. a fault proxy in front of this one)."""
        return {**self.options, "azure.endpoint": endpoint}

    def sas_options(self) -> dict[str, str]:
        """Options with an account SAS token instead of the account key (a SAS signs no request header, so a
        proxy may rewrite headers without breaking the signature)."""
        opts = {k: v for k, v in self.options.items() if k != "azure.key"}
        return {**opts, "azure.sasToken": account_sas()}

    def __iter__(self) -> Iterator[object]:
        """Unpacks as ``url, options``."""
        return iter((self.url, self.options))


def account_sas() -> str:
    """An account SAS token for Azurite's account: every permission on containers and blobs, for an hour."""
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    return generate_account_sas(
        ACCOUNT, ACCOUNT_KEY, ResourceTypes(service=True, container=True, object=True),
        AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def azurite_bin() -> Path:
    """The ``azurite-blob`` script of the Azurite installed beside the Python environment.

    Raises:
        FileNotFoundError: Azurite is not installed there (run scripts/_setup.sh test).
    """
    roots = [os.environ.get("VIRTUAL_ENV"), sys.prefix]
    for root in roots:
        if root:
            path = Path(root) / "azurite" / "node_modules" / ".bin" / "azurite-blob"
            if path.exists():
                return path
    raise FileNotFoundError(
        f"azurite-blob not found under {[r for r in roots if r]} (…/azurite/node_modules/.bin); install it with "
        f"scripts/_setup.sh test, or npm install --no-save --prefix \"$VIRTUAL_ENV/azurite\" azurite@{AZURITE_VERSION}"
    )


def connection_string(endpoint: str) -> str:
    """The connection string of Azurite's account at ``endpoint`` (the Blob service URL)."""
    return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"


def make_container(endpoint: str) -> str:
    """Create a container with a fresh name on ``endpoint`` and return its name."""
    from azure.storage.blob import BlobServiceClient

    name = f"txnlog-{uuid.uuid4().hex[:20]}"
    with BlobServiceClient.from_connection_string(connection_string(endpoint)) as service:
        service.create_container(name)
    return name


def container_blobs(lake: AzureLake) -> dict[str, bytes]:
    """Every blob of the lake's container: name -> bytes."""
    from azure.storage.blob import BlobServiceClient

    with BlobServiceClient.from_connection_string(connection_string(lake.endpoint)) as service:
        container = service.get_container_client(lake.container)
        return {b.name: container.download_blob(b.name).readall() for b in container.list_blobs()}


@pytest.fixture(scope="session")
def azure_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT/devstoreaccount1``: an Azurite Blob service running for the whole test session."""
    folder = tempfile.mkdtemp(prefix="txnlog-azurite-")
    log_path = Path(folder) / "azurite.out"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [str(azurite_bin()), "--blobHost", "127.0.0.1", "--blobPort", "0", "--location", folder,
             "--skipApiVersionCheck", "--loose", "--silent"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        base = _wait_listening(proc, log_path)
        yield f"{base}/{ACCOUNT}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=3)  # it waits for kept-alive connections to close; nothing in it needs saving
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        subprocess.run(["rm", "-rf", folder], check=False)


def _wait_listening(proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60.0) -> str:
    """The URL Azurite says it listens on, once it answers.

    Raises:
        RuntimeError: Azurite exited or said nothing in ``timeout`` seconds (its output is in the message).
    """
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        match = _LISTENING.search(text)
        if match:
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                opener.open(f"{match.group(1)}/{ACCOUNT}?comp=list", timeout=2).close()
            except urllib.error.HTTPError:
                return match.group(1)  # it answers (403: the request is unsigned)
            except OSError:
                pass
            else:
                return match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"azurite-blob exited with {proc.returncode}: {text[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError(f"azurite-blob did not answer in {timeout:.0f}s: {log_path.read_text(errors='replace')[-2000:]}")


@pytest.fixture
def azure_lake(azure_endpoint: str) -> AzureLake:
    """A fresh container; ``url`` is ``az://<container>/lake`` and ``options`` the ``azure.*`` options to open it."""
    container = make_container(azure_endpoint)
    options = {"azure.account": ACCOUNT, "azure.key": ACCOUNT_KEY, "azure.endpoint": azure_endpoint}
    return AzureLake(url=f"az://{container}/lake", options=options, container=container, endpoint=azure_endpoint)
