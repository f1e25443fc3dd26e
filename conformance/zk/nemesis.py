"""Runs a fault schedule (`conformance.zk.schedule`) against a `conformance.zk.harness.ProxiedEnsemble`.

Theory of operation
-------------------
`ZkNemesis.run(step)` does one step: process faults through the ensemble (``kill`` is SIGKILL to the server's
process group, ``pause``/``resume`` SIGSTOP/SIGCONT, ``restart`` a start on the same data dir, ``crash_in_sync`` a
start and a SIGKILL the moment the server's ``currentEpoch`` file is replaced -- polled every 0.2 ms: the only
moment of ZooKeeper's synchronization that its disk shows from outside), network faults
through the proxy (``cut``, ``isolate``, ``heal``: blocked directed pairs, nothing dropped), and the waits
(``sleep``, ``writes``, ``settle``) with a deadline each. The write load is not the nemesis's: ``writes``,
``load`` and ``writer`` call the hooks it is given (``acked()``, the number of acknowledged writes so far,
``set_load(on)`` and ``add_writer(sid, seconds)``).

Selectors are resolved when the step runs, from the servers' ``srvr`` answers: ``leader``, ``follower#k`` (by id,
highest first), ``follower`` and ``any`` (drawn from the seeded generator). A server already in a fault the
nemesis began and did not end (killed, paused, cut) is *busy*: ``leader``, ``follower`` and ``any`` pick a free one
-- when the leader is busy, ``leader`` falls back to a free server (logged), so random episodes stay on disjoint
servers. ``$name`` is the server an earlier step bound with ``as``. A selector that finds no server (no leader
during an election) is retried until ``RESOLVE_TIMEOUT``; then the step fails with a `ScheduleError` naming it.

Every step is logged in ``events`` (seconds since the start, text) with the server it resolved to, and counted by
op. `heal_all` ends every fault still on: restarts the killed, resumes the paused, heals the network.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Callable

from conformance.zk.ensemble import mode_of
from conformance.zk.harness import ProxiedEnsemble
from conformance.zk.ports import KINDS
from conformance.zk.schedule import ScheduleError, Step

__all__ = ["ZkNemesis", "RESOLVE_TIMEOUT", "RESTART_TIMEOUT", "WRITES_TIMEOUT"]

RESOLVE_TIMEOUT = 30.0
RESTART_TIMEOUT = 60.0
WRITES_TIMEOUT = 60.0
EPOCH_POLL = 0.0002


class ZkNemesis:
    def __init__(self, z: ProxiedEnsemble, seed: int, acked: Callable[[], int] = lambda: 0,
                 set_load: Callable[[bool], None] = lambda on: None,
                 add_writer: Callable[[int, float], None] | None = None) -> None:
        self.z = z
        self.rng = random.Random(f"zk-nemesis:{seed}")
        self.acked = acked
        self.set_load = set_load
        self.add_writer = add_writer
        self.names: dict[str, int] = {}
        self.killed: set[int] = set()
        self.paused: set[int] = set()
        self.counts: Counter[str] = Counter()
        self.events: list[tuple[float, str]] = []
        self.t0 = time.monotonic()

    @property
    def sids(self) -> list[int]:
        return [m.id for m in self.z.members]

    @property
    def busy(self) -> set[int]:
        return self.killed | self.paused | {s for t in self.z.faults.blocked for s in t[:2]}

    def log(self, text: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 3), text))

    # ------------------------------------------------------------------------------------------ selectors

    def modes(self) -> dict[int, str | None]:
        return {s: None if s in self.killed or s in self.paused else mode_of(self.z.members[s - 1].client_port)
                for s in self.sids}

    def _pick(self, sel: object, exclude: set[int]) -> int | None:
        if isinstance(sel, int):
            return sel
        assert isinstance(sel, str)
        if sel.startswith("$"):
            return self.names[sel[1:]]
        free = [s for s in self.sids if s not in self.busy and s not in exclude]
        if sel == "any":
            return self.rng.choice(free) if free else None
        modes = self.modes()
        if sel == "leader":
            leader = next((s for s, m in modes.items() if m == "leader"), None)
            if leader is None:
                return None
            if leader in self.busy or leader in exclude:
                self.log(f"the leader {leader} is busy: a free server instead")
                return self.rng.choice(free) if free else None
            return leader
        followers = sorted((s for s, m in modes.items() if m == "follower"), reverse=True)
        if sel == "follower":
            free_f = [s for s in followers if s in free]
            return self.rng.choice(free_f) if free_f else None
        k = int(sel.split("#")[1])
        if not any(m == "leader" for m in modes.values()) or len(followers) < k:
            return None  # an election is under way: the ranking is not known yet
        return followers[k - 1]

    def resolve(self, step: Step, key: str = "server", exclude: set[int] | None = None) -> int:
        sel = step.get(key)
        deadline = time.monotonic() + RESOLVE_TIMEOUT
        while True:
            sid = self._pick(sel, exclude or set())
            if sid is not None:
                return sid
            if time.monotonic() > deadline:
                raise ScheduleError(f"{step}: no server matches {key} {sel!r} within {RESOLVE_TIMEOUT} s "
                                    f"(modes {self.modes()}, busy {sorted(self.busy)})")
            time.sleep(0.1)

    # ------------------------------------------------------------------------------------------ steps

    def run(self, step: Step) -> None:
        op = step.op
        self.counts[op] += 1
        if op == "sleep":
            time.sleep(step.get("seconds"))
            return
        if op == "load":
            self.set_load(step.get("on"))
            self.log(f"load {'on' if step.get('on') else 'held'}")
            return
        if op == "writes":
            self._wait_writes(step)
            return
        if op == "settle":
            running = [self.resolve(step)] if step.get("server") is not None else \
                [s for s in self.sids if s not in self.killed]
            self.z.ensemble.wait_serving(running, step.get("timeout", RESTART_TIMEOUT))
            self.log(f"settled: {self.modes()}")
            return
        kinds = (step.get("port"),) if step.get("port") else KINDS
        on = f" ({step.get('port')} port)" if step.get("port") else ""
        if op == "heal" and step.get("server") is None:
            self.z.faults.heal(kinds=kinds)
            self.log(f"heal all links{on}")
            return
        sid = self.resolve(step)
        if step.get("as"):
            self.names[step.get("as")] = sid
        ens = self.z.ensemble
        if op == "name":
            self.log(f"name {sid} {step.get('as')}")
            return
        if op == "writer":
            if self.add_writer is None:
                raise ScheduleError(f"{step}: this run has no client load to add a writer to")
            self.add_writer(sid, float(step.get("seconds")))
            self.log(f"a writer on {sid} alone for {step.get('seconds')} s")
            return
        if op == "kill":
            ens.kill(sid)
            self.killed.add(sid)
            self.paused.discard(sid)

        elif op == "restart":
            self.paused.discard(sid)
            ens.restart(sid)
            self.killed.discard(sid)
            if step.get("wait", True):
                ens.wait_serving([sid], step.get("timeout", RESTART_TIMEOUT))
        elif op == "crash_in_sync":
            self._crash_in_sync(step, sid)
            self.killed.add(sid)
            self.paused.discard(sid)
            return
        elif op == "pause":
            ens.pause(sid)
            self.paused.add(sid)
        elif op == "resume":
            if ens.running(sid):
                ens.resume(sid)
            self.paused.discard(sid)
        elif op in ("cut", "heal") and step.get("peer") is not None:
            peer = self.resolve(step, "peer", exclude={sid})
            (self.z.faults.cut if op == "cut" else self.z.faults.heal)(sid, peer, kinds=kinds)
            self.log(f"{op} {sid} <-> {peer}{on}")
            return
        elif op == "isolate":
            self.z.faults.isolate(sid, kinds=kinds)
        elif op == "heal":
            self.z.faults.heal(sid, kinds=kinds)
        self.log(f"{op} {sid}{on}" + (f" (as {step.get('as')})" if step.get("as") else ""))

    def _crash_in_sync(self, step: Step, sid: int) -> None:
        """Start ``sid`` and SIGKILL it as soon as its ``currentEpoch`` file is replaced (ZooKeeper writes it to a
        temporary file and renames it: a new inode), polled every `EPOCH_POLL` s."""
        ens = self.z.ensemble
        ens.kill(sid)
        path = ens.store_dir(sid) / "version-2" / "currentEpoch"

        def mark() -> tuple[int, int] | None:
            try:
                st = path.stat()
            except OSError:
                return None
            return st.st_ino, st.st_mtime_ns

        before = mark()
        old = path.read_text().strip() if before else None
        ens.start_server(sid)
        timeout = step.get("timeout", RESTART_TIMEOUT)
        deadline = time.monotonic() + timeout
        while mark() == before:
            if time.monotonic() > deadline or not ens.running(sid):
                ens.kill(sid)
                raise ScheduleError(f"{step}: server {sid}'s currentEpoch did not change within {timeout} s")
            time.sleep(EPOCH_POLL)
        ens.kill(sid)
        new = path.read_text().strip() if path.exists() else None
        self.log(f"crash_in_sync {sid}: killed when currentEpoch went {old} -> {new}"
                 + (f" (as {step.get('as')})" if step.get("as") else ""))

    def _wait_writes(self, step: Step) -> None:
        target = self.acked() + step.get("count")
        timeout = step.get("timeout", WRITES_TIMEOUT)
        deadline = time.monotonic() + timeout
        while self.acked() < target:
            if time.monotonic() > deadline:
                raise ScheduleError(f"{step}: {target - self.acked()} of {step.get('count')} writes still not "
                                    f"acknowledged after {timeout} s (modes {self.modes()})")
            time.sleep(0.05)
        self.log(f"{step.get('count')} more writes acknowledged")

    def heal_all(self, timeout: float = RESTART_TIMEOUT) -> list[str]:
        """End every fault still on; the problems met (a server that would not serve again)."""
        problems = []
        self.z.faults.heal()
        for sid in sorted(self.paused):
            if self.z.ensemble.running(sid):
                self.z.ensemble.resume(sid)
        self.paused.clear()
        for sid in sorted(self.killed):
            self.z.ensemble.restart(sid)
        self.killed.clear()
        try:
            self.z.ensemble.wait_serving(self.sids, timeout)
        except Exception as e:  # noqa: BLE001 -- recorded: the verdict shows what it cost
            problems.append(f"after healing: {e}")
        self.log("healed everything")
        return problems
