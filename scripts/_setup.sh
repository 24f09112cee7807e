# Sourced by demo.sh and test.sh: checks Python and Java, creates .venv and installs the project into it, with the
# versions pinned in constraints/newest.txt (TXNLOG_CONSTRAINTS=oldest: constraints/oldest.txt).
# Usage: . scripts/_setup.sh EXTRAS      (EXTRAS: "spark" or "test"; TXNLOG_VENV: another venv folder)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "txnlog needs Python 3.11 or newer: install python3 (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
  exit 1
fi
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "txnlog needs Python 3.11 or newer; $("$PY" --version 2>&1) found" >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1; then
  echo "Spark needs Java 17 or 21 and no 'java' is on PATH." >&2
  echo "Install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17)" >&2
  echo "or set JAVA_HOME and put \$JAVA_HOME/bin on PATH." >&2
  exit 1
fi
JAVA_MAJOR=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -n "$JAVA_MAJOR" ] && [ "$JAVA_MAJOR" -lt 17 ]; then
  echo "Spark 4 needs Java 17 or newer; java $JAVA_MAJOR found (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)" >&2
  exit 1
fi
if [ "$1" = test ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  # the notebook tests screenshot the rendered notebooks with headless Chromium
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing chromium (apt-get) for the notebook screenshots" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null
  else
    echo "the notebook tests need Chromium: install it (Debian/Ubuntu: apt-get install chromium)" >&2
    exit 1
  fi
fi

VENV="${TXNLOG_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtual environment $VENV" >&2
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
PINS="constraints/${TXNLOG_CONSTRAINTS:-newest}.txt"
echo "installing txnlog[$1] into $VENV with the versions of $PINS" >&2
# errexit does not hold where this file is sourced in an `&&` list (test.sh's second pass): stop explicitly
"$VENV/bin/python" -m pip install --quiet -c "$PINS" -e ".[$1]" || { echo "installing txnlog[$1] failed" >&2; exit 1; }
# The Azure tests run Azurite (Microsoft's Azure Storage emulator, from the npm registry) beside the venv; the
# version is tests/azure_lake.py's AZURITE_VERSION.
AZURITE_VERSION=3.37.0
if [ "$1" = test ] && [ ! -x "$VENV/azurite/node_modules/.bin/azurite-blob" ]; then
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "the Azure tests need Node.js and npm to install Azurite $AZURITE_VERSION: install them" >&2
    echo "(Debian/Ubuntu: apt-get install nodejs npm; macOS: brew install node)" >&2
    exit 1
  fi
  echo "installing azurite@$AZURITE_VERSION (npm) into $VENV/azurite" >&2
  npm install --silent --no-save --no-audit --no-fund --prefix "$VENV/azurite" "azurite@$AZURITE_VERSION" >/dev/null \
    || { echo "installing azurite@$AZURITE_VERSION failed" >&2; exit 1; }
fi
export PATH="$PWD/$VENV/bin:$PATH"
export PYSPARK_PYTHON="$PWD/$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/$VENV/bin/python"
