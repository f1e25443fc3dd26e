"""``zabref zk faults`` and ``zabref zk matrix``: fault runs on real ZooKeeper (docs/zookeeper.md).

Theory of operation: the ``zk`` group is defined in conformance/zk/command.py, a layer below this one; these two
commands plug into it through the entry-point group ``zabref.zk.commands`` (pyproject.toml), because they use the
history checker of this layer. ``faults`` is one run (`conformance.faults.zkrun.run_zk_faults`): a verdict line,
exit code 0 when it passed, 1 when it did not, and a JSON report; with ``--validate`` the run's recording is then
held against spec/Zab.tla and its election notifications against spec/FastLeaderElection.tla by the ``validate``
plugin of the same group (conformance/validate/zkcommand.py; the two checks side by side), and the exit code is the
worse of the two (4: the validation had no verdict). ``matrix`` runs the `MATRIX` -- each known bug's
scripted schedule on the versions it affects and the versions that fixed it, judged by the row's check -- and
compares each verdict with the one expected: exit code 0 when every run came out as expected.

Exit codes: 0 passed / as expected; 1 a check failed / a run came out otherwise; a ZkError (a version that cannot
be fetched, a bad schedule) is click's ``Error: ...`` with exit code 1.
"""

from __future__ import annotations

import json
import shutil
import time
from importlib.resources import files
from pathlib import Path

from typing import NamedTuple

import click

from conformance.zk import ZkError

__all__ = ["faults", "matrix", "MATRIX", "Row", "builtin_schedule", "caught_by", "judged"]

class Row(NamedTuple):
    """One bug of the matrix: its scripted schedule (``conformance/zk/schedules/<schedule>.toml``, the bug's name
    when None) on ``servers`` servers, the verdict expected of each version, and the check that judges it:
    ``"history"`` (the history checker and the disk check: ``ok``) or a JIRA id of `conformance.zk.knownbugs` (its
    mark in the servers' own logs, for a bug that loses no data the history check could see). A version expected
    "caught" is run up to ``attempts`` times, until caught (a scenario that timing outside the servers' control can
    miss: the matrix says at which attempt it was caught)."""

    bug: str
    servers: int
    expect: dict[str, str]
    attempts: int
    schedule: str | None = None
    judge: str = "history"


MATRIX: list[Row] = [
    Row("zookeeper-4925", 5, {"3.9.2": "pass", "3.9.3": "caught", "3.9.4": "pass"}, 1),
    # the kill must land between the learner's epoch write and its log's: a loaded machine missed it once in three
    # fresh-clone CI runs of 2026-11-30 (the run passed: nothing lost): up to 3 attempts
    Row("zookeeper-4785", 3, {"3.8.0": "caught", "3.8.3": "caught", "3.8.4": "caught", "3.8.5": "pass",
                              "3.9.1": "caught", "3.9.2": "pass"}, 3),
    # found here (docs/zookeeper.md, "The txnlog hole"): no fixed version; 3.8.0 and the newest of each line. An
    # election the load causes between y's kill and x's SNAP turns the TRUNC into a (safe) SNAP: up to 3 attempts.
    Row("txnlog-hole", 5, {"3.8.0": "caught", "3.8.6": "caught", "3.9.4": "caught", "3.9.5": "caught"}, 3),
    # found here by a random mixed run (docs/zookeeper.md, "Known bugs in ZooKeeper's own logs"): no fixed version;
    # 3.8.0 and the newest of each line. A proposal no quorum took survives a TRUNC in the reloaded snapshot: divergent
    Row("zookeeper-4837", 3, {"3.8.0": "caught", "3.8.6": "caught", "3.9.5": "caught"}, 3),
    # a COMMIT during a sync with nothing waiting for it (no data lost): judged by its mark in ZooKeeper's own log
    Row("zookeeper-4394", 3, {"3.8.0": "caught", "3.8.6": "caught", "3.9.2": "caught", "3.9.3": "pass",
                              "3.9.5": "pass"}, 3, judge="ZOOKEEPER-4394"),
]


