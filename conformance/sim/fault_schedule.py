"""The faults of a simulated run: which kinds it enables (swarm testing), when each strikes, and how it heals.

Theory of operation: `_swarm` picks the run's fault kinds and rates from its seed (or takes the options'); the fault
task then draws, in virtual time, the next fault and its target from the run's random source, and schedules its end
(`FAULTS`, docs/simulation.md). `SimFaults` is a part of `conformance.sim.cluster.Simulation` (a mixin): it uses the
run's machines, network, loop and event log.
"""

from __future__ import annotations

import asyncio
import random

from conformance.sim.options import FAULTS, OWN_SOURCE
from zabref.core.packets import ServerState
from zabref.storage import CrashPoint

__all__ = ["SimFaults"]


class SimFaults:
    """The faults of `conformance.sim.cluster.Simulation` (module docstring)."""

    def _swarm(self) -> dict[str, float]:
        """The fault kinds this run enables and their rates (per virtual second): the options', or a seeded subset.
        A kind of `OWN_SOURCE` is chosen, timed and aimed from its own random source (`_source`)."""
        self._sources = {k: random.Random(f"{self.seed}:{k}") for k in OWN_SOURCE}
        chosen = self.options.faults
        if chosen is None:
            chosen = tuple(k for k in FAULTS if k not in OWN_SOURCE and self.rng.random() < 0.5)
            chosen += tuple(k for k in OWN_SOURCE if self._sources[k].random() < 0.5)
        return {k: round(self._source(k).uniform(0.05, 1.0), 3) for k in chosen}

    def _source(self, kind: str) -> random.Random:
        return self._sources.get(kind, self.rng)

    async def _nemesis(self) -> None:
        kinds = [k for k in self.faults if k != "client_retry" and k not in OWN_SOURCE]
        rate = sum(self.faults[k] for k in kinds)
        if not kinds:
            return
        weights = [self.faults[k] for k in kinds]
        while not self.recovering:
            await asyncio.sleep(self.rng.expovariate(rate))
            if self.recovering:
                return
            kind = self.rng.choices(kinds, weights)[0]
            self.injected[kind] = self.injected.get(kind, 0) + 1
            await getattr(self, f"_fault_{kind}")()

    async def _own_nemesis(self, kind: str) -> None:
        """The faults of one `OWN_SOURCE` kind, timed by its own source, beside `_nemesis`."""
        rng = self._source(kind)
        while not self.recovering:
            await asyncio.sleep(rng.expovariate(self.faults[kind]))
            if self.recovering:
                return
            self.injected[kind] = self.injected.get(kind, 0) + 1
            await getattr(self, f"_fault_{kind}")()

    def _up(self) -> list[int]:
        return [sid for sid in self.sids if self.machines[sid].up]

    def _leader(self) -> int | None:
        for sid in self._up():
            if self.machines[sid].server.node.core.state == ServerState.LEADING:
                return sid
        return None

    def _later_on(self, sid: int) -> None:
        self.loop.call_later(self.rng.uniform(0.2, 3.0), self._power_on, sid)

    async def _fault_reset(self) -> None:
        links = self.net.open_links()
        if links:
            link = self.rng.choice(links)
            self._event(f"reset {link.a.owner.machine}->{link.b.owner.machine}")
            self.net.reset(link)

    async def _fault_partition(self) -> None:
        sids = list(self.sids)
        self.rng.shuffle(sids)
        minority = len(sids) // 2
        leader = self._leader()
        how = self.rng.choice(("leader-minority", "leader-majority", "random"))
        if leader is not None and how != "random":
            sids.remove(leader)
            sids.insert(0 if how == "leader-minority" else len(sids), leader)
        else:
            how = "random"
        cut = self.rng.randint(1, len(sids) - 1) if how == "random" else minority
        groups = [[f"s{s}" for s in sids[:cut]], [f"s{s}" for s in sids[cut:]]]
        self._event(f"partition {how} {groups}")
        self.net.partition(groups)
        await asyncio.sleep(self.rng.uniform(0.3, 5.0))
        self._event("heal")
        self.net.heal()

    async def _fault_crash(self) -> None:
        up = self._up()
        if up:
            sid = self.rng.choice(up)
            if self._power_off(sid, tear=self.rng.choice((None, self.rng.randint(0, 64)))):
                self._later_on(sid)

    async def _fault_cluster_power(self) -> None:
        for sid in self._up():
            self._power_off(sid, tear=self.rng.choice((None, self.rng.randint(0, 64))))
        for sid in self.sids:
            self._later_on(sid)

    async def _fault_sync_crash(self) -> None:
        self._sync_crash_armed = True  # `_step` crashes a quorum at the next synchronization step

    def _crash_quorum(self, sid: int) -> None:
        others = [s for s in self.sids if s != sid]
        self.rng.shuffle(others)
        quorum = [sid] + others[: len(self.sids) // 2]
        self._event(f"quorum power cut during sync: {sorted(quorum)}")
        for s in quorum:
            if self._power_off(s, tear=self.rng.choice((None, self.rng.randint(0, 64)))):
                self._later_on(s)

    async def _fault_fsync_crash(self) -> None:
        self._arm(CrashPoint("fsync", self.rng.randint(1, 4)))

    async def _fault_torn_write(self) -> None:
        self._arm(CrashPoint("write", self.rng.randint(1, 3), int(2 ** self.rng.uniform(0, 12))))

    def _arm(self, point: CrashPoint) -> None:
        up = self._up()
        if up:
            sid = self.rng.choice(up)
            self._event(f"arm s{sid} {point}")
            self.machines[sid].disk.arm(point)

    async def _fault_pause(self) -> None:
        """A server stops for 0.2-3 s (SIGSTOP, a long GC pause, a frozen VM) -- the leader half the time -- and goes
        on (SIGCONT) believing what it believed: what arrived while it slept is read before its timers' wake-ups run
        (`conformance.sim.loop`). Its connections stay open and silent; its peers decide by their own timeouts."""
        rng, up, leader = self._source("pause"), self._up(), self._leader()
        if not up:
            return
        sid = leader if leader is not None and rng.random() < 0.5 else rng.choice(up)
        process = self.machines[sid].process
        self._event(f"pause s{sid}")
        self.loop.pause(process)
        await asyncio.sleep(rng.uniform(0.2, 3.0))
        if process.paused:  # not yet resumed by a power cut or the recovery
            self._event(f"continue s{sid}")
            self.loop.resume(process)

    async def _fault_slow_disk(self) -> None:
        up = self._up()
        if up:
            sid = self.rng.choice(up)
            disk = self.machines[sid].disk
            disk.fsync_delay = self.rng.uniform(0.005, 0.4)
            self._event(f"slow disk s{sid} {disk.fsync_delay:.3f}s")
            await asyncio.sleep(self.rng.uniform(0.5, 5.0))
            disk.fsync_delay = 0.0
