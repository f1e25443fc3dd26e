#!/usr/bin/env bash
# The longer command: the heaviest checks, which the test command (scripts/test.sh) skips -- the tests marked `long`
# (every edge and channel head of ci on Spark, the liveness model live2 and its mutations, the mutation matrix's
# peel, the real-ZooKeeper version matrix). About 15 minutes on two idle cores (docs/performance.md, "The two test
# commands"); it runs on two workers, a test file to a worker, and prints the ten slowest tests at its end.
#   bash scripts/test-long.sh
#   bash scripts/test-long.sh tests/test_edges.py -q
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
rc=0
.venv/bin/python -m pytest --long -m long -n "${ZABREF_TEST_WORKERS:-2}" --dist loadfile --durations=10 "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test-long.sh: pytest collected no tests (exit 5): treating as a failure" >&2
    exit 1
fi
exit "$rc"
