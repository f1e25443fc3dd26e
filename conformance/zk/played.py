"""The other servers of a ZooKeeper ensemble, played by the driver through `zabref.net.zkwire`.

Theory of operation
-------------------
Conformance of a real ZooKeeper server (issue 37, part 3) makes one real server do what a spec trace says while the
driver plays every other server on its own ports, one message at a time, with nothing added to ZooKeeper. This
module is the playing: the bytes a played server sends are written by zabref's codec of ZooKeeper's wire, and what
the real server sends is read by it.

* **Election** (`ElectionLink`): the played server dials the real server's election port and sends its initial
  message. A real server with a smaller id than the played one keeps such a connection (QuorumCnxManager drops a
  connection only when the *dialer's* id is the smaller one, and its own dials to larger ids are dropped by itself:
  "Have smaller server identifier, so dropping the connection"), so dialing is how a played server with a larger id
  talks to it. Notifications go both ways on it.
* **Quorum** (`QuorumLink`): a played leader listens on its quorum port; the real server, once FOLLOWING it,
  connects and the two exchange QuorumPackets (`PlayedLeader` accepts one learner).

A played PROPOSAL's data is zabref's own (`zabref.core.payloads.encode_proposal_data`: a ZooKeeper create
transaction, `zabref.core.zktxn`). `newleader_config` is the configuration text a leader sends in NEWLEADER, as
ZooKeeper writes it.

Every wait is bounded (``timeout``); what the real server sends that does not decode raises `WireError` naming the
link and the byte offset, as the recordings' decoder does.
"""

from __future__ import annotations

import asyncio

from conformance.zk import WireError
from conformance.zk.ports import ZkServer
from conformance.zk.snapshot import read_snapshot
from conformance.zk.stream import Cursor
from zabref.core.packets import Notification, ServerState
from zabref.net import wire, zkwire
from zabref.net.zkwire import Initial, RawPacket, Short, ZkNotification

__all__ = ["ElectionLink", "QuorumLink", "PlayedLeader", "newleader_config", "LEARNER_PROTOCOL"]

#: LEADERINFO's data: the protocol version a 3.4+ leader sends (Leader.java), and what a learner's LearnerInfo says.
LEARNER_PROTOCOL = 0x10000


class _Link:
    """A stream and the bytes read from it so far, decoded with ``read`` (a `zabref.net.zkwire` reader)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str) -> None:
        self.reader, self.writer, self.where = reader, writer, where
        self.buf = b""
        self.offset = 0  # of buf's first byte in the stream

    async def _next(self, read, timeout: float):
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            cur = Cursor(self.buf, self.where)
            try:
                item = read(cur)
            except Short:
                pass
            except WireError as e:
                raise WireError(self.where, self.offset + e.offset, e.reason) from None
            else:
                self.buf, self.offset = self.buf[cur.pos:], self.offset + cur.pos
                return item
            left = end - loop.time()
            if left <= 0:
                raise TimeoutError(f"{self.where}: nothing whole within {timeout} s ({len(self.buf)} bytes waiting)")
            chunk = await asyncio.wait_for(self.reader.read(65536), left)
            if not chunk:
                raise ConnectionError(f"{self.where}: the real server closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.writer.close()


class ElectionLink(_Link):
    """Played server ``sid``'s election connection to the real server ``zk``."""

    @classmethod
    async def dial(cls, zk: ZkServer, sid: int, address: str, timeout: float = 10.0) -> ElectionLink:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", zk.election_port), timeout)
        link = cls(reader, writer, f"election link {sid} -> {zk.id}")
        writer.write(zkwire.encode_initial(Initial(sid, zkwire.PROTOCOL_V1, (address,))))
        return link

    def send(self, state: str, leader: int, zxid: int, election_epoch: int, peer_epoch: int, config: str) -> None:
        """A notification in the bytes a zabref server sends (`zabref.net.wire`: ZooKeeper 3.8's form)."""
        vote = Notification(ServerState[state], leader, zxid, election_epoch, peer_epoch)
        self.writer.write(wire.frame(wire.encode_notification(vote, config)))

    async def recv(self, timeout: float = 10.0) -> ZkNotification:
        return await self._next(zkwire.read_notification, timeout)


