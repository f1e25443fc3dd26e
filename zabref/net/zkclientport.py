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
* **Requests** are pipelined, as ZooKeeper's clients send them: a write or a sync goes to the node as soon as it is
  read (at most `MAX_PIPELINED` waiting), and the replies leave in request order, a read's made at its turn so that
  it sees this session's writes before it. One task reads the session's frames (every whole frame of a read at
  once), one writes its replies (`_Pipeline`): a reply leaves as soon as its answer is in and those before it left,
  and every reply ready then leaves with it in one write (a write per reply and a task per request took 27-32 % of
  the servers' CPU a write at 16 and 128 in flight: docs/performance.md). PING; getData, exists, getChildren,
  getChildren2 (`Node.zk_read`); sync (`Node.client_sync`; answered with the path); create, create2,
  createContainer, delete, setData, setACL, multi (`Node.zk_write`, keyed by the session and the request's xid,
  which ZooKeeper's clients number as the cxid); closeSession (answered, the session forgotten, the connection
  closed). Any other type, and a read that asks to set a watch (no watch is ever triggered here), is answered with
  UNIMPLEMENTED (-6).
* **Four-letter words.** ``srvr`` and ``ruok`` in place of a ConnectRequest are answered as ZooKeeper answers
  them (``Mode:`` and ``Zxid:``, the last delivered, are what harnesses read), and the connection closed.
* **Closing.** A write the node could not answer (no established leader, not delivered in time, a role change
  before its transaction came) closes the connection, which a client reads as a connection loss, the outcome
  unknown; a session silent for its timeout is expired; a frame that cannot be read closes the connection. Each
  close for a reason is logged with the client's address.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Any

from zabref.core import zkclients, zktree
from zabref.core.node import Node
from zabref.core.packets import ServerState
from zabref.core.zab import ZabState
from zabref.errors import CodecError
from zabref.net import listener, peers, streams, wire, zkclientwire
from zabref.net.clientport import FRAME_TIMEOUT, WRITE_TIMEOUT, ClientPortHost
from zabref.net.security import AuthError

__all__ = ["ZkClientPort"]

log = logging.getLogger("zabref")

UNIMPLEMENTED = zktree.ERR["UNIMPLEMENTED"]
#: Requests of one session read and not answered yet, at most: past it the port reads no more until replies leave.
MAX_PIPELINED = 1024
#: Bytes of replies written in the read callback and not sent yet past which the session's reading pauses until the
#: client has read them (the reply task drains them, at most `WRITE_TIMEOUT` s).
REPLY_BUFFER = 64 * 1024
#: `_read_requests`' reason when the client closed its session (closeSession).
_SESSION_CLOSED = "the client closed its session"
#: The four-letter words answered (ZooKeeper reads one in place of a ConnectRequest's length): ``srvr``, ``ruok``.
FOUR_LETTER_WORDS = (b"srvr", b"ruok")


class _Close(Exception):
    """Close the connection; the message says why (logged)."""


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
        except _Close as e:
            reason = str(e)
        except AuthError as e:
            reason = str(e)
        except CodecError as e:
            reason = f"bad input: {e}"
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            reason = None
        finally:
            self.open_connections -= 1
            accepted.close()
        if reason is not None:
            log.warning("ZooKeeper client connection from %s closed: %s", address, reason)

    async def _send(self, writer: asyncio.StreamWriter, body: bytes) -> None:
        await _write(writer, [wire.frame(body)])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        decoder = wire.FrameDecoder(self.limits.client_frame_bytes, "ZooKeeper client request")
        try:
            async with asyncio.timeout(FRAME_TIMEOUT):
                head = await reader.readexactly(4)
                if head in FOUR_LETTER_WORDS:
                    streams.write(writer, self._four_letter(head).encode())
                    await writer.drain()
                    return
                # the length, checked against the bound; then the body, and nothing past it (`_read_requests` reads on)
                (length,) = struct.unpack(">i", head)
                body, = decoder.feed(head) or decoder.feed(await reader.readexactly(length))
        except TimeoutError:
            raise _Close(f"nothing from the client within {FRAME_TIMEOUT:g} s") from None
        connect = zkclientwire.decode_connect(body)
        node = self._node
        seen = node.committed_zxid
        if connect.last_zxid_seen > seen:
            raise _Close(f"the client has seen zxid {connect.last_zxid_seen:#x}, this server has delivered up to "
                         f"{seen:#x} only")
        session, timeout_ms = self._session(connect)
        if session == 0:
            await self._send(writer, zkclientwire.encode_connect_response(0, 0, b"\x00" * 16))
            raise _Close(f"session {connect.session:#x} is not known here: expired")
        try:
            await self._send(writer, zkclientwire.encode_connect_response(timeout_ms, session,
                                                                            self.sessions[session][0]))
            await self._requests(reader, writer, decoder, session, timeout_ms, host)
        finally:
            self._left(session)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        decoder: wire.FrameDecoder, session: int, timeout_ms: int, host: str) -> None:
        """Serve the session's requests: they are read in the loop's read callback (`_read_requests`) and one task
        writes the replies that wait for the node, in order (`_reply_in_order`); an error of either ends both."""
        pipeline = _Pipeline(peers.transport_of(writer))
        reading = asyncio.ensure_future(self._read_requests(reader, writer, decoder, pipeline, session, timeout_ms,
                                                            host))
        replying = asyncio.ensure_future(self._reply_in_order(writer, pipeline))
        try:
            done, _ = await asyncio.wait({reading, replying}, return_when=asyncio.FIRST_COMPLETED)
            if reading in done:
                reading.result()  # why the requests stopped, raised
                await replying  # the replies of every request read, then the end
            else:
                replying.result()  # why the replies stopped, raised
                raise _Close("the replies stopped")
        finally:
            reading.cancel()
            replying.cancel()
            pipeline.cancel()

    async def _read_requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             decoder: wire.FrameDecoder, pipeline: _Pipeline, session: int, timeout_ms: int,
                             host: str) -> None:
        """Read requests into ``pipeline`` until the client closes its end or the session; a session with no whole
        frame within its timeout is closed. The frames are decoded in the loop's read callback (`peers.read_stream`,
        no task woken a read). A request whose reply needs no answer of the node (a read, a PING) while nothing
        before it waits is answered there (its turn is now), with the others of the same read in one write."""
        out: list[bytes] = []
        sessions = self.sessions
        request = self._request

        def on_frame(body: bytes) -> None:
            xid, op, record = zkclientwire.decode_header(body)
            entry = request(session, xid, op, record, host)
            if entry[0] is None and not pipeline.entries:
                out.append(wire.frame(_made(entry)))
            else:
                pipeline.put(entry)
            if op == zkclientwire.OP_CLOSE:
                sessions.pop(session, None)
                raise peers.EndReading(_SESSION_CLOSED)

        def after_chunk() -> None:
            if out:
                streams.write(writer, b"".join(out))
                out.clear()
                pipeline.wrote()

        reason = await peers.read_stream(reader, writer, decoder, on_frame, idle_timeout=timeout_ms / 1000,
                                         peer_name="the client", after_chunk=after_chunk)
        if reason.startswith(peers.LOST):
            raise ConnectionResetError(reason)
        if reason not in (peers.PEER_CLOSED, _SESSION_CLOSED):
            raise _Close(reason)
        pipeline.end()

    async def _reply_in_order(self, writer: asyncio.StreamWriter, pipeline: _Pipeline) -> None:
        """Write the replies in request order: each as soon as its answer is in and those before it left, every
        reply ready then in the same write."""
        while True:
            entry = await pipeline.next()
            if entry is not None:
                out = [wire.frame(_made(entry))]
                while (entry := pipeline.ready()) is not None:
                    out.append(wire.frame(_made(entry)))
                await _write(writer, out)
            elif pipeline.draining:  # replies written in the read callback wait for the client to read them
                await _drain(writer)
                pipeline.drained()
            else:
                return

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

    def _request(self, session: int, xid: int, op: int, record: bytes, host: str) -> _Entry:
        """One request (module docstring): a write or sync is handed to the node now; its reply is made when its turn
        comes. A record that cannot be read raises CodecError now."""
        node = self._node
        if op in zkclients.READS:
            path, watch = zkclientwire.decode_path_watch(record, zkclients.READS[op])
            if watch:
                return None, lambda _: zkclientwire.encode_reply(xid, node.committed_zxid, UNIMPLEMENTED)
            return None, lambda _: self._reply(xid, node.zk_read(op, path))
        if op == zkclientwire.OP_SYNC:
            path = zkclientwire.decode_path(record, "sync")

            def synced(answer: dict[str, Any]) -> bytes:
                if "error" in answer:
                    raise _Close(f"sync: {answer['error']}")
                return zkclientwire.encode_reply(xid, answer["zxid"], 0, zkclientwire.encode_result(
                    {"op": "sync", "err": 0, "path": path}))
            return self.server.submit(lambda rid, now: node.client_sync(rid, now)), synced
        if op in zkclients.WRITES:
            written = self.server.submit(lambda rid, now: node.zk_write(rid, session, xid, op, record, now, host))
            return written, lambda answer: self._reply(xid, answer)
        code = 0 if op in (zkclientwire.OP_PING, zkclientwire.OP_CLOSE) else UNIMPLEMENTED
        return None, lambda _: zkclientwire.encode_reply(xid, node.committed_zxid, code)

    @staticmethod
    def _reply(xid: int, answer: dict[str, Any]) -> bytes:
        if "error" in answer:
            raise _Close(str(answer["error"]))
        result = answer["zk"]
        return zkclientwire.encode_reply(xid, result["zxid"], result["err"], zkclientwire.encode_result(result))


