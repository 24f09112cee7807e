#!/usr/bin/env bash
# Set up (.venv) and run the whole test suite, slow fault-injection runs included, plus lint and type checks, with
# the newest supported versions (constraints/newest.txt); then, on a full run, the Spark tests of what depends on
# the pyspark version (not the slow ones), the store contract tests (S3 conditional writes) and the partitioner's
# fixed placements again with the oldest
# supported versions (constraints/oldest.txt) in a second environment (.venv-oldest).
# Extra arguments go to pytest and skip the second pass, e.g.  bash scripts/test.sh -m "not slow"
# TXNLOG_OLDEST=1 runs the second pass even with arguments, TXNLOG_OLDEST=0 never.
# Both passes run on TXNLOG_WORKERS pytest-xdist workers (default 2; 0: one process): the Spark tests as one group
# on one worker, sharing its SparkSession (tests/conftest.py), the rest spread over both.
set -euo pipefail
. "$(dirname "$0")/_setup.sh" test
echo "ruff" >&2 && ruff check src tests bench examples
echo "mypy" >&2 && mypy
PYTEST="python -m pytest -n ${TXNLOG_WORKERS:-2} --dist loadgroup"
if [ "${TXNLOG_OLDEST:-$([ $# -eq 0 ] && echo 1 || echo 0)}" != 1 ]; then
  exec $PYTEST "$@"
fi
$PYTEST "$@"
echo "Spark, store contract and partitioner tests with the oldest supported versions (constraints/oldest.txt)" >&2
export TXNLOG_VENV="${VENV}-oldest" TXNLOG_CONSTRAINTS=oldest
# what depends on the pyspark version: the Python Data Source API (batch and streaming reads and writes, filter
# pushdown, the pickled source a DataFrame pins), the jar's rules (native micro-batches included) and session
# extension against that Spark's internals, and the JVM partitioner
SPARK_OLDEST="tests/spark/test_read.py tests/spark/test_read_pushdown.py tests/spark/test_read_snapshot.py
  tests/spark/test_read_native.py tests/spark/test_read_native_rule.py tests/spark/test_stream_read.py
  tests/spark/test_stream_write.py tests/spark/test_write.py tests/spark/test_write_native.py
  tests/spark/test_write_native_rule.py tests/spark/test_write_keyed_jvm.py tests/spark/test_extension.py
  tests/spark/test_extension_stream.py tests/spark/test_native_stream_read.py tests/spark/test_native_stream_write.py"
exec bash -c ". scripts/_setup.sh test && exec $PYTEST -m 'not slow' $(echo $SPARK_OLDEST) tests/test_store_contract.py tests/test_partitioner.py"
