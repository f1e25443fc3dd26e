"""`zabref chain`: the whole chain on one model -- check, traces, conform, report -- with traces cached by spec hash.

Theory of operation: the traces of a model depend only on the spec folder's modules and the model's cfg. `spec_hash`
hashes them; `ensure_traces` keeps the generated traces under `.cache/traces/<model>-<hash>/` and regenerates them
(`zabref check --dump-dot`, then `zabref traces`) only when that folder is missing, so a change to the spec makes
new traces and an unchanged spec reuses them. Each hop runs as its own `zabref` subcommand, so its progress and its
one-line summary show as they would by hand; a hop that fails stops the chain with its exit code. The cache folder
is written under a temporary name and renamed when complete: an interrupted run leaves nothing that looks cached.

`zabref chain --config ci` then builds the auditor's site (`zabref docs`, beside the report: out/site), replays the
generated traces and the committed ones in traces/ (each of its folders with a manifest.json), writes the report
(which links to the site), runs a short fault run of real servers in normal mode (writers paced) whose action logs
`zabref validate` checks against spec/Zab.tla (`--fault-seconds`; its summary in ``<report>/faults.json``), and
prints where the report and the site are.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import click

from conformance.labels import config_module_base

__all__ = ["spec_hash", "ensure_traces", "committed_trace_dirs", "chain"]

REPO = Path(__file__).resolve().parent.parent


def spec_hash(spec_dir: Path, config: str) -> str:
    """sha256 over the spec folder's .tla files and the model's cfg (names and contents), first 16 hex digits."""
    digest = hashlib.sha256()
    files = sorted(Path(spec_dir).glob("*.tla")) + [Path(spec_dir) / f"MC_{config}.cfg"]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _zabref() -> list[str]:
    exe = Path(sys.executable).with_name("zabref")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from zabref.cli import main; main()"]


def _hop(args: list[str]) -> None:
    click.echo(f"chain: zabref {' '.join(args)}")
    code = subprocess.call([*_zabref(), *args])
    if code != 0:
        raise click.ClickException(f"'zabref {' '.join(args)}' failed with exit code {code}")


def ensure_traces(config: str, spec_dir: Path = REPO / "spec", cache: Path = REPO / ".cache" / "traces",
                  regenerate: bool = False) -> Path:
    """The folder of `config`'s action-coverage traces for the current spec, generating them when not cached."""
    target = Path(cache) / f"{config}-{spec_hash(spec_dir, config)}"
    if regenerate and target.exists():
        shutil.rmtree(target)
    if (target / "manifest.json").is_file():
        click.echo(f"chain: {config}: this spec passed the model check and its traces are cached in {target}")
        return target
    work = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        dot = work / f"{config}.dot"
        _hop(["check", "--config", config, "--spec-dir", str(spec_dir), "--dump-dot", str(dot),
              "--out", str(work / "check")])
        _hop(["traces", "--graph", str(dot), "--out", str(work / "traces"), "--spec-dir", str(spec_dir),
              "--config", config, "--parquet", str(work / "graph.parquet")])
        dot.unlink()  # the Parquet keeps the graph (for the minimizer) at a tenth of the size
        shutil.move(str(work / "traces"), str(work / "final"))
        for name in ("graph.parquet",):
            if (work / name).exists():
                shutil.move(str(work / name), str(work / "final" / name))
        os.replace(work / "final", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def committed_trace_dirs(root: Path = REPO / "traces") -> list[Path]:
    """The reviewed regression traces: every folder under traces/ with a manifest.json."""
    return sorted(p.parent for p in Path(root).glob("*/manifest.json"))


@click.command("chain")
@click.option("--config", default="ci", show_default=True, help="The model: spec/MC_<NAME>.tla/.cfg.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None, help="Traces replayed at once.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/report"),
              show_default=True)
@click.option("--regenerate", is_flag=True, help="Generate the traces again even when cached.")
@click.option("--committed/--no-committed", default=True, show_default=True,
              help="Also replay the committed regression traces in traces/.")
@click.option("--fault-seconds", type=click.FloatRange(min=0), default=15.0, show_default=True,
              help="A fault run of this many seconds on `zabref cluster`'s servers (normal mode: their own election, "
                   "timeouts and clients), its action logs validated against spec/Zab.tla; 0 skips it.")
def chain(config: str, jobs: int | None, report_dir: Path, regenerate: bool, committed: bool,
          fault_seconds: float) -> None:
    """Run the whole chain on model NAME: model-check, generate traces, replay them on real servers, report."""
    start = time.monotonic()
    generated = ensure_traces(config, regenerate=regenerate)  # model-checks the spec when it changed
    paths = [str(generated)] + ([str(p) for p in committed_trace_dirs()] if committed else [])
    site = report_dir.with_name("site")
    link: list[str] = []
    if config_module_base(REPO / "spec", config) == "Zab":  # the site is Zab.tla beside zabref/ (docs/auditing.md)
        _hop(["docs", "--out", str(site), "--config", config, "--traces", str(generated)])
        link = ["--site", str(site / "index.html")]
    _hop(["conform", *paths, "--report", str(report_dir), *link, *(["--jobs", str(jobs)] if jobs else [])])
    if fault_seconds and config_module_base(REPO / "spec", config) == "Zab":
        # the other direction: the program users run, under faults, checked against the spec from its own logs
        # with paced writers: unpaced, 15 s of faults logged 142,106 actions, and TLC ran out of memory validating
        # them after 648 s (2026-11-25); the test command's validated fault run paces them the same way
        _hop(["faults", "--duration", str(fault_seconds), "--seed", "1", "--validate", "--write-pause", "0.05",
              "--json", str(report_dir / "faults.json")])
    click.echo(f"chain: config={config} traces={generated} report={report_dir.resolve() / 'index.html'} "
               + (f"site={site.resolve() / 'index.html'} " if link else "")
               + f"wall={time.monotonic() - start:.1f}s result=ok")
