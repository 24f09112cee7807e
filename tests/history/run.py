"""Run generated histories and check them.

    python tests/history/run.py --seed S --histories N [--store memory|local|s3] [--fault-rate R]
                                [--processes] [--steps K] [--workers W] [--avoid DEFECT ...] [--time]
                                [--pause-rate R] [--process-pauses N] [--clock-skew] [--lying PATH]
                                [--damage-log] [--long]

Prints one summary line ``histories=N operations=M faults=F anomalies=A faults_by_kind=crash:..,error:..,...
pauses=P pause_s=MIN-MAX(total T)``, then one line per anomaly with the seed that reproduces it (history ``i`` uses
seed ``S + i``), and exits 1 when there are anomalies. ``--avoid`` stops exercising the trigger of a core defect the
histories found, fixed (``workload.KNOWN_DEFECTS``; ``--avoid all`` for every one) or not yet
(``workload.OPEN_DEFECTS``; ``--avoid open``), to tell a known defect from a new one. ``--pause-rate``,
``--process-pauses``, ``--clock-skew`` and ``--lying`` give every history that fault instead of drawing it;
``--damage-log`` (off by default; the operator's repair, ``txnlog repair --log``, must mend each one)
overwrites a log entry before the operator's repair. ``--long`` is the long mode: 1,000 histories of 40 steps at
fault rate 0.05 unless given otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coordinator import MemoryStore  # noqa: E402
from history.checker import Anomaly, History, check  # noqa: E402
from history.lying import PATHS  # noqa: E402
from history.workload import KNOWN_DEFECTS, OPEN_DEFECTS, params_for, run_history  # noqa: E402

StoreFactory = Callable[[int], tuple[str, dict[str, str]]]
#: The fault kinds the figures report, in order.
FAULT_KINDS = ("crash", "error", "lost-reply", "maintenance-race", "expiry", "corrupt-file", "zombie", "skewed-clock",
               "stall", "pause", "process-pause", "clock-skew", "lying-store", "damaged-checkpoint",
               "damaged-log-entry")
#: The kinds every run of 30 default memory histories injects, whatever the timing (process pauses need
#: ``--processes``, damaged log entries ``--damage-log``; stalls are rare, at a sixteenth of the crash rate; pauses,
#: with the open defects' triggers avoided, and damaged checkpoints, which need a checkpoint written in time, are
#: not certain in 30 histories).
DEFAULT_KINDS = tuple(k for k in FAULT_KINDS
                      if k not in ("process-pause", "damaged-log-entry", "stall", "pause", "damaged-checkpoint"))
#: The long mode (``--long``): histories, fault rate and steps unless given.
LONG = {"histories": 1000, "fault_rate": 0.05, "steps": 40}


@dataclass
class Summary:
    """Totals over a run of histories."""

    histories: int = 0
    operations: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    anomalies: list[Anomaly] = field(default_factory=list)
    #: how long each pause lasted (s): store calls and whole processes
    pauses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    #: where to write each history that has anomalies, as JSON (None: nowhere)
    dump: str | None = None

    @property
    def faults(self) -> int:
        return sum(self.by_kind.values())

    def add(self, h: History) -> list[Anomaly]:
        found = check(h)
        self.histories += 1
        self.operations += len(h.ops)
        self.by_kind.update(h.faults)
        self.pauses += h.pause_lengths()
        self.anomalies += found
        if found and self.dump:
            os.makedirs(self.dump, exist_ok=True)
            with open(os.path.join(self.dump, f"history-{h.seed}.json"), "w", encoding="utf-8") as fh:
                json.dump(_jsonable({"anomalies": [dataclasses.asdict(a) for a in found],
                                     "history": dataclasses.asdict(h)}), fh, indent=1)
        return found

    def line(self) -> str:
        kinds = ",".join(f"{k}:{self.by_kind[k]}" for k in FAULT_KINDS)
        lengths = (f"{min(self.pauses):.2f}-{max(self.pauses):.2f}(total {sum(self.pauses):.1f})" if self.pauses
                   else "-")
        return (f"histories={self.histories} operations={self.operations} faults={self.faults} "
                f"anomalies={len(self.anomalies)} faults_by_kind={kinds} pauses={len(self.pauses)} "
                f"pause_s={lengths}" + (f" pipelined_commits={self.by_kind['pipelined']} failed_in_flight="
                                        f"{self.by_kind['in-flight-failed']} aborted_behind_a_failed_one="
                                        f"{self.by_kind['pipelined-aborted']}" if self.by_kind["pipelined"] else ""))

    def details(self) -> list[str]:
        return [f"  {a.kind} (reproduce with --seed {a.seed} --histories 1): {a.detail}" for a in self.anomalies]


def _jsonable(x: object) -> object:
    """``x`` with tuple keys written as ``topic/partition`` strings and tuples as lists."""
    if isinstance(x, dict):
        return {"/".join(map(str, k)) if isinstance(k, tuple) else k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple | set):
        return [_jsonable(v) for v in x]
    return x


@contextmanager
def stores(kind: str) -> Iterator[StoreFactory]:
    """A factory giving each history a fresh, empty store root of ``kind``."""
    if kind == "memory":
        urls: list[str] = []

        def memory(seed: int) -> tuple[str, dict[str, str]]:
            urls.append(f"memory://history-{seed}-{uuid.uuid4().hex[:8]}")
            return urls[-1], {}

        try:
            yield memory
        finally:
            for u in urls:
                MemoryStore.drop(u)
    elif kind == "local":
        with tempfile.TemporaryDirectory(prefix="txnlog-history-") as root:
            yield lambda seed: (f"file://{root}/h{seed}-{uuid.uuid4().hex[:8]}", {})
    elif kind == "s3":
        with s3_server() as (endpoint, make_bucket):
            yield lambda seed: (f"s3://{make_bucket()}/h{seed}", s3_options(endpoint))
    else:
        raise SystemExit(f"unknown store {kind!r}: use memory, local or s3")


TEST_KEY, TEST_SECRET, TEST_REGION = "AKIAHISTORYTEST00000", "history-test-secret-000000000000000000", "us-east-1"


def s3_options(endpoint: str, key: str = TEST_KEY, secret: str = TEST_SECRET) -> dict[str, str]:
    return {"s3.endpoint": endpoint, "s3.key": key, "s3.secret": secret, "s3.region": TEST_REGION}


@contextmanager
def s3_server() -> Iterator[tuple[str, Callable[[], str]]]:
    """A moto S3 server on loopback for the command line (the tests use the shared fixture instead)."""
    import logging

    import botocore.session
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = botocore.session.get_session().create_client(
        "s3", endpoint_url=endpoint, aws_access_key_id=TEST_KEY, aws_secret_access_key=TEST_SECRET,
        region_name=TEST_REGION)

    def make_bucket() -> str:
        name = f"history-{uuid.uuid4().hex[:20]}"
        client.create_bucket(Bucket=name)
        return name

    try:
        yield endpoint, make_bucket
    finally:
        client.close()
        server.stop()


def run(seed: int, histories: int, store: str = "memory", fault_rate: float = 0.03, *, processes: bool = False,
        steps: int | None = None, factory: StoreFactory | None = None, avoid: frozenset[str] = frozenset(),
        dump: str | None = None, **fixed: object) -> Summary:
    """Run ``histories`` histories with seeds ``seed .. seed + histories - 1`` and check each (``fixed``: history
    parameters to fix instead of drawing them from the seed)."""
    summary = Summary(dump=dump)
    t0 = time.monotonic()

    def go(make: StoreFactory) -> None:
        for i in range(histories):
            url, options = make(seed + i)
            summary.add(run_history(params_for(seed + i, url, options, fault_rate=fault_rate, processes=processes,
                                               steps=steps, avoid=avoid, **fixed)))

    if factory is not None:
        go(factory)
    else:
        with stores(store) as make:
            go(make)
    summary.seconds = time.monotonic() - t0
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--histories", type=int, default=100)
    ap.add_argument("--store", choices=["memory", "local", "s3"], default="memory")
    ap.add_argument("--fault-rate", type=float, default=0.03, help="crash probability at each protocol point")
    ap.add_argument("--processes", action="store_true", help="run each history's workers as separate processes "
                    "(local store only)")
    ap.add_argument("--steps", type=int, default=None, help="steps per worker (default: drawn from the seed)")
    ap.add_argument("--workers", type=int, default=None,
                    help="concurrent workers per history (default: drawn from the seed, 1-3)")
    ap.add_argument("--time", action="store_true", help="append the runtime to the summary line")
    ap.add_argument("--dump", metavar="DIR", help="write every history with anomalies to DIR as JSON")
    ap.add_argument("--avoid", nargs="+", default=[],
                    choices=[*sorted(KNOWN_DEFECTS), *sorted(OPEN_DEFECTS), "all", "open"], metavar="DEFECT",
                    help="do not exercise the trigger of these core defects, to tell a known one from a new one: "
                    "fixed (all): " + ", ".join(sorted(KNOWN_DEFECTS)) + "; not fixed yet (open): "
                    + ", ".join(sorted(OPEN_DEFECTS)))
    ap.add_argument("--pause-rate", type=float, default=None,
                    help="pause store calls under _txn/ at this rate in every history (others at a quarter of it)")
    ap.add_argument("--process-pauses", type=int, default=None,
                    help="with --processes: stop this many worker processes per history (SIGSTOP)")
    ap.add_argument("--clock-skew", action="store_true",
                    help="skew the host clock of every worker of every history (hours or days, either way)")
    ap.add_argument("--lying", choices=PATHS, default=None,
                    help="open a store that ignores conditional writes through this writing path in every history")
    ap.add_argument("--damage-log", action="store_true",
                    help="overwrite a log entry before the operator's repair (reported until a repair exists)")
    ap.add_argument("--async-commits", type=float, default=None, metavar="SHARE",
                    help="send this share of producer commits with commit_transaction_async (pipelined)")
    ap.add_argument("--long", action="store_true",
                    help="the long mode: 1,000 histories, 40 steps, fault rate 0.05 (unless given)")
    args = ap.parse_args(argv)
    for name in ("coordinator", "txnsink"):  # injected faults make the core log warnings by the hundred
        logging.getLogger(name).setLevel(logging.CRITICAL)
    if args.processes and args.store == "memory":
        ap.error("--processes needs a store shared between processes: --store local or s3")
    given = set(argv if argv is not None else sys.argv[1:])
    if args.long:
        args.histories = args.histories if "--histories" in given else LONG["histories"]
        args.fault_rate = args.fault_rate if "--fault-rate" in given else LONG["fault_rate"]
        args.steps = args.steps if args.steps is not None else LONG["steps"]
    avoid = set(args.avoid) - {"all", "open"}
    avoid |= set(KNOWN_DEFECTS) if "all" in args.avoid else set()
    avoid |= set(OPEN_DEFECTS) if "open" in args.avoid else set()
    fixed: dict[str, Any] = {} if args.workers is None else {"workers": args.workers}
    if args.pause_rate is not None:
        fixed["pause_rate"] = args.pause_rate
    if args.process_pauses is not None:
        fixed["process_pauses"] = args.process_pauses
    if args.clock_skew:
        fixed["clock_skews"] = "all"
    if args.lying is not None:
        fixed["lying"] = args.lying
    if args.damage_log:
        fixed["damage_log"] = True
    if args.async_commits is not None:
        fixed["async_commits"] = args.async_commits
    summary = run(args.seed, args.histories, args.store, args.fault_rate, processes=args.processes,
                  steps=args.steps, avoid=frozenset(avoid), dump=args.dump, **fixed)
    print(summary.line() + (f" seconds={summary.seconds:.1f}" if args.time else ""))
    for line in summary.details():
        print(line)
    return 1 if summary.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
