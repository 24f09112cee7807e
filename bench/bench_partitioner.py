"""Partitioner benchmark: the partition of every row by key columns, the legacy per-row CRC-32 of the values' text
(``txnlog-v1``) against the vectorised ``txnlog-v2``, on the same table, side by side, best of ``--repeat``.

    python bench/bench_partitioner.py [--rows 1000000] [--partitions 16] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from coordinator import TopicMeta
from coordinator.partitioner import CURRENT, LEGACY, partition_for

KEYS: dict[str, list[str]] = {
    "long + string": ["customer_id", "region"],
    "string": ["user"],
    "long": ["customer_id"],
    "timestamp": ["ts"],
    "decimal + date": ["amount", "day"],
}


def make_table(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = rng.integers(1_600_000_000_000_000, 1_800_000_000_000_000, rows)
    return pa.table(
        {
            "customer_id": pa.array(rng.integers(0, 10_000_000, rows)),
            "region": pa.array([f"region-{i % 37}" for i in range(rows)]),
            "user": pa.array([f"user-{i:08d}@example.com" for i in rng.integers(0, 500_000, rows)]),
            "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC")),
            "amount": pa.array(rng.integers(0, 10**9, rows)).cast(pa.decimal128(21, 2)),
            "day": pa.array(rng.integers(0, 20_000, rows).astype(np.int32), type=pa.date32()),
        }
    )


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time of this process over ``repeat`` runs (on a shared
    machine the CPU time is the steadier of the two)."""
    wall, cpu = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    table = make_table(args.rows)
    legacy = TopicMeta("bench", args.partitions, table.schema, {"partitioner": LEGACY})
    current = TopicMeta("bench", args.partitions, table.schema, {"partitioner": CURRENT})
    print(f"{args.rows:,} rows, {args.partitions} partitions, best of {args.repeat} runs (legacy: 1 run)")
    print(f"{'key':<16} {LEGACY + ' wall/cpu (s)':>24} {CURRENT + ' wall/cpu (s)':>24} {'speed-up (cpu)':>15}")
    for label, cols in KEYS.items():
        lw, lc = best(lambda cols=cols: partition_for(table, cols, args.partitions, legacy), 1)
        vw, vc = best(lambda cols=cols: partition_for(table, cols, args.partitions, current), args.repeat)
        print(f"{label:<16} {lw:>11.3f} / {lc:>10.3f} {vw:>11.3f} / {vc:>10.3f} {lc / vc:>14.0f}x")


if __name__ == "__main__":
    main()