#: A request's reply, made at its turn: (the node's answer it waits for, or None; what makes the reply's body of
#: that answer, raising _Close where the connection must close instead).
_Entry = tuple["asyncio.Future[dict[str, Any]] | None", Callable[[Any], bytes]]


async def _write(writer: asyncio.StreamWriter, replies: list[bytes]) -> None:
    """Write ``replies`` at once; if the client is not reading them, wait for it, at most `WRITE_TIMEOUT` s."""
    streams.write(writer, b"".join(replies))
    if writer.transport.get_write_buffer_size():
        await _drain(writer)


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the client has read enough of its replies (the stream's drain), at most `WRITE_TIMEOUT` s."""
    try:
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()
    except TimeoutError:
        raise _Close(f"the client did not read its answer within {WRITE_TIMEOUT} s") from None


def _made(entry: _Entry) -> bytes:
    fut, make = entry
    if fut is None:
        return make(None)
    if fut.cancelled():
        raise _Close("the server stopped before it answered")
    return make(fut.result())


class _Pipeline:
    """One session's requests read and not answered yet, in request order, and whether the session ended (nothing
    more will come). The session's reading pauses while `MAX_PIPELINED` requests wait (until half of them are
    answered; a read's requests are all taken, so a read's worth more may wait) and while replies written in the
    read callback wait for the client to read them (``draining``: over `REPLY_BUFFER` unsent bytes, until the reply
    task has drained them)."""

    __slots__ = ("entries", "ended", "draining", "_paused", "_transport", "_waiter", "_loop")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.entries: collections.deque[_Entry] = collections.deque()
        self.ended = False
        self.draining = False
        self._paused = False
        self._transport = transport
        # `next` waits on a future of the loop kept here, not on an Event: an Event looks the running loop up at every
        # wait, a getpid() system call on Python 3.11 (`zabref.runtime.inbox`)
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()

    def put(self, entry: _Entry) -> None:
        self.entries.append(entry)
        if entry[0] is None:
            self._wake()
        else:
            entry[0].add_done_callback(self._answered)
        if len(self.entries) >= MAX_PIPELINED:
            self._reading()

    def wrote(self) -> None:
        """Replies were written in the read callback: past `REPLY_BUFFER` unsent bytes, read no more until the reply
        task has drained them."""
        if self._transport.get_write_buffer_size() > REPLY_BUFFER:
            self.draining = True
            self._reading()
            self._wake()

    def drained(self) -> None:
        self.draining = False
        self._reading()

    def _reading(self) -> None:
        """Pause or resume the session's reading as the bounds (the class docstring) say."""
        if self.ended:
            return
        if not self._paused and (self.draining or len(self.entries) >= MAX_PIPELINED):
            self._paused = True
            self._transport.pause_reading()
        elif self._paused and not self.draining and len(self.entries) <= MAX_PIPELINED // 2:
            self._paused = False
            self._transport.resume_reading()

    def _answered(self, fut: asyncio.Future[dict[str, Any]]) -> None:
        if self.entries and self.entries[0][0] is fut:
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self) -> None:
        self.ended = True
        self._wake()

    def ready(self) -> _Entry | None:
        """The first entry, taken, if its answer is in; else None."""
        if self.entries:
            fut = self.entries[0][0]
            if fut is None or fut.done():
                entry = self.entries.popleft()
                if self._paused:
                    self._reading()
                return entry
        return None

    async def next(self) -> _Entry | None:
        """The first entry, taken once its answer is in; None once the session ended and every entry was taken, or
        when the replies must be drained first (``draining``)."""
        while (entry := self.ready()) is None:
            if self.draining or (self.ended and not self.entries):
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        return entry

    def cancel(self) -> None:
        """Stop waiting for the answers of requests not replied to (the connection is closing)."""
        for fut, _ in self.entries:
            if fut is not None:
                fut.cancel()
        self.entries.clear()
