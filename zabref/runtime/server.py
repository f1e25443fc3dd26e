"""The server process: one asyncio loop carrying a `zabref.core.node.Node`'s inputs in and its effects out.

Theory of operation
-------------------
The node (`zabref.core.node`) makes every decision; this module only does the I/O around it, the same way in both
modes. There is ONE step path: every input -- a quorum packet, an election notification, a closed connection, a
tick of the clock, a client request, a forwarded request's answer -- is an *event*, a small function that calls one
node entry point and returns its `Effects`. ONE task, the *pump*, runs events in arrival order, a batch at a time
(all that are ready, at most `BATCH_LIMIT`), and then, for the whole batch:

1. makes every step's ``persist`` operations durable: each step is one atomic batch (`zabref.storage.Storage.apply`),
   and ONE ``sync`` -- one write, one fsync -- makes the whole pump batch durable (group commit), in the machine's
   worker (a thread), or in the loop's own thread when the last sync was quick (`INLINE_SYNC_SECONDS`), unless the
   batch holds fewer than `INLINE_SYNC_MIN_STEPS` persisting steps while the server's clients wait on more;
2. only then carries out the rest, in order: quorum packets (one socket write per connection per batch), election
   notifications, connections to close, client answers, forwards; after a change of role or zabState, packets the
   node deferred are offered again.

So no packet -- an ACK, a LEADERINFO, a leader's PROPOSAL -- leaves before the persistence of its step is durable
(seed 000, phase 3, step 2: "log and sync proposals to disk and send ACK"), and a power cut loses exactly the steps
of the batch in progress, none of whose packets left: a crash is the spec's Crash. A storage failure stops the
server (exit code 2): the node would otherwise run ahead of its disk.

A leader that logs late (``[cluster] leader_logs_late``, spec/Zab.tla's LeaderLogsLate, ZooKeeper's way) is the one
exception, and the spec's: its own log write of a PROPOSAL (``Effects.late``) is written and synced after the batch's
sends -- by the pump itself, or while the leader is loaded (`LOG_BESIDE_OUTSTANDING`) by the *log writer*
(`_log_writer`, a task beside the pump that syncs on the disk thread, as ZooKeeper's SyncRequestProcessor is a thread
of its own) --, and then the node hears that it is durable (``Node.logged``, an event of the pump: the spec's
LeaderOwnACK), so that the leader's sync runs beside its followers' instead of before their PROPOSAL leaves, and a
loaded pump goes on with the next batch meanwhile. A power cut in between loses that write, which the spec's Crash
allows a leader in BROADCAST (``Kept(i)``). Late writes still waiting, or still being written, are durable before any
later step that persists or changes role takes effect (`_durable_first`; every write of the storage waits for the
one before it, `_persist`). The control driver holds them until the control socket's ``log_late`` (the conformance
driver's LeaderOwnACK).

The mode is a *driver* (`zabref.runtime.drivers`) behind two questions: when does an inbound packet or notification
reach the node, and what time is it. The normal driver delivers everything as it arrives and ticks the node every
``tick_ms`` on the loop's clock; the control driver (``--control``, for the conformance driver) holds every inbound
packet and notification in its connection's queue until the control socket releases it, and advances a logical
clock only when told (``tick``). PINGs are never held: they only keep connections alive -- but for a step PING of a
sync's round (spec/ZabSync.tla, `zabref.core.clients`), which is held as any other packet. Nothing else differs.

Connections to the other servers, and the fault layer's one seam, are `zabref.runtime.links`.

Reset (control mode only). The control socket's ``reset`` stops the server; `run_server` then removes its storage
from the data directory (`wipe_data_dir`: every file but the logs) and runs a new `Server` -- new event loop, new
`Machine` and disk, new storage, the same start-up as a new process -- as incarnation k + 1 (``ping`` says which).
The conformance driver reuses a cluster's processes across traces this way instead of forking new ones; a Crash is
still a SIGKILL and a new process. Between the two, every object the old incarnation tenured is collected
(`zabref.runtime.tenure`: a server process keeps the survivors of each full collection out of later ones).

Surroundings. The network and time are the running event loop's (asyncio streams, ``loop.time()``); the disk, the
connection ids, the clock that times a sync, the sync worker and the signals are the `zabref.runtime.machine.Machine`'s.
A real process gets asyncio's loop and `Machine()`; the simulator (`conformance.sim`) runs every server of a cluster on
one virtual-time loop with simulated machines. Nothing here depends on which.

"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import shutil
import signal
import ssl
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import zabref
from zabref.config import Config
from zabref.core import payloads
from zabref.core.effects import Effects, Timing
from zabref.core.node import Node
from zabref.core.packets import Notification, PacketType, QuorumPacket, ServerState
from zabref.core.zab import HANDLERS, ZabCore
from zabref.errors import ConfigError, RemoteProtocolError, StorageError, ZabError
from zabref.net import clientport, listener, peers, votes, wire, zkclientport, zkwire
from zabref.net.security import Guard
from zabref.runtime import control
from zabref.runtime.actionlog import ActionLog
from zabref.runtime.drivers import ControlDriver, NormalDriver
from zabref.runtime.inbox import Inbox
from zabref.runtime.links import HOLD_LIMIT, PeerLinks
from zabref.runtime.machine import Machine
from zabref.runtime.tenure import TENURING
from zabref.storage import Storage

__all__ = ["Server", "HOLD_LIMIT", "BATCH_LIMIT", "INLINE_SYNC_SECONDS", "INLINE_SYNC_MIN_STEPS",
           "LOG_BESIDE_OUTSTANDING", "run_server",
           "wipe_data_dir", "LOG_FILES"]

log = logging.getLogger("zabref")

#: Most events run by the pump before it persists and sends (bounds the latency of one batch).
BATCH_LIMIT = 1_000
#: A batch syncs in the loop's own thread when the previous sync took at most this long (a slow disk goes to the
#: disk thread, so that the loop keeps reading sockets while it waits).
INLINE_SYNC_SECONDS = 0.002
#: ... unless the batch holds fewer persisting steps than this while this server's clients wait on more requests
#: than it holds: such a batch syncs on the disk thread, so that the loop reads the sockets and answers meanwhile and
#: the next batch comes fuller (docs/performance.md, "Fewer, fuller syncs"); a lone request still syncs inline.
INLINE_SYNC_MIN_STEPS = 8
#: A late leader's own log writes go to the log writer, which syncs them on the disk thread beside the pump, while at
#: least this many of its proposals wait for their commit (a loaded leader, whose loop would otherwise stand still in
#: the sync); with fewer the pump makes them durable itself after its sends, where the thread's hand-off would cost
#: more CPU than the wait (docs/performance.md, "A log writer beside the pump").
LOG_BESIDE_OUTSTANDING = 32
#: Packet types a quorum connection may carry: what some role of the core takes, PING, a sync's REQUEST and SYNC, and
#: a ZooKeeper learner's REVALIDATE (`zabref.core.node.Node._revalidate`).
QUORUM_TYPES = frozenset(t for table in HANDLERS.values() for t in table) | {PacketType.PING, PacketType.REQUEST,
                                                                           PacketType.SYNC, PacketType.REVALIDATE}

Event = Callable[[], Effects | None]


def timing_of(config: Config) -> Timing:
    c = config.cluster
    return Timing(tick_s=c.tick_ms / 1000, init_limit=c.init_limit, sync_limit=c.sync_limit)


class Server(PeerLinks):
    """One zabref server: ``await Server(config, sid, driver).run()``; `stop` ends it. ``machine``: what it runs on
    (`zabref.runtime.machine`; default: this process, its disk and its signals)."""

    def __init__(self, config: Config, sid: int, driver: Any, *, action_log: Any = None,
                 machine: Machine | None = None, control_token: bytes | None = None, incarnation: int = 1) -> None:
        """``control_token``: open the control port (`zabref.runtime.control`), which admits only this token.
        ``incarnation``: how many servers this process has run, this one included (`run_server`)."""
        self.incarnation = incarnation
        #: Set by the control socket's ``reset`` ("now", or "pause": SIGSTOP first): when this server stops,
        #: `run_server` wipes its data directory and runs the next incarnation.
        self.reset_requested: str | None = None
        self.config = config
        self.sid = sid
        self.me = config.server(sid)
        self.driver = driver  # zabref.runtime.drivers.NormalDriver or ControlDriver
        self.action_log = action_log  # an ActionLog, or anything with its restart/step/flush/close
        self.machine = Machine() if machine is None else machine
        self.control_token = control_token
        self.guard = Guard()  # TLS and quorum authentication (`zabref.net.security`), read from the config by `run`
        self.storage: Storage | None = None
        self.node: Node | None = None
        self.conns: dict[int, peers.Connection] = {}  # quorum connections by peer
        self.votes: dict[int, votes.VoteChannel] = {}  # inbound election connections by serial
        self.senders: dict[int, votes.ElectionSender] = {}
        self.cut_peers: set[int] = set()  # the fault layer's cut links (`zabref.runtime.links`)
        self.exit_code = 0
        self.client_waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._rids = itertools.count(1)
        self._events: Inbox[tuple[Event, asyncio.Future[Effects] | None]] = Inbox()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop `run` runs on (looked up once, not a request)
        self._stopping = asyncio.Event()
        self._listeners: list[listener.Listener] = []
        self._accepted: set[listener.Accepted] = set()  # every inbound connection not yet ended
        self._tasks: dict[asyncio.Task[Any], None] = {}  # in creation order (a set's order would vary by run)
        self._last_sync_s = 0.0
        self._unflushed: dict[int, peers.Connection] = {}
        #: A late leader's log writes not yet on the disk (``Effects.late``, each with its ``late_upto``), in order:
        #: written after the sends of their batch (by the pump or the log writer, `_log_writer`), or held by the
        #: control driver until told (`write_late`)
        self.late: list[tuple[tuple[Any, ...], tuple[int, int]]] = []
        self._late_waiting = asyncio.Event()  # wakes the log writer
        self._writer: asyncio.Task[None] | None = None  # the log writer, from the first late write on
        #: Done when the last storage write begun is durable (or failed): each write waits for the one before it
        self._disk_done: asyncio.Future[None] | None = None
        self._disk_failed: BaseException | None = None
        #: Serves the client port (from `run`) and carries the node's forwards to the leader (`_apply`).
        self.client_port = clientport.ClientPort(self)

    @property
    def core(self) -> ZabCore:
        return self.running().core

    def running(self) -> Node:
        """The node (made by `run`; every event of the pump comes after)."""
        node = self.node
        assert node is not None, "the server's node is made by Server.run"
        return node

    def opened(self) -> Storage:
        """The storage (opened by `run`, before the node; every write of the pump comes after)."""
        storage = self.storage
        assert storage is not None, "the storage is opened by Server.run"
        return storage

    # ------------------------------------------------------------------------------------------ life cycle

    async def run(self) -> int:
        """Open the data dir, listen, serve until `stop` (SIGTERM/SIGINT); returns the process exit code."""
        config = zkwire.config_text((s.id, s.host, s.quorum_port, s.election_port) for s in self.config.servers)
        if len(wire.encode_notification(Notification(ServerState.LOOKING, 0, 0, 0, 0), config)) > \
                peers.MAX_ELECTION_FRAME:
            raise ConfigError(f"{self.config.path}: the servers' addresses make a notification longer than "
                              f"{peers.MAX_ELECTION_FRAME} bytes (each one carries the configuration, as ZooKeeper's)")
        self.guard = Guard.from_config(self.config)  # reads the certificates and the secret: ConfigError first
        disk = self.machine.disk
        disk.mkdir(self.me.data_dir)
        self.storage, report = Storage.open(self.me.data_dir, disk=disk)
        log.info("storage: %s", report)
        self.node = Node(self.sid, self.config.sids, self.storage.persistent(), timing_of(self.config),
                         logs_late=self.config.cluster.leader_logs_late,
                         zk_clients=self.me.zk_client_port is not None)
        self._loop = asyncio.get_running_loop()
        self.machine.install_signals(self._loop, self.stop)
        # Every peer's election sender exists before any port listens: a peer's connection may be accepted, and its
        # handler run, while a later port is still being opened (uvloop runs an accept at once).
        me = f"{self.me.host}:{self.me.election_port}"  # the initial message's election address
        for other in self.config.servers:
            if other.id != self.sid:
                self.senders[other.id] = votes.ElectionSender(
                    self.sid, other.id, other.host, other.election_port, address=me, config=config, guard=self.guard,
                    on_connection=self._dialed_votes(other.id))
        await self.listen("quorum_port", self._accept_quorum, tls=self.guard.quorum_server)
        await self.listen("election_port", self._accept_votes, tls=self.guard.quorum_server)
        await self.listen("client_port", self.client_port.handle, tls=self.guard.client_server)
        if self.me.zk_client_port is not None:
            await self.listen("zk_client_port", zkclientport.ZkClientPort(self, self.sid).handle,
                              tls=self.guard.client_server)
        if self.control_token is not None:
            await self.listen("control_port", control.ControlPort(self, self.control_token).handle,
                              host=self.me.control_host, limit=control.MAX_LINE)
        self.spawn(self._pump(), "pump")
        if self.action_log is not None:
            self.action_log.restart(self.sid, self.node)
        self.enqueue(lambda: self.running().start(self.driver.now()))
        self.driver.start(self)
        control_at = f"{self.me.control_host}:{self.me.control_port}" if self.control_token is not None else "none"
        log.info("server %d ready (%s mode, %s build, %s loop): quorum %s:%d, election %d, client %d, control %s; "
                 "history %d txns, acceptedEpoch %d, currentEpoch %d", self.sid, self.driver.name, zabref.build(),
                 type(self._loop).__module__.split(".")[0], self.me.host,
                 self.me.quorum_port, self.me.election_port, self.me.client_port, control_at, len(self.core.history),
                 self.core.accepted_epoch, self.core.current_epoch)
        await self._stopping.wait()
        await self._shutdown()
        return self.exit_code

    async def listen(self, key: str, handler: listener.Handler, host: str | None = None, *,
                     tls: ssl.SSLContext | None = None, limit: int = listener.LIMIT) -> None:
        """Listen on this server's ``key`` port (a config key) at its host (or ``host``), over TLS with ``tls``
        (`zabref.net.listener`); ConfigError naming it if the port is taken. Every connection accepted is in `_accepted`
        until its handler returns (one accepted once the server stops is closed at once)."""
        port = getattr(self.me, key)
        host = self.me.host if host is None else host

        async def tracked(accepted: listener.Accepted) -> None:
            if self._stopping.is_set():  # accepted as the server stops: `_shutdown` closed the others already
                accepted.close()
                return
            self._accepted.add(accepted)
            try:
                await handler(accepted)
            finally:
                self._accepted.discard(accepted)

        try:
            self._listeners.append(await listener.Listener.open(host, port, tracked, tls=tls, limit=limit,
                                                                name=f"{key} {host}:{port}"))
        except OSError as e:
            for opened in self._listeners:
                opened.close()
            if self.storage is not None:
                self.storage.close()
            raise ConfigError(f"{self.config.path}: server {self.sid}: {key}: cannot listen on "
                              f"{host}:{port}: {e.strerror or e}") from None

    def stop(self, code: int = 0) -> None:
        self.exit_code = self.exit_code or code
        self._stopping.set()

    async def _shutdown(self) -> None:
        log.info("server %d stopping", self.sid)
        for port in self._listeners:
            port.close()
        # Every inbound connection ends here too (what it has queued is written first), so that its handler sees
        # the end of its stream and returns even if the cancellation below is lost: on Python 3.11 asyncio.wait_for
        # drops a cancellation that arrives as the awaited read completes (gh-86296), and a handler that then waits
        # on a peer's open connection would keep the event loop from closing (a stop, or a reset, that never ends).
        for accepted in list(self._accepted):
            accepted.close()
        for sender in self.senders.values():
            sender.close()
        for conn in list(self.conns.values()):
            conn.close("server stopping")
        for task in list(self._tasks):
            task.cancel()
        if self.machine.executor is not None:
            self.machine.executor.shutdown(wait=True)
        if self.action_log is not None:
            self.action_log.close()
        if self.storage is not None:
            try:
                self.storage.sync()
            except StorageError as e:
                log.error("final sync failed: %s", e)
            self.storage.close()

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks[task] = None
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())
            self.stop(3)

    # ------------------------------------------------------------------------------------------ events

    def enqueue(self, event: Event) -> None:
        """Run ``event`` in the pump; nobody waits for it (its errors are logged)."""
        self._events.put((event, None))

    async def call(self, event: Event) -> Effects:
        """Run ``event`` in the pump; return its Effects once carried out, or raise its error."""
        fut: asyncio.Future[Effects] = asyncio.get_running_loop().create_future()
        self._events.put((event, fut))
        return await fut

    def submit(self, make: Callable[[int, float], Effects]) -> asyncio.Future[dict[str, Any]]:
        """A client request: ``make(rid, now)`` runs one node entry point in the pump; the future of the node's answer
        to ``rid`` (cancel it to stop waiting)."""
        rid = next(self._rids)
        fut: asyncio.Future[dict[str, Any]] = (self._loop or asyncio.get_running_loop()).create_future()
        self.client_waiters[rid] = fut
        self.enqueue(lambda: make(rid, self.driver.now()))
        fut.add_done_callback(lambda _: self.client_waiters.pop(rid, None))
        return fut

    async def _pump(self) -> None:
        while True:
            batch = await self._events.take(BATCH_LIMIT)
            done: list[tuple[asyncio.Future[Effects] | None, Effects | BaseException]] = []
            effects: list[Effects] = []
            for event, fut in batch:
                try:
                    eff = event() or Effects()
                except ZabError as refused:
                    if fut is None:
                        log.warning("%s", refused)
                    done.append((fut, refused))
                    continue
                except Exception as bug:  # a bug: stop (exit 3), but never leave a caller waiting
                    log.exception("internal error in an event; stopping")
                    for f in [f for _, f in batch] + [f for f, _ in done]:
                        if f is not None and not f.done():
                            f.set_exception(ZabError(f"internal error: {type(bug).__name__}: {bug}"))
                    self.stop(3)
                    return
                effects.append(eff)
                done.append((fut, eff))
                for peer in eff.dial:  # the connection (and its id) exists from now on; it is dialed in _apply
                    self._new_outbound(peer)
                if self.action_log is not None and eff.actions:
                    self.action_log.step(self.node, eff, self._cid)
            if self.action_log is not None:
                self.action_log.flush()  # before anything of the batch takes effect: no effect without its line
            steps, ordered = self._durable_first(effects)
            if steps or (ordered and self._disk_done is not None):
                try:
                    await self._persist(steps)
                except (StorageError, OSError, ValueError) as failed:
                    self._storage_failed(failed, [fut for fut, _ in done])
                    return
            for eff in effects:
                self._apply(eff)
            self.flush()
            for fut, answer in done:
                if fut is None or fut.done():
                    continue
                if isinstance(answer, BaseException):
                    fut.set_exception(answer)
                else:
                    fut.set_result(answer)
            if self.late and self.driver.writes_late:
                core = self.running().core
                if len(core.history) - core.last_committed >= LOG_BESIDE_OUTSTANDING:
                    self._late_waiting.set()  # the log writer syncs on the disk thread; the pump goes on
                    if self._writer is None:
                        self._writer = self.spawn(self._log_writer(), "log writer")
                elif not await self._log_late(beside=False):
                    return  # stopping (`write_late`)

    async def _log_writer(self) -> None:
        """A loaded late leader's log writes, made durable beside the pump: all that wait, with one sync on the disk
        thread; again while more wait. Ends when a write fails (the server stops)."""
        while True:
            await self._late_waiting.wait()
            self._late_waiting.clear()
            if not await self._log_late(beside=True):
                return

    async def _log_late(self, *, beside: bool) -> bool:
        """The late writes waiting made durable (`write_late`), then the node hears it (``Node.logged``, an event of
        the pump); False when a write failed (the server stops)."""
        try:
            upto = await self.write_late(beside=beside)
        except StorageError:
            return False
        if upto is not None:
            serial, k = upto
            self.enqueue(lambda: self.running().logged(serial, k, self.driver.now()))
        return True

    def _durable_first(self, effects: list[Effects]) -> tuple[list[Any], bool]:
        """The storage steps of a batch to make durable before any of its effects: every step's ``persist``, and
        before a step that persists or changes role, the late writes still waiting (this batch's or held): a leader
        that stopped leading has them durable before anything of its next role leaves (the spec's Kept(i) is the
        whole history then), and the disk keeps its order. A batch's late writes after its last such step wait.
        Second: whether the batch has such a step, whose effects must also wait for a late write in flight."""
        steps: list[Any] = []
        ordered = False
        for eff in effects:
            if eff.persist or eff.role is not None:
                ordered = True
                if self.late:
                    steps += [ops for ops, _ in self.late]
                    self.late.clear()
            if eff.persist:
                steps.append(eff.persist)
            if eff.late:
                assert eff.late_upto is not None
                self.late.append((eff.late, eff.late_upto))
        return steps, ordered

    async def write_late(self, upto: int | None = None, *, beside: bool = False) -> tuple[int, int] | None:
        """Make the waiting late writes durable -- those up to history entry ``upto`` of their role, or all --, in
        order, with one sync (on the disk thread if ``beside``); the (role serial, history length) they bring the
        log to, None when none waited. A failed write stops the server, as in the pump, and raises StorageError."""
        take = list(itertools.takewhile(lambda item: upto is None or item[1][1] <= upto, self.late))
        if not take:
            return None
        del self.late[:len(take)]
        try:
            await self._persist([ops for ops, _ in take], beside=beside)
        except (StorageError, OSError, ValueError) as e:
            self._storage_failed(e, ())
            raise StorageError(f"storage failed: {e}") from e
        return take[-1][1]

    def _storage_failed(self, e: BaseException, waiting: Iterable[asyncio.Future[Effects] | None]) -> None:
        """A write or sync failed: stop the server (exit code 2: the node would otherwise run ahead of its disk),
        failing the callers still ``waiting``."""
        log.critical("storage failed, stopping: %s", e)
        for fut in waiting:
            if fut is not None and not fut.done():
                fut.set_exception(StorageError(f"storage failed: {e}"))
        self.stop(2)

    async def _persist(self, steps: list[Any], *, beside: bool = False) -> None:
        """Each step one atomic batch, then one sync for them all (on the disk thread if ``beside``; else inline when
        the disk has been quick, unless the batch is small while more client requests wait). Storage writes are
        durable in the order they are begun: this one first waits for the one before it (the log writer's may be
        in flight); with no ``steps`` it only waits. After a failed write every later one fails too."""
        loop = self._loop or asyncio.get_running_loop()
        before, done = self._disk_done, loop.create_future()
        self._disk_done = done
        try:
            if before is not None and not before.done():
                await asyncio.shield(before)  # a cancelled waiter leaves the write before it running
            if self._disk_failed is not None:
                raise StorageError(f"an earlier write failed: {self._disk_failed}")
            if not steps:
                return
            storage = self.opened()
            for ops in steps:
                storage.apply(ops)
            small = len(steps) < INLINE_SYNC_MIN_STEPS and len(self.client_waiters) > len(steps)
            if self._last_sync_s <= INLINE_SYNC_SECONDS and not small and not beside:
                self._last_sync_s = self._timed_sync()
            else:
                worker = self.machine.worker(f"zabref-{self.sid}-disk")
                self._last_sync_s = await loop.run_in_executor(worker, self._timed_sync)
        except BaseException as e:
            if not isinstance(e, asyncio.CancelledError):
                self._disk_failed = self._disk_failed or e
            raise
        finally:
            done.set_result(None)
            if self._disk_done is done:
                self._disk_done = None

    def _timed_sync(self) -> float:
        """Sync the storage; the seconds it took on the machine's clock."""
        clock = self.machine.clock
        started = clock()
        self.opened().sync()
        return clock() - started

    def _apply(self, eff: Effects) -> None:
        """Everything of ``eff`` but persist (durable already)."""
        for peer in eff.dial:
            conn = self.conns.get(peer)
            if conn is not None and conn.state == "connecting" and not conn.dialing:
                conn.dialing = True
                self.spawn(self._run_dialed(conn), f"quorum-to-{peer}")
        for peer, packet in eff.send:
            self.send(peer, packet)
        for send in eff.notify:
            if self.link_open(send.to):
                self.senders[send.to].send(send.notification)
        for peer in eff.close:
            conn = self.conns.get(peer)
            if conn is not None:
                self.close_connection(conn, "this server went back to leader election", report=False)
        for rid, answer in eff.answers:
            fut = self.client_waiters.get(rid)
            if fut is not None and not fut.done():
                fut.set_result(answer)
        for rid, leader, request in eff.forwards:
            self.spawn(self.client_port.forward(rid, leader, request), f"forward-{rid}")
        if eff.role is not None:
            core = self.core
            log.info("state -> %s (zabState %s, leader %d, acceptedEpoch %d, currentEpoch %d, lastZxid %#x)",
                     eff.role.name, core.zab_state, core.leader, core.accepted_epoch, core.current_epoch,
                     core.last_zxid)
        if eff.unblock:
            blocked = [conn for conn in self.conns.values() if conn.blocked]
            for conn in blocked:
                conn.blocked = False
            if blocked:
                self.driver.unblocked(self, blocked)

    # ------------------------------------------------------------------------------------------ inbound

    def deliver(self, conn: peers.Connection) -> Effects | None:
        """The event of the head packet of ``conn``'s queue reaching the node (the one step path for packets)."""
        if conn.closed or not conn.inbound or conn.blocked:
            return None
        packet = conn.take()
        try:
            eff = self.running().packet(conn.peer, packet, self.driver.now(), tag=conn.cid)
        except RemoteProtocolError as e:
            self.close_connection(conn, f"protocol error: {e}", report=True)
            raise
        if eff.deferred:
            conn.inbound.appendleft(packet)
            conn.blocked = True
        return eff

    def tick(self, now: float) -> Effects:
        """The event of time passing: the node's timers, told whether an election sender still holds a
        notification (the node resends its vote only when none does: `zabref.core.node`)."""
        return self.running().tick(now, any(sender.holds() for sender in self.senders.values()))

    def deliver_vote(self, channel: votes.VoteChannel) -> Effects | None:
        """The event of the head notification of ``channel`` reaching the node."""
        if channel.closed or not channel.inbound:
            return None
        n = channel.inbound.popleft()
        try:
            return self.running().notification(channel.peer, n, self.driver.now())
        except RemoteProtocolError as e:
            log.warning("election notification from %d dropped: %s", channel.peer, e)
            return None

    def _arrived(self, conn: peers.Connection, packet: QuorumPacket) -> None:
        if packet.type not in QUORUM_TYPES:
            raise ValueError(f"{packet.type.name} (type {int(packet.type)}) is not a packet of this protocol")
        conn.received += 1
        if packet.type == PacketType.PING and packet.zxid != payloads.PING_STEP:
            # never held: a keepalive only says the peer is there; a step PING of a sync's round (spec/ZabSync.tla)
            # waits in order as every other packet
            self.enqueue(lambda: None if conn.closed else self.running().packet(conn.peer, packet, self.driver.now(),
                                                                                tag=conn.cid))
            return
        if len(conn.inbound) >= HOLD_LIMIT:
            raise ValueError(f"more than {HOLD_LIMIT} packets wait on this connection")
        conn.hold(packet)
        self.driver.arrived(self, conn)


def _event_loop() -> asyncio.AbstractEventLoop:
    """A server process's event loop: uvloop's where it is installed (its reads, writes and timers are C; measured:
    docs/performance.md, "uvloop"), else asyncio's own. Nothing of the server depends on which: the listeners open
    TLS at the accept (`zabref.net.listener`) and a write to a closing stream is dropped on both
    (`zabref.net.streams`)."""
    try:
        import uvloop
    except ImportError:  # Windows, or installed without it
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_server(config: Config, sid: int, *, control: bool, action_log: str | None = None,
               control_token: bytes | None = None) -> int:
    """Run one server until SIGTERM/SIGINT; returns the exit code (0 clean, 2 storage failure, 3 internal error).
    ConfigError if control mode or a control token is asked for and the server has no control port."""

    if control and control_token is None:
        raise ConfigError("control mode (--control) is driven through the control port: give --control-token")
    if control_token is not None and config.server(sid).control_port is None:
        raise ConfigError(f"{config.path}: server {sid} has no control_port, so --control-token has no port to open")

    async def main(server: Server) -> int:
        return await server.run()

    incarnation = 1
    TENURING.install()  # the survivors of each full collection are not walked again (zabref.runtime.tenure)
    while True:
        driver = ControlDriver() if control else NormalDriver(config.cluster.tick_ms / 1000)
        log_ = ActionLog.open(action_log, sid) if action_log else None
        server = Server(config, sid, driver, action_log=log_, control_token=control_token, incarnation=incarnation)
        with asyncio.Runner(loop_factory=_event_loop) as runner:
            code = runner.run(main(server))
        if not server.reset_requested or code != 0:
            return code
        # The control socket's reset: the next incarnation is a new Server -- new event loop, new Machine (its
        # disk, so a power-loss disk's unsynced state goes with the old one), new storage -- on an empty data
        # directory, through the same start-up as a new process; only the interpreter and its imports are kept.
        pause = server.reset_requested == "pause"
        del server, driver, log_
        TENURING.release()  # the old incarnation's objects, cycles among them too, are collected now
        removed = wipe_data_dir(config.server(sid).data_dir)
        if pause:
            os.kill(os.getpid(), signal.SIGSTOP)  # until the driver has seen every old server of its cluster gone
        incarnation += 1
        log.info("server %d reset: incarnation %d starts on an empty data directory (removed %s)", sid, incarnation,
                 ", ".join(removed) or "nothing")


#: What a data directory holds that is not the server's storage: the logs (kept across a reset).
LOG_FILES = frozenset({"server.log", "stderr.log"})


def wipe_data_dir(data_dir: Path) -> list[str]:
    """Remove everything in ``data_dir`` but `LOG_FILES` (the reset's empty data directory); the names removed."""
    removed = []
    for entry in sorted(Path(data_dir).iterdir()):
        if entry.name in LOG_FILES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry.name)
    return removed
