#!/usr/bin/env bash
# Set up (.venv) and run the whole test suite, slow fault-injection runs included, plus lint and type checks.
# Extra arguments go to pytest, e.g.  bash scripts/test.sh -m "not slow"
set -euo pipefail
. "$(dirname "$0")/_setup.sh" test
echo "ruff" >&2 && ruff check src tests bench examples
echo "mypy" >&2 && mypy
exec python -m pytest "$@"
