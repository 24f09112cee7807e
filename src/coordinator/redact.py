"""Keeping credentials out of logs.

Libraries below the store (botocore, aiobotocore, s3fs) log request headers at DEBUG level, and a signed request
names the access key. :func:`register` adds a credential to the process's redaction set; a log-record factory
installed on first use replaces every registered value in every log record's message with ``***`` before any
handler sees it, whichever library logged it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

MASK = "***"
_secrets: set[str] = set()
_lock = threading.Lock()
_installed = False


def scrub(text: str) -> str:
    """``text`` with every registered credential replaced by ``***``."""
    for s in sorted(_secrets, key=len, reverse=True):
        if s in text:
            text = text.replace(s, MASK)
    return text


def register(*values: str | None) -> None:
    """Never let these values reach a log record (values shorter than 4 characters are ignored)."""
    global _installed
    with _lock:
        _secrets.update(v for v in values if v and len(v) >= 4)
        if _installed or not _secrets:
            return
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a broken format is the logger's problem, not ours
                return record
            clean = scrub(message)
            if clean != message:
                record.msg, record.args = clean, None
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
