"""``txnlog``: the operator's command line (see ``docs/cli.md``).

```
txnlog --store file:///data/lake topics
txnlog describe orders
txnlog txns                       # open, in-doubt and recent transactions
txnlog resolve 3.0.5f2c...        # finish an in-doubt transaction from the transaction log
txnlog verify                     # exit 1 if any file is missing or damaged
txnlog coordinator run --interval 5
```

Every command takes ``--json`` for scripts, and the store options ``--store`` (or ``TXNLOG_STORE``),
``--config FILE`` (TOML), ``--s3-endpoint``, ``--s3-region``, ``--s3-key``/``--s3-secret`` (otherwise the standard
AWS credential chain), before or after the command name. Exit codes: 0 ok, 1 problems found / not ok, 2 usage or
invalid option, 3 not found, 4 store error. This module never imports pyspark.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from coordinator.cli_commands import (
    cmd_create_topic,
    cmd_describe,
    cmd_dump,
    cmd_expire,
    cmd_groups,
    cmd_lag,
    cmd_resolve,
    cmd_topics,
    cmd_txns,
    cmd_verify,
)
from coordinator.cli_common import EXIT_USAGE, Output, exit_code_for, scrub
from coordinator.cli_config import ENV_CONFIG, ENV_STORE, Settings, load_settings
from coordinator.cli_daemon import cmd_coordinator_run
from coordinator.cli_maintenance import cmd_compact, cmd_gc

Command = Callable[[argparse.Namespace, Settings, Output], int]
DEBUG_ENV = "TXNLOG_DEBUG"


def _non_negative(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {v}")
    return v


def _positive(text: str) -> int:
    v = _non_negative(text)
    if v == 0:
        raise argparse.ArgumentTypeError("expected a positive integer, got 0")
    return v


def _seconds_arg(text: str, *, zero_ok: bool) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if v != v or v == float("inf") or v < 0 or (v == 0 and not zero_ok):
        kind = "non-negative" if zero_ok else "positive"
        raise argparse.ArgumentTypeError(f"expected a {kind} number of seconds, got {text!r}")
    return v


def _seconds(text: str) -> float:
    return _seconds_arg(text, zero_ok=False)


def _grace_seconds(text: str) -> float:
    return _seconds_arg(text, zero_ok=True)


def _common(suppress: bool) -> argparse.ArgumentParser:
    """The options every command takes, before or after its name (defaults suppressed in the subcommand copies
    so a value given before the command name is not overwritten)."""
    d = argparse.SUPPRESS if suppress else None
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("store and output")
    g.add_argument("--store", metavar="URL", default=d,
                   help=f"store root: a folder, file://, s3://bucket/prefix (default ${ENV_STORE})")
    g.add_argument("--config", metavar="FILE", default=d, help=f"TOML settings file (default ${ENV_CONFIG})")
    g.add_argument("--s3-endpoint", metavar="URL", default=d, help="S3-compatible endpoint URL")
    g.add_argument("--s3-region", metavar="REGION", default=d, help="S3 region")
    g.add_argument("--s3-key", metavar="KEY", default=d, help="access key id (default: the AWS credential chain)")
    g.add_argument("--s3-secret", metavar="SECRET", default=d,
                   help="secret access key (default: the AWS credential chain)")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="machine-readable JSON on stdout")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=d,
                   help="progress on stderr for long work (default: when stderr is a terminal)")
    return p


def _installed_version() -> str:
    """The version of the installed ``txnlog`` distribution (its package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("txnlog")
    except PackageNotFoundError:
        return "(not installed: no package metadata)"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = argparse.ArgumentParser(
        prog="txnlog", parents=[_common(False)],
        description="Inspect and operate a txnlog store: topics, transactions, groups, integrity, sweeps.",
        epilog="exit codes: 0 ok, 1 problems found / not ok, 2 usage or invalid option, 3 not found, "
               "4 store error",
    )
    parser.add_argument("--version", action="version", version=f"txnlog {_installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = [_common(True)]

    def add(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=common, help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    add("topics", cmd_topics, "list topics with records, segments, bytes and offsets")
    p = add("describe", cmd_describe, "a topic's schema and per-partition offsets, bytes and segment counts")
    p.add_argument("topic")
    p = add("create-topic", cmd_create_topic, "create a topic")
    p.add_argument("topic")
    p.add_argument("--schema", required=True, help='columns, e.g. "id:int64,name:string" (a trailing ! = not null)')
    p.add_argument("--partitions", type=_positive, default=1, help="number of partitions (default 1)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists with this schema")
    p = add("txns", cmd_txns, "transactional ids, open, in-doubt and recent transactions")
    p.add_argument("--recent", type=_non_negative, default=20, help="completed transactions shown (default 20)")
    p.add_argument("--all", action="store_true", help="include the reserved producers of group offset commits")
    p = add("resolve", cmd_resolve, "finish an in-doubt transaction from the transaction log")
    p.add_argument("txn", nargs="?", help="transaction id (see `txnlog txns`)")
    p.add_argument("--all", action="store_true", help="resolve every in-doubt transaction")
    p.add_argument("--abort", action="store_true",
                   help="abort an ongoing transaction, fencing its producer with an epoch bump")
    add("groups", cmd_groups, "consumer groups with committed offsets and total lag")
    p = add("lag", cmd_lag, "per-partition lag of consumer groups")
    p.add_argument("--group", help="only this group")
    p = add("expire", cmd_expire, "abort timed-out transactions and expire idle transactional ids")
    p.add_argument("--dry-run", action="store_true", help="only report what would be done")
    add("verify", cmd_verify, "check every log entry, marker and segment (size, CRC-32); exit 1 on problems")
    p = add("dump", cmd_dump, "print committed records of a topic")
    p.add_argument("topic")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--from", dest="start", type=_non_negative, metavar="OFFSET", help="first offset (inclusive)")
    p.add_argument("--to", dest="end", type=_non_negative, metavar="OFFSET", help="last offset (exclusive)")
    p.add_argument("--limit", type=_non_negative, metavar="N", help="at most N records")
    p = add("compact", cmd_compact, "merge small segments into segments of the target size (offsets unchanged)")
    p.add_argument("topic", nargs="?", help="only this topic (default: all)")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--target-bytes", type=_positive, help="target segment size (default from config: 64 MiB)")
    p = add("gc", cmd_gc, "delete segment files nothing live names, older than the grace period")
    p.add_argument("topic", nargs="?", help="only this topic (default: all)")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--grace", type=_grace_seconds, metavar="S",
                   help="only files retired or written more than S seconds ago (default 86400)")
    p.add_argument("--dry-run", action="store_true", help="only report what would be deleted")
    p = sub.add_parser("coordinator", help="the coordinator daemon", description="the coordinator daemon")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = csub.add_parser("run", parents=common, help="loop the sweeps until SIGTERM/SIGINT",
                        description="roll forward prepared commits, abort timed-out transactions, expire ids; "
                                    "one line per sweep; SIGTERM/SIGINT stop it cleanly")
    r.add_argument("--interval", type=_seconds, metavar="S", help="seconds between sweeps (default from config)")
    r.add_argument("--once", action="store_true", help="run one sweep and exit")
    r.add_argument("--maintenance", action="store_true",
                   help="also run retention, compaction and GC (default grace 24 h) in every sweep")
    r.set_defaults(func=cmd_coordinator_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    secrets = (getattr(args, "s3_key", None), getattr(args, "s3_secret", None))
    try:
        settings = load_settings(config=getattr(args, "config", None), flags={
            "store_url": getattr(args, "store", None),
            "s3_endpoint": getattr(args, "s3_endpoint", None),
            "s3_region": getattr(args, "s3_region", None),
            "s3_key": secrets[0],
            "s3_secret": secrets[1],
        })
        out = Output(sys.stdout, sys.stderr, json_mode=bool(getattr(args, "json", False)),
                     progress=getattr(args, "progress", None))
        code: int = args.func(args, settings, out)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        sys.stderr.write(f"txnlog: error: {scrub(str(exc) or type(exc).__name__, secrets)}\n")
        return exit_code_for(exc)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
