"""One simulated run: a whole zabref cluster, its clients and its faults in one process, a pure function of a seed.

Theory of operation
-------------------
Every server is the real `zabref.runtime.server.Server` -- the same node, pump, drivers, peers, election senders and
client port as a process started by ``zabref serve`` -- with the normal driver. What differs is only what it runs on:

* the event loop is a `conformance.sim.loop.SimLoop` shared by every server and client: virtual time, and an in-memory
  network (`conformance.sim.net`) with seeded delays, resets and partitions;
* its `zabref.runtime.machine.Machine` has a `zabref.storage.SimDisk` (the power-loss model: what is not fsynced is
lost; a
  torn write keeps a prefix), connection ids from the run's random source, a sync clock that counts the simulated
  disk's latency, an executor that completes a slow sync after that latency (virtual time), and no signals.

Determinism. The seed drives everything -- one `random.Random(seed)`, and a source of its own for the readers and
for each kind of `OWN_SOURCE` (below), seeded from the same number: which faults this run enables and how often (swarm
testing: each seed a different mix), network delays, which connection breaks, when clients write and to whom, when
machines lose power and for how long. The loop runs callbacks in a deterministic order, so the run -- every step of
every server, at its virtual time -- is a function of the seed and the options. The *event log* records each step
(spec action, parameters, packets sent, transactions delivered), each fault and each acknowledged write, one line
each; its BLAKE2b digest identifies the run, and `Result.replay` is the command that repeats it.

A *step* is one input the node took that made it take at least one spec action (a PING or an idle tick is not a
step). The run injects faults until ``steps`` steps were taken (or ``max_time`` virtual seconds passed), then the
*recovery*: every partition heals, every machine is powered on, disks are quick again. The cluster must then elect
one leader, which a quorum follows, and commit a new write within ``liveness_s`` virtual seconds, else the run fails
(liveness). Every acknowledged write must be in that leader's history at its zxid (durability).

Checkers. `Observer`\\ s see every step after the node took it (before it is durable: the spec's state is the
node's), every power cut and the end; an observer's message fails the run at once. The safety invariants of the spec
live in `conformance.sim.invariants` (they read the spec's variables through `conformance.replay.mapping`):
``zabref simulate`` plugs them in. The clients are `conformance.sim.clients`, the faults
`conformance.sim.fault_schedule` (both parts of `Simulation`), the options and the result `conformance.sim.options`.

Faults (`FAULTS`): ``reset`` (a connection breaks), ``partition`` (the leader isolated with a minority, the leader
with a majority, or a random split; healed after a while), ``crash`` (one machine loses power, torn or not, and
comes back later: several may overlap), ``cluster_power`` (every machine at once), ``sync_crash`` (a quorum loses
power just as a server enters synchronization), ``fsync_crash`` (the power goes at one of a server's next fsyncs,
before it takes effect), ``torn_write`` (at one of its next writes, keeping a prefix of up to 4 KiB), ``slow_disk``
(fsyncs take tens to hundreds of milliseconds for a while), ``client_retry`` (clients send a write again when its
outcome is unknown) and ``pause`` (a server stops and goes on, SIGSTOP and SIGCONT: `conformance.sim.loop`). A kind
of `OWN_SOURCE` (``pause``, added after the CI seeds were first recorded) is chosen, timed and aimed from a random
source of its own, so a seed whose swarm leaves it out runs as it did before the kind existed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Any, Protocol

from conformance.faults.history import Read
from conformance.sim.clients import SimClients
from conformance.sim.fault_schedule import SimFaults
from conformance.sim.loop import Process, SimLoop, Stuck
from conformance.sim.net import SimNetwork
from conformance.sim.options import FAULTS, OWN_SOURCE, Options, Result
from conformance.sim.validation import ActionLogs
from zabref.config import ClusterConfig, Config, ServerConfig, parse_config, render_config
from zabref.core.effects import Effects
from zabref.core.packets import ServerState
from zabref.errors import ZabError
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.machine import Machine
from zabref.runtime.server import Server
from zabref.storage import SimDisk

__all__ = ["FAULTS", "Options", "Result", "Observer", "Simulation", "simulate"]

#: Ports every simulated server listens on (each server is its own host, 127.0.0.<sid>).
QUORUM_PORT, ELECTION_PORT, CLIENT_PORT, CONTROL_PORT = 2888, 3888, 2181, 7000


class Observer(Protocol):
    """A checker of a run (module docstring): each method returns None, or why the run fails."""

    def step(self, sim: Simulation, sid: int, eff: Effects) -> str | None: ...

    def crashed(self, sim: Simulation, sid: int) -> str | None: ...

    def finished(self, sim: Simulation) -> str | None: ...


class _SimExecutor(Executor):
    """Runs a sync inline and completes it after the simulated disk's latency, in virtual time."""

    def __init__(self, loop: SimLoop, disk: SimDisk) -> None:
        self.loop, self.disk = loop, disk

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        before = self.disk.busy_s
        try:
            result = fn(*args, **kwargs)
        except Exception as e:
            fut.set_exception(e)
            return fut
        self.loop.call_later(self.disk.busy_s - before, fut.set_result, result)
        return fut