def caught_by(row: Row, result) -> list[str]:  # noqa: ANN001 -- a conformance.faults.zkrun.ZkRunResult
    """What of ``row``'s check caught ``result``: the history check's failed counts, or the row's JIRA if its mark
    is in the servers' logs."""
    if row.judge == "history":
        return result.caught_by
    return sorted({k.jira for k in result.known} & {row.judge})


def judged(row: Row, result) -> str:  # noqa: ANN001 -- a conformance.faults.zkrun.ZkRunResult
    """"pass", "caught" or "error": ``result`` as ``row``'s check sees it."""
    if row.judge == "history":
        return "pass" if result.ok else "caught" if result.caught_by else "error"
    return "caught" if caught_by(row, result) else "error" if result.problems else "pass"


def builtin_schedule(name: str) -> Path:
    """The path of a built-in schedule (``zookeeper-4925``), or a ZkError listing them."""
    folder = files("conformance.zk") / "schedules"
    path = Path(str(folder / f"{name}.toml"))
    if not path.is_file():
        known = sorted(p.stem for p in Path(str(folder)).glob("*.toml"))
        raise ZkError(f"no built-in schedule {name!r}; the built-in ones: {', '.join(known)}")
    return path


def _schedule(spec: str, servers: int):  # noqa: ANN202
    from conformance.zk.schedule import load_schedule  # noqa: PLC0415

    path = Path(spec) if Path(spec).is_file() else builtin_schedule(spec)
    return load_schedule(path, servers)


@click.command("faults")
@click.option("--version", "version", default="3.8.0", show_default=True, help="A version of `zabref zk versions`.")
@click.option("--servers", type=click.Choice(["3", "5"]), default="3", show_default=True)
@click.option("--duration", type=click.FloatRange(1.0), default=30.0, show_default=True,
              help="Seconds of random faults (ignored with --schedule).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the random schedule and the selectors.")
@click.option("--schedule", "schedule", default=None,
              help="A schedule file (.toml or .json) or a built-in one (zookeeper-4925, zookeeper-4785, txnlog-hole, "
                   "zookeeper-4837, power-loss-all).")
@click.option("--writers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option("--rate", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Each writer's writes a second at most (0: as fast as they are answered); a paced run makes a "
                   "recording whose validation keeps pace with it.")
@click.option("--readers/--no-readers", default=True, show_default=True,
              help="A reader at each server alone: a sync, then a read, every 0.1 s (the read guarantee checked; a "
                   "follower's sync crosses the quorum connection as REQUEST and SYNC).")
@click.option("--power-loss", is_flag=True, default=False,
              help="Each dataDir on a power-cut file system (FUSE): every kill loses what the server never fsynced.")
@click.option("--writeback", type=click.FloatRange(0), default=30.0, show_default=True,
              help="With --power-loss: an unsynced write older than this survives a cut (the kernel wrote it back; "
                   "Linux's default dirty expiry is 30 s).")
@click.option("--force-sync/--no-force-sync", default=True, show_default=True,
              help="zoo.cfg's forceSync; --no-force-sync ACKs before the log reaches the disk (shows a power cut "
                   "is seen).")
