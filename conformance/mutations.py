"""Spec mutations: each invariant shown to fail on a plausibly wrong protocol.

Theory of operation: a mutation (spec/mutations/NAME.toml) is a few exact text replacements in the spec, a model
config, and the invariant that must catch it. `run_mutation` copies spec/ to a scratch folder, applies the
replacements (each `find` must occur exactly once: a mutation that no longer applies is an error, never silently
skipped), rewrites the model's cfg to check only that invariant, and runs TLC. The mutation is *caught* when TLC
reports that very invariant violated.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import SpecFormatError
from conformance.model import prepare
from conformance.patches import Replacement, apply_replacements, read_replacements
from conformance.tla import Outcome, TLCResult, Toolchain, run_tlc

__all__ = ["Mutation", "load_mutations", "apply_mutation", "only_invariant", "run_mutation"]


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


def only_invariant(cfg_text: str, invariant: str) -> str:
    """The cfg with its INVARIANT(S) section replaced by the one invariant."""
    out, skipping = [], False
    for line in cfg_text.splitlines():
        if re.match(r"^\s*INVARIANTS?\b", line):
            skipping = True
            rest = re.sub(r"^\s*INVARIANTS?\b", "", line).strip()
            if rest:  # names on the keyword's own line
                continue
            continue
        if skipping and (re.match(r"^\s+[A-Za-z]\w*\s*$", line) or not line.strip()):
            continue
        skipping = False
        out.append(line)
    out.append(f"INVARIANT {invariant}")
    return "\n".join(out) + "\n"


def run_mutation(mutation: Mutation, spec_dir: Path, *, workers: int = 2, tools: Toolchain | None = None,
                 keep: Path | None = None) -> TLCResult:
    """Run TLC on the mutated spec; `keep` (a folder) keeps the mutated copy for inspection."""
    with tempfile.TemporaryDirectory(prefix=f"zabref-mutation-{mutation.name}-") as scratch:
        work = Path(scratch) / "spec"
        shutil.copytree(spec_dir, work, ignore=shutil.ignore_patterns("mutations", "states"))
        apply_mutation(mutation, work)
        cfg = work / f"MC_{mutation.config}.cfg"
        if not cfg.is_file():
            raise SpecFormatError(f"{mutation.path}: no model MC_{mutation.config} in {spec_dir}")
        cfg.write_text(only_invariant(cfg.read_text(encoding="utf-8"), mutation.invariant), encoding="utf-8")
        model = prepare(work, mutation.config, Path(scratch) / "run", labels=False)
        result = run_tlc(model.module, model.cfg, workers=workers, extra_args=model.tlc_options, tools=tools)
        if keep is not None:
            shutil.copytree(work, Path(keep) / mutation.name, dirs_exist_ok=True)
    return result


def caught(mutation: Mutation, result: TLCResult) -> bool:
    return result.outcome is Outcome.INVARIANT_VIOLATED and result.violated == mutation.invariant


def _command():
    import json
    import time

    import click

    @click.command("mutations")
    @click.option("--spec-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("spec"),
                  show_default=True)
    @click.option("--only", multiple=True, metavar="NAME", help="Run only these mutations (repeatable).")
    @click.option("--json-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Write the results as JSON (name, invariant, caught, counterexample length, seconds).")
    @click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
    def mutations(spec_dir: Path, only: tuple[str, ...], json_out: Path | None, workers: int) -> None:
        """Run every spec mutation and check TLC reports the invariant it names; exit 1 if one is missed."""
        chosen = [m for m in load_mutations(spec_dir / "mutations") if not only or m.name in only]
        rows, missed = [], 0
        for m in chosen:
            start = time.monotonic()
            result = run_mutation(m, spec_dir, workers=workers)
            ok = caught(m, result)
            missed += not ok
            rows.append({"name": m.name, "invariant": m.invariant, "config": m.config, "description": m.description,
                         "caught": ok, "reported": result.violated or result.outcome.value,
                         "counterexample_length": len(result.trace), "seconds": round(time.monotonic() - start, 1)})
            click.echo(f"mutation: {m.name:<24} {'caught' if ok else 'MISSED':<7} by {result.violated or '-':<22} "
                       f"counterexample {len(result.trace):>3} states  {rows[-1]['seconds']:>6.1f}s")
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            tmp = json_out.with_name(f".{json_out.name}.tmp")
            tmp.write_text(json.dumps(rows, indent=1), encoding="utf-8")
            tmp.replace(json_out)
        click.echo(f"mutations: {len(chosen)} run, {len(chosen) - missed} caught, {missed} missed")
        raise SystemExit(1 if missed else 0)

    return mutations


mutations_command = _command()
