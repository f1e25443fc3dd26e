"""``zabref faults``: the fault runner's command line (the runner itself loads only when the command runs).

Exit codes: 0 the run passed (0 lost, 0 divergent, no other violation, no server exited by itself); 1 it failed or
could not run (the reason is printed; the data directory is kept).
"""

from __future__ import annotations

import click

from conformance.faults.run import run_faults, write_json

__all__ = ["faults"]

LONG_DURATION = 600.0


@click.command()
@click.option("--servers", "-n", type=click.IntRange(3, 9), default=3, show_default=True, help="Cluster size.")
@click.option("--duration", type=click.FloatRange(1.0), default=None,
              help="Seconds of faults. [default: 40; 600 with --long]")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the fault schedule.")
@click.option("--long", "long_", is_flag=True, help="The long mode: 10 minutes, episodes of 0.5-8 s.")
@click.option("--writers", type=click.IntRange(1, 64), default=3, show_default=True, help="Concurrent clients.")
@click.option("--readers", type=click.IntRange(0, 64), default=2, show_default=True,
              help="Clients reading (plain reads and sync+read), checked for consistency.")
@click.option("--write-pause", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Seconds each writer waits after an acknowledged write (keeps a long run's history small).")
@click.option("--faults", "fault_count", type=click.IntRange(1), default=None,
              help="Run until this many fault episodes were injected (short episodes) instead of for --duration.")
@click.option("--concurrency", type=click.IntRange(1, 8), default=None,
              help="Fault episodes at once (on disjoint servers). [default: (servers-1)//2]")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the cluster (kept). [default: a temp folder, removed if the run passes]")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the summary, counts and events to this JSON file.")
@click.option("--validate", is_flag=True,
              help="Log every server's spec actions and check them with TLC (zabref validate) after the run.")
@click.option("--leader-logs-late", is_flag=True,
              help="The servers run with [cluster] leader_logs_late (a leader's PROPOSAL before its own fsync).")
def faults(servers: int, duration: float | None, seed: int, long_: bool, writers: int, readers: int,
           write_pause: float, fault_count: int | None, concurrency: int | None, data_dir: str | None,
           json_path: str | None,
           validate: bool, leader_logs_late: bool) -> None:
    """Run a cluster under a write load while killing (-9), pausing (SIGSTOP) and cutting links between servers;
    then check that no acknowledged write was lost and that all servers delivered the same sequence (docs/faults.md).
    """

    if duration is None:
        duration = LONG_DURATION if long_ else 40.0
    result = run_faults(servers, duration, seed, long=long_, data_dir=data_dir, writers=writers, readers=readers,
                        write_pause=write_pause,
                        concurrency=concurrency, validate=validate, faults=fault_count, echo=click.echo,
                        leader_logs_late=leader_logs_late)
    if json_path is not None:
        write_json(result, json_path)
    if not result.ok:
        raise SystemExit(1)
