#!/usr/bin/env bash
# Mutation score of the core (issue 13; docs/traces.md): mutmut mutates zabref/core's protocol modules (pyproject's
# [tool.mutmut]) and runs tests/mutation/test_kill_core.py against each mutant: every edge and channel head of the
# models given by --graphs, then every step of the action-coverage traces of the models given by --traces and of the
# committed regression traces, on the core.
#   bash scripts/mutation.sh                       # --graphs tiny,two --traces ci; all of [tool.mutmut] only_mutate
#   bash scripts/mutation.sh --graphs tiny,two,ci --traces ci,ci3,five -- NAME...
#                                                  # the second stage: the first stage's survivors (mutant names,
#                                                  # `mutmut results`) against the whole ci graph and more traces
#   results: .venv/bin/mutmut results; the ledger of survivors: .venv/bin/python scripts/mutation_ledger.py
set -euo pipefail
cd "$(dirname "$0")/.."
graphs=tiny,two
traces=ci
while [ $# -gt 0 ]; do
  case "$1" in
    --graphs) graphs="$2"; shift 2 ;;
    --traces) traces="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "mutation.sh: unknown option $1 (--graphs M,M --traces M,M -- MUTMUT-ARGS)" >&2; exit 2 ;;
  esac
done
bash scripts/bootstrap.sh
.venv/bin/python -c "import mutmut" 2>/dev/null || .venv/bin/pip install -q "mutmut==3.8.1"
# the graphs and traces, generated (or taken from the cache) before mutmut copies the project into mutants/
env_file="$(mktemp)"
trap 'rm -f "$env_file"' EXIT
.venv/bin/python - "$env_file" "$graphs" "$traces" <<'PY'
import shutil
import sys
import tempfile
from pathlib import Path

from conformance.graph.cache import ensure_traces
from conformance.replay.regress import REGRESSION_DIR

out, graphs, traces = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
graph_dirs = [str(ensure_traces(m) / "graph.parquet") for m in graphs if m]
# a copy of the regression traces: the kill set stays the same for the whole run, whatever regress --write does
regression = Path(tempfile.mkdtemp(prefix="zabref-mutation-")) / "regression"
shutil.copytree(REGRESSION_DIR, regression)
trace_dirs = [str(ensure_traces(m)) for m in traces if m] + [str(regression)]
Path(out).write_text(f"export ZABREF_MUTATION_GRAPHS={':'.join(graph_dirs)}\n"
                     f"export ZABREF_MUTATION_TRACES={':'.join(trace_dirs)}\n")
PY
# shellcheck disable=SC1090
source "$env_file"
.venv/bin/mutmut run --max-children "${ZABREF_MUTATION_CHILDREN:-2}" "$@"
.venv/bin/mutmut results
