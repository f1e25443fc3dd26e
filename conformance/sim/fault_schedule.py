"""The faults of a simulated run: which kinds it enables (swarm testing), when each strikes, and how it heals.

Theory of operation: `_swarm` picks the run's fault kinds and rates from its seed (or takes the options'); the fault
task then draws, in virtual time, the next fault and its target from the run's random source, and schedules its end
(`FAULTS`, docs/simulation.md). `SimFaults` is a part of `conformance.sim.cluster.Simulation` (a mixin): it uses the
run's machines, network, loop and event log.
"""

from __future__ import annotations

import asyncio

from conformance.sim.options import FAULTS
from zabref.core.packets import ServerState
from zabref.storage import CrashPoint

__all__ = ["SimFaults"]


class SimFaults:
    """The faults of `conformance.sim.cluster.Simulation` (module docstring)."""

    def _swarm(self) -> dict[str, float]:
        """The fault kinds this run enables and their rates (per virtual second): the options', or a seeded subset."""
        chosen = self.options.faults
        if chosen is None:
            chosen = tuple(k for k in FAULTS if self.rng.random() < 0.5)
        return {k: round(self.rng.uniform(0.05, 1.0), 3) for k in chosen}

    async def _nemesis(self) -> None:
        kinds = [k for k in self.faults if k != "client_retry"]
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

    async def _fault_slow_disk(self) -> None:
        up = self._up()
        if up:
            sid = self.rng.choice(up)
            disk = self.machines[sid].disk
            disk.fsync_delay = self.rng.uniform(0.005, 0.4)
            self._event(f"slow disk s{sid} {disk.fsync_delay:.3f}s")
            await asyncio.sleep(self.rng.uniform(0.5, 5.0))
            disk.fsync_delay = 0.0
