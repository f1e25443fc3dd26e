"""The fault runner on real ZooKeeper: an ensemble, a kazoo write load, a schedule of faults, then the checks.

Theory of operation
-------------------
`run_zk_faults` is `conformance.faults.run` for an unmodified ZooKeeper (docs/zookeeper.md, "Faults on real
ZooKeeper"); the checker is the same `conformance.faults.history.check`, fed from outside:

1. Start a `conformance.zk.harness.ProxiedEnsemble` of 3 or 5 servers of the version asked for; every byte between
   servers crosses the recording proxy, which is also the network's fault layer.
2. Start the `conformance.faults.zkload.ZkWriter` threads, the `ZkSampler` and a `ZkReader` at each server (a
   sync then a read, every 0.1 s: ``readers``).
3. Run the schedule step by step (`conformance.zk.nemesis.ZkNemesis`): a scripted one (``--schedule``) or one drawn
   from the seed (`conformance.zk.schedule.random_schedule`, ``duration`` seconds). The schedule run is in the
   report, so a random run can be run again as a script. With ``power_loss`` (every kill a power cut:
   `conformance.zk.powercut`) a random schedule starts after ``writeback`` + 1 s of load.
4. Heal everything (restart the killed, resume the paused, heal the links), keep writing ``calm`` seconds, stop the
   load; settle: wait (bounded) until every server serves and ``srvr`` gives one zxid at all of them.
5. Finals: each server's delivered sequence, read through a session to that server alone
   (`conformance.zk.delivered.read_delivered`: what it applied, i.e. committed -- not its transaction log, which
   holds proposals that may never commit). Then stop the ensemble and read every server's transaction logs
   (`read_logged`).
6. Check: `history.check(writes, finals, samples, reads)` -- lost, divergent, misplaced, duplicates, out of order,
   phantoms, stale reads (a read after a sync that misses a write acknowledged before the sync began) -- and the
   disk check ``not_durable``: a write a server delivered that is in none of its logs although no snapshot of that
   server covers it (a restart of that server would lose it).
7. Name: the known bugs whose mark is in the servers' own logs (`conformance.zk.knownbugs`), reported beside the
   checks; a sighting does not change ``ok`` (it names a bug, whatever it cost), and `zabref zk matrix` judges a
   bug without a data loss of its own by it. A stale read that a deposed ZooKeeper leader's sync answer explains is
   named ZOOKEEPER-1675 from the history and the recording (`conformance.faults.syncquorum`), beside them.

The run passes when the verdict does, ``not_durable`` is 0 and nothing went wrong (a step that could not run, a
server that would not serve again, a final read that failed). The run's folder keeps every server's data dir and
log and the proxy's recording.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.faults.history import Read, Sample, Verdict, Write, check
from conformance.faults.syncquorum import JIRA, SyncAnswer, explain
from conformance.faults.zkload import ROOT, ZkReader, ZkSampler, ZkWriter, reads_at_writes
from conformance.zk import WireError, ZkError
from conformance.zk.delivered import read_delivered, read_logged, snapshots
from conformance.zk.ensemble import four_letter
from conformance.zk.harness import ProxiedEnsemble
from conformance.zk.knownbugs import Sighting, sightings, summarise
from conformance.zk.nemesis import ZkNemesis
from conformance.zk.schedule import Step, random_schedule
from conformance.zk.wire import decode_recording
from zabref.storage.atomic import write_file

__all__ = ["ZkRunResult", "run_zk_faults", "write_report"]

SETTLE_TIMEOUT = 60.0


@dataclass
class ZkRunResult:
    version: str
    servers: int
    seed: int
    schedule: list[Step]
    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    finals: dict[int, int] = field(default_factory=dict)  # server -> length of its delivered sequence
    not_durable: dict[int, list[str]] = field(default_factory=dict)
    folder: str = ""
    seconds: float = 0.0
    known: list[Sighting] = field(default_factory=list)  # known bugs' marks in the servers' own logs
    sync_answers: list[SyncAnswer] = field(default_factory=list)  # stale reads ZOOKEEPER-1675 explains
    zabref: list[int] = field(default_factory=list)  # members that are zabref servers (a mixed ensemble)
    #: the checker's inputs, kept for a caller that checks again (the tests show each check can fail on them)
    writes: list[Write] = field(default_factory=list, repr=False)
    delivered: dict[int, list[tuple[int, str]]] = field(default_factory=dict, repr=False)
    samples: list[Sample] = field(default_factory=list, repr=False)
    reads: list[Read] = field(default_factory=list, repr=False)  # ends mapped to writes (`reads_at_writes`)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems and not any(self.not_durable.values())

    @property
    def caught_by(self) -> list[str]:
        """Which checks failed: the verdict's counts that are not 0, and ``not_durable``."""
        v = self.verdict
        out = [name for name in ("lost", "divergent", "misplaced", "duplicates", "out_of_order", "phantoms",
                                 "stale_reads", "backward_reads") if getattr(v, name)]
        return out + (["not_durable"] if any(self.not_durable.values()) else [])

    @property
    def mixed(self) -> str:
        """`` with zabref servers 3`` for a mixed ensemble, else ''."""
        return f" with zabref server{'s' if len(self.zabref) > 1 else ''} {','.join(map(str, self.zabref))}" \
            if self.zabref else ""

    def summary(self) -> str:
        nd = sum(len(x) for x in self.not_durable.values())
        return (f"ZooKeeper {self.version}{self.mixed}, {self.servers} servers, seed {self.seed}, "
                f"{len(self.schedule)} steps in {self.seconds:.1f} s; {self.verdict.summary()}; not durable {nd}")

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {"ok": self.ok, "version": self.version, "servers": self.servers, "zabref": self.zabref,
                "seed": self.seed, "seconds": round(self.seconds, 2), "caught_by": self.caught_by,
                "writes": {"acknowledged": v.acked, "refused": v.failed, "unknown": v.unknown,
                           "unknown_delivered": v.unacked_delivered, "delivered": v.delivered},
                "lost": v.lost, "divergent": v.divergent, "duplicates": v.duplicates, "misplaced": v.misplaced,
                "out_of_order": v.out_of_order, "phantoms": v.phantoms,
                "reads": {"synced": v.synced_reads, "stale": v.stale_reads, "backward": v.backward_reads},
                "not_durable": {str(k): x for k, x in self.not_durable.items()},
                "finals": {str(k): n for k, n in self.finals.items()}, "examples": v.examples,
                "known_bugs": [{"jira": k.jira, "server": k.sid, "at": k.where(), "text": k.text} for k in self.known]
                + [{"jira": JIRA, "server": a.read.server, "at": "the history check and the recording",
                    "text": a.line()} for a in self.sync_answers],
                "problems": self.problems, "counts": self.counts, "events": self.events,
                "schedule": [s.to_json() for s in self.schedule], "folder": self.folder}


