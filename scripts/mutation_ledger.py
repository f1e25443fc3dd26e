"""Account for every mutant of the core that scripts/mutation.sh left alive (issue 13; docs/traces.md).

Usage: .venv/bin/python scripts/mutation_ledger.py [--units] [--markdown FILE]
       .venv/bin/python scripts/mutation_ledger.py --ledger tests/mutation/security-ledger.toml [--markdown FILE]

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

``--ledger`` names another ledger: tests/mutation/security-ledger.toml for the code that guards the ensemble
(scripts/mutation-security.sh; docs/operations.md, "Mutation score of the guarding code"). A ledger with a
``[scope]`` table says which files mutmut mutated (``files``), which of their functions are measured (``functions``:
the other mutants of those files are outside the measurement, neither run nor counted), the pytest selection
(``tests``), where the run lives (``run_dir``: its mutants/ and its own pyproject.toml) and the name prefix of its
functions (``prefix``); there every mutant was run against that selection, so it has no second killer (no
``--units``): the score is killed / (mutants - equivalent).
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
#: mutmut's exit codes of a mutant whose tests hung until mutmut's time limit: caught, as mutmut counts them (a scoped
#: run only; 3 is pytest's internal error, which mutmut counts as killed)
TIMEOUT = {36, -24, 24, 152, 255}
#: The core's ledger needs no [scope]: mutmut's configuration is pyproject's, its functions are below zabref.core.
CORE_SCOPE = {"prefix": "zabref.core.", "run_dir": "."}


@dataclass
class Mutant:
    name: str  # mutmut's: zabref.core.leader.xǁLeaderActionsǁleader_process_ack__mutmut_22
    status: int | None
    before: str = ""
    after: str = ""
    how: str = ""  # "units", or the class of the ledger rule that accounts for it
    rule: int | None = None
    prefix: str = "zabref.core."  # the package the ledger's function names start below

    @property
    def function(self) -> str:
        """module.Class.function (or module.function), as the ledger names it."""
        qual = self.name.removeprefix(self.prefix).rsplit("__mutmut_", 1)[0]
        return qual.replace("xǁ", "").replace("ǁ", ".").replace(".x_", ".")

    @property
    def short(self) -> str:
        return f"{self.function}#{self.name.rsplit('__mutmut_', 1)[1]}"


def load_scope(ledger: Path = LEDGER) -> dict:
    """The ledger's [scope] (module docstring), or the core's."""
    return {**CORE_SCOPE, **tomllib.loads(ledger.read_text()).get("scope", {})}


def in_scope(scope: dict, m: Mutant) -> bool:
    return "functions" not in scope or any(fnmatch.fnmatchcase(m.function, f) for f in scope["functions"])


def mutmut_globs(scope: dict) -> list[str]:
    """mutmut's names for the mutants of the scope's functions, as fnmatch patterns for ``mutmut run``:
    net.peers.dial -> zabref.net.peers.x_dial__mutmut_*, runtime.links.PeerLinks._admit ->
    zabref.runtime.links.xǁPeerLinksǁ_admit__mutmut_*, net.security.* -> zabref.net.security.*."""
    prefix = scope["prefix"]
    modules = [f.removesuffix(".py").replace("/", ".").removeprefix(prefix) for f in scope["files"]]
    out = []
    for pattern in scope["functions"]:
        module = max((m for m in modules if pattern.startswith(m + ".")), key=len, default=None)
        if module is None:
            raise SystemExit(f"mutation_ledger: {pattern}: in none of the scope's files")
        *classes, function = pattern.removeprefix(module + ".").split(".")
        if function == "*" and not classes:
            out.append(f"{prefix}{module}.*")
        elif classes:
            out.append(f"{prefix}{module}.x" + "".join(f"ǁ{c}" for c in classes) + f"ǁ{function}__mutmut_*")
        else:
            out.append(f"{prefix}{module}.x_{function}__mutmut_*")
    return out


def module_files(scope: dict, patterns: list[str]) -> list[Path]:
    """The source files a rule's function patterns name (core: follower.X.y -> zabref/core/follower.py)."""
    root = REPO / scope["prefix"].rstrip(".").replace(".", "/")
    out = []
    for pattern in patterns:
        parts = pattern.split(".")
        for k in range(len(parts) - 1, 0, -1):
            path = root.joinpath(*parts[:k]).with_suffix(".py")
            if path.is_file():
                out.append(path)
                break
        else:
            raise SystemExit(f"mutation_ledger: {pattern}: no module of {root} holds it")
    return out


def load_mutants(scope: dict = CORE_SCOPE) -> list[Mutant]:
    """Every mutant of the run in the current directory whose function is in ``scope``."""
    from mutmut.mutation.data import SourceFileMutationData  # noqa: PLC0415 (mutmut: installed by mutation.sh)
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # noqa: PLC0415
    from mutmut.utils.file_utils import walk_mutatable_files  # noqa: PLC0415

    out = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            m = Mutant(name, code, prefix=scope["prefix"])
            if not in_scope(scope, m):
                continue
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


def load_rules(ledger: Path = LEDGER) -> list[dict]:
    rules = tomllib.loads(ledger.read_text()).get("rule", [])
    for k, r in enumerate(rules):
        missing = {"class", "functions", "before", "after", "reason"} - set(r)
        if missing:
            raise SystemExit(f"{ledger}: rule {k + 1} lacks {', '.join(sorted(missing))}")
    return rules


