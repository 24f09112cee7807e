#!/usr/bin/env bash
# Build src/coordinator/jars/txnlog-spark.jar (the optimizer rules behind txnsource.enable_native and
# txnsink.enable_native) from jvm/src, against the jars of the installed pyspark, for Java 17. The jar records the SHA-256 of its sources
# (META-INF/txnlog-source.sha256); tests/spark/test_read_native_rule.py checks it against jvm/src.
# Usage: bash scripts/build_jar.sh [PYTHON]     (PYTHON: an interpreter with pyspark; default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
command -v javac >/dev/null || { echo "building the jar needs a JDK (javac): apt-get install openjdk-17-jdk-headless" >&2; exit 1; }
JARS="$("$PY" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mapfile -t sources < <(find jvm/src -name '*.java' | LC_ALL=C sort)
javac --release 17 -nowarn -cp "$JARS/*" -d "$out/classes" "${sources[@]}"
mkdir -p "$out/classes/META-INF"
"$PY" -m coordinator.jvm --source-hash > "$out/classes/META-INF/txnlog-source.sha256"
jar --create --file src/coordinator/jars/txnlog-spark.jar --date=2026-01-01T00:00:00Z -C "$out/classes" .
echo "built src/coordinator/jars/txnlog-spark.jar" >&2