@click.option("--dir", "folder", type=click.Path(file_okay=False), default="out/zk-faults", show_default=True,
              help="The run's folder (emptied first): data dirs, server logs, the proxy's recording.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="The report. [default: <dir>/report.json]")
@click.option("--validate/--no-validate", default=False, show_default=True,
              help="Then hold the run's recording against spec/ZabSync.tla (Zab.tla and a client's sync) and its "
                   "election notifications against spec/FastLeaderElection.tla (the `zabref zk validate` plugin, in "
                   "windows); the run passes only if every check does.")
@click.option("--zabref", "zabref", default="", metavar="IDS",
              help="Members that are zabref servers, by id (3, or 2,3): a mixed ensemble; its ZooKeeper servers run "
                   "with local sessions (docs/zookeeper.md, \"A mixed ensemble under faults\").")
def faults(version: str, servers: str, duration: float, seed: int, schedule: str | None, writers: int,
           rate: float, readers: bool, power_loss: bool, writeback: float, force_sync: bool, folder: str,
           json_path: str | None, validate: bool, zabref: str) -> None:
    """One fault run on a real ZooKeeper ensemble, checked by the history checker; a verdict line and a report."""
    from conformance.faults.zkrun import run_zk_faults, write_report  # noqa: PLC0415

    n = int(servers)
    try:
        mixed = frozenset(int(x) for x in zabref.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{zabref!r}: ids separated by commas, such as 3 or 2,3", param_hint="--zabref") \
            from None
    if not mixed <= set(range(1, n + 1)):
        raise click.BadParameter(f"{sorted(mixed)}: each id must be one of the {n} servers'", param_hint="--zabref")
    try:
        steps = _schedule(schedule, n) if schedule else None
        out = Path(folder)
        if out.exists():
            shutil.rmtree(out)
        result = run_zk_faults(out, version, n, seed, duration, steps, writers=writers, rate=rate, readers=readers,
                               power_loss=power_loss, writeback=writeback, force_sync=force_sync, zabref=mixed,
                               echo=click.echo)
    except (ZkError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    report = Path(json_path) if json_path else out / "report.json"
    write_report(result, report)
    click.echo(f"report: {report}")
    code = 0 if result.ok else 1
    if validate:
        ctx = click.get_current_context()
        group = ctx.parent
        # the group's own lookup: a MultiCommand
        command = None if group is None else group.command.get_command(group, "validate")  # type: ignore
        if command is None:
            raise click.ClickException("--validate needs the `zabref zk validate` plugin (run as `zabref zk faults`)")
        try:  # a plugin of the zk group: conformance.validate.zkcommand (a layer above this one)
            ctx.invoke(command, recording_dir=out, election=True)
        except SystemExit as e:
            code = max(code, int(e.code or 0))
    if code:
        raise SystemExit(code)


@click.command("matrix")
@click.option("--only", default=None,
              help="Only this bug (zookeeper-4925, zookeeper-4785, txnlog-hole, zookeeper-4837, zookeeper-4394).")
@click.option("--dir", "folder", type=click.Path(file_okay=False), default="out/zk-matrix", show_default=True)
def matrix(only: str | None, folder: str) -> None:
    """Each known bug's scripted schedule on the versions it affects and those that fixed it (docs/zookeeper.md);
    a version expected to be caught is tried again, up to the bug's attempts, while it passes."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    rows, started, bad = [], time.monotonic(), 0
    for row in MATRIX:
        bug = row.bug
        if only and bug != only:
            continue
        try:
            steps = _schedule(row.schedule or bug, row.servers)
            for version, want in row.expect.items():
                for attempt in range(1, (row.attempts if want == "caught" else 1) + 1):
                    out = Path(folder) / f"{bug}-{version}" / str(attempt)
                    if out.exists():
                        shutil.rmtree(out)
                    r = run_zk_faults(out, version, row.servers, 1, schedule=steps, echo=lambda _: None)
                    got = judged(row, r)
                    if got != "pass":
                        break
                bad += got != want
                by = caught_by(row, r)
                rows.append({"bug": bug, "version": version, "expected": want, "got": got, "attempt": attempt,
                             "judge": row.judge, "caught_by": by, "lost": r.verdict.lost,
                             "known_bugs": sorted({k.jira for k in r.known}), "seconds": round(r.seconds, 1),
                             "first": (r.problems + r.verdict.examples + [k.where() for k in r.known
                                                                         if k.jira == row.judge])[:1]})
                click.echo(f"{bug} {version:<6} expected {want:<6} got {got:<6} {','.join(by) or '-':<16} "
                           f"lost {r.verdict.lost:<5} {r.seconds:5.1f} s, attempt {attempt}"
                           + ("" if got == want else "  <-- differs"))
        except ZkError as e:
            raise click.ClickException(str(e)) from e
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / "matrix.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    click.echo(f"{'OK' if not bad else 'DIFFERS'}: {len(rows)} runs, {bad} not as expected, "
               f"{time.monotonic() - started:.0f} s; {Path(folder) / 'matrix.json'}")
    if bad:
        raise SystemExit(1)
