"""``zabref fuzz`` (and ``python -m zabref.fuzz``): start a cluster with a ghost, run the fuzzer, print the report."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

__all__ = ["fuzz_command", "DEFAULT_INPUTS"]

DEFAULT_INPUTS = 2000


@click.command("fuzz")
@click.option("--inputs", type=click.IntRange(1), default=lambda: int(os.environ.get("ZABREF_FUZZ_INPUTS",
                                                                                      DEFAULT_INPUTS)),
              show_default=f"$ZABREF_FUZZ_INPUTS or {DEFAULT_INPUTS}", help="How many inputs to throw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Input i is built from random.Random('SEED:i').")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Where the cluster lives (default: a new temporary folder, kept for its logs).")
@click.option("--include-known", is_flag=True, help="Also throw the kinds of input with a known open issue.")
def fuzz_command(inputs: int, seed: int, data_dir: str | None, include_known: bool) -> None:
    """Start a 3-server cluster and throw bad input at every port of every server (docs/fuzzing.md)."""
    from tqdm import tqdm  # noqa: PLC0415

    from zabref.client import ZabClient  # noqa: PLC0415 (not at import: `zabref serve` loads this module too)
    from zabref.cluster import LocalCluster  # noqa: PLC0415
    from zabref.fuzz.harness import RUNNING, Fuzzer, fuzz_cluster  # noqa: PLC0415

    folder = Path(data_dir or tempfile.mkdtemp(prefix="zabref-fuzz-"))
    path = fuzz_cluster(folder)
    cluster = LocalCluster(path)
    try:
        for sid in RUNNING:
            cluster[sid].start()
        for sid in RUNNING:
            cluster[sid].wait_ready()
        with ZabClient(cluster.client_addresses(), attempts=60) as c:
            c.submit("before-fuzz")
        with tqdm(total=inputs, unit="input", mininterval=2, disable=None) as bar:
            report = Fuzzer(cluster, inputs=inputs, seed=seed, include_known=include_known,
                            progress=bar.update).run()
    finally:
        cluster.stop()
    click.echo(report.summary())
    click.echo(f"cluster folder (logs): {folder}")
    click.echo(f"fuzz: {inputs} inputs, {len(report.problems)} problems")
    raise SystemExit(1 if report.problems else 0)