def matches(rule: dict, m: Mutant) -> bool:
    return (any(fnmatch.fnmatchcase(m.function, f) for f in rule["functions"])
            and rule["before"] in m.before and rule["after"] in m.after)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--units", action="store_true", help="run the core's unit tests against each survivor first")
    p.add_argument("--markdown", type=Path, default=None, help="write the per-mutant page (docs/mutation.md)")
    p.add_argument("--ledger", type=Path, default=LEDGER, help="the ledger (default: the core's, %(default)s)")
    p.add_argument("--globs", action="store_true", help="print the mutmut names of the ledger's scope and exit")
    p.add_argument("--alive", action="store_true",
                   help="print the names of the scope's mutants not killed (or not run yet) and exit")
    a = p.parse_args()
    ledger = a.ledger if a.ledger.is_absolute() else Path.cwd() / a.ledger
    scope = load_scope(ledger)
    if a.globs:
        if "functions" not in scope:
            raise SystemExit(f"mutation_ledger: {ledger.name} has no [scope]: pyproject's [tool.mutmut] says what "
                             "mutmut mutates")
        print("\n".join(mutmut_globs(scope)))
        return 0
    core = "functions" not in scope
    if a.units and not core:
        raise SystemExit("mutation_ledger: --units is the core's (a scoped run's mutants ran every test it selects)")
    a.markdown = a.markdown.resolve() if a.markdown else None
    os.chdir(REPO / scope["run_dir"])
    mutants = load_mutants(scope)
    caught = {KILLED} if core else {KILLED, 3, *TIMEOUT}
    if a.alive:
        print("\n".join(m.name for m in mutants if m.status not in caught))
        return 0
    if not mutants or any(m.status is None for m in mutants):
        raise SystemExit("mutation_ledger: mutants not run yet (bash scripts/mutation.sh"
                         f"{'' if core else '; scripts/mutation-security.sh'})")
    rules = load_rules(ledger)
    if a.units:  # the unit tests as they are now (mutmut copied tests/ when it last ran)
        for name in UNIT_TESTS:
            shutil.copy2(REPO / name, REPO / "mutants" / name)
    if a.units and killed_by_units(None):
        raise SystemExit(f"mutation_ledger: the unit tests fail on the unmutated core in mutants/: {UNIT_TESTS}")
    used: Counter[int] = Counter()
    alive = [m for m in mutants if m.status not in caught]
    for m in alive:
        for k, rule in enumerate(rules):
            if matches(rule, m):
                m.how, m.rule = rule["class"], k
                used[k] += 1
                break
        else:
            if a.units and killed_by_units(m):
                m.how = "units"
    if not core:
        return report_scoped(mutants, alive, rules, used, ledger, a.markdown)
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
        print(f"stale rule {k + 1} of {ledger.name} ({rules[k]['class']}: {rules[k]['before']!r}): matches no survivor")
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


STATUS = {SURVIVED: "survived", NO_TESTS: "no tests", 36: "timeout", -24: "timeout", 37: "type check"}


def report_scoped(mutants: list[Mutant], alive: list[Mutant], rules: list[dict], used: Counter[int], ledger: Path,
                  markdown: Path | None) -> int:
    """The report of a ledger with a [scope]: one killer (the scope's tests), so killed / (mutants - equivalent)."""
    rows = []
    for m in sorted(alive, key=lambda m: m.name):
        why = rules[m.rule]["reason"] if m.rule is not None else "NOT ACCOUNTED FOR"
        print(f"{m.how or 'GAP':12} {STATUS.get(m.status, m.status)!s:9} {m.short:60} {m.before} -> {m.after}")
        cells = [f"`{m.short}`", f"`{m.before}`", f"`{m.after}`", m.how or "gap", " ".join(why.split())]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    total = len(mutants)
    killed = total - len(alive)
    timeouts = sum(1 for m in mutants if m.status in TIMEOUT)
    equivalent = sum(1 for m in alive if m.rule is not None)
    gaps = [m for m in alive if not m.how]
    stale = [k for k in range(len(rules)) if not used[k]]
    classes = Counter(m.how for m in alive if m.how)
    per_file = Counter(m.name.rsplit(".", 1)[0].rsplit(".x", 1)[0] for m in mutants)
    print(f"\nmutants {total} ({', '.join(f'{f} {n}' for f, n in sorted(per_file.items()))}): killed {killed} "
          f"({timeouts} of them by a timeout: the tests hang), "
          f"equivalent {equivalent} ({', '.join(f'{c} {n}' for c, n in sorted(classes.items()))}), "
          f"not accounted for {len(gaps)}")
    live = total - equivalent
    score = f"{killed}/{live} = {100 * killed / live:.1f} %"
    print(f"score: {score}")
    for k in stale:
        print(f"stale rule {k + 1} of {ledger.name} ({rules[k]['class']}: {rules[k]['before']!r}): matches no survivor")
    if markdown:
        markdown.write_text(
            "# The guarding code's mutants that the security tests leave alive\n\n"
            f"Written by `.venv/bin/python scripts/mutation_ledger.py --ledger {ledger.relative_to(REPO)} --markdown\n"
            f"{markdown.relative_to(REPO)}` after `bash scripts/mutation-security.sh` (docs/operations.md, \"Mutation\n"
            "score of the guarding code\", says how it was run). One row per mutant the security tests did not kill,\n"
            f"equivalent for the reason its rule in {ledger.relative_to(REPO)} gives.\n\n"
            f"{total} mutants: {killed} killed ({timeouts} by a timeout), {equivalent} equivalent, {len(gaps)} not "
            f"accounted for. Score: {score} "
            "of the non-equivalent mutants.\n\n"
            "| mutant | line | mutated | accounted as | why |\n|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return 1 if gaps or stale else 0


if __name__ == "__main__":
    sys.exit(main())