def _zxid(port: int) -> int | None:
    try:
        m = re.search(r"^Zxid: (0x[0-9a-f]+)", four_letter(port), re.M)
    except OSError:
        return None
    return int(m.group(1), 16) if m else None


#: How many times the end's read of a server is tried (`read_delivered`) before the run reports it unreadable.
FINAL_READS = 3


def _settle(z: ProxiedEnsemble, timeout: float) -> str | None:
    """Until every server serves and all give the same zxid; None, or why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        modes = z.ensemble.modes()
        zxids = {m.id: _zxid(m.client_port) for m in z.members}
        if all(x in ("leader", "follower") for x in modes.values()) and len(set(zxids.values())) == 1:
            return None
        time.sleep(0.2)
    return f"the ensemble did not settle within {timeout} s: modes {modes}, zxids " + \
        ", ".join(f"{s}: {'-' if x is None else hex(x)}" for s, x in zxids.items())


def run_zk_faults(folder: str | os.PathLike[str], version: str = "3.8.0", servers: int = 3, seed: int = 1,
                  duration: float = 30.0, schedule: list[Step] | None = None, *, writers: int = 2,
                  rate: float = 0.0, calm: float = 2.0, sample: bool = True, readers: bool = True,
                  power_loss: bool = False, writeback: float | None = 30.0, force_sync: bool = True,
                  zabref: frozenset[int] = frozenset(), echo: Callable[[str], None] = print) -> ZkRunResult:
    """One run; see the module docstring. ``schedule`` None: a random one of ``duration`` seconds from ``seed``.
    ``rate``: each writer's writes a second at most (0: unpaced). ``zabref``: the ids of members that are zabref
    servers (a mixed ensemble: `conformance.zk.zabrefmember`)."""
    started = time.monotonic()
    steps = schedule if schedule is not None else random_schedule(seed, servers, duration)
    folder = Path(folder)
    z = ProxiedEnsemble(folder, servers, version, power_loss=power_loss, writeback=writeback, force_sync=force_sync,
                        zabref=zabref, echo=echo)
    result = ZkRunResult(z.distribution.version, servers, seed, steps, Verdict(), folder=str(folder),
                         zabref=sorted(zabref))
    echo(f"zk faults: ZooKeeper {result.version}{result.mixed}, {servers} servers, seed {seed}, "
         f"{'scripted' if schedule is not None else 'random'} schedule of {len(steps)} steps; folder {folder}")
    with z.start():
        hosts = ",".join(f"127.0.0.1:{m.client_port}" for m in z.members)
        stop, hold = threading.Event(), threading.Event()
        load = [ZkWriter(k, hosts, stop, hold, rate=rate) for k in range(writers)]
        sampler = ZkSampler({m.id: m.client_port for m in z.members}, stop) if sample else None
        reading = [ZkReader(k, m.id, m.client_port, stop, hold) for k, m in enumerate(z.members)] if readers else []
        for t in (*load, *reading, *([sampler] if sampler else [])):
            t.start()
        timers: list[tuple[threading.Timer, threading.Event]] = []

        def add_writer(sid: int, seconds: float) -> None:
            """A writer with a session to ``sid`` alone (a schedule's ``writer`` step), stopped after ``seconds``."""
            done = threading.Event()
            w = ZkWriter(len(load), f"127.0.0.1:{z.members[sid - 1].client_port}", done, hold, rate=rate)
            load.append(w)
            w.start()
            timer = threading.Timer(seconds, done.set)
            timer.daemon = True
            timers.append((timer, done))
            timer.start()

        nemesis = ZkNemesis(z, seed, acked=lambda: sum(w.acked() for w in load),
                            set_load=lambda on: hold.clear() if on else hold.set(), add_writer=add_writer)
        try:
            if power_loss and schedule is None and writeback is not None:
                # a random schedule's first kill would otherwise find the start's files (ZooKeeper's first snapshot
                # is never fsynced) younger than the writeback delay, and every run would stop at that one finding
                # (docs/zookeeper.md, "The power cut"): under load, past the delay first
                time.sleep(writeback + 1.0)
                nemesis.log(f"warm-up of {writeback + 1.0:.0f} s: the start's files are past the writeback delay")
            for step in steps:
                nemesis.run(step)
        except (ZkError, OSError, RuntimeError) as e:
            result.problems.append(f"the schedule stopped: {e}")
        finally:
            hold.clear()
            result.problems += nemesis.heal_all()
            stop.wait(calm)
            stop.set()
            for timer, done in timers:
                timer.cancel()
                done.set()
            for t in (*load, *reading, *([sampler] if sampler else [])):
                t.join(30.0)
        result.problems += [w.error for w in load if w.error]
        if (why := _settle(z, SETTLE_TIMEOUT)) is not None:
            result.problems.append(why)
        finals: dict[int, list[tuple[int, str]]] = {}
        for m in z.members:
            for attempt in range(1, FINAL_READS + 1):
                try:
                    finals[m.id] = read_delivered(m.client_port, ROOT)
                    break
                except Exception as e:  # noqa: BLE001 -- recorded; the run fails
                    # a read of state is safe to repeat: a session lost under load (kazoo's ConnectionLoss while
                    # five JVMs share two cores) is asked again once the ensemble has settled again
                    if attempt == FINAL_READS:
                        result.problems.append(f"server {m.id} could not be read at the end ({FINAL_READS} tries): "
                                               f"{type(e).__name__}: {e}")
                    else:
                        _settle(z, SETTLE_TIMEOUT)
        result.events, result.counts = nemesis.events, dict(nemesis.counts)
    writes = [w for t in load for w in t.writes]
    samples = sampler.samples if sampler else []
    reads = reads_at_writes([r for t in reading for r in t.reads], finals)
    result.verdict = check(writes, finals, samples, reads) if finals else Verdict()
    result.writes, result.delivered, result.samples, result.reads = writes, finals, samples, reads
    result.finals = {sid: len(seq) for sid, seq in finals.items()}
    for sid, seq in finals.items():
        d = z.ensemble.store_dir(sid)
        logged = {v for _, v in read_logged(d, ROOT)}
        covered = max(snapshots(d), default=0)
        result.not_durable[sid] = [f"{v} (zxid {zx:#x})" for zx, v in seq if zx > covered and v not in logged]
    result.known = sightings(folder)
    if result.verdict.missed and z.recording.exists():
        try:
            result.sync_answers = explain(result.verdict.missed, decode_recording(z.recording), zabref)
        except WireError as e:  # the stale reads stay unexplained; the checks' verdict is what it was
            echo(f"  the recording could not be read to explain the stale reads: {e}")
    result.seconds = time.monotonic() - started
    echo(("PASS: " if result.ok else "FAIL: ") + result.summary())
    for line in result.problems + result.verdict.examples:
        echo(f"  {line}")
    for sid, missing in result.not_durable.items():
        if missing:
            echo(f"  server {sid} delivered {len(missing)} writes its logs do not hold, e.g. {missing[:3]}")
    for line in summarise(result.known):
        echo(f"  known bug in ZooKeeper's own log: {line}")
    for a in result.sync_answers:
        echo(f"  known bug, from the stale read and the recording: {a.line()}")
    echo(f"logs, data dirs and the recording in {folder}")
    return result


def write_report(result: ZkRunResult, path: str | os.PathLike[str]) -> None:
    """The report as JSON, replaced atomically."""
    write_file(path, json.dumps(result.to_json(), indent=1) + "\n")
