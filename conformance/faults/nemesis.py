"""The nemesis: injects and heals faults on a `zabref.runtime.cluster.LocalCluster` of normal-mode servers.

Theory of operation
-------------------
Six kinds of fault, each one *episode* with a start and an end. The servers run on the power-loss disk
(``ZABREF_DISK=powerloss``, `zabref.storage`), so a SIGKILL is a power cut: what a server wrote and did not fsync is
lost.

``kill``     SIGKILL a server -- a power cut; at the end, start it again from its data dir.
``torn``     a power cut in the middle of a write: SIGKILL the server, start it again armed with a crash point
             (``ZABREF_CRASH_AT=write:K:T``) so that it dies at its K-th write with only T bytes of it on disk (a torn
             write); at the end, start it again unarmed (its recovery drops the torn batch).
``pause``    SIGSTOP a server (a long GC pause, a hung VM: its sockets stay open, nothing answers); at the end, SIGCONT.
``cut``      cut the link between two servers, both directions (the runtime's fault layer, docs/faults.md: the
             control op ``partition`` at both ends); at the end, ``heal`` it.
``isolate``  cut every link of one server; at the end, heal them.
``clock``    move one server's clock forward by twice (initLimit + 1) ticks (the control op ``clock_jump``): its node
             sees every peer silent that long and takes its timeout at once -- a follower FollowerTimeout, a leader
             LeaderTimeout, the spec's spontaneous timeouts on a running cluster; nothing to undo at the end.

The schedule comes from one `random.Random(seed)`: kinds are taken in rounds, each round a shuffled list of all
six (so a short run still injects every kind); the target is the current leader half of the time (the fault that
forces an election and a recovery), else any server; an episode lasts `Timing.duration` and the next one starts
`Timing.gap` later. At most ``concurrency`` episodes run at once and they touch disjoint sets of servers, so no cut
has to be re-applied to a server that was killed or paused meanwhile. The workload's timing is not seeded, so two
runs with one seed inject the same faults but not at the same moments of the protocol.

`Nemesis.step` is called in a loop by the runner; it also notices a server that exited although nobody killed it
(an internal error, a storage failure), records it with the tail of its log, and starts it again.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field

from zabref.runtime.cluster import LocalCluster
from zabref.runtime.control import ControlError
from zabref.storage import ENV_CRASH_AT

__all__ = ["KINDS", "Timing", "Episode", "Nemesis"]

KINDS = ("kill", "torn", "pause", "cut", "isolate", "clock")


@dataclass(frozen=True)
class Timing:
    """Seconds: how long an episode lasts (uniform in ``duration``) and the pause before the next (``gap``)."""

    duration: tuple[float, float] = (1.0, 3.0)
    gap: tuple[float, float] = (0.5, 1.5)


@dataclass
class Episode:
    kind: str
    target: int
    servers: frozenset[int]  # every server it touches
    links: tuple[tuple[int, int], ...] = ()
    until: float = 0.0
    began: float = 0.0  # time.monotonic() when it began


@dataclass
class Nemesis:
    cluster: LocalCluster
    seed: int
    timing: Timing = field(default_factory=Timing)
    concurrency: int = 1
    counts: Counter[str] = field(default_factory=Counter)
    events: list[tuple[float, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: every episode over: (kind, began, ended) in time.monotonic() seconds (for the availability figures)
    spans: list[tuple[str, float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.active: list[Episode] = []
        self.t0 = time.monotonic()
        self.next_start = self.t0
        self._kinds: list[str] = []

    # ------------------------------------------------------------------------------------------ loop

    def step(self) -> None:
        """End the episodes that are due, notice unexpected exits, start an episode if one is due."""
        now = time.monotonic()
        for ep in [e for e in self.active if e.until <= now]:
            self._end(ep)
        self.check_exits()
        if len(self.active) < self.concurrency and now >= self.next_start:
            ep = self._plan()
            if ep is not None:
                self._begin(ep)
                self.next_start = time.monotonic() + self.rng.uniform(*self.timing.gap)

    def heal_all(self) -> None:
        """End every active episode now (restart, resume, heal)."""
        for ep in list(self.active):
            self._end(ep)
        self.check_exits()

    @property
    def busy(self) -> frozenset[int]:
        return frozenset().union(*(e.servers for e in self.active))

    # ------------------------------------------------------------------------------------------ planning

    def _next_kind(self) -> str:
        if not self._kinds:
            self._kinds = list(KINDS)
            self.rng.shuffle(self._kinds)
        return self._kinds.pop()

    def _plan(self) -> Episode | None:
        sids = sorted(self.cluster.servers)
        free = [s for s in sids if s not in self.busy]
        kind = self._next_kind()
        if (kind == "isolate" and self.active) or not free or (kind == "cut" and len(free) < 2):
            self._kinds.append(kind)  # retry this kind when the other episodes are over
            return None
        leader = self._leader(free) if self.rng.random() < 0.5 else None
        target = leader if leader is not None else self.rng.choice(free)
        until = time.monotonic() + self.rng.uniform(*self.timing.duration)
        if kind == "cut":
            other = self.rng.choice([s for s in free if s != target])
            return Episode(kind, target, frozenset({target, other}), ((target, other),), until)
        if kind == "isolate":
            return Episode(kind, target, frozenset(sids), tuple((target, s) for s in sids if s != target), until)
        return Episode(kind, target, frozenset({target}), (), until)

    def _leader(self, candidates: list[int]) -> int | None:
        for sid in candidates:
            try:
                with self.cluster[sid].control(timeout=1.0) as c:
                    if c.request("state")["variables"]["state"] == "LEADING":
                        return sid
            except (OSError, ControlError, KeyError):
                continue
        return None

    # ------------------------------------------------------------------------------------------ doing

    def _log(self, text: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 3), text))

    def _begin(self, ep: Episode) -> None:
        server = self.cluster[ep.target]
        if ep.kind == "kill":
            server.kill()
            self.counts["kill"] += 1
        elif ep.kind == "torn":
            server.kill()
            point = f"write:{self.rng.randint(1, 20)}:{self.rng.randint(0, 64)}"
            server.start(env={ENV_CRASH_AT: point})
            self.counts["torn"] += 1
            ep.links = ()
            self._log(f"torn write armed at {ep.target}: {point}")
        elif ep.kind == "pause":
            os.kill(server.proc.pid, signal.SIGSTOP)
            self.counts["pause"] += 1
        elif ep.kind == "clock":
            c = self.cluster.config.cluster
            self._control(ep.target, "clock_jump", seconds=2 * (c.init_limit + 1) * c.tick_ms / 1000)
            self.counts["clock"] += 1
        else:
            for a, b in ep.links:
                self._control(a, "partition", peers=[b])
                self._control(b, "partition", peers=[a])
            self.counts[ep.kind] += 1
            self.counts["link cut"] += len(ep.links)
        ep.began = time.monotonic()
        self.active.append(ep)
        self._log(f"{ep.kind} {ep.target}" + (f" links {list(ep.links)}" if ep.links else ""))

    def _end(self, ep: Episode) -> None:
        server = self.cluster[ep.target]
        self.active.remove(ep)
        self.spans.append((ep.kind, ep.began, time.monotonic()))
        if ep.kind in ("kill", "torn"):
            if server.running:  # "torn": it may not have reached its crash point
                server.kill()
            server.start()
            try:
                server.wait_ready(30.0)
            except Exception as e:  # noqa: BLE001 -- recorded; the final check will show what it cost
                self.problems.append(f"server {ep.target} did not restart: {e}")
            self.counts["restart"] += 1
        elif ep.kind == "pause":
            os.kill(server.proc.pid, signal.SIGCONT)
            self.counts["resume"] += 1
        elif ep.kind == "clock":
            pass  # a jump is over once taken
        else:
            for a, b in ep.links:
                self._control(a, "heal", peers=[b])
                self._control(b, "heal", peers=[a])
            self.counts["link heal"] += len(ep.links)
        self._log(f"end {ep.kind} {ep.target}")

    def _control(self, sid: int, op: str, **fields: object) -> None:
        for attempt in range(3):
            try:
                with self.cluster[sid].control(timeout=5.0) as c:
                    c.request(op, **fields)
                return
            except (OSError, ControlError) as e:
                if attempt == 2:
                    self.problems.append(f"{op} {fields} at server {sid} failed: {e}")
                time.sleep(0.2)

    def check_exits(self) -> None:
        killed = {e.target for e in self.active if e.kind in ("kill", "torn")}
        for sid, server in sorted(self.cluster.servers.items()):
            if sid in killed or server.running:
                continue
            code = server.proc.returncode if server.proc else None
            self.counts["unexpected exit"] += 1
            self.problems.append(f"server {sid} exited by itself with code {code}; its log ends:\n{server.tail(10)}")
            self._log(f"server {sid} exited by itself (code {code}); restarting it")
            server.start()
            try:
                server.wait_ready(30.0)
            except Exception as e:  # noqa: BLE001
                self.problems.append(f"server {sid} did not restart: {e}")