class _Disk(SimDisk):
    """A machine's disk: a power cut at a crash point first tells the simulator (its machine goes down)."""

    def __init__(self, on_cut: Callable[[], None]) -> None:
        super().__init__()
        self._on_cut = on_cut

    def cut_power(self, *, torn: bool = False):  # type: ignore[override]
        self._on_cut()
        return super().cut_power(torn=torn)


class _Recorder:
    """The action-log seam of `zabref.runtime.server.Server`: every step reaches the simulation."""

    def __init__(self, sim: Simulation, sid: int, process: Process) -> None:
        self.sim, self.sid, self.process = sim, sid, process
        # with --validate, the runtime's own action log too (conformance.sim.validation)
        self.log = sim.action_logs.open(sid) if sim.action_logs is not None else None

    def restart(self, sid: int, node: Any) -> None:
        self.sim._event(f"start s{sid} history={len(node.core.history)} acceptedEpoch={node.core.accepted_epoch} "
                        f"currentEpoch={node.core.current_epoch}")
        if self.log is not None:
            self.log.restart(sid, node)

    def step(self, node: Any, eff: Effects, cid: Any) -> None:
        if self.process.alive:
            if self.log is not None:
                self.log.step(node, eff, cid)
            self.sim._step(self.sid, eff)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Machine:
    def __init__(self, sim: Simulation, sid: int) -> None:
        self.sid = sid
        self.name = f"s{sid}"
        self.disk = _Disk(lambda: sim._power_off(sid, by_disk=True))
        self.process: Process | None = None
        self.server: Server | None = None

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.alive


def _config(options: Options) -> Config:
    servers = [ServerConfig(sid, f"127.0.0.{sid}", QUORUM_PORT, ELECTION_PORT, CLIENT_PORT, CONTROL_PORT,
                            f"/sim/{sid}") for sid in range(1, options.servers + 1)]
    cluster = ClusterConfig(options.tick_ms, options.init_limit, options.sync_limit, options.leader_logs_late)
    return parse_config(render_config(cluster, servers), "<simulation>")


