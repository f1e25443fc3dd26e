#!/usr/bin/env bash
# Mutation score of the code that guards the ensemble (issue 39; docs/operations.md, "Mutation score of the guarding
# code"): TLS, quorum authentication, the acceptors' admission, the control port's gate, the security keys of the
# configuration. What is mutated and which tests run is the [scope] of tests/mutation/security-ledger.toml.
#   bash scripts/mutation-security.sh              # every mutant of the scope's functions (one mutmut child)
#   bash scripts/mutation-security.sh -- NAME...   # only these (mutmut names or fnmatch patterns, `mutmut results`)
#   bash scripts/mutation-security.sh --fresh      # forget the previous run (its mutants/ and results) first
#   bash scripts/mutation-security.sh --alive      # again, the mutants the previous run did not kill or not reach
#   the ledger of survivors: .venv/bin/python scripts/mutation_ledger.py --ledger tests/mutation/security-ledger.toml
#
# pyproject's [tool.mutmut] is the core's and stays so: the run lives in a copy of the project (the scope's run_dir,
# .cache/mutation-security/), whose pyproject.toml gets a [tool.mutmut] for the scope: only_mutate = its files,
# the pytest selection = its tests but `deselect`, tests marked slow or long deselected (a mutant runs only the tests
# that called its function: mutmut 3 records that at the start of every run), pytest's -x, and the tests of `last`
# (ensembles of real processes) after the fast ones and not at all for a mutant of a `fast_only` function, so a
# killed mutant usually costs a second. mutmut 3.8.1 mutates
# whole files; the names of the scope's functions (`mutation_ledger.py --globs`) select the mutants that run.
set -euo pipefail
cd "$(dirname "$0")/.."
LEDGER=tests/mutation/security-ledger.toml
fresh=0
alive=0
while [ $# -gt 0 ]; do
  case "$1" in
    --fresh) fresh=1; shift ;;
    --alive) alive=1; shift ;;
    --) shift; break ;;
    *) echo "mutation-security.sh: unknown option $1 (--fresh, --alive, -- MUTANT-NAME...)" >&2; exit 2 ;;
  esac
done
bash scripts/bootstrap.sh
.venv/bin/python -c "import mutmut" 2>/dev/null || .venv/bin/pip install -q "mutmut==3.8.1"
ROOT=$(pwd -P)
RUN="$ROOT/$(.venv/bin/python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["scope"]["run_dir"])' \
  "$LEDGER")"
if [ "$fresh" = 1 ]; then rm -rf "$RUN"; fi
mkdir -p "$RUN"
# the project as it is now (mutants/ keeps mutmut's results and its first copy of the files it does not mutate:
# those are refreshed below)
for d in zabref conformance tests spec traces; do
  rm -rf "${RUN:?}/$d"
  cp -a "$d" "$RUN/$d"
done
cp -a pyproject.toml "$RUN/pyproject.toml"
.venv/bin/python - "$RUN" "$LEDGER" <<'PY'
import re
import sys
import tomllib
from pathlib import Path

run, ledger = Path(sys.argv[1]), Path(sys.argv[2])
scope = tomllib.loads(ledger.read_text())["scope"]
py = run / "pyproject.toml"
text = py.read_text()
# drop the core's [tool.mutmut] table (up to the next table header or the end), then add the scope's
text = re.sub(r"(?ms)^\[tool\.mutmut\]\n.*?(?=^\[|\Z)", "", text)
toml_list = lambda xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]"
text += (
    "\n[tool.mutmut]\n"
    '# written by scripts/mutation-security.sh from tests/mutation/security-ledger.toml\'s [scope]\n'
    'source_paths = ["zabref/"]\n'
    f"only_mutate = {toml_list(scope['files'])}\n"
    "do_not_mutate_patterns = [" + ", ".join(f"'{x}'" for x in scope.get("do_not_mutate", [])) + "]\n"
    'also_copy = ["conformance/", "spec/", "traces/", "_mutation_security_order.py"]\n'
    f"pytest_add_cli_args_test_selection = {toml_list(scope['tests'])}\n"
    'pytest_add_cli_args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-m", "not slow and not long", '
    '"-p", "_mutation_security_order"' + "".join(f', "--deselect", "{x}"' for x in scope.get("deselect", [])) + "]\n"
)
assert tomllib.loads(text)["tool"]["mutmut"]["only_mutate"] == scope["files"]
py.write_text(text)
# a pytest plugin: the scope's `last` tests after the others (after conftest's own ordering), and none of them for a
# mutant of a `fast_only` function
(run / "_mutation_security_order.py").write_text(f'''"""The guarding code's mutation run: slow tests last
(scripts/mutation-security.sh)."""

import fnmatch
import os
import sys

import pytest

sys.path.insert(0, {str(Path("scripts").resolve())!r})
from mutation_ledger import Mutant  # noqa: E402

LAST = {scope.get("last", [])!r}
FAST_ONLY = {scope.get("fast_only", [])!r}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: any(item.nodeid.startswith(x) for x in LAST))
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" in mutant:
        function = Mutant(mutant, None, prefix={scope["prefix"]!r}).function
        if any(fnmatch.fnmatchcase(function, f) for f in FAST_ONLY):
            slow = [item for item in items if any(item.nodeid.startswith(x) for x in LAST)]
            if slow:
                config.hook.pytest_deselected(items=slow)
                items[:] = [item for item in items if item not in slow]
''')
# the files mutmut does not mutate: its copy in mutants/ is the first one it made, so refresh them
mutated = {Path(f) for f in scope["files"]}
if (run / "mutants").is_dir():
    for src in Path("zabref").rglob("*.py"):
        if src not in mutated and "__pycache__" not in src.parts:
            (run / "mutants" / src).parent.mkdir(parents=True, exist_ok=True)
            (run / "mutants" / src).write_bytes(src.read_bytes())
PY
if [ "$alive" = 1 ]; then
  mapfile -t names < <(.venv/bin/python scripts/mutation_ledger.py --ledger "$LEDGER" --alive)
elif [ $# -eq 0 ]; then
  mapfile -t names < <(.venv/bin/python scripts/mutation_ledger.py --ledger "$LEDGER" --globs)
else
  names=("$@")
fi
# which tests call which function: recorded afresh by every run (mutmut would reuse it for changed tests)
rm -f "$RUN/mutants/mutmut-stats.json"
start=$(date +%s)
if [ "${#names[@]}" -eq 0 ]; then
  echo "mutation-security.sh: no mutant to run"
else
  (cd "$RUN" && "$ROOT/.venv/bin/mutmut" run --max-children 1 "${names[@]}")
fi
echo "mutation-security.sh: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
.venv/bin/python scripts/mutation_ledger.py --ledger "$LEDGER" || true