class QuorumLink(_Link):
    """A quorum connection between a played server and the real one. Read from a real leader (``from_leader``), a
    SNAP is followed by the data tree, outside any packet: `recv` reads past it and keeps what it holds in
    ``snapshot`` (`conformance.zk.snapshot`)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str, *,
                 from_leader: bool = False) -> None:
        super().__init__(reader, writer, where)
        self.from_leader = from_leader
        self.snapshot: dict | None = None
        self._tree_next = False
        self.held: list[tuple[str, RawPacket]] = []  # read, then handed back to be read again (`hand_back`)

    def hand_back(self, packets: list[tuple[str, RawPacket]]) -> None:
        """Packets `recv` returned that belong to a later step: the next calls return them first, in order."""
        self.held[:0] = packets

    def send(self, ptype: str, zxid: int, data: bytes | None = None) -> None:
        number = next(k for k, v in zkwire.PACKET_TYPES.items() if v == ptype)
        self.writer.write(zkwire.encode_quorum_packet(RawPacket(number, zxid, data)))

    async def recv(self, timeout: float = 10.0, *, skip_pings: bool = True) -> tuple[str, RawPacket]:
        """The next packet (its name and the packet) within ``timeout``; the learner's PINGs are skipped unless asked
        for (they do not extend the wait). Packets handed back (`hand_back`) come first."""
        if self.held:
            return self.held.pop(0)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            if self._tree_next:
                self.snapshot = await self._next(read_snapshot, max(end - loop.time(), 0.0))
                self._tree_next = False
            p = await self._next(zkwire.read_quorum_packet, max(end - loop.time(), 0.0))
            name = zkwire.PACKET_TYPES[p.type]
            self._tree_next = self.from_leader and name == "SNAP"
            if not (skip_pings and name == "PING"):
                return name, p


class PlayedLeader:
    """Listens on a played leader's quorum port; `learner` waits for the real server's connection; once it is synced,
    `ping` sends it a PING every ``ping_s`` (a follower that hears nothing for syncLimit ticks leaves)."""

    def __init__(self, port: int, sid: int, ping_s: float = 0.1) -> None:
        self.port, self.sid, self.ping_s = port, sid, ping_s
        self._links: asyncio.Queue[QuorumLink] = asyncio.Queue()
        self._server: asyncio.AbstractServer | None = None
        self._pings: list[asyncio.Task[None]] = []
        self.zxid = 0  # what the PINGs carry: the last zxid the played leader proposed

    async def start(self) -> PlayedLeader:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._links.put(QuorumLink(reader, writer, f"quorum link {self.sid} <- learner"))

        self._server = await asyncio.start_server(accepted, "127.0.0.1", self.port)
        return self

    async def learner(self, timeout: float = 30.0) -> QuorumLink:
        return await asyncio.wait_for(self._links.get(), timeout)

    def ping(self, link: QuorumLink) -> None:
        """PING ``link`` every ``ping_s`` from now: call it once the learner is synced (UPTODATE sent); a PING before
        LEADERINFO is a protocol error to ZooKeeper's learner, which resets the connection."""

        async def ping() -> None:
            while not link.writer.is_closing():
                await asyncio.sleep(self.ping_s)
                link.send("PING", self.zxid)

        self._pings.append(asyncio.get_running_loop().create_task(ping()))

    async def close(self) -> None:
        for task in self._pings:
            task.cancel()
        await asyncio.gather(*self._pings, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def newleader_config(members: list[ZkServer], version: int = 0) -> str:
    """The configuration text of NEWLEADER (and of notifications), as ZooKeeper writes it (`zkwire.config_text`)."""
    return zkwire.config_text(((m.id, "127.0.0.1", m.quorum_port, m.election_port) for m in members), version)
