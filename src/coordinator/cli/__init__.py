"""``txnlog``: the operator's command line (see ``docs/cli.md``).

```
txnlog --store file:///data/lake topics
txnlog describe orders
txnlog txns                             # transactional ids, open transactions, recent decisions
txnlog resolve p.3.0.7 --abort          # what aborting an open transaction would do (--execute does it)
txnlog reset-offsets billing --topic orders --to-earliest --execute
txnlog verify                           # exit 1 if any file is missing or damaged
txnlog coordinator run --interval 5
```

Every command takes ``--json`` for scripts, and the store options ``--store`` (or ``TXNLOG_STORE``),
``--config FILE`` (TOML), ``--s3-endpoint``, ``--s3-region``, ``--s3-key``/``--s3-secret`` (otherwise the standard
AWS credential chain), ``--azure-account``, ``--azure-endpoint``, ``--azure-key``/``--azure-sas-token`` (otherwise
adlfs's chain: ``AZURE_STORAGE_*`` variables, azure-identity), ``--gcs-endpoint``, ``--gcs-project``, ``--gcs-token``
(otherwise Google's chain), before or after the command name. Exit codes: 0 ok, 1 problems found / not ok, 2 usage
or invalid option, 3 not found, 4 store error, 5 no txnlog store at the URL. Read-only commands never write to the
store nor create it. This package never imports pyspark.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from coordinator import parallel
from coordinator.cli.common import EXIT_USAGE, Output, exit_code_for, scrub
from coordinator.cli.config import load_settings
from coordinator.cli.parser import build_parser

__all__ = ["build_parser", "main"]

DEBUG_ENV = "TXNLOG_DEBUG"
#: How long the program waits at exit for work it left in the background (partition records, checkpoints: derived
#: data, which readers compute from the log when missing).
EXIT_DRAIN_S = 60.0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code. Every error is one
    line on stderr (``txnlog: error: ...``) scrubbed of the credentials given as flags; ``TXNLOG_DEBUG=1`` shows
    tracebacks instead.

    Run as the program (no ``argv``), it does not return: once the command is done, the work it left in the
    background has finished and its output is flushed, the process exits at once (:func:`_exit`)."""
    code = _main(argv)
    if argv is None:
        _exit(code)
    return code


def _exit(code: int) -> NoReturn:
    """End the program with ``code`` once its background work is done and its output flushed, skipping the
    interpreter's teardown: native libraries tearing down their thread pools at exit intermittently abort a process
    whose work is complete (Arrow's, apache/arrow#34314: exit by SIGABRT after a command's output was written)."""
    parallel.drain(EXIT_DRAIN_S)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: the reader stopped reading (as for BrokenPipeError in _main)
            pass
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    gcs_token = getattr(args, "gcs_token", None)
    secrets = (getattr(args, "s3_key", None), getattr(args, "s3_secret", None), getattr(args, "azure_key", None),
               getattr(args, "azure_sas_token", None), None if gcs_token == "anon" else gcs_token)
    try:
        settings = load_settings(config=getattr(args, "config", None), flags={
            "store_url": getattr(args, "store", None),
            "s3_endpoint": getattr(args, "s3_endpoint", None),
            "s3_region": getattr(args, "s3_region", None),
            "s3_key": secrets[0],
            "s3_secret": secrets[1],
            "azure_account": getattr(args, "azure_account", None),
            "azure_endpoint": getattr(args, "azure_endpoint", None),
            "azure_key": secrets[2],
            "azure_sas_token": secrets[3],
            "gcs_endpoint": getattr(args, "gcs_endpoint", None),
            "gcs_project": getattr(args, "gcs_project", None),
            "gcs_token": gcs_token,
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