class Simulation(SimClients, SimFaults):
    """One run (module docstring): ``Simulation(seed, options, observers).run()``."""

    def __init__(self, seed: int, options: Options = Options(), observers: Sequence[Observer] = ()) -> None:
        self.seed = seed
        self.options = options
        self.observers = list(observers)
        self.rng = random.Random(seed)
        self.net = SimNetwork(self.rng)
        self.loop = SimLoop(self.net)
        self.net.loop = self.loop
        self.loop.set_exception_handler(lambda loop, context: None)  # tasks a power cut left behind
        self.config = _config(options)
        self.sids = self.config.sids
        for s in self.config.servers:
            self.net.machine_of[s.host] = f"s{s.id}"
        self.machines = {sid: _Machine(self, sid) for sid in self.sids}
        self.action_logs = ActionLogs() if options.validate else None
        self.faults = self._swarm()
        self.events: list[str] = []
        self._hash = hashlib.blake2b(digest_size=16)
        self.steps = 0
        self.injected: dict[str, int] = {}
        self.acked: list[tuple[int, str]] = []  # (zxid, value) of every write a client was told is in
        #: every write, for the read check: value -> (first invoked, last completed, zxid if acknowledged)
        self.writes: dict[str, tuple[float, float, int | None]] = {}
        self.reads: list[Read] = []
        self.failure: str | None = None
        self.recovering = False
        self._done: asyncio.Future[None] | None = None
        self._sync_crash_armed = False
        self._clients: list[Process] = []

    # ------------------------------------------------------------------------------------------ the run

    def run(self) -> Result:
        zlog = logging.getLogger("zabref")
        level = zlog.level
        zlog.setLevel(logging.CRITICAL + 1)  # a power cut leaves errors behind on purpose; the event log is the record
        try:
            self.loop.run_until_complete(self._main())
        except Stuck as e:
            self._fail(f"stuck: {e}")
        finally:
            self._stop_everything()
            zlog.setLevel(level)
            self.loop.close()
        return Result(self.seed, self.options, self.failure, self.steps, round(self.loop.now, 6), self.faults,
                      dict(sorted(self.injected.items())), len(self.acked), self._hash.hexdigest(), self.events,
                      len(self.reads))

    async def _main(self) -> None:
        self._done = self.loop.create_future()
        kinds = ", ".join(f"{k}={r:.3g}" for k, r in self.faults.items()) or "none"
        self._event(f"seed {self.seed} servers {self.options.servers} faults {kinds}")
        for sid in self.sids:
            self.loop.call_later(self.rng.uniform(0, 0.05), self._power_on, sid)
        for k in range(self.options.clients):
            client = Process(f"c{k + 1}")
            self._clients.append(client)
            client.spawn(self.loop, self._client(k + 1), f"client-{k + 1}")
        for k in range(self.options.readers):
            reader = Process(f"r{k + 1}")
            self._clients.append(reader)
            reader.spawn(self.loop, self._reader(k + 1), f"reader-{k + 1}")
        if self.faults:
            self.loop.create_task(self._nemesis(), name="nemesis")
        for kind in OWN_SOURCE:
            if kind in self.faults:
                self.loop.create_task(self._own_nemesis(kind), name=f"nemesis-{kind}")
        self.loop.create_task(self._deadline(), name="deadline")
        await self._done

    def _stop_everything(self) -> None:
        for m in self.machines.values():
            if m.process is not None:
                self.loop.resume(m.process)
                m.process.kill()
        for c in self._clients:
            c.kill()
        for _ in range(100):  # let the cancellations run to their end (a cancelled task may await once more)
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            if not pending:
                break
            for task in pending:
                task.cancel()
            try:
                self.loop.run_until_complete(asyncio.sleep(0))
            except Stuck:
                break

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
            self._event(f"FAILED {message}")
        self._finish()

    # ------------------------------------------------------------------------------------------ the event log

    def _event(self, text: str) -> None:
        line = f"{self.loop.now:.6f} {text}"
        self.events.append(line)
        self._hash.update(line.encode())
        self._hash.update(b"\n")

    def _step(self, sid: int, eff: Effects) -> None:
        if self.failure is not None:
            return
        self.steps += 1
        actions = " ".join(f"{a.module}.{a.name}({','.join(f'{k}={v}' for k, v in a.params)})" for a in eff.actions)
        sends = " ".join(f"{p.type.name}:{peer}:{p.zxid:x}" for peer, p in eff.send)
        deliver = " ".join(f"{t.zxid:x}" for t in eff.deliver)
        self._event(f"s{sid} {actions}" + (f" send {sends}" if sends else "") + (f" deliver {deliver}" if deliver
                                                                                   else ""))
        for observer in self.observers:
            message = observer.step(self, sid, eff)
            if message is not None:
                self._fail(f"step {self.steps} at s{sid}: {message}")
                return
        if self._sync_crash_armed and any(a.name in ("FollowerProcessNEWLEADER", "LeaderProcessACKEPOCH")
                                          for a in eff.actions):
            self._sync_crash_armed = False
            self.loop.call_soon(self._crash_quorum, sid)
        if self.steps >= self.options.steps and not self.recovering:
            self.loop.call_soon(self._recover)

    # ------------------------------------------------------------------------------------------ machines

    def server(self, sid: int) -> Server | None:
        """The running server ``sid`` (None while its machine is down)."""
        m = self.machines[sid]
        return m.server if m.up else None

    def _power_on(self, sid: int) -> None:
        m = self.machines[sid]
        if m.up or self.failure is not None:
            return
        m.disk.crash_at = None
        process = Process(m.name)
        loop, disk = self.loop, m.disk
        machine = Machine(disk, connection_ids=lambda: self.rng.getrandbits(63),
                          clock=lambda: loop.now + disk.busy_s, executor=_SimExecutor(loop, disk), signals=False)
        server = Server(self.config, sid, NormalDriver(self.options.tick_ms / 1000),
                        action_log=_Recorder(self, sid, process), machine=machine)
        m.process, m.server = process, server
        self.net.power_on(m.name)
        process.spawn(loop, self._serve(sid, server), f"server-{sid}")

    async def _serve(self, sid: int, server: Server) -> None:
        try:
            code = await server.run()
        except ZabError as e:  # e.g. a log its recovery refuses: what a power cut must never leave
            self._fail(f"server {sid} cannot start: {type(e).__name__}: {e}")
            return
        if self.machines[sid].server is server and self.machines[sid].up:
            self._fail(f"server {sid} stopped by itself with exit code {code}")

    def _power_off(self, sid: int, *, tear: int | None = None, by_disk: bool = False) -> bool:
        """Machine ``sid`` loses power (its disk keeps what was durable; ``tear``: a prefix of the last write)."""
        m = self.machines[sid]
        if not m.up:
            return False
        self.loop.resume(m.process)  # a paused machine loses power too: what it held is queued, its tasks cancelled
        m.process.kill()
        self.net.power_off(m.name)
        if not by_disk:  # a crash point cuts the disk itself, right after this
            m.disk.crash(tear=tear)
        m.disk.crash_at = None
        m.disk.fsync_delay = 0.0
        self._event(f"power off s{sid}" + (" (crash point)" if by_disk else f" tear={tear}" if tear else ""))
        for observer in self.observers:
            message = observer.crashed(self, sid)
            if message is not None:
                self._fail(f"after the power cut of s{sid}: {message}")
        if by_disk:
            self.loop.call_later(self.rng.uniform(0.2, 3.0), self._power_on, sid)
        return True

    # ------------------------------------------------------------------------------------------ the end

    async def _deadline(self) -> None:
        await asyncio.sleep(self.options.max_time)
        self._recover()

    def _recover(self) -> None:
        if self.recovering or self.failure is not None:
            return
        self.recovering = True
        self._event(f"recovery after {self.steps} steps")
        self.net.heal()
        for sid, m in self.machines.items():
            if m.up and m.process.paused:
                self._event(f"continue s{sid}")
                self.loop.resume(m.process)
        # Half the runs end with a minority down for good (the last fault): the rest must still make progress.
        down = set(self.rng.sample(self.sids, self.rng.randint(1, len(self.sids) // 2))) \
            if "crash" in self.faults and self.rng.random() < 0.5 else set()
        for sid, m in self.machines.items():
            m.disk.crash_at = None
            m.disk.fsync_delay = 0.0
            if sid in down:
                self._power_off(sid)
            elif not m.up:
                self._power_on(sid)
        if down:
            self._event(f"stays down: {sorted(down)}")
        probe = Process("probe")
        self._clients.append(probe)
        probe.spawn(self.loop, self._liveness(), "liveness")

    def established_leader(self) -> int | None:
        """The one LEADING server, in broadcast, that a quorum (itself included) follows in broadcast; else None."""
        up = {sid: self.machines[sid].server.node.core for sid in self._up()}
        leaders = [s for s, c in up.items() if c.state == ServerState.LEADING]
        if len(leaders) != 1:
            return None
        lead = up[leaders[0]]
        if str(lead.zab_state) != "BROADCAST":
            return None
        with_it = [s for s, c in up.items() if c.leader == leaders[0] and str(c.zab_state) == "BROADCAST"]
        return leaders[0] if 2 * len(with_it) > len(self.sids) else None

    async def _liveness(self) -> None:
        started = self.loop.now
        deadline = started + self.options.liveness_s
        n = 0
        while self.loop.now < deadline:
            leader = self.established_leader()
            if leader is not None:
                value, n = f"probe.{n}", n + 1
                invoked = self.loop.now
                answer = await self._request(leader, {"op": "submit", "value": value}, timeout=2.0)
                self.writes[value] = (invoked, self.loop.now, answer.get("zxid"))
                if "zxid" in answer:
                    self.acked.append((answer["zxid"], value))
                    self._event(f"live: leader s{leader} committed {value} at {answer['zxid']:x} "
                                f"{self.loop.now - started:.3f}s after the last fault")
                    self._check_end(leader)
                    return
            await asyncio.sleep(self.options.tick_ms / 1000)
        states = {sid: (m.server.node.core.state.name, str(m.server.node.core.zab_state)) if m.up else "down"
                  for sid, m in self.machines.items()}
        self._fail(f"liveness: no leader committed a write within {self.options.liveness_s}s after the last fault "
                   f"(servers: {states})")

    def _check_end(self, leader: int) -> None:
        history = {t.zxid: t.value for t in self.machines[leader].server.node.core.history}
        for zxid, value in self.acked:
            if history.get(zxid) != value.encode():
                got = history.get(zxid)
                self._fail(f"acknowledged write lost: {value!r} at zxid {zxid:#x} is "
                           f"{'missing' if got is None else repr(got)} in leader s{leader}'s history")
                return
        if self.reads and (why := self._check_reads(leader)) is not None:
            self._fail(why)
            return
        for observer in self.observers:
            message = observer.finished(self)
            if message is not None:
                self._fail(message)
                return
        self._finish()


def simulate(seed: int, options: Options = Options(), observers: Sequence[Observer] = ()) -> Result:
    """Run one simulation (module docstring)."""
    return Simulation(seed, options, observers).run()
