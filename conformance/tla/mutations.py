"""Spec mutations: each invariant and property shown to fail on a plausibly wrong protocol, and the matrix of which
checks catch which mutation.

Theory of operation: a mutation (spec/mutations/NAME.toml) is a few exact text replacements in the spec, a model
config, and the check (an invariant or a property of the model's cfg) that must catch it. `run_mutation`
copies spec/ to a scratch folder, applies the replacements (each `find` must occur exactly once: a mutation that no
longer applies is an error, never silently skipped), rewrites the model's cfg to check only that one, and runs TLC.
The mutation is *caught* when TLC reports that very check violated.

The matrix (`zabref mutations --matrix`) asks, for each mutation, which of ALL the model's checks it violates. TLC
stops at the first violation it meets, so `matrix_row` peels: it runs TLC with every check not yet known to be
violated; when TLC reports one, that check is recorded (with the length of its counterexample, shortest since the
search is breadth-first) and dropped, and TLC runs again with the rest; when a run ends without a violation, the
remaining checks hold on the mutated model. A row costs one run per catching check plus one full run.

TLC names the invariant or action property it finds violated, but not a temporal (liveness) property: it prints
"Temporal properties were violated." So a run that checks exactly one property credits an unnamed violation to it,
and the peel, meeting one in a run of several, runs each of that run's properties alone to tell which.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from conformance.errors import SpecFormatError
from conformance.patches import Replacement, apply_replacements, read_replacements
from conformance.tla.modelconfig import prepare
from conformance.tla.tools import Outcome, TLCResult, Toolchain, run_tlc
from zabref.storage.atomic import write_file

__all__ = ["Mutation", "MatrixRow", "load_mutations", "apply_mutation", "model_checks", "with_checks", "run_mutation",
           "caught", "matrix_row"]


@dataclass(frozen=True)
class Mutation:
    name: str
    invariant: str
    config: str
    description: str
    replacements: tuple[Replacement, ...]
    path: Path


def load_mutations(directory: Path) -> list[Mutation]:
    """Every spec/mutations/*.toml, sorted by name; a malformed file is an error naming it."""
    mutations = []
    for path in sorted(Path(directory).glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            reps = read_replacements(data["replace"], default_file="Zab.tla")
            mutations.append(Mutation(path.stem, data["invariant"], data["config"], data["description"], reps, path))
        except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SpecFormatError(f"{path}: not a mutation ({type(exc).__name__}: {exc})") from None
    return mutations


def apply_mutation(mutation: Mutation, spec_dir: Path) -> None:
    """Apply the replacements in place, in spec_dir (a scratch copy)."""
    apply_replacements(spec_dir, mutation.replacements, mutation.path, SpecFormatError, "the spec")


_SECTION = re.compile(r"^\s*(INVARIANTS?|PROPERTY|PROPERTIES)\b(.*)$")


def _sections(cfg_text: str) -> tuple[list[str], list[str], list[str]]:
    """(the lines outside INVARIANT(S)/PROPERTY(IES) sections, the invariants, the properties), in cfg order. Blank
    lines and indented `\\*` comments inside a section belong to it; any other line ends it."""
    kept: list[str] = []
    found: dict[str, list[str]] = {"inv": [], "prop": []}
    section: str | None = None
    for line in cfg_text.splitlines():
        m = _SECTION.match(line)
        if m:
            section = "inv" if m.group(1).startswith("INVARIANT") else "prop"
            found[section] += m.group(2).split()
            continue
        if section and re.match(r"^\s+[A-Za-z]\w*\s*$", line):
            found[section].append(line.strip())
            continue
        if section and (not line.strip() or re.match(r"^\s+\\\*", line)):  # a blank or an indented comment
            continue
        section = None
        kept.append(line)
    return kept, found["inv"], found["prop"]


def model_checks(cfg_text: str) -> tuple[list[str], list[str]]:
    """The invariants and the (action) properties a model's cfg checks, in its order."""
    _, invariants, properties = _sections(cfg_text)
    return invariants, properties


def with_checks(cfg_text: str, invariants: list[str], properties: list[str]) -> str:
    """The cfg with its INVARIANT(S) and PROPERTY(IES) sections replaced by these checks (either may be empty)."""
    kept, _, _ = _sections(cfg_text)
    out = list(kept)
    if invariants:
        out += ["INVARIANTS"] + [f"    {name}" for name in invariants]
    if properties:
        out += ["PROPERTIES"] + [f"    {name}" for name in properties]
    return "\n".join(out) + "\n"


def _run_checks(mutation: Mutation, spec_dir: Path, invariants: list[str], properties: list[str], *,
                workers: int, tools: Toolchain | None, keep: Path | None = None) -> TLCResult:
    """TLC on the mutated spec, checking exactly these invariants and properties."""
    with tempfile.TemporaryDirectory(prefix=f"zabref-mutation-{mutation.name}-") as scratch:
        work = Path(scratch) / "spec"
        shutil.copytree(spec_dir, work, ignore=shutil.ignore_patterns("mutations", "states"))
        apply_mutation(mutation, work)
        cfg = work / f"MC_{mutation.config}.cfg"  # its callers found it in spec_dir (`_model_checks_of`)
        cfg.write_text(with_checks(cfg.read_text(encoding="utf-8"), invariants, properties), encoding="utf-8")
        model = prepare(work, mutation.config, Path(scratch) / "run", labels=False)
        result = run_tlc(model.module, model.cfg, workers=workers, extra_args=model.tlc_options, tools=tools)
        if keep is not None:
            shutil.copytree(work, Path(keep) / mutation.name, dirs_exist_ok=True)
    if result.outcome is Outcome.PROPERTY_VIOLATED and result.violated is None and len(properties) == 1:
        # a temporal property: TLC does not name it (module docstring)
        result = dataclasses.replace(result, violated=properties[0])
    return result


def _model_checks_of(mutation: Mutation, spec_dir: Path) -> tuple[list[str], list[str]]:
    cfg = Path(spec_dir) / f"MC_{mutation.config}.cfg"
    if not cfg.is_file():
        raise SpecFormatError(f"{mutation.path}: no model MC_{mutation.config} in {spec_dir}")
    return model_checks(cfg.read_text(encoding="utf-8"))


def run_mutation(mutation: Mutation, spec_dir: Path, *, workers: int = 2, tools: Toolchain | None = None,
                 keep: Path | None = None) -> TLCResult:
    """Run TLC on the mutated spec with only the check the mutation names (an invariant or a property of its model's
    cfg); `keep` (a folder) keeps the mutated copy for inspection."""
    invariants, properties = _model_checks_of(mutation, spec_dir)
    if mutation.invariant in properties:
        return _run_checks(mutation, spec_dir, [], [mutation.invariant], workers=workers, tools=tools, keep=keep)
    return _run_checks(mutation, spec_dir, [mutation.invariant], [], workers=workers, tools=tools, keep=keep)


def caught(mutation: Mutation, result: TLCResult, check: str | None = None) -> bool:
    """Did TLC report `check` (default: the one the mutation names) violated?"""
    return (result.outcome in (Outcome.INVARIANT_VIOLATED, Outcome.PROPERTY_VIOLATED)
            and result.violated == (check or mutation.invariant))


@dataclass(frozen=True)
class MatrixRow:
    """One mutation against every check of its model: `caught` maps each violated check to the length (states) of
    TLC's counterexample; `holds` lists the checks no state of the mutated model violates; `runs` TLC runs."""

    mutation: Mutation
    caught: dict[str, int]
    holds: list[str]
    runs: int
    seconds: float


def matrix_row(mutation: Mutation, spec_dir: Path, *, workers: int = 2, tools: Toolchain | None = None,
               on_run: Callable[[str], None] | None = None) -> MatrixRow:
    """Peel the model's checks (module docstring) until TLC finds no more violated; an error (not a violation) of
    TLC is raised as a SpecFormatError naming the mutation."""
    invariants, properties = _model_checks_of(mutation, spec_dir)
    found: dict[str, int] = {}
    runs, start = 0, time.monotonic()
    while True:
        inv = [i for i in invariants if i not in found]
        prop = [p for p in properties if p not in found]
        if not inv and not prop:
            break
        result = _run_checks(mutation, spec_dir, inv, prop, workers=workers, tools=tools)
        runs += 1
        if result.outcome is Outcome.OK:
            break
        if result.outcome is Outcome.PROPERTY_VIOLATED and result.violated is None:
            # an unnamed temporal violation among several properties: check each alone (module docstring)
            for p in prop:
                alone = _run_checks(mutation, spec_dir, [], [p], workers=workers, tools=tools)
                runs += 1
                if alone.outcome is Outcome.PROPERTY_VIOLATED and alone.violated == p:
                    result = alone
                    break
        name = result.violated
        if result.outcome not in (Outcome.INVARIANT_VIOLATED, Outcome.PROPERTY_VIOLATED) or name not in inv + prop:
            raise SpecFormatError(f"{mutation.path}: TLC ended {result.outcome.value} "
                                  f"({name or result.message[:200]}) on the mutated model")
        found[name] = len(result.trace)
        if on_run is not None:
            on_run(name)
    holds = [c for c in invariants + properties if c not in found]
    return MatrixRow(mutation, found, holds, runs, round(time.monotonic() - start, 1))


def matrix_table(rows: list[MatrixRow]) -> str:
    """The matrix as Markdown: a row per mutation, a column per check (the counterexample's length where caught)."""
    checks: list[str] = []
    for r in rows:
        checks += [c for c in [*r.caught, *r.holds] if c not in checks]
    head = "| mutation (model) | " + " | ".join(checks) + " |"
    lines = [head, "|---|" + "---|" * len(checks)]
    for r in rows:
        cells = [(f"**{r.caught[c]}**" if c == r.mutation.invariant else str(r.caught[c])) if c in r.caught
                 else ("." if c in r.holds else "") for c in checks]
        lines.append(f"| {r.mutation.name} ({r.mutation.config}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _command():



    @click.command("mutations")
    @click.option("--spec-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("spec"),
                  show_default=True)
    @click.option("--only", multiple=True, metavar="NAME", help="Run only these mutations (repeatable).")
    @click.option("--matrix", is_flag=True,
                  help="Check every mutation against every invariant and property of its model and print the "
                       "matrix (one TLC run per catching check plus one full run, per mutation).")
    @click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write the results as JSON.")
    @click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
    def mutations(spec_dir: Path, only: tuple[str, ...], matrix: bool, json_out: Path | None, workers: int) -> None:
        """Run every spec mutation and check TLC reports the check it names (with --matrix: every check that catches
        it); exit 1 if a mutation is missed (by its own check, or with --matrix by every check)."""
        chosen = [m for m in load_mutations(spec_dir / "mutations") if not only or m.name in only]
        unknown = sorted(set(only) - {m.name for m in chosen})
        if unknown:
            raise click.UsageError(f"no mutation named {', '.join(unknown)} in {spec_dir / 'mutations'}")
        out: list[dict] = []
        missed = 0
        if matrix:
            table: list[MatrixRow] = []
            for m in chosen:
                row = matrix_row(m, spec_dir, workers=workers,
                                 on_run=lambda name, m=m: click.echo(f"mutation: {m.name}: violates {name}"))
                table.append(row)
                bad = m.invariant not in row.caught
                missed += bad
                click.echo(f"mutation: {m.name:<24} {'MISSED by its own check' if bad else 'caught':<7} "
                           f"by {len(row.caught)} of {len(row.caught) + len(row.holds)} checks, "
                           f"{row.runs} TLC runs, {row.seconds:.1f}s")
                out.append({"name": m.name, "check": m.invariant, "config": m.config, "caught": row.caught,
                            "holds": row.holds, "runs": row.runs, "seconds": row.seconds})
            click.echo(matrix_table(table))
        else:
            for m in chosen:
                start = time.monotonic()
                result = run_mutation(m, spec_dir, workers=workers)
                ok = caught(m, result)
                missed += not ok
                out.append({"name": m.name, "check": m.invariant, "config": m.config, "description": m.description,
                            "caught": ok, "reported": result.violated or result.outcome.value,
                            "counterexample_length": len(result.trace),
                            "seconds": round(time.monotonic() - start, 1)})
                click.echo(f"mutation: {m.name:<24} {'caught' if ok else 'MISSED':<7} by {result.violated or '-':<22} "
                           f"counterexample {len(result.trace):>3} states  {out[-1]['seconds']:>6.1f}s")
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            write_file(json_out, json.dumps(out, indent=1).encode("utf-8"))
        click.echo(f"mutations: {len(chosen)} run, {len(chosen) - missed} caught, {missed} missed")
        raise SystemExit(1 if missed else 0)

    return mutations


mutations_command = _command()
