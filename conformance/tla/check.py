"""`zabref check`: model-check one config of the spec with TLC and say, in one line, what was found.

Theory of operation: config NAME means `MC_NAME.tla` + `MC_NAME.cfg` in the spec folder (`spec/` under the current
directory, else the one beside this package). The command resolves java and tla2tools.jar (conformance.tla.tools), runs
SANY so that syntax errors come back as file:line:column, then TLC, echoing TLC's progress as it streams and
naming the jar and TLC version that ran. It ends with one summary line of key=value fields (docs/toolchain.md):

    check: config=ci distinct_states=... states_generated=... depth=... wall=12.3s result=ok

A counterexample is written, whole, to `OUT/MC_NAME.counterexample.txt` and its path is in the summary line. A
state-graph dump (`--dump-dot PATH`) appears at PATH only when TLC found no violation. Dumps are made with one
worker and `-fp 0` unless told otherwise, so the same spec gives the same file byte for byte.

Exit codes: 0 no violation; 1 a violation (invariant, property, deadlock); 2 bad usage (unknown config);
3 the spec, the config or the toolchain is broken (SANY or TLC error, java or the jar missing).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import click

from conformance.errors import ConformanceError
from conformance.tla.labels import decode_label
from conformance.tla.modelconfig import labelable, prepare
from conformance.tla.output import Code, Severity
from conformance.tla.tools import Outcome, TLCMessage, TLCResult, run_sany, run_tlc, toolchain
from zabref.storage.atomic import write_file

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_BROKEN = 0, 1, 2, 3
_PROGRESS_CODES = {
    Code.STARTING, Code.COMPUTING_INIT, Code.INIT_GENERATED, Code.PROGRESS_STATS, Code.CHECKING_TEMPORAL_PROPS,
}


def default_spec_dir() -> Path:
    here = Path.cwd() / "spec"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "spec"


def config_files(spec_dir: Path, name: str) -> tuple[Path, Path]:
    """The module and cfg of config `name`; click.BadParameter lists the configs that do exist."""
    module, cfg = spec_dir / f"MC_{name}.tla", spec_dir / f"MC_{name}.cfg"
    missing = [p.name for p in (module, cfg) if not p.is_file()]
    if missing:
        known = sorted(p.stem.removeprefix("MC_") for p in spec_dir.glob("MC_*.cfg"))
        raise click.BadParameter(
            f"{', '.join(missing)} not found in {spec_dir}; configs there: {', '.join(known) or 'none'}",
            param_hint="--config",
        )
    return module, cfg


def write_counterexample(result: TLCResult, config: str, path: Path) -> None:
    header = (
        f"\\* zabref check --config {config}: {result.result_text()}\n"
        f"\\* {result.tlc_version or 'TLC version unknown'}; jar {result.jar.describe()}\n"
        f"\\* TLC said: {result.message}\n\n"
    )
    write_file(path, header + result.trace_text())


def summary_line(config: str, result: TLCResult | None, wall: float, counterexample: Path | None) -> str:
    """The one line every run ends with (fields documented in docs/toolchain.md)."""

    def num(value: int | None) -> str:
        return "-" if value is None else str(value)

    outcome = "error"
    if result is not None and result.outcome is not Outcome.ERROR:
        outcome = {
            Outcome.OK: "ok",
            Outcome.INVARIANT_VIOLATED: "invariant-violated",
            Outcome.PROPERTY_VIOLATED: "property-violated",
            Outcome.DEADLOCK: "deadlock",
        }[result.outcome] + (f":{result.violated}" if result.violated else "")
    fields = {
        "config": config,
        "distinct_states": num(result and result.distinct_states),
        "states_generated": num(result and result.states_generated),
        "depth": num(result and result.depth),
        "wall": f"{wall:.1f}s",
        "result": outcome,
    }
    if counterexample is not None:
        fields["counterexample"] = str(counterexample)
    return "check: " + " ".join(f"{key}={value}" for key, value in fields.items())


def coverage_by_action(result: TLCResult) -> dict[str, tuple[int, int]]:
    """TLC's coverage rows summed per action name (a labeled model reports one row per parameter tuple)."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in result.coverage:
        name = decode_label(row.action)[0] if "__" in row.action else row.action
        totals[name][0] += row.distinct
        totals[name][1] += row.generated
    return {name: (d, g) for name, (d, g) in totals.items()}


