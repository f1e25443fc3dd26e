"""The fault runner: a cluster, a write load, a nemesis, then the checker. ``zabref faults`` calls `run_faults`.

Theory of operation
-------------------
1. Lay out a cluster of normal-mode servers on leased loopback ports (`zabref.runtime.cluster`), start it, wait for
ready.
2. Start the `Writer` threads (one per writing client), the `Reader` threads and the `Sampler`; every ``PROGRESS``
   seconds print one line.
3. For ``duration`` seconds (or until ``faults`` episodes were injected), call `Nemesis.step` in a loop: faults begin
   and end on its seeded schedule.
4. Heal everything (restart the killed, resume the paused, heal the cut), keep writing for ``calm`` seconds so the
   run also shows the cluster recovering, then stop the writers and the sampler.
5. Settle: wait (bounded) until one leader and every follower are in BROADCAST with the same committed zxid; then
   read every server's whole delivered sequence (`ZabClient.read`).
6. Stop the cluster and run `conformance.faults.history.check`. The `RunResult` holds the fault counts, the verdict, the
   nemesis's events and any problem (a server that exited by itself, a cluster that did not settle); it is OK only
   when the verdict is and there was no problem.
7. With ``validate``, every server wrote the spec actions it took to ``<data dir>/actions`` (``--action-log``), and
   ``zabref validate`` checks them with TLC against spec/Zab.tla (run as a command: zabref does not import the
   conformance package); a departure is a problem of the run.

The servers run on the power-loss disk (``ZABREF_DISK=powerloss``): a kill is a power cut.

The data directory is kept (``--data-dir``, or a temp folder that is removed only when the run passed), with every
server's ``server.log`` and, with ``--json``, the summary.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.faults.availability import KindAvailability, availability
from conformance.faults.history import Verdict, check
from conformance.faults.nemesis import KINDS, Nemesis, Timing
from conformance.faults.workload import Reader, Sampler, Writer
from zabref.client import ClientError, ZabClient
from zabref.config import ClusterConfig
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port
from zabref.runtime.control import ControlError
from zabref.storage import ENV_DISK
from zabref.storage.atomic import write_file

__all__ = ["RunResult", "run_faults", "CI_TIMING", "LONG_TIMING", "PROGRESS"]

PROGRESS = 5.0
CI_TIMING = Timing(duration=(1.0, 3.0), gap=(0.5, 1.5))
LONG_TIMING = Timing(duration=(0.5, 8.0), gap=(0.2, 3.0))
#: A run by fault count (``--faults N``): short episodes, short gaps, so that a thousand fit in well under an hour.
FAST_TIMING = Timing(duration=(0.3, 2.0), gap=(0.1, 0.6))
SETTLE_TIMEOUT = 60.0
VALIDATE_TIMEOUT = 1800.0


@dataclass
class RunResult:
    servers: int
    seed: int
    duration: float
    counts: dict[str, int]
    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    data_dir: str = ""
    validation: str = ""  # the last line of zabref validate, when the run was validated
    available: list[KindAvailability] = field(default_factory=list)  # per kind of fault

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems

    @property
    def faults(self) -> int:
        return sum(self.counts.get(k, 0) for k in KINDS)

    def summary(self) -> str:
        c = self.counts
        return (f"faults injected {self.faults} (kill {c.get('kill', 0)}, restart {c.get('restart', 0)}, pause "
                f"{c.get('pause', 0)}, resume {c.get('resume', 0)}, torn write {c.get('torn', 0)}, cut {c.get('cut', 0)}, isolate "
                f"{c.get('isolate', 0)}, clock jump {c.get('clock', 0)}; links cut {c.get('link cut', 0)}, healed "
                f"{c.get('link heal', 0)}); {self.verdict.summary()}; unexpected exits {c.get('unexpected exit', 0)}")

    def availability_table(self) -> str:
        """One line per kind of fault: episodes, seconds, acknowledged writes per second and against fault-free
        time, the longest stretch without an acknowledged write."""
        lines = ["availability per kind of fault (writes acknowledged while such an episode was under way):"]
        for a in self.available:
            ratio = "n/a" if a.ratio is None else f"{a.ratio:.2f}x"
            lines.append(f"  {a.kind:8} {a.episodes:5} episodes  {a.seconds:8.1f} s  {a.rate:8.1f} acks/s "
                         f"({ratio} of fault-free)  longest outage {a.longest_outage:.2f} s")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {"ok": self.ok, "servers": self.servers, "seed": self.seed, "duration_s": self.duration,
                "faults": self.faults, "counts": dict(self.counts),
                "writes": {"acknowledged": v.acked, "refused": v.failed, "unknown": v.unknown,
                           "unknown_delivered": v.unacked_delivered, "delivered": v.delivered},
                "lost": v.lost, "divergent": v.divergent, "duplicates": v.duplicates,
                "out_of_order": v.out_of_order, "misplaced": v.misplaced, "phantoms": v.phantoms,
                "reads": {"all": v.reads, "after_sync": v.synced_reads, "stale": v.stale_reads,
                          "backward": v.backward_reads},
                "availability": {a.kind: a.to_json() for a in self.available},
                "examples": v.examples, "problems": self.problems, "events": self.events,
                "data_dir": self.data_dir, "validation": self.validation}


def _settle(cluster: LocalCluster, timeout: float) -> str | None:
    """Wait until one leader and all followers are in BROADCAST with one committed zxid; None, or why not."""
    deadline = time.monotonic() + timeout
    why = "no answer yet"
    while time.monotonic() < deadline:
        try:
            states = {}
            for sid, server in cluster.servers.items():
                with server.control(timeout=2.0) as c:
                    states[sid] = c.request("state")
            roles = {sid: (s["variables"]["state"], s["variables"]["zab_state"]) for sid, s in states.items()}
            committed = {sid: s["committed_zxid"] for sid, s in states.items()}
            leaders = [sid for sid, r in roles.items() if r == ("LEADING", "BROADCAST")]
            if len(leaders) == 1 and all(r[1] == "BROADCAST" for r in roles.values()) \
                    and len(set(committed.values())) == 1:
                return None
            why = f"roles {roles}, committed zxids {committed}"
        except (OSError, ControlError, KeyError) as e:
            why = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    return f"cluster did not settle within {timeout} s: {why}"


def run_faults(servers: int = 3, duration: float = 40.0, seed: int = 1, *, long: bool = False,
               data_dir: str | os.PathLike[str] | None = None, writers: int = 3, readers: int = 2,
               write_pause: float = 0.0,
               concurrency: int | None = None, calm: float = 3.0, validate: bool = False, faults: int | None = None,
               echo: Callable[[str], None] = print, leader_logs_late: bool = False) -> RunResult:
    """One fault run; see the module docstring. ``echo`` gets the progress lines and the summary. ``faults``: run
    until that many fault episodes were injected (with `FAST_TIMING`) instead of for ``duration`` seconds.
    ``write_pause``: seconds each writer waits after an acknowledged write (a long run keeps its history, and with it
    each restart's log replay and each SNAP, small). ``leader_logs_late``: the servers' [cluster] leader_logs_late."""
    keep = data_dir is not None
    folder = Path(data_dir) if keep else Path(tempfile.mkdtemp(prefix="zabref-faults-"))
    folder.mkdir(parents=True, exist_ok=True)
    base = find_free_base_port(servers)
    actions = folder / "actions" if validate else None
    try:
        path = cluster_config(folder, servers, base, ClusterConfig(leader_logs_late=leader_logs_late))
        with LocalCluster(path, action_log=actions, env={ENV_DISK: "powerloss"}) as cluster:
            result = _run(cluster, servers, duration, seed, long, writers, readers, write_pause, concurrency, calm,
                          faults, echo)
    finally:
        release_base_port(base)
    if actions is not None:
        _validate(actions, result, echo)
    result.data_dir = str(folder)
    if not keep and result.ok:
        shutil.rmtree(folder, ignore_errors=True)
        result.data_dir = ""
    echo(result.availability_table())
    echo(("PASS: " if result.ok else "FAIL: ") + result.summary())
    for line in result.problems + result.verdict.examples:
        echo(f"  {line}")
    if result.data_dir:
        echo(f"data and server logs kept in {result.data_dir}")
    return result


def _run(cluster: LocalCluster, servers: int, duration: float, seed: int, long: bool, writers: int, readers: int,
         write_pause: float, concurrency: int | None, calm: float, faults: int | None,
         echo: Callable[[str], None]) -> RunResult:
    cluster.start()
    addresses = {sid: (s.me.host, s.me.client_port) for sid, s in sorted(cluster.servers.items())}
    stop = threading.Event()
    clients = [Writer(k, list(addresses.values()), stop, timeout=10.0, pause=write_pause) for k in range(writers)]
    lookers = [Reader(k, addresses, stop, timeout=10.0, seed=seed) for k in range(readers)]
    sampler = Sampler(addresses, stop)
    timing = FAST_TIMING if faults is not None else LONG_TIMING if long else CI_TIMING
    nemesis = Nemesis(cluster, seed, timing, concurrency if concurrency is not None else max(1, (servers - 1) // 2))
    until = f"{faults} faults" if faults is not None else f"{duration:g} s of faults"
    echo(f"fault run: {servers} servers, {until}, seed {seed}, {writers} writers, {readers} readers, "
         f"{nemesis.concurrency} fault(s) at a time; config {cluster.config_path}")
    for t in (*clients, *lookers, sampler):
        t.start()
    t0 = time.monotonic()
    next_progress = t0 + PROGRESS

    def injected() -> int:
        return sum(nemesis.counts[k] for k in KINDS)

    try:
        while injected() < faults if faults is not None else time.monotonic() < t0 + duration:
            now = time.monotonic()
            nemesis.step()
            if now >= next_progress:
                next_progress += PROGRESS
                acked = sum(w.outcome == "ok" for c in clients for w in c.writes)
                echo(f"  t={now - t0:5.0f} s  faults {injected()}"
                     f"  active {[f'{e.kind} {e.target}' for e in nemesis.active]}  acknowledged {acked}  reads "
                     f"{sum(len(r.reads) for r in lookers)}")
            time.sleep(0.05)
    finally:
        elapsed = time.monotonic() - t0
        # The faults still active end now (a run by fault count waits for its last episode to run its course).
        nemesis.heal_all()
        stop.wait(calm)
        stop.set()
        for t in (*clients, *lookers, sampler):
            t.join(30.0)
    problems: list[str] = []
    if (why := _settle(cluster, SETTLE_TIMEOUT)) is not None:
        problems.append(why)
    finals = {}
    for sid, addr in addresses.items():
        try:
            with ZabClient([addr], attempts=5) as zc:
                finals[sid] = zc.read()
        except ClientError as e:
            problems.append(f"server {sid} could not be read at the end: {e}")
    nemesis.check_exits()
    problems = nemesis.problems + problems
    writes = [w for c in (*clients, *lookers) for w in c.writes]
    reads = [r for looker in lookers for r in looker.reads]
    verdict = check(writes, finals, sampler.samples, reads) if finals else Verdict()
    acks = [w.completed for w in writes if w.outcome == "ok"]
    available = availability(nemesis.spans, acks, (t0, t0 + elapsed))
    return RunResult(servers, seed, elapsed, dict(nemesis.counts), verdict, problems, nemesis.events,
                     available=available)


def _validate(actions: Path, result: RunResult, echo: Callable[[str], None]) -> None:
    """``zabref validate`` on the run's action logs, as a command (validate is a layer above the fault runner in
    conformance's import rules, docs/architecture.md), in a process group of its own: whatever ends the wait (its
    timeout, an interrupt) also ends the TLC it started."""
    proc = subprocess.Popen([sys.executable, "-m", "zabref.cli", "validate", str(actions)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=VALIDATE_TIMEOUT)
    except subprocess.TimeoutExpired:
        out, err = "", f"validate: no verdict within {VALIDATE_TIMEOUT:.0f} s; stopped"
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = (out + err).strip().splitlines()
    for line in lines:
        echo(f"  {line}")
    result.validation = next((x for x in reversed(lines) if x.startswith("validate: servers=")), "")
    if proc.returncode != 0 or not result.validation:
        result.problems.append(f"zabref validate {actions} failed (exit {proc.returncode}): "
                               + " / ".join(lines[-5:]))


def write_json(result: RunResult, path: str | os.PathLike[str]) -> None:
    """The summary as JSON, replaced atomically (`zabref.storage.atomic.write_file`: never half-written)."""
    write_file(path, json.dumps(result.to_json(), indent=1) + "\n")
