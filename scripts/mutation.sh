#!/usr/bin/env bash
# Mutation score of the core (issue 13; docs/traces.md): mutmut mutates zabref/core's protocol modules (pyproject's
# [tool.mutmut]) and runs tests/mutation/test_kill_core.py against each mutant: every edge and channel head of the
# tiny model, every step of the ci action-coverage traces and of the committed regression traces, on the core.
#   bash scripts/mutation.sh            # all of [tool.mutmut] only_mutate; results: .venv/bin/mutmut results
#   bash scripts/mutation.sh -- ARGS    # ARGS to `mutmut run` (e.g. a mutant name to run again)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/python -c "import mutmut" 2>/dev/null || .venv/bin/pip install -q "mutmut==3.8.1"
# the graphs and traces, generated (or taken from the cache) before mutmut copies the project into mutants/
env_file="$(mktemp)"
trap 'rm -f "$env_file"' EXIT
.venv/bin/python - "$env_file" <<'PY'
import sys
from pathlib import Path
from conformance.graph.cache import ensure_traces
from conformance.replay.regress import REGRESSION_DIR
tiny = ensure_traces("tiny") / "graph.parquet"
# a copy of the regression traces: the kill set stays the same for the whole run, whatever regress --write does
import shutil, tempfile
regression = Path(tempfile.mkdtemp(prefix="zabref-mutation-")) / "regression"
shutil.copytree(REGRESSION_DIR, regression)
Path(sys.argv[1]).write_text(f"export ZABREF_MUTATION_TINY={tiny}\n"
                             f"export ZABREF_MUTATION_TRACES={ensure_traces('ci')}:{regression}\n")
PY
# shellcheck disable=SC1090
source "$env_file"
shift_args=()
if [ "${1:-}" = "--" ]; then shift; shift_args=("$@"); fi
.venv/bin/mutmut run --max-children "${ZABREF_MUTATION_CHILDREN:-2}" "${shift_args[@]}"
.venv/bin/mutmut results