def _echo_message(msg: TLCMessage, jar_line: str) -> None:
    if msg.code == Code.VERSION:
        click.echo(f"check: {msg.text.strip()}, {jar_line}")
    elif msg.code in _PROGRESS_CODES:
        click.echo(f"tlc: {msg.text.strip()}")
    elif msg.severity == Severity.WARNING:
        click.echo(f"tlc: warning: {msg.text.strip()}", err=True)


@click.command()
@click.option("--config", "config", metavar="NAME", default="ci", show_default=True,
              help="Model config: spec/MC_<NAME>.tla/.cfg.")
@click.option("--spec-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder holding the MC_*.tla/.cfg files [default: ./spec].")
@click.option("--dump-dot", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write TLC's state graph (DOT with action labels) to exactly this path.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="TLC worker threads [default: 1 when dumping, for reproducible dumps; else all cores].")
@click.option("--fp", type=click.IntRange(0, 130), default=None,
              help="TLC fingerprint polynomial index [default: 0 when dumping].")
@click.option("--coverage", is_flag=True, help="Report, per action, the states it generated.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/check"),
              show_default=True, help="Where a counterexample is written.")
def check(config: str, spec_dir: Path | None, dump_dot: Path | None, workers: int | None, fp: int | None,
          coverage: bool, out_dir: Path) -> None:
    """Model-check spec config NAME with TLC; exit 0 only when no violation is found."""
    start = time.monotonic()
    module, cfg = config_files(spec_dir or default_spec_dir(), config)
    if dump_dot is not None:
        workers = workers or 1
        fp = 0 if fp is None else fp
    workers = workers or os.cpu_count() or 1
    result: TLCResult | None = None
    try:
        tools = toolchain()
        jar_line = f"jar {tools.jar.describe()}"
        click.echo(f"check: SANY {module}")
        for warning in run_sany(module, tools).warnings:
            click.echo(f"sany: warning: {warning.render()}", err=True)
        with tempfile.TemporaryDirectory(prefix="zabref-model-") as scratch:
            # a dumped graph becomes traces, whose edges must name their actions' parameters: a model whose NEXT is
            # not Next (spec/ZabSync.tla's SyncNext) is labeled then too, when it can be (`labels.model_next`)
            dumped = dump_dot is not None and labelable(module.parent, config)
            model = prepare(module.parent, config, Path(scratch), labels=True if dumped else None)
            click.echo(f"check: TLC {module.name} with {cfg.name}, {workers} worker(s)"
                       + (", edges labeled with action parameters" if model.labeled else "")
                       + (f", options {' '.join(model.tlc_options)}" if model.tlc_options else "")
                       + (f", dumping the state graph to {dump_dot}" if dump_dot else ""))
            result = run_tlc(model.module, model.cfg, workers=workers, dump_dot=dump_dot, fp=fp,
                             coverage=coverage, extra_args=model.tlc_options,
                             on_message=lambda msg: _echo_message(msg, jar_line), tools=tools)
    except ConformanceError as exc:
        click.echo(f"error: {exc}", err=True)
        click.echo(summary_line(config, None, time.monotonic() - start, None))
        raise SystemExit(EXIT_BROKEN) from None

    if coverage:
        for action, (distinct, generated) in coverage_by_action(result).items():
            note = "  <- never taken" if generated == 0 else ""
            click.echo(f"coverage: {action:<40} distinct={distinct:<10} generated={generated}{note}")
    counterexample = None
    if result.outcome is Outcome.ERROR:
        click.echo(f"error: TLC: {result.message}", err=True)
    elif not result.ok:
        if result.trace:
            counterexample = out_dir / f"MC_{config}.counterexample.txt"
            write_counterexample(result, config, counterexample)
        click.echo(f"check: {result.message}", err=True)
    if result.dump_dot is not None:
        click.echo(f"check: state graph written to {result.dump_dot}")
    elif dump_dot is not None:
        click.echo(f"check: no state graph written to {dump_dot} ({result.result_text()})", err=True)
    click.echo(summary_line(config, result, time.monotonic() - start, counterexample))
    if result.outcome is Outcome.ERROR:
        raise SystemExit(EXIT_BROKEN)
    raise SystemExit(EXIT_OK if result.ok else EXIT_VIOLATION)
