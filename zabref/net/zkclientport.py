"""ZooKeeper's client protocol, server side: a ZooKeeper client (kazoo, ZooKeeper's Java client) connects to a zabref
server's ``zk_client_port`` as to a ZooKeeper server.

Theory of operation
-------------------
The port carries; the node decides (`zabref.core.zkclients`: where a write goes and when it is answered, what a read
sees), through the same `zabref.net.clientport.ClientPortHost` as zabref's own client port, with the same
``[limits]`` on connections and frames and the same TLS (``client_tls``). A connection is one session:

* **Connect.** The first frame is ConnectRequest (`zabref.net.zkclientwire`). A client that has seen a zxid this
  server has not delivered yet is refused (the connection closed, as ZooKeeper does: "Refusing session request for
  client as it has seen zxid ..."), so that it never reads backwards. A session id of 0 asks for a new session:
  ``sid << 56`` and a counter started from the clock, ZooKeeper's layout, with a random password; a known session
  with its password is taken again; any other is expired (ConnectResponse with timeout 0, then closed). The timeout
  is held between 2 and 20 ticks, as ZooKeeper's defaults bound it. Sessions are local: none is a transaction, and
  a session lives at this server only (another server expires it), like ZooKeeper's local sessions.
* **Requests** are pipelined, as ZooKeeper's clients send them (`zabref.net.pipeline`: read in the loop's read
  callback, at most `zabref.net.pipeline.MAX_PIPELINED` waiting): a write or a sync goes to the node as soon as it
  is read, and the replies leave in request order, a read's made at its turn so that it sees this session's writes
  before it. PING; getData, exists, getChildren, getChildren2 (`Node.zk_read`); sync (`Node.client_sync`; answered
  with the path); create, create2, createContainer, delete, setData, setACL, multi (`Node.zk_write`, keyed by the
  session and the request's xid, which ZooKeeper's clients number as the cxid); closeSession (answered, the session
  forgotten, nothing after it read, the connection closed). Any other type, and a read that asks to set a watch (no
  watch is ever triggered here), is answered with UNIMPLEMENTED (-6).
* **Four-letter words.** ``srvr`` and ``ruok`` in place of a ConnectRequest are answered as ZooKeeper answers
  them (``Mode:`` and ``Zxid:``, the last delivered, are what harnesses read), and the connection closed.
* **Closing.** A write the node could not answer (no established leader, not delivered in time, a role change
  before its transaction came) closes the connection, which a client reads as a connection loss, the outcome
  unknown; a session with no whole request within its timeout is expired; a frame that cannot be read, and a reply
  the client does not read in time, close the connection. Each close for a reason is logged with the client's
  address.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
from typing import Any

from zabref.core import zkclients, zktree
from zabref.core.node import Node
from zabref.core.packets import ServerState
from zabref.core.zab import ZabState
from zabref.errors import CodecError
from zabref.net import listener, peers, pipeline, streams, wire, zkclientwire
from zabref.net.clientport import FRAME_TIMEOUT, ClientPortHost
from zabref.net.pipeline import Close, Entry
from zabref.net.security import AuthError

__all__ = ["ZkClientPort"]

log = logging.getLogger("zabref")

UNIMPLEMENTED = zktree.ERR["UNIMPLEMENTED"]
#: The four-letter words answered (ZooKeeper reads one in place of a ConnectRequest's length): ``srvr``, ``ruok``.
FOUR_LETTER_WORDS = (b"srvr", b"ruok")


class ZkClientPort:
    """The server's listener hands `handle` each connection it accepts on the ZooKeeper client port."""

    def __init__(self, server: ClientPortHost, sid: int) -> None:
        self.server = server
        self.limits = server.config.limits
        self.open_connections = 0
        #: session -> (password, timeout in ms, when it expires: None while a connection holds it)
        self.sessions: dict[int, tuple[bytes, int, float | None]] = {}
        # ZooKeeper's layout: the server's id in the top byte (the low 8 bits of it), the clock below it
        self._next = (sid & 0xFF) << 56 | ((time.time_ns() // 1_000_000) << 24 & (1 << 56) - 1) >> 8
        tick_ms = server.config.cluster.tick_ms
        self.timeouts = (2 * tick_ms, 20 * tick_ms)

    @property
    def _node(self) -> Node:
        node = self.server.node
        assert node is not None, "a client port serves a started server"
        return node

    @peers.quiet_cancel
    async def handle(self, accepted: listener.Accepted) -> None:
        address = accepted.address
        if self.open_connections >= self.limits.client_connections:
            log.warning("ZooKeeper client connection from %s closed: %d client connections are open already "
                        "(limits.client_connections)", address, self.open_connections)
            accepted.close()
            return
        self.open_connections += 1
        reason: str | None = None
        try:
            reader, writer = await accepted.open(FRAME_TIMEOUT)
            host = address[0] if isinstance(address, tuple) and address else str(address)
            await self._serve(reader, writer, host)
        except (Close, AuthError) as refused:
            reason = str(refused)
        except CodecError as bad:
            reason = f"bad input: {bad}"
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            reason = None
        finally:
            self.open_connections -= 1
            accepted.close()
        if reason is not None:
            log.warning("ZooKeeper client connection from %s closed: %s", address, reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        decoder = wire.FrameDecoder(self.limits.client_frame_bytes, "ZooKeeper client request")
        try:
            async with asyncio.timeout(FRAME_TIMEOUT):
                head = await reader.readexactly(4)
                if head not in FOUR_LETTER_WORDS:
                    # the length, checked against the bound; then the body and nothing past it (`pipeline.serve`
                    # reads on)
                    (length,) = struct.unpack(">i", head)
                    body, = decoder.feed(head) or decoder.feed(await reader.readexactly(length))
        except TimeoutError:
            raise Close(f"nothing from the client within {FRAME_TIMEOUT:g} s") from None
        if head in FOUR_LETTER_WORDS:
            streams.write(writer, self._four_letter(head).encode())
            await asyncio.wait_for(writer.drain(), pipeline.WRITE_TIMEOUT)
            return
        connect = zkclientwire.decode_connect(body)
        node = self._node
        seen = node.committed_zxid
        if connect.last_zxid_seen > seen:
            raise Close(f"the client has seen zxid {connect.last_zxid_seen:#x}, this server has delivered up to "
                        f"{seen:#x} only")
        session, timeout_ms = self._session(connect)
        if session == 0:
            streams.write(writer, wire.frame(zkclientwire.encode_connect_response(0, 0, b"\x00" * 16)))
            raise Close(f"session {connect.session:#x} is not known here: expired")
        try:
            streams.write(writer, wire.frame(zkclientwire.encode_connect_response(timeout_ms, session,
                                                                                  self.sessions[session][0])))
            await pipeline.serve(reader, writer, decoder, lambda body: self._request(session, body, host),
                                 idle_timeout=timeout_ms / 1000)
        finally:
            self._left(session)

    def _four_letter(self, word: bytes) -> str:
        """ZooKeeper's answer to a four-letter word: ``ruok`` -> ``imok``; ``srvr`` -> the server's summary (its
        mode and its last delivered zxid), or that it does not serve while it has no established role."""
        if word == b"ruok":
            return "imok"
        node = self._node
        core = node.core
        if core.zab_state != ZabState.BROADCAST or core.state == ServerState.LOOKING:
            return "This ZooKeeper instance is not currently serving requests\n"
        mode = "leader" if core.state == ServerState.LEADING else "follower"
        count = len(node.zk_applied.follow(core.history, core.last_committed).nodes)
        return (f"Zookeeper version: zabref\nLatency min/avg/max: 0/0.0/0\nReceived: 0\nSent: 0\n"
                f"Connections: {self.open_connections}\nOutstanding: 0\nZxid: {node.committed_zxid:#x}\n"
                f"Mode: {mode}\nNode count: {count}\n")

    def _session(self, connect: zkclientwire.Connect) -> tuple[int, int]:
        """(session, timeout) of a connect: a new session, the known one, or (0, 0) for one that expired (a session
        no connection held for its timeout is forgotten: sessions left without a closeSession are not kept)."""
        now = time.monotonic()
        for old, (_, _, expires) in list(self.sessions.items()):
            if expires is not None and expires <= now:
                del self.sessions[old]
        low, high = self.timeouts
        timeout = min(max(connect.timeout_ms, low), high)
        if connect.session == 0:
            session = self._next - (1 << 64) if self._next >= 1 << 63 else self._next  # a signed long
            self._next += 1
            self.sessions[session] = (os.urandom(16), timeout, None)
            return session, timeout
        known = self.sessions.get(connect.session)
        if known is None or known[0] != connect.passwd:
            return 0, 0
        self.sessions[connect.session] = (known[0], timeout, None)
        return connect.session, timeout

    def _left(self, session: int) -> None:
        """The connection holding ``session`` ended without closeSession: it expires after its timeout."""
        known = self.sessions.get(session)
        if known is not None:
            self.sessions[session] = (known[0], known[1], time.monotonic() + known[1] / 1000)

    def _request(self, session: int, body: bytes, host: str) -> tuple[Entry, bool]:
        """One request (module docstring), and whether it is the session's last (closeSession): a write or sync is
        handed to the node now; its reply is made when its turn comes. A record that cannot be read raises
        CodecError now."""
        xid, op, record = zkclientwire.decode_header(body)
        node = self._node
        if op in zkclients.READS:
            path, watch = zkclientwire.decode_path_watch(record, zkclients.READS[op])
            if watch:
                return (None, lambda _: wire.frame(zkclientwire.encode_reply(xid, node.committed_zxid,
                                                                             UNIMPLEMENTED))), False
            return (None, lambda _: self._reply(xid, node.zk_read(op, path))), False
        if op == zkclientwire.OP_SYNC:
            path = zkclientwire.decode_path(record, "sync")

            def synced(answer: dict[str, Any]) -> bytes:
                if "error" in answer:
                    raise Close(f"sync: {answer['error']}")
                return wire.frame(zkclientwire.encode_reply(xid, answer["zxid"], 0, zkclientwire.encode_result(
                    {"op": "sync", "err": 0, "path": path})))
            return (self.server.submit(lambda rid, now: node.client_sync(rid, now)), synced), False
        if op in zkclients.WRITES:
            written = self.server.submit(lambda rid, now: node.zk_write(rid, session, xid, op, record, now, host))
            return (written, lambda answer: self._reply(xid, answer)), False
        last = op == zkclientwire.OP_CLOSE
        if last:
            self.sessions.pop(session, None)
        code = 0 if op == zkclientwire.OP_PING or last else UNIMPLEMENTED
        return (None, lambda _: wire.frame(zkclientwire.encode_reply(xid, node.committed_zxid, code))), last

    @staticmethod
    def _reply(xid: int, answer: dict[str, Any]) -> bytes:
        if "error" in answer:
            raise Close(str(answer["error"]))
        result = answer["zk"]
        return wire.frame(zkclientwire.encode_reply(xid, result["zxid"], result["err"],
                                                    zkclientwire.encode_result(result)))
