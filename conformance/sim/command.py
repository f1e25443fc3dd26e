"""``zabref simulate``: seeded whole-cluster simulations with the spec's invariants checked after every step.

Theory of operation
-------------------
The simulator is `conformance.sim` (the real servers on a virtual-time loop, docs/simulation.md); this command runs it
with `conformance.sim.invariants.SpecInvariants` plugged in -- which is why it lives here: zabref/ never imports
conformance/, and the command reaches ``zabref`` through the ``zabref.commands`` entry point.

* ``--seed N`` runs one seed and prints its result, the digest of its event log and the command that repeats it
  (``--log`` prints the event log too);
* ``--seeds A..B`` runs seeds A to B-1, on ``--workers`` processes (each run is independent and deterministic, so
  the split changes nothing), prints one line per failing seed and a summary, and exits 1 if any failed;
  ``--spark`` runs them as a Spark job instead (local mode: `conformance.graph.spark`);
* ``--shrink`` (with ``--seed``): a failing run is repeated with fewer steps (a binary search on ``--steps``, the
  same seed: the same schedule, cut shorter) and then with fewer fault kinds (dropping each kind that is not needed),
  and the shortest failing command is printed;
* ``--bug NAME`` runs everything against a copy of zabref with the seeded bug NAME (conformance/replay/bugs/NAME.toml)
  applied, in a child process whose import path starts with the patched package.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import replace

import click

from conformance.replay.seeded import run_patched
from conformance.sim import FAULTS, Options, Result
from conformance.sim.campaign import run_seeds_spark
from conformance.sim.seeds import run_seed, run_seeds

__all__ = ["shrink", "simulate_command", "parse_seeds"]


_WHERE = re.compile(r"^(?:step \d+ at s\d+|after the power cut of s\d+): ")


def failure_kind(failure: str) -> str:
    """How a run failed, without where and the state: "invariant X violated", "acknowledged write lost",
    "liveness", ... (what must stay the same while a failure is shrunk)."""
    text = _WHERE.sub("", failure or "")
    if text.startswith("validation: "):  # the action no spec step takes, or the merge's failure
        taken = re.search(r"no step of spec/Zab\.tla takes (\w+)\(", text)
        return f"validation: {taken.group(1) if taken else 'merge'}"
    return re.split(r" \(|:", text, maxsplit=1)[0].strip()


def shrink(seed: int, options: Options) -> tuple[Options, Result]:
    """The smallest options (fewest steps, fewest fault kinds) with which ``seed`` still fails the same way (the same
    `failure_kind`: another invariant violated, or a lost write instead of a violation, is another failure)."""
    best = run_seed(seed, options)
    if best.ok:
        raise click.ClickException(f"seed {seed} does not fail with these options: nothing to shrink")
    want = failure_kind(best.failure)

    def same(r: Result) -> bool:
        return not r.ok and failure_kind(r.failure) == want

    low, high = 1, min(options.steps, best.steps)
    while low < high:  # the smallest budget that still fails the same way
        mid = (low + high) // 2
        r = run_seed(seed, replace(options, steps=mid))
        if not same(r):
            low = mid + 1
        else:
            high, best = mid, r
    options = replace(options, steps=high)
    kinds = list(best.faults)
    for kind in list(kinds):
        trial = replace(options, faults=tuple(k for k in kinds if k != kind))
        r = run_seed(seed, trial)
        if same(r):
            kinds.remove(kind)
            options, best = trial, r
    return replace(options, faults=tuple(kinds)), best


def parse_seeds(text: str) -> range:
    try:
        a, b = (int(x) for x in text.split(".."))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected A..B (seeds A to B-1)") from None
    if not 0 <= a < b:
        raise click.BadParameter(f"{text!r}: expected 0 <= A < B")
    return range(a, b)


@click.command("simulate")
@click.option("--seed", type=int, help="Run this one seed.")
@click.option("--seeds", "seed_range", help="Run seeds A..B (A to B-1).")
@click.option("--servers", type=click.Choice(["3", "5", "7"]), default="3", show_default=True)
@click.option("--steps", type=click.IntRange(1), default=1000, show_default=True,
              help="Steps (spec actions taken by servers) before the faults stop and recovery is checked.")
@click.option("--faults", help=f"Comma-separated fault kinds, or 'none' (default: each seed picks its own subset "
                               f"and rates: swarm testing). Kinds: {', '.join(FAULTS)}.")
@click.option("--clients", type=click.IntRange(0), default=2, show_default=True)
@click.option("--readers", type=click.IntRange(0), default=0, show_default=True,
              help="Clients that read (plain, and sync + read); their reads are checked at the end.")
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True, help="Processes for --seeds.")
@click.option("--until-failure", is_flag=True, help="With --seeds: stop at the first failing seed (bug hunting).")
@click.option("--spark", is_flag=True, help="Run --seeds as a Spark job (local mode).")
@click.option("--shrink", "do_shrink", is_flag=True, help="With --seed: shrink a failing run.")
@click.option("--log", "show_log", is_flag=True, help="With --seed: print the event log.")
@click.option("--validate", is_flag=True, help="Validate each run's action logs against spec/Zab.tla with TLC at "
                                                "its end (docs/simulation.md).")
@click.option("--leader-logs-late", is_flag=True,
              help="Servers with [cluster] leader_logs_late: a leader sends a PROPOSAL before its own log write is "
                   "durable (LeaderLogsLate).")
@click.option("--bug", help="Run against zabref with this seeded bug (conformance/replay/bugs/NAME.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
def simulate_command(seed: int | None, seed_range: str | None, servers: str, steps: int, faults: str | None,
                     clients: int, readers: int, workers: int, until_failure: bool, spark: bool, do_shrink: bool,
                     show_log: bool, validate: bool, leader_logs_late: bool, bug: str | None,
                     as_json: bool) -> None:
    """Simulate a whole cluster in one process: seeded faults, virtual time, the spec's invariants after every step."""
    if (seed is None) == (seed_range is None):
        raise click.UsageError("give exactly one of --seed N and --seeds A..B")
    if bug is not None:
        argv = ["--seed", str(seed)] if seed is not None else ["--seeds", str(seed_range)]
        argv += ["--servers", servers, "--steps", str(steps), "--clients", str(clients), "--readers", str(readers),
                 "--workers", str(workers)]
        argv += ["--faults", faults] if faults is not None else []
        flags = {"--until-failure": until_failure, "--spark": spark, "--shrink": do_shrink, "--log": show_log,
                 "--json": as_json, "--validate": validate, "--leader-logs-late": leader_logs_late}
        argv += [flag for flag, on in flags.items() if on]
        sys.exit(run_patched(bug, "conformance.sim.command", "simulate_command", argv))
    kinds: tuple[str, ...] | None = None
    if faults is not None:
        kinds = () if faults == "none" else tuple(k.strip() for k in faults.split(",") if k.strip())
    try:
        options = Options(servers=int(servers), steps=steps, faults=kinds, clients=clients, readers=readers,
                          validate=validate, leader_logs_late=leader_logs_late)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None
    if seed is not None:
        started = time.perf_counter()
        if do_shrink:
            options, r = shrink(seed, options)
            click.echo(f"shrunk to {r.steps} steps, faults {','.join(options.faults or ()) or 'none'}")
        else:
            r = run_seed(seed, options)
        if show_log:
            click.echo("\n".join(r.events))
        out = {"seed": seed, "ok": r.ok, "failure": r.failure, "steps": r.steps, "virtual_s": r.virtual_s,
               "faults": r.faults, "injected": r.injected, "acked": r.acked, "reads": r.reads, "digest": r.digest,
               "replay": r.replay, "seconds": round(time.perf_counter() - started, 3)}
        if as_json:
            click.echo(json.dumps(out))
        else:
            click.echo(f"seed {seed}: {'ok' if r.ok else 'FAILED: ' + str(r.failure)}")
            click.echo(f"  steps {r.steps}, virtual {r.virtual_s:.3f}s, acked writes {r.acked}, reads {r.reads}, "
                       f"injected {r.injected or 'nothing'}")
            click.echo(f"  digest {r.digest}")
            click.echo(f"  replay: {r.replay}")
        sys.exit(0 if r.ok else 1)
    seeds = parse_seeds(seed_range)
    started = time.perf_counter()
    if spark:

        rows = run_seeds_spark(seeds, options)
    else:
        rows = run_seeds(seeds, options, workers, until_failure=until_failure)
    seconds = time.perf_counter() - started
    failed = [row for row in rows if not row["ok"]]
    if as_json:
        click.echo(json.dumps({"runs": len(rows), "failed": failed, "seconds": round(seconds, 3)}))
    else:
        for row in failed:
            click.echo(f"seed {row['seed']}: FAILED: {row['failure']}\n  replay: {row['replay']}")
        total = sum(row["steps"] for row in rows)
        click.echo(f"{len(rows)} runs, {len(failed)} failed, {total} steps, {seconds:.1f}s "
                   f"({60 * len(rows) / seconds:.0f} runs/min)")
    sys.exit(1 if failed else 0)
