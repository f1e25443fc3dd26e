#!/usr/bin/env bash
# The test suite: bring the machine up to date, then run pytest with any arguments given, on two workers (the
# machine's two cores; pytest-xdist), each test file on one worker so that a file's fixtures are made once. Generated
# traces are shared through conformance/graph/cache.py's lock. ZABREF_TEST_WORKERS=N (or `-n N` as an argument) sets the
# number of workers; 0 runs the suite in one process.
#   bash scripts/test.sh                          # everything
#   bash scripts/test.sh tests/test_toolchain.py -q
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
rc=0
.venv/bin/python -m pytest -n "${ZABREF_TEST_WORKERS:-2}" --dist loadfile "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    # pytest's "no tests were collected" is a broken selection, not a pass.
    echo "test.sh: pytest collected no tests (exit 5): treating as a failure" >&2
    exit 1
fi
exit "$rc"
