"""The ``txnlog`` argument parser: every command, its options and help (``docs/cli.md`` documents them)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import NoReturn

from coordinator.cli.common import Output
from coordinator.cli.config import ENV_CONFIG, ENV_STORE, Settings
from coordinator.cli.daemon import cmd_coordinator_run
from coordinator.cli.groups import cmd_delete_group, cmd_groups, cmd_lag, cmd_reset_offsets
from coordinator.cli.maintenance import cmd_compact, cmd_gc
from coordinator.cli.produce import INPUT_FORMATS, cmd_produce
from coordinator.cli.records import cmd_dump, cmd_repair, cmd_verify
from coordinator.cli.topics import (
    cmd_add_partitions,
    cmd_create_topic,
    cmd_delete_topic,
    cmd_describe,
    cmd_set_config,
    cmd_topics,
)
from coordinator.cli.txns import cmd_expire, cmd_resolve, cmd_txns
from coordinator.errors import InvalidOptionError
from coordinator.units import parse_duration_ms, parse_size

Command = Callable[[argparse.Namespace, Settings, Output], int]
EPILOG = ("exit codes: 0 ok, 1 problems found / not ok, 2 usage or invalid option, 3 not found, 4 store error, "
          "5 no txnlog store at the URL. Commands that delete or change committed state show what they would do "
          "unless --execute.")


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


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _duration(flag: str, default_unit: str, *, zero_ok: bool) -> Callable[[str], int]:
    """An argparse type reading a duration in ``coordinator.units`` syntax (a plain number is ``default_unit``);
    the value is in milliseconds."""

    def parse(text: str) -> int:
        try:
            return parse_duration_ms(text, what=flag, default_unit=default_unit, zero_ok=zero_ok)
        except InvalidOptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _size(flag: str) -> Callable[[str], int]:
    """An argparse type reading a size in ``coordinator.units`` syntax (a plain number is bytes)."""

    def parse(text: str) -> int:
        try:
            return parse_size(text, what=flag)
        except InvalidOptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (``txnlog: error: ...``, exit 2), as every other
    error of the command line, instead of argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        m = re.match(r"argument (\S+?)(?:/\S+)?: (.*)", message, re.DOTALL)
        if m and m.group(2).startswith(m.group(1)):
            message = m.group(2)  # the type's message already names the option
        self.exit(2, f"txnlog: error: {message} (see '{self.prog} --help')\n")


def _common(suppress: bool) -> OneLineParser:
    """The options every command takes, before or after its name (defaults suppressed in the subcommand copies
    so a value given before the command name is not overwritten)."""
    d = argparse.SUPPRESS if suppress else None
    p = OneLineParser(add_help=False)
    g = p.add_argument_group("store and output")
    g.add_argument("--store", metavar="URL", default=d,
                   help=f"store root: a folder, file:///path, s3://bucket/prefix, az://container/prefix, "
                        f"gs://bucket/prefix "
                        f"(default ${ENV_STORE})")
    g.add_argument("--config", metavar="FILE", default=d, help=f"TOML settings file (default ${ENV_CONFIG})")
    g.add_argument("--s3-endpoint", metavar="URL", default=d, help="S3-compatible endpoint URL")
    g.add_argument("--s3-region", metavar="REGION", default=d, help="S3 region")
    g.add_argument("--s3-key", metavar="KEY", default=d, help="access key id (default: the AWS credential chain)")
    g.add_argument("--s3-secret", metavar="SECRET", default=d,
                   help="secret access key (default: the AWS credential chain)")
    g.add_argument("--azure-account", metavar="NAME", default=d, help="Azure storage account (az://, abfss://)")
    g.add_argument("--azure-endpoint", metavar="URL", default=d,
                   help="Azure Blob service URL (default https://ACCOUNT.blob.core.windows.net)")
    g.add_argument("--azure-key", metavar="KEY", default=d, help="Azure account key (default: the Azure chain)")
    g.add_argument("--azure-sas-token", metavar="SAS", default=d, help="Azure SAS token (default: the Azure chain)")
    g.add_argument("--gcs-endpoint", metavar="URL", default=d, help="GCS endpoint URL (leave out for Google's)")
    g.add_argument("--gcs-project", metavar="PROJECT", default=d, help="GCS project")
    g.add_argument("--gcs-token", metavar="FILE", default=d,
                   help="GCS credentials file, or anon (default: Google's credential chain)")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                   help="machine-readable JSON on stdout (JSON Lines for dump and the daemon)")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=d,
                   help="progress on stderr for long work (default: when stderr is a terminal)")
    return p


def _execute(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--execute", action="store_true", help=f"{what} (without it: only show what would be done)")


def _installed_version() -> str:
    """The version of the installed ``txnlog`` distribution (its package metadata)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("txnlog")
    except PackageNotFoundError:
        return "(not installed: no package metadata)"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser."""
    parser = OneLineParser(
        prog="txnlog", parents=[_common(False)], epilog=EPILOG,
        description="Inspect and operate a txnlog store: topics, transactions, consumer groups, integrity, sweeps.",
    )
    parser.add_argument("--version", action="version", version=f"txnlog {_installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = [_common(True)]

    def add(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=common, help=help_text, description=help_text, epilog=EPILOG)
        p.set_defaults(func=func)
        return p

    # topics
    add("topics", cmd_topics, "list topics: partitions, records, segments, size")
    p = add("describe", cmd_describe, "a topic's schema, config and per-partition offsets, size and staged files")
    p.add_argument("topic")
    p = add("create-topic", cmd_create_topic, "create a topic (creates the store if there is none)")
    p.add_argument("topic")
    p.add_argument("--schema", required=True,
                   help='columns, Arrow style "id:int64!,amount:decimal128(10, 2)" or Spark DDL '
                        '"id BIGINT NOT NULL, amount DECIMAL(10,2)"')
    p.add_argument("--partitions", type=_positive, default=1, help="number of partitions (default 1)")
    p.add_argument("--topic-config", dest="config_items", action="append", metavar="KEY=VALUE",
                   help="topic config, e.g. retention.ms=7d (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists with this schema")
    p = add("delete-topic", cmd_delete_topic, "delete a topic and its data; its name is not reused")
    p.add_argument("topic")
    _execute(p, "delete it")
    p = add("add-partitions", cmd_add_partitions, "grow a topic to N partitions (never shrinks)")
    p.add_argument("topic")
    p.add_argument("--partitions", type=_positive, required=True, metavar="N", help="the new partition count")
    p = add("set-config", cmd_set_config, "set or remove topic config (retention.ms, retention.bytes)")
    p.add_argument("topic")
    p.add_argument("--set", dest="assignments", action="append", metavar="KEY=VALUE",
                   help="set a config key, e.g. retention.ms=7d, retention.bytes=10GiB (repeatable)")
    p.add_argument("--unset", action="append", metavar="KEY", help="remove a config key (repeatable)")
    # transactions
    p = add("txns", cmd_txns, "transactional ids, open transactions and recent decisions")
    p.add_argument("--recent", type=_non_negative, default=20, help="recent decisions shown (default 20)")
    p.add_argument("--all", action="store_true", help="include the reserved producers of group offset commits")
    p = add("resolve", cmd_resolve, "what became of a transaction, from the transaction log; --abort an open one")
    p.add_argument("txn", nargs="?", help="transaction id (see `txnlog txns`)")
    p.add_argument("--all", action="store_true", help="every open transaction")
    p.add_argument("--timed-out", action="store_true", help="with --all: only those open past their timeout")
    p.add_argument("--abort", action="store_true",
                   help="abort an open transaction, fencing its producer with an epoch bump")
    _execute(p, "with --abort: abort it")
    p = add("expire", cmd_expire, "abort timed-out transactions and expire idle transactional ids")
    p.add_argument("--dry-run", action="store_true", help="only report what would be done")
    # groups
    add("groups", cmd_groups, "consumer groups with committed offsets and total lag")
    p = add("lag", cmd_lag, "per-partition lag of consumer groups")
    p.add_argument("--group", help="only this group")
    p = add("reset-offsets", cmd_reset_offsets, "change a consumer group's committed offsets")
    p.add_argument("group")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,...]", help="partitions to reset (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="every topic the group has committed for")
    p.add_argument("--to-earliest", action="store_true", help="the log start offset")
    p.add_argument("--to-latest", action="store_true", help="the log end offset")
    p.add_argument("--to-offset", type=_non_negative, metavar="N", help="offset N (clamped to the log's range)")
    p.add_argument("--to-datetime", metavar="TIME", help="the first offset committed at or after an ISO-8601 time")
    p.add_argument("--shift-by", type=_integer, metavar="N", help="the committed offset plus N (may be negative)")
    _execute(p, "commit the new offsets")
    p = add("delete-group", cmd_delete_group, "delete a consumer group's committed offsets")
    p.add_argument("group")
    _execute(p, "delete them")
    # records and integrity
    p = add("dump", cmd_dump, "print committed records of a topic (JSON Lines with --json, streamed)")
    p.add_argument("topic")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--from", dest="start", type=_non_negative, metavar="OFFSET", help="first offset (inclusive)")
    p.add_argument("--to", dest="end", type=_non_negative, metavar="OFFSET", help="last offset (exclusive)")
    p.add_argument("--limit", type=_non_negative, metavar="N", help="at most N records")
    p = add("produce", cmd_produce, "publish JSON Lines, CSV or Parquet files to a topic as one transaction")
    p.add_argument("topic")
    p.add_argument("files", nargs="+", metavar="FILE", help="input files ('-' reads standard input)")
    p.add_argument("--format", choices=INPUT_FORMATS, help="input format (default: from each file's extension)")
    p.add_argument("--key", metavar="COL[,COL]", help="hash these columns to choose the partition")
    p.add_argument("--partition", type=_non_negative, help="write every record to this partition")
    p.add_argument("--transactional-id", metavar="ID",
                   help="produce as this transactional id (default: a one-off producer)")
    add("verify", cmd_verify, "check every log entry, partition record and segment (size, CRC-32); exit 1 on "
                              "problems")
    p = add("repair", cmd_repair, "rewrite damaged or missing partition records from the log entries defining them; "
                                  "--log: rebuild damaged log entries and checkpoints from the copies")
    p.add_argument("--log", action="store_true",
                   help="repair the transaction log instead: rebuild damaged entries and checkpoints from what "
                        "partition records, checkpoints, later entries and intents hold, naming what is lost")
    _execute(p, "write them")
    # maintenance
    p = add("compact", cmd_compact, "merge small segments into segments of the target size (offsets unchanged)")
    p.add_argument("topic", nargs="?", help="only this topic (default: all)")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--target-bytes", type=_size("--target-bytes"), metavar="SIZE",
                   help="target segment size, e.g. 64MiB (default [segments] target_bytes: 64 MiB)")
    p = add("gc", cmd_gc, "delete segment files nothing live names, older than the grace period")
    p.add_argument("topic", nargs="?", help="only this topic (default: all)")
    p.add_argument("--partition", type=_non_negative, help="only this partition")
    p.add_argument("--grace", type=_duration("--grace", "s", zero_ok=True), metavar="DURATION",
                   help="only files retired or written more than this long ago, e.g. 1d, 12h, 30m or seconds "
                        "(default 1d)")
    _execute(p, "delete them")
    p = sub.add_parser("coordinator", help="the coordinator daemon", description="the coordinator daemon")
    csub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = csub.add_parser("run", parents=common, help="loop the sweeps until SIGTERM/SIGINT", epilog=EPILOG,
                        description="abort timed-out transactions, expire idle transactional ids, write partition "
                                    "records crashed writers left out; logs one line per action; SIGTERM/SIGINT "
                                    "stop it cleanly")
    r.add_argument("--interval", type=_duration("--interval", "s", zero_ok=False), metavar="DURATION",
                   help="time between sweeps, e.g. 5s, 1m or seconds (default [daemon] sweep_interval_s: 10s)")
    r.add_argument("--once", action="store_true", help="run one sweep and exit")
    r.add_argument("--maintenance", action="store_true",
                   help="also run retention, compaction and GC (default grace 1d) in every sweep")
    r.set_defaults(func=cmd_coordinator_run)
    return parser
