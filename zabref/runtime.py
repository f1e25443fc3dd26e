"""The server process: one asyncio event loop wiring the Zab core, its disk log and its TCP connections.

Theory of operation
-------------------
Everything that changes the core goes through ONE queue of events, taken by ONE task, the *pump* (so the core, a
plain object, is never touched by two things at once). An event is a small function that calls one core entry point
(``receive``, ``elect_leader``, ``client_request``, a timeout, ``connection_closed``) and returns its `Output`s. The
pump takes every event that is ready, runs them in arrival order, and then, for the whole batch:

1. applies every ``persist`` operation to the `Storage` with `apply_persist` -- consecutive appends of the batch share
   ONE fsync (group commit) -- in a worker thread, so sockets keep being read meanwhile; or, when the batch only
   appends a little (`INLINE_SYNC_BYTES`) and the last sync was quick (`INLINE_SYNC_SECONDS`), in the loop's own
   thread, saving the two thread wake-ups of the hand-off;
2. only then writes the ``send`` packets (so an ACK never leaves before its proposal is on disk: seed 000, phase 3,
   step 2), wakes the clients waiting for deliveries, closes the connections the core said to close;
3. answers the callers that wait for the event (control requests, client submits).

The packets of one batch to one peer leave in ONE socket write (`peers.Connection.flush`).

One exception to step 2, in normal mode only (``send_before_sync``): a LEADING server in BROADCAST writes its
PROPOSALs (and COMMITs) *before* the fsync of its own log append, as ZooKeeper's leader does, so that its fsync and
the followers' run at the same time. Only the longest prefix of the batch's outputs that are of that kind
(`_may_send_early`: no role change, no close, no persist but appends, only PROPOSAL / COMMIT / INFORM packets) goes
early; everything else waits for the sync as above. This is safe because the leader counts itself in a quorum
(``leader_process_ack`` assumes it holds its whole history) only when it takes an ACK, and it takes no event -- no
ACK -- until the pump has finished the batch, fsync included: an ACK of a proposal can only arrive after the
PROPOSAL left, so it is run in a later batch, when the leader's append is durable. A COMMIT can only name a
transaction ACKed before this batch, hence durable here. If the leader crashes before its fsync, a follower may hold
a proposal the leader lost: it was never committed (its commit needed the leader's durable ACK), and the next
epoch's sync truncates it, as in ZooKeeper. Followers never send early: their ACK still leaves after their fsync.
In control mode every send waits for the sync, as the spec's steps do (`tests/test_runtime.py`).

A storage failure stops the server (exit code 2): the core would otherwise run ahead of its disk.

Connections (`zabref.peers.Connection`): a follower dials its leader when the core first sends to it; a leader takes
the connections its followers open. Packets from a peer are processed in arrival order (seed 000). A connection that
ends (EOF, reset, bad bytes, a packet the protocol forbids) is closed, logged with its reason, and reported to the
core with ``connection_closed``; connections the core closes itself (GoLooking) are not reported back to it.

Two modes. In *normal* mode packets go to the core as they arrive, and `zabref.normal` runs FastLeaderElection,
PINGs and timeouts. In *control* mode (``--control``, for the conformance driver) nothing happens by itself: inbound
packets are decoded and HELD in a FIFO per connection (at most `HOLD_LIMIT` packets) until the driver releases one
through the control socket (`zabref.control`); a closed connection is still reported at once, and its held packets
are dropped (the spec empties both channels of a closed connection in the same step).

Fault layer (normal mode only; docs/faults.md). ``cut_links(peers)`` makes this server behave as if the network
between it and those peers were cut, both directions: its quorum and election connections with them are closed,
new ones are refused (inbound) or fail (outbound), and election notifications to them are dropped, until
``heal_links``. The fault runner (`zabref.faults`) applies a cut at both ends through the control socket.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zabref import peers, wire
from zabref.config import Config
from zabref.core import (HANDLERS, OBSERVER_HANDLERS, AppendTxns, LearnerPhase, ObserverPhase, Output, Persistent,
                         ZabCore, ZabState, apply_persist)
from zabref.disklog import Storage
from zabref.errors import ConfigError, ProtocolError, RemoteProtocolError, StorageError, ZabError
from zabref.packets import PacketType, QuorumPacket, ServerState

__all__ = ["Server", "StepError", "HOLD_LIMIT", "BATCH_LIMIT", "INLINE_SYNC_BYTES", "INLINE_SYNC_SECONDS", "run_server"]

log = logging.getLogger("zabref")

#: Most packets held from one connection in control mode; one more closes the connection.
HOLD_LIMIT = 10_000
#: Most events run by the pump before it persists and sends (bounds the latency of one batch).
BATCH_LIMIT = 1_000
#: A batch whose storage work is only appends of at most this many value bytes syncs in the loop's thread ...
INLINE_SYNC_BYTES = 64 * 1024
#: ... provided the previous sync took at most this long (a slow disk goes back to the worker thread, so that the
#: loop keeps reading sockets while it waits).
INLINE_SYNC_SECONDS = 0.002
#: Packets a leader in BROADCAST may write before the fsync of the same batch (module docstring).
EARLY_TYPES = frozenset({PacketType.PROPOSAL, PacketType.COMMIT, PacketType.INFORM})
#: Packet types a quorum connection may carry: what some role of the core takes (observers' included), and PING.
QUORUM_TYPES = frozenset(t for tables in (HANDLERS, OBSERVER_HANDLERS) for table in tables.values() for t in table) | {
    PacketType.PING}

Event = Callable[[], list[Output]]


class StepError(ZabError):
    """An event failed; ``outputs`` (e.g. the report of the connection it closed) must still be applied."""

    def __init__(self, message: str, outputs: list[Output]) -> None:
        super().__init__(message)
        self.outputs = outputs


class Server:
    """One zabref server: ``await Server(config, sid, control=...).run()``; `stop` ends it."""

    def __init__(self, config: Config, sid: int, *, control: bool = False) -> None:
        self.config = config
        self.sid = sid
        self.me = config.server(sid)
        self.control = control
        self.storage: Storage | None = None
        self.core: ZabCore | None = None
        self.conns: dict[int, peers.Connection] = {}
        self.normal: Any = None  # zabref.normal.NormalMode in normal mode
        self._events: asyncio.Queue[tuple[Event, asyncio.Future[list[Output]] | None]] = asyncio.Queue()
        self._changed = asyncio.Event()  # set (and replaced) after every batch that delivered or changed role
        self._disk = ThreadPoolExecutor(1, thread_name_prefix=f"zabref-{sid}-disk")
        self._stopping = asyncio.Event()
        self._listeners: list[asyncio.base_events.Server] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self.exit_code = 0
        self.cut_peers: set[int] = set()  # fault layer: peers whose links are cut (normal mode only)
        self.send_before_sync = not control  # a leader's PROPOSALs leave before its own fsync (module docstring)
        self._last_sync_s = 0.0  # how long the last apply_persist took (chooses inline or worker thread)
        self._unflushed: dict[int, peers.Connection] = {}  # connections with packets queued in this batch

    # ------------------------------------------------------------------------------------------ life cycle

    async def run(self) -> int:
        """Open the data dir, listen, serve until `stop` (SIGTERM/SIGINT); returns the process exit code."""
        from zabref import clientport, control  # noqa: PLC0415 (the modules import this one)

        self.me.data_dir.mkdir(parents=True, exist_ok=True)
        self.storage, report = Storage.open(self.me.data_dir)
        log.info("storage: %s", report)
        self.core = ZabCore(self.sid, self.config.participants, Persistent.from_storage(self.storage),
                            observers=self.config.observers)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        host = self.me.host
        await self.listen("quorum_port", self._accept_quorum)
        await self.listen("client_port", clientport.ClientPort(self).handle)
        await self.listen("control_port", control.ControlPort(self).handle, limit=control.MAX_LINE)
        self.spawn(self._pump(), "pump")
        if not self.control:
            from zabref.normal import NormalMode  # noqa: PLC0415

            self.normal = NormalMode(self)
            await self.normal.start()
        log.info("server %d ready (%s mode): quorum %s:%d, election %d, client %d, control %d; history %d txns, "
                 "acceptedEpoch %d, currentEpoch %d", self.sid, "control" if self.control else "normal", host,
                 self.me.quorum_port, self.me.election_port, self.me.client_port, self.me.control_port,
                 len(self.core.history), self.core.accepted_epoch, self.core.current_epoch)
        await self._stopping.wait()
        await self._shutdown()
        return self.exit_code

    async def listen(self, key: str, handler: Any, **kwargs: Any) -> None:
        """Listen on this server's ``key`` port (a config key); ConfigError naming it if the port is taken."""
        port = getattr(self.me, key)
        try:
            self._listeners.append(await asyncio.start_server(handler, self.me.host, port, **kwargs))
        except OSError as e:
            for listener in self._listeners:
                listener.close()
            self.storage.close()
            raise ConfigError(f"{self.config.path}: server {self.sid}: {key}: cannot listen on "
                              f"{self.me.host}:{port}: {e.strerror or e}") from None

    def stop(self, code: int = 0) -> None:
        self.exit_code = self.exit_code or code
        self._stopping.set()

    async def _shutdown(self) -> None:
        log.info("server %d stopping", self.sid)
        for listener in self._listeners:
            listener.close()
        if self.normal is not None:
            self.normal.close()
        for conn in list(self.conns.values()):
            conn.close("server stopping")
        for task in list(self._tasks):
            task.cancel()
        self._disk.shutdown(wait=True)
        if self.storage is not None:
            try:
                self.storage.sync()
            except StorageError as e:
                log.error("final sync failed: %s", e)
            self.storage.close()

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())
            self.stop(3)

    # ------------------------------------------------------------------------------------------ fault layer

    def cut_links(self, sids: set[int]) -> None:
        """Cut the links to ``sids``: close their quorum and election connections, refuse new ones, drop traffic."""
        unknown = sorted(sids - set(self.config.sids) | (sids & {self.sid}))
        if unknown:
            raise ValueError(f"cannot cut links to {unknown}: not other servers of this cluster")
        self.cut_peers |= sids
        log.warning("fault layer: links to %s cut (now cut: %s)", sorted(sids), sorted(self.cut_peers))
        for sid in sids:
            conn = self.conns.get(sid)
            if conn is not None:
                self.close_connection(conn, "link cut by the fault layer", report=None)
        if self.normal is not None:
            self.normal.set_links_cut(sids, True)

    def heal_links(self, sids: set[int]) -> None:
        """Undo `cut_links` for ``sids``."""
        self.cut_peers -= sids
        log.warning("fault layer: links to %s healed (now cut: %s)", sorted(sids), sorted(self.cut_peers))
        if self.normal is not None:
            self.normal.set_links_cut(sids, False)

    # ------------------------------------------------------------------------------------------ events

    def enqueue(self, event: Event) -> None:
        """Run ``event`` in the pump; nobody waits for it (its errors are logged)."""
        self._events.put_nowait((event, None))

    async def call(self, event: Event) -> list[Output]:
        """Run ``event`` in the pump; return its Outputs once persisted and sent, or raise its error."""
        fut: asyncio.Future[list[Output]] = asyncio.get_running_loop().create_future()
        self._events.put_nowait((event, fut))
        return await fut

    async def _pump(self) -> None:
        assert self.core is not None and self.storage is not None
        while True:
            batch = [await self._events.get()]
            while len(batch) < BATCH_LIMIT and not self._events.empty():
                batch.append(self._events.get_nowait())
            outputs: list[Output] = []
            early = 0  # outputs[:early] may be sent before this batch's sync
            prefix = self.send_before_sync
            answers: list[tuple[asyncio.Future[list[Output]] | None, list[Output] | BaseException]] = []
            for event, fut in batch:
                try:
                    outs = event()
                    answers.append((fut, outs))
                except StepError as e:
                    outs = e.outputs
                    answers.append((fut, e))
                    if fut is None:
                        log.warning("%s", e)
                except ZabError as e:
                    outs = []
                    answers.append((fut, e))
                    if fut is None:
                        log.warning("%s", e)
                outputs.extend(outs)
                prefix = prefix and all(self._may_send_early(out) for out in outs)
                if prefix:
                    early = len(outputs)
            ops = [op for out in outputs for op in out.persist]
            if not ops:
                early = 0  # nothing to wait for: everything goes in order below
            if ops:
                for out in outputs[:early]:
                    for peer, packet in out.send:
                        self.send(peer, packet)
                self.flush()
                try:
                    await self._persist(ops)
                except (StorageError, OSError, ValueError) as e:
                    log.critical("storage failed, stopping: %s", e)
                    for fut, _ in answers:
                        if fut is not None and not fut.done():
                            fut.set_exception(StorageError(f"storage failed: {e}"))
                    self.stop(2)
                    return
            changed = False
            for i, out in enumerate(outputs):
                changed |= self._apply(out, send=i >= early)
            self.flush()
            if changed:
                self._changed.set()
                self._changed = asyncio.Event()
            for fut, answer in answers:
                if fut is None or fut.done():
                    continue
                if isinstance(answer, BaseException):
                    fut.set_exception(answer)
                else:
                    fut.set_result(answer)

    def _may_send_early(self, out: Output) -> bool:
        """Whether ``out``'s packets may leave before the batch's sync: a leader's PROPOSALs and COMMITs in
        BROADCAST, with no storage work but log appends (the module docstring says why that is safe)."""
        core = self.core
        return (core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST and out.role is None
                and not out.close and all(isinstance(op, AppendTxns) for op in out.persist)
                and all(packet.type in EARLY_TYPES for _, packet in out.send))

    async def _persist(self, ops: list[Any]) -> None:
        """`apply_persist` in the loop's thread when the batch is small appends and the disk is quick, otherwise in
        the disk thread (so the loop keeps reading sockets during a slow sync)."""
        inline = (self._last_sync_s <= INLINE_SYNC_SECONDS and all(isinstance(op, AppendTxns) for op in ops)
                  and sum(len(txn.value) for op in ops for txn in op.txns) <= INLINE_SYNC_BYTES)
        if inline:
            self._last_sync_s = _timed_persist(ops, self.storage)
        else:
            self._last_sync_s = await asyncio.get_running_loop().run_in_executor(
                self._disk, _timed_persist, ops, self.storage)

    def _apply(self, out: Output, *, send: bool = True) -> bool:
        """Send (unless sent early), deliver, close, change role: everything of ``out`` but persist (done already).
        The packets are queued on their connections; `flush` writes them."""
        assert self.core is not None
        if send:
            for peer, packet in out.send:
                self.send(peer, packet)
        for peer in out.close:
            conn = self.conns.get(peer)
            if conn is not None:
                self.close_connection(conn, "this server went back to leader election", report=False)
        if out.role is not None:
            core = self.core
            log.info("state -> %s (zabState %s, leader %d, acceptedEpoch %d, currentEpoch %d, lastZxid %#x)",
                     out.role.name, core.zab_state, core.leader, core.accepted_epoch, core.current_epoch,
                     core.last_zxid)
            if self.normal is not None:
                self.normal.on_role(out.role)
        return bool(out.deliver) or out.role is not None

    # ------------------------------------------------------------------------------------------ connections

    def send(self, peer: int, packet: QuorumPacket) -> None:
        assert self.core is not None
        conn = self.conns.get(peer)
        if conn is None:
            if self.core.state in (ServerState.FOLLOWING, ServerState.OBSERVING) and self.core.leader == peer:
                conn = self._dial(peer)
            else:
                log.warning("%s(zxid %#x) to %d dropped: no connection", packet.type.name, packet.zxid, peer)
                return
        conn.catching_up = self._catching_up(peer)
        was_open = not conn.closed
        conn.send(packet, flush=False)
        self._unflushed[conn.serial] = conn
        if conn.closed:
            self._closed_by_send(conn, was_open)

    def flush(self) -> None:
        """Write what `send` queued: one socket write per connection."""
        conns, self._unflushed = self._unflushed, {}
        for conn in conns.values():
            was_open = not conn.closed
            conn.flush()
            if conn.closed:
                self._closed_by_send(conn, was_open)

    def _closed_by_send(self, conn: peers.Connection, was_open: bool) -> None:
        if was_open:  # the connection closed itself (SEND_BUFFER_LIMIT): say so, as close_connection would
            log.warning("quorum connection with %d closed: %s", conn.peer, conn.close_reason)
        # It stays in `conns` until the core is told: the rest of this batch's packets to the peer are lost with it
        # (as in the spec), never sent on a new connection that lacks the ones before them.
        self._report_later(conn)

    def _catching_up(self, peer: int) -> bool:
        """Whether this server leads ``peer`` and ``peer`` is not UPTODATE yet: its catch-up burst is exempt from
        `peers.SEND_BUFFER_LIMIT` (the peers module docstring says why; ``init_limit`` bounds its time)."""
        core = self.core
        if core.state != ServerState.LEADING:
            return False
        if peer in self.config.observers:
            return core.observer_phase.get(peer) != ObserverPhase.UPTODATE
        return core.learner_phase.get(peer) != LearnerPhase.UPTODATE

    def _dial(self, peer: int) -> peers.Connection:
        conn = peers.Connection(peer, initiated=True)
        self.conns[peer] = conn
        self.spawn(self._run_dialed(conn), f"quorum-to-{peer}")
        return conn

    async def _run_dialed(self, conn: peers.Connection) -> None:
        target = self.config.server(conn.peer)
        if conn.peer in self.cut_peers:
            self.close_connection(conn, "link cut by the fault layer", report=None)
            return
        attempts = 20 if self.control else max(3, self.config.cluster.init_limit)
        max_delay = 0.5 if self.control else self.config.cluster.tick_ms / 1000
        try:
            reader, writer = await peers.dial(target.host, target.quorum_port, self.sid, attempts=attempts,
                                              timeout=2.0, max_delay=max_delay)
        except (OSError, TimeoutError) as e:
            self.close_connection(conn, f"cannot connect to {target.host}:{target.quorum_port}: {e}", report=None)
            return
        if conn.closed:
            writer.close()
            return
        conn.attach(writer)
        log.info("quorum connection to leader %d open", conn.peer)
        await self._read(conn, reader)

    @peers.quiet_cancel
    async def _accept_quorum(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername")
        try:
            sid = await peers.accept_handshake(reader)
        except peers.HandshakeError as e:
            log.warning("quorum connection from %s closed: %s", address, e)
            writer.close()
            return
        if sid == self.sid or sid not in self.config.sids:
            log.warning("quorum connection from %s closed: handshake names server %d, not another server of %s",
                        address, sid, list(self.config.sids))
            writer.close()
            return
        if sid in self.cut_peers:
            log.info("quorum connection from %d refused: link cut by the fault layer", sid)
            writer.close()
            return
        old = self.conns.get(sid)
        if old is not None:
            self.close_connection(old, f"server {sid} opened a new connection", report=None)
        conn = peers.Connection(sid, initiated=False)
        self.conns[sid] = conn
        conn.attach(writer)
        log.info("quorum connection from %d open", sid)
        if self.normal is not None:
            self.normal.heard(sid)
        await self._read(conn, reader)

    async def _read(self, conn: peers.Connection, reader: asyncio.StreamReader) -> None:
        def on_body(body: bytes) -> None:
            packet = wire.decode_quorum_packet(body)
            if conn.closed:
                return
            conn.received += 1
            if packet.type not in QUORUM_TYPES:
                raise ValueError(f"{packet.type.name} (type {int(packet.type)}) is not a packet of this protocol")
            if self.normal is not None:
                self.normal.heard(conn.peer)
            if packet.type == PacketType.PING:
                if self.normal is not None:
                    self.normal.on_ping(conn, packet)
            elif self.control:
                if len(conn.held) >= HOLD_LIMIT:
                    raise ValueError(f"more than {HOLD_LIMIT} packets held")
                conn.held.append(packet)
            else:
                self.enqueue(lambda: self.receive(conn, packet))

        reason = await peers.read_frames(reader, peers.MAX_QUORUM_FRAME, f"quorum stream from {conn.peer}", on_body)
        self.close_connection(conn, reason, report=None)

    def close_connection(self, conn: peers.Connection, reason: str, *, report: bool | None) -> list[Output]:
        """Close ``conn`` (logged once, with ``reason``) and forget it.

        ``report``: True -- report to the core now and return its Outputs (call only from inside the pump);
        None -- report through an event (from outside the pump); False -- never (the core closed it itself).
        """
        if not conn.closed:
            conn.close(reason)
            level = logging.WARNING if reason.startswith(("bad input", "protocol error")) else logging.INFO
            log.log(level, "quorum connection with %d closed: %s", conn.peer, reason)
        if self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]
        conn.held.clear()
        if report is False:
            conn.reported = True
        elif report is None:
            self._report_later(conn)
        elif not conn.reported:
            return self._report(conn)
        return []

    def _report_later(self, conn: peers.Connection) -> None:
        if not conn.reported:
            self.enqueue(lambda: self._report(conn))

    def _report(self, conn: peers.Connection) -> list[Output]:
        assert self.core is not None
        if conn.reported:
            return []
        conn.reported = True
        if self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]
        outs = [self.core.connection_closed(conn.peer)]
        if self.normal is not None:
            outs += self.normal.on_connection_closed(conn.peer)
        return outs

    def receive(self, conn: peers.Connection, packet: QuorumPacket) -> list[Output]:
        """The event of one packet from ``conn``: lost if the connection closed meanwhile (as in the spec)."""
        assert self.core is not None
        if conn.closed:
            return []
        if self.normal is not None and self.normal.park(conn, packet):
            return []
        try:
            return [self.core.receive(conn.peer, packet)]
        except RemoteProtocolError as e:
            outs = self.close_connection(conn, f"protocol error: {e}", report=True)
            raise StepError(f"closed the connection with {conn.peer}: {e}", outs) from None

    # ------------------------------------------------------------------------------------------ waiting

    @property
    def committed_zxid(self) -> int:
        """The zxid of the last delivered transaction (0 when none)."""
        core = self.core
        assert core is not None
        return core.history[core.last_committed - 1].zxid if core.last_committed else 0

    async def wait_delivered(self, zxid: int, timeout: float) -> None:
        """Return once transaction ``zxid`` is delivered here; ProtocolError if another took its place."""
        assert self.core is not None
        if zxid == 0:
            return

        async def wait() -> None:
            while self.committed_zxid < zxid:
                await self._changed.wait()

        try:
            await asyncio.wait_for(wait(), timeout)
        except TimeoutError:
            raise ProtocolError(f"transaction {zxid:#x} not delivered within {timeout} s: outcome unknown") from None
        k = self.core.index_of(self.core.history, zxid)
        if not 0 < k <= self.core.last_committed:
            raise ProtocolError(f"transaction {zxid:#x} was not committed: the next epoch skipped it")


def _timed_persist(ops: list[Any], storage: Storage) -> float:
    """`apply_persist`; returns the seconds it took."""
    started = time.perf_counter()
    apply_persist(ops, storage)
    return time.perf_counter() - started


def run_server(config: Config, sid: int, *, control: bool) -> int:
    """Run one server until SIGTERM/SIGINT; returns the exit code (0 clean, 2 storage failure, 3 internal error)."""
    return asyncio.run(Server(config, sid, control=control).run())
