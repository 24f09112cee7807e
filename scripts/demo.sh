#!/usr/bin/env bash
# Set up (.venv) and run the main demo on the embedded default (local store, local Spark): a
# consume-transform-produce stream that is SIGKILLed mid-stream, restarted, and proven exactly-once.
set -euo pipefail
. "$(dirname "$0")/_setup.sh" spark
exec python examples/ctp_demo.py "$@"
