"""A server's connections to the other servers, and the fault layer's one seam.

Theory of operation
-------------------
Connections (`zabref.net.peers`): a follower dials its leader when the node says so (``Effects.dial``) and writes its
FOLLOWERINFO first; a leader takes the connections its learners open, each named by its FOLLOWERINFO. A connection
that ends (EOF, reset, bad bytes, a packet no spec action takes) is closed, logged with its reason, and reported to
the node; packets not yet given to the node when their connection closes are dropped (the spec empties both channels
of a closed connection). Election notifications go out through one `zabref.net.votes.ElectionSender` per peer, on the
pair's one connection (the one the larger id dialed, as ZooKeeper's QuorumCnxManager keeps it), and come in on every
connection a `VoteChannel` reads: the pair's, and a smaller id's dial until its dialer closes it (that dial asks for
the pair's connection: this server dials back).

Fault layer (docs/faults.md), the one seam where faults enter the runtime: ``cut_links(peers)`` makes this server
behave as if the network between it and those peers were cut, both directions: its quorum and election connections
with them are closed, new ones are refused or fail, and notifications to them are dropped, until ``heal_links``.
Every path that could carry traffic between this server and a peer -- dialing, accepting a handshake, taking or
sending a notification -- asks `link_open`; `cut_links` and `heal_links` (the control port's ``partition`` and
``heal``) are the only writers. The fault runner's other kinds need no
hook here: kill -9 and SIGSTOP act on the process from outside, a power cut and a torn write are the power-loss disk
(``ZABREF_DISK``, `zabref.storage.powerloss`), and a clock jump moves the driver's clock
(`zabref.runtime.drivers.NormalDriver.jump`).

`PeerLinks` is a part of `zabref.runtime.server.Server` (a mixin): it uses the server's config, node, driver,
machine, guard and event queue, which its class body declares (typed, so that mypy checks this module and mypyc can
compile it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from zabref.config import Config
from zabref.core import payloads
from zabref.core.election import check_notification
from zabref.core.node import Node
from zabref.core.packets import QuorumPacket, ServerState
from zabref.core.zab import LearnerPhase
from zabref.errors import CodecError
from zabref.net import listener, peers, wire
from zabref.net.security import AuthError, Guard
from zabref.net.votes import ElectionSender, VoteChannel
from zabref.runtime.machine import Machine

__all__ = ["PeerLinks", "HOLD_LIMIT"]

log = logging.getLogger("zabref")

#: Most packets (or notifications) waiting in one connection's queue; one more closes the connection.
HOLD_LIMIT = 10_000


class _Refused(Exception):
    """An inbound quorum or election connection refused at admission; the text says why (for the log line)."""


#: An admitted inbound connection: its stream, the sid its first bytes named, and on the quorum port its first packet
#: (FOLLOWERINFO) with the connection id written after it.
_Admitted = tuple[asyncio.StreamReader, asyncio.StreamWriter, int, "tuple[QuorumPacket, int | None] | None"]


class PeerLinks:
    """The quorum and election connections of a `zabref.runtime.server.Server` (module docstring)."""

    # What the server keeps that these methods read and write (set in `Server.__init__` and `Server.run`).
    config: Config
    sid: int
    guard: Guard
    driver: Any  # zabref.runtime.drivers.NormalDriver or ControlDriver
    machine: Machine
    node: Node | None
    conns: dict[int, peers.Connection]  # quorum connections by peer
    votes: dict[int, VoteChannel]  # inbound election connections by serial
    senders: dict[int, ElectionSender]
    cut_peers: set[int]
    _unflushed: dict[int, peers.Connection]

    # What the server does for them (`zabref.runtime.server.Server`).
    def enqueue(self, event: Callable[[], Any]) -> None:
        raise NotImplementedError

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        raise NotImplementedError

    def _arrived(self, conn: peers.Connection, packet: QuorumPacket) -> None:
        raise NotImplementedError

    def running(self) -> Node:
        """The node (`Server.run` made it; nothing of this class runs before)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------ quorum connections

    def send(self, peer: int, packet: QuorumPacket) -> None:
        conn = self.conns.get(peer)
        if conn is None:
            log.debug("%s(zxid %#x) to %d dropped: no connection", packet.type.name, packet.zxid, peer)
            return
        core = self.running().core
        conn.catching_up = core.state == ServerState.LEADING and core.learner_phase.get(peer) != LearnerPhase.UPTODATE
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
        if was_open:
            log.warning("quorum connection with %d closed: %s", conn.peer, conn.close_reason)
        self._report_later(conn)

    def _new_outbound(self, peer: int) -> None:
        """The connection the node asked for (``Effects.dial``), not dialed yet: packets sent meanwhile wait in it."""
        old = self.conns.get(peer)
        if old is None or old.closed:
            self.conns[peer] = peers.Connection(peer, initiated=True, cid=self.machine.new_connection_id())

    def _cid(self, peer: int) -> int | None:
        """The id of the connection a packet to ``peer`` would go to now (None: it would be dropped)."""
        conn = self.conns.get(peer)
        return None if conn is None or conn.closed else conn.cid

    async def _run_dialed(self, conn: peers.Connection) -> None:
        target = self.config.server(conn.peer)
        if not self.link_open(conn.peer):
            self.close_connection(conn, "link cut by the fault layer", report=None)
            return
        attempts = max(3, self.config.cluster.init_limit)
        try:
            reader, writer = await peers.dial(target.host, target.quorum_port, conn.take_hello(), peer=conn.peer,
                                              attempts=attempts, timeout=2.0,
                                              max_delay=self.config.cluster.tick_ms / 1000, guard=self.guard)
        except (OSError, TimeoutError) as e:
            self.close_connection(conn, f"cannot connect to {target.host}:{target.quorum_port}: {e}", report=None)
            return
        if conn.closed:
            writer.close()
            return
        conn.attach(writer)
        log.info("quorum connection to leader %d open", conn.peer)
        await self._read(conn, reader, writer)

    @peers.quiet_cancel
    async def _accept_quorum(self, accepted: listener.Accepted) -> None:
        admitted = await self._handshake(accepted, "quorum")
        if admitted is None:
            return
        reader, writer, sid, hello = admitted
        assert hello is not None
        packet, cid = hello
        old = self.conns.get(sid)
        if old is not None:
            self.close_connection(old, f"server {sid} opened a new connection", report=None)
        # A ZooKeeper learner writes no connection id: this end names the connection for its own action log.
        conn = peers.Connection(sid, initiated=False, cid=self.machine.new_connection_id() if cid is None else cid)
        self.conns[sid] = conn
        conn.attach(writer)
        log.info("quorum connection from %d open", sid)
        self.enqueue(lambda: self.running().connection_opened(sid, inbound=True))
        self._arrived(conn, packet)  # FOLLOWERINFO, the connection's first packet
        await self._read(conn, reader, writer)

    async def _handshake(self, accepted: listener.Accepted, kind: str) -> _Admitted | None:
        """An inbound connection opened (over TLS when it is on), its sid and, on the quorum port, its first packet
        (FOLLOWERINFO) and the connection id written after its LearnerInfo; or None (refused, logged, closed). The
        whole admission has one deadline, `peers.HANDSHAKE_TIMEOUT` from now: one that ends after it is refused for
        that, whatever else it found."""
        address = accepted.address
        loop = asyncio.get_running_loop()
        deadline = loop.time() + peers.HANDSHAKE_TIMEOUT
        admitted: _Admitted | None = None
        why = ""
        timed_out = False
        try:
            async with asyncio.timeout_at(deadline):
                admitted = await self._admit(accepted, kind)
        except _Refused as e:
            why = str(e)
        except TimeoutError:
            timed_out = True  # the clock may read the deadline itself then (uvloop's counts milliseconds)
        # An admission can end after its deadline without the deadline's cancellation: Python 3.11's wait_for can
        # swallow it when its read completes at the same moment (gh-86296), and a loop busy past the deadline runs
        # the read's completion, and the refusal it leads to, first. Either is refused for the deadline.
        if timed_out or loop.time() > deadline:
            why = (f"admission (TLS, first bytes, quorum authentication) not complete within "
                   f"{peers.HANDSHAKE_TIMEOUT} s" + (f"; by then: {why}" if why else ""))
            admitted = None
        if admitted is None:
            if why:
                log.warning("%s connection from %s closed: %s", kind, address, why)
            accepted.close()
        return admitted

    async def _admit(self, accepted: listener.Accepted, kind: str) -> _Admitted | None:
        """What `_handshake` returns for an admitted connection; None if the fault layer cuts that server's link
        (logged here); raises _Refused saying why a stranger is refused."""
        first: tuple[QuorumPacket, int | None] | None = None
        try:
            reader, writer = await accepted.open(peers.HANDSHAKE_TIMEOUT)
            if kind == "election":  # ZooKeeper's initial message; quorum authentication binds its bytes
                initial, hello = await peers.accept_initial(reader)
                sid = initial.sid
            else:  # the learner's FOLLOWERINFO: its LearnerInfo names it
                packet, hello, cid = await peers.accept_hello(reader)
                sid = payloads.decode_followerinfo_data(packet.data).serverid
                first = packet, cid
        except (peers.HandshakeError, AuthError, CodecError) as refused:
            raise _Refused(str(refused)) from None
        if sid == self.sid or sid not in self.config.sids:
            raise _Refused(f"handshake names server {sid}, not another server of {list(self.config.sids)}")
        if not self.link_open(sid):
            log.info("%s connection from %d refused: link cut by the fault layer", kind, sid)
            return None
        try:  # the certificate names that server's host; quorum authentication: no packet before the proof
            self.guard.check_peer_host(writer, self.config.server(sid).host)
            await self.guard.check(reader, writer, hello, self.sid, peers.HANDSHAKE_TIMEOUT)
        except AuthError as denied:
            raise _Refused(f"{denied} (its handshake named server {sid})") from None
        return reader, writer, sid, first

    async def _read(self, conn: peers.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def on_packet(packet: QuorumPacket) -> None:
            if not conn.closed:
                self._arrived(conn, packet)

        # A packet unfinished for initLimit ticks is a broken peer (ZooKeeper bounds its sync reads by initLimit too):
        # the connection is closed as bad input, which the node sees as any lost connection.
        timing = self.config.cluster
        decoder = wire.PacketDecoder(peers.MAX_QUORUM_DATA, f"quorum stream from {conn.peer}", peers.MAX_SNAPSHOT)
        reason = await peers.read_stream(reader, writer, decoder, on_packet,
                                         frame_timeout=timing.init_limit * timing.tick_ms / 1000)
        self.close_connection(conn, reason, report=None)

    def close_connection(self, conn: peers.Connection, reason: str, *, report: bool | None) -> None:
        """Close ``conn`` (logged once, with ``reason``) and forget it; what waited on it is dropped.

        ``report``: True/None -- tell the node (through an event); False -- never (the node closed it itself).
        """
        if not conn.closed:
            conn.close(reason)
            level = logging.WARNING if reason.startswith(("bad input", "protocol error")) else logging.INFO
            log.log(level, "quorum connection with %d closed: %s", conn.peer, reason)
        if self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]
        conn.inbound.clear()
        if report is False:
            conn.reported = True
        else:
            self._report_later(conn)

    def _report_later(self, conn: peers.Connection) -> None:
        if conn.reported:
            return
        conn.reported = True
        if self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]
        self.enqueue(lambda: self.running().connection_closed(conn.peer, self.driver.now(), inbound=not conn.initiated,
                                                              tag=conn.cid))
        self.driver.closed(self)

    # ------------------------------------------------------------------------------------------ election connections

    @peers.quiet_cancel
    async def _accept_votes(self, accepted: listener.Accepted) -> None:
        shaken = await self._handshake(accepted, "election")
        if shaken is None:
            return
        reader, writer, sid, _ = shaken
        if sid < self.sid:
            # QuorumCnxManager's rule: the pair's one connection is the one the larger id dials, so this one only
            # asks for it. ZooKeeper closes it at once; here it is read until its dialer closes it (a zabref or
            # ZooKeeper server does so at once, having written nothing; the conformance driver's played voters write
            # their notifications there, `conformance.replay.harness.Cluster.vote`) and never written to.
            self.senders[sid].dial_back()
        else:
            self.senders[sid].adopt(writer)
        await self._read_votes(sid, reader, writer)

    def _dialed_votes(self, sid: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], None]:
        """What reads the notifications ``sid`` writes on the connection this server dialed to it and kept."""
        def read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.spawn(self._read_votes(sid, reader, writer), f"votes-from-{sid}")
        return read

    async def _read_votes(self, sid: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Read ``sid``'s notifications on the pair's connection (`votes.VoteChannel`) until it ends."""
        channel = VoteChannel(sid, writer)
        self.votes[channel.serial] = channel

        def on_body(body: bytes) -> None:
            n = wire.decode_notification(body)
            check_notification(n)  # ValueError: the connection is closed as bad input, nothing reaches the node
            if not self.link_open(sid) or channel.closed:
                return
            if len(channel.inbound) >= HOLD_LIMIT:
                raise ValueError(f"more than {HOLD_LIMIT} notifications wait on this connection")
            channel.received += 1
            channel.inbound.append(n)
            self.driver.vote_arrived(self, channel)

        reason = "stopped"
        try:
            decoder = wire.FrameDecoder(peers.MAX_ELECTION_FRAME, f"election stream from {sid}")
            reason = await peers.read_stream(reader, writer, decoder, on_body,
                                             frame_timeout=peers.ELECTION_FRAME_TIMEOUT)
        finally:
            channel.close()
            self.votes.pop(channel.serial, None)
            self.senders[sid].connection_ended(writer, reason)
        level = logging.WARNING if reason.startswith("bad input") else logging.DEBUG
        log.log(level, "election connection from %d closed: %s", sid, reason)

    # ------------------------------------------------------------------------------------------ fault layer (the seam)

    def link_open(self, sid: int) -> bool:
        """Whether the fault layer lets traffic pass between this server and ``sid`` (asked on every path)."""
        return sid not in self.cut_peers

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
            self.senders[sid].set_link_cut(True)
            for channel in list(self.votes.values()):
                if channel.peer == sid:
                    channel.close()

    def heal_links(self, sids: set[int]) -> None:
        """Undo `cut_links` for ``sids``."""
        self.cut_peers -= sids
        log.warning("fault layer: links to %s healed (now cut: %s)", sorted(sids), sorted(self.cut_peers))
        for sid in sids:
            self.senders[sid].set_link_cut(False)
