"""Account for every mutant of the core that scripts/mutation.sh left alive (issue 13; docs/traces.md).

Usage: .venv/bin/python scripts/mutation_ledger.py [--units] [--markdown FILE]

Reads mutmut's results (mutants/, as scripts/mutation.sh left them) and, for every mutant the conformance killer
(tests/mutation/test_kill_core.py) did not kill:

* matches it against the ledger (tests/mutation/ledger.toml): each rule names a class, the functions it covers and
  the text of the mutated line before and after, and says why such a mutant is equivalent;
* with ``--units``, runs the core's unit tests (`UNIT_TESTS`) against each one no rule excuses, as mutmut runs its
  killer (the mutants/ copy of the project, ``MUTANT_UNDER_TEST`` naming the mutant): the validation of packets no
  spec state sends, and the contracts between the core and its callers, are theirs to check, not conformance's.

Prints one line per mutant not killed by the conformance killer (how it was accounted for), then the counts and the
scores: conformance = killed by the conformance killer / (mutants - equivalent); with the unit tests added. Exits 1
when a survivor matches no rule (a gap: kill it with a trace or model, or add a rule with its reason) or a rule
matches no survivor (stale: the ledger must not excuse more than is there). ``--markdown`` writes the per-mutant
page, docs/mutation.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LEDGER = REPO / "tests" / "mutation" / "ledger.toml"
#: The core's unit tests: every packet a peer may send, and every entry point, checked case by case.
UNIT_TESTS = ("tests/test_core.py", "tests/test_core_model.py")
KILLED, SURVIVED, NO_TESTS = 1, 0, 33


@dataclass
class Mutant:
    name: str  # mutmut's: zabref.core.leader.xǁLeaderActionsǁleader_process_ack__mutmut_22
    status: int | None
    before: str = ""
    after: str = ""
    how: str = ""  # "units", or the class of the ledger rule that accounts for it
    rule: int | None = None

    @property
    def function(self) -> str:
        """module.Class.function (or module.function), as the ledger names it."""
        qual = self.name.removeprefix("zabref.core.").rsplit("__mutmut_", 1)[0]
        return qual.replace("xǁ", "").replace("ǁ", ".").replace(".x_", ".")

    @property
    def short(self) -> str:
        return f"{self.function}#{self.name.rsplit('__mutmut_', 1)[1]}"


def load_mutants() -> list[Mutant]:
    from mutmut.mutation.data import SourceFileMutationData  # noqa: PLC0415 (mutmut: installed by mutation.sh)
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # noqa: PLC0415
    from mutmut.utils.file_utils import walk_mutatable_files  # noqa: PLC0415

    out = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            m = Mutant(name, code)
            if code != KILLED:
                lines = get_diff_for_mutant(name, path=path).splitlines()
                m.before = " ".join(x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---"))
                m.after = " ".join(x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++"))
            out.append(m)
    return out


def killed_by_units(m: Mutant | None) -> bool:
    """Whether the unit tests fail with mutant ``m`` active (None: with none, which must pass)."""
    env = dict(os.environ, MUTANT_UNDER_TEST=m.name if m else "", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-p", "no:randomly", *UNIT_TESTS], cwd=REPO / "mutants", env=env, capture_output=True,
                       text=True, timeout=600)
    return p.returncode != 0


def load_rules() -> list[dict]:
    rules = tomllib.loads(LEDGER.read_text())["rule"]
    for k, r in enumerate(rules):
        missing = {"class", "functions", "before", "after", "reason"} - set(r)
        if missing:
            raise SystemExit(f"{LEDGER}: rule {k + 1} lacks {', '.join(sorted(missing))}")
    return rules


def matches(rule: dict, m: Mutant) -> bool:
    return (any(fnmatch.fnmatchcase(m.function, f) for f in rule["functions"])
            and rule["before"] in m.before and rule["after"] in m.after)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--units", action="store_true", help="run the core's unit tests against each survivor first")
    p.add_argument("--markdown", type=Path, default=None, help="write the per-mutant page (docs/mutation.md)")
    a = p.parse_args()
    os.chdir(REPO)
    mutants = load_mutants()
    if not mutants or any(m.status is None for m in mutants):
        raise SystemExit("mutation_ledger: mutants not run yet (bash scripts/mutation.sh)")
    rules = load_rules()
    if a.units:  # the unit tests as they are now (mutmut copied tests/ when it last ran)
        for name in UNIT_TESTS:
            shutil.copy2(REPO / name, REPO / "mutants" / name)
    if a.units and killed_by_units(None):
        raise SystemExit(f"mutation_ledger: the unit tests fail on the unmutated core in mutants/: {UNIT_TESTS}")
    used: Counter[int] = Counter()
    alive = [m for m in mutants if m.status != KILLED]
    for m in alive:
        for k, rule in enumerate(rules):
            if matches(rule, m):
                m.how, m.rule = rule["class"], k
                used[k] += 1
                break
        else:
            if a.units and killed_by_units(m):
                m.how = "units"
    rows = []
    for m in sorted(alive, key=lambda m: m.name):
        why = "killed by the unit tests" if m.how == "units" else rules[m.rule]["reason"] if m.rule is not None \
            else "NOT ACCOUNTED FOR"
        print(f"{m.how or 'GAP':12} {m.short:60} {m.before} -> {m.after}")
        cells = [f"`{m.short}`", f"`{m.before}`", f"`{m.after}`", m.how or "gap", " ".join(why.split())]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    total = len(mutants)
    conformance = sum(1 for m in mutants if m.status == KILLED)
    units = sum(1 for m in alive if m.how == "units")
    equivalent = sum(1 for m in alive if m.rule is not None)
    gaps = [m for m in alive if not m.how]
    stale = [k for k in range(len(rules)) if not used[k]]
    classes = Counter(m.how for m in alive if m.how)
    print(f"\nmutants {total}: killed by conformance {conformance}, by the unit tests {units}, "
          f"equivalent {equivalent} ({', '.join(f'{c} {n}' for c, n in sorted(classes.items()) if c != 'units')}), "
          f"not accounted for {len(gaps)}")
    live = total - equivalent
    print(f"score: conformance {conformance}/{live} = {100 * conformance / live:.1f} %; "
          f"with the unit tests {conformance + units}/{live} = {100 * (conformance + units) / live:.1f} %")
    for k in stale:
        print(f"stale rule {k + 1} of {LEDGER.name} ({rules[k]['class']}: {rules[k]['before']!r}): matches no survivor")
    if a.markdown:
        counts = (f"{total} mutants: {conformance} killed by the conformance killer, {units} by the unit tests, "
                  f"{equivalent} equivalent, {len(gaps)} not accounted for. Score: conformance {conformance}/{live} "
                  f"= {100 * conformance / live:.1f} % of the non-equivalent mutants; with the unit tests "
                  f"{conformance + units}/{live} = {100 * (conformance + units) / live:.1f} %.")
        a.markdown.write_text(
            "# The core's mutants that the conformance killer leaves alive\n\n"
            "Written by `.venv/bin/python scripts/mutation_ledger.py --units --markdown docs/mutation.md` after\n"
            "`bash scripts/mutation.sh` (docs/traces.md, \"Mutation score of the core\", says how it was run). One\n"
            "row per mutant not killed by tests/mutation/test_kill_core.py: killed by the core's unit tests\n"
            "(`units`: what no spec state sends), or equivalent for the reason its rule in\n"
            "tests/mutation/ledger.toml gives.\n\n" + counts + "\n\n"
            "| mutant | line | mutated | accounted as | why |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 1 if gaps or stale else 0


if __name__ == "__main__":
    sys.exit(main())
