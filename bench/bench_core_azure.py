"""Core benchmark on Azure Blob Storage (Azurite on loopback) next to the S3 endpoint (moto's server on loopback),
in one run: commit latency and store requests per transaction against touched partitions, and producer throughput
against a plain pyarrow Parquet write (the measures of ``bench_core.py``).

Azurite is the one ``scripts/_setup.sh test`` installs beside the virtual environment (``$VENV/azurite``).

    python bench/bench_core_azure.py [--commits 20] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_core import bench_commits, bench_throughput, make_table, s3_endpoint

from coordinator import open_store

ACCOUNT = "devstoreaccount1"
#: Azurite's well-known development key (public).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@contextmanager
def azurite() -> Iterator[tuple[str, dict[str, str]]]:
    """``(az://bench/<fresh prefix>, options)`` on an Azurite started here, stopped on exit.

    Raises:
        SystemExit: Azurite is not installed beside this Python, or did not start.
    """
    from azure.storage.blob import BlobServiceClient

    script = Path(os.environ.get("VIRTUAL_ENV") or sys.prefix) / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if not script.exists():
        raise SystemExit(f"{script} not found: run scripts/_setup.sh test")
    with tempfile.TemporaryDirectory(prefix="bench-azurite-") as folder:
        log = Path(folder) / "out"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(script), "--blobHost", "127.0.0.1", "--blobPort", "0", "--location", folder,
                                     "--skipApiVersionCheck", "--loose", "--silent"], stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while not (match := re.search(r"listens on (http://\S+)", log.read_text())):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"azurite-blob did not start: {log.read_text()[-1000:]}")
                time.sleep(0.1)
            endpoint = f"{match.group(1)}/{ACCOUNT}"
            conn = f"AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
            with BlobServiceClient.from_connection_string(conn) as service:
                service.create_container("bench")
            opts = {"azure.account": ACCOUNT, "azure.key": ACCOUNT_KEY, "azure.endpoint": endpoint}
            yield "az://bench/" + uuid.uuid4().hex, opts
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=20, help="commits per configuration")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the throughput comparison")
    args = ap.parse_args()
    table = make_table(args.rows)
    results = {}
    with s3_endpoint() as (url, opts):
        results["s3 (loopback)"] = (bench_commits(open_store(url + "/c", opts), args.commits),
                                    bench_throughput(open_store(url + "/t", opts), table))
    with azurite() as (url, opts):
        results["azure (azurite)"] = (bench_commits(open_store(url + "/c", opts), args.commits),
                                      bench_throughput(open_store(url + "/t", opts), table))
    print("\nCommit cost (median latency; store requests per commit)")
    print(f"{'store':<17}{'partitions':>11}{'commit ms':>11}{'cond. writes':>14}{'all requests':>14}")
    for name, (commits, _) in results.items():
        for touched, ms, cond, total in commits:
            print(f"{name:<17}{touched:>11}{ms:>11.1f}{cond:>14.1f}{total:>14.1f}")
    print(f"\nProducer throughput, {args.rows:,} rows ({table.nbytes / 1e6:.0f} MB in memory)")
    print(f"{'store':<17}{'txnlog MB/s':>13}{'pyarrow MB/s':>14}{'ratio':>8}")
    for name, (_, (txn, plain)) in results.items():
        print(f"{name:<17}{txn:>13.1f}{plain:>14.1f}{plain / txn:>7.2f}x")


if __name__ == "__main__":
    main()
