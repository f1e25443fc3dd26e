"""`zabref chain`: the whole chain on one model -- check, traces, conform, report -- with traces cached by spec hash.

Theory of operation: the traces come from `conformance.graph.cache` (model-checked and generated only when the spec
changed). Each later hop runs as its own `zabref` subcommand, so its progress and its one-line summary show as they
would by hand; a hop that fails stops the chain with its exit code. `zabref chain --config ci` builds the auditor's
site (`zabref docs`, beside the report: out/site), replays the generated traces and the committed ones in traces/
(each of its folders with a manifest.json), writes the report (which links to the site), runs a short fault run of real
servers in normal mode (writers paced) whose action logs `zabref validate` checks against spec/Zab.tla
(`--fault-seconds`; its summary in ``<report>-faults.json`` beside the report folder, which the replay replaces
whole), and prints where the report and the site are. The site, the replay and the fault run are independent once the
traces exist, and run side by side (`conformance.graph.cache.hops`), each output line behind its subcommand's name.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from conformance.graph.cache import REPO, committed_trace_dirs, ensure_traces, hops
from conformance.tla.labels import config_module_base

__all__ = ["chain"]


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
    side_by_side: list[list[str]] = []
    zab = config_module_base(REPO / "spec", config) == "Zab"
    if zab:  # the site is Zab.tla beside zabref/ (docs/auditing.md)
        side_by_side.append(["docs", "--out", str(site), "--config", config, "--traces", str(generated)])
        link = ["--site", str(site / "index.html")]
    side_by_side.append(["conform", *paths, "--report", str(report_dir), *link,
                         *(["--jobs", str(jobs)] if jobs else [])])
    if fault_seconds and zab:
        # the other direction: the program users run, under faults, checked against the spec from its own logs
        # with paced writers: unpaced, 15 s of faults logged 142,106 actions, and TLC ran out of memory validating
        # them after 648 s (2026-11-25); the test command's validated fault run paces them the same way
        report_dir.parent.mkdir(parents=True, exist_ok=True)
        side_by_side.append(["faults", "--duration", str(fault_seconds), "--seed", "1", "--validate", "--write-pause",
                             "0.05", "--json", str(report_dir.with_name(report_dir.name + "-faults.json"))])
    # the site, the replay and the fault run read the same cached traces and write apart: side by side, they keep
    # both cores busy where one after another each left one idle (docs/performance.md, "The main job")
    hops(*side_by_side)
    click.echo(f"chain: config={config} traces={generated} report={report_dir.resolve() / 'index.html'} "
               + (f"site={site.resolve() / 'index.html'} " if link else "")
               + f"wall={time.monotonic() - start:.1f}s result=ok")
