"""The client protocol, server side: submit a value, read the delivered sequence, sync.

Theory of operation
-------------------
A client connection carries frames whose bodies are JSON objects (`zabref.net.clientwire`: the one codec of the client
protocol, which every client uses). Requests on one connection may be pipelined and are answered in order
(`zabref.net.pipeline`: read in the loop's read callback; a submit or sync goes to the node as soon as it is read, a
read is made at its turn, so that it sees what the requests before it wrote). This module only carries them: every
decision -- who runs ClientRequest, where a request is forwarded, when it is answered -- is the node's
(`zabref.core.node`, ``client_submit`` / ``client_sync`` / ``forward_reply`` / ``client_read``), in both modes:

* ``{"op": "submit", "value": text}`` -> ``{"zxid": z}`` once the transaction is committed AND delivered at this
  server. The leader runs ClientRequest; a follower forwards the request to its leader's client port, relays the
  zxid, and answers once it has delivered z itself (so a later ``read`` here sees it). Forwarded requests go over
  connections to the leader's client port kept open for reuse (at most `FORWARD_POOL` idle ones).
* ``{"op": "read", "from_zxid": z, "limit": n}`` -> ``{"txns": [[zxid, text], ...], "more": bool, "zxid": last}``:
  the delivered transactions after z, in delivery order, at most n (default and cap `READ_LIMIT`), and the last zxid
  delivered here. A ZooKeeper leader's transaction (a mixed ensemble) reads as an object of its fields in place of
  the text (``{"zookeeper": "create", "path": ..., "data": ..., ...}``, `zabref.core.zktxn.read_form`).
* ``{"op": "sync"}`` -> ``{"zxid": z}``: returns when this server has delivered what its leader had committed when
  the sync reached it, once a quorum confirmed that leader still leads (`Node.client_sync`). A follower sends the
  sync to its leader as REQUEST on the quorum connection and answers at the leader's SYNC, with z the last zxid it
  has delivered then (spec/ZabSync.tla); the leader answers its own clients with its commit point at arrival.

Errors are ``{"error": text, "retry": bool}``; ``retry`` is true when asking again later (or elsewhere) is safe --
no leader yet, the leader is still synchronizing, the forward failed before the leader took the value. A submit
whose outcome is unknown (the leader lost leadership while the value was in flight) says ``retry: false``: resending
could commit the value twice. Control mode serves clients the same way (the conformance driver submits the spec's
ClientRequest values here).

Bad input. A body that is not a JSON object (bad UTF-8, bad JSON, nesting too deep for the parser, an integer with
more digits than Python converts, a ``value`` that is not encodable Unicode such as a lone surrogate) gets an error
answer and the connection stays usable. A bad length prefix closes the connection at once. Bounds, so that clients
cannot exhaust the server, from the configuration's ``[limits]`` (`zabref.config.Limits`): at most
``client_connections`` client connections at a time, and at most ``client_connections_per_address`` from one
address (as ZooKeeper's maxClientCnxns: one host that opens thousands of connections takes its share, and the
others are still served); one more is closed at once. A request is at most ``client_frame_bytes`` long (a longer
length prefix closes the connection before the body is read) and must arrive whole within `FRAME_TIMEOUT` seconds
of its first byte (half a frame then silence is closed); at most `zabref.net.pipeline.MAX_PIPELINED` requests wait
for their answers (then the reading pauses), and an answer the client does not read within
`zabref.net.pipeline.WRITE_TIMEOUT` seconds closes the connection. Every close for one of these reasons is logged
with the client's address.

TLS. With ``[security] client_tls`` the connection is opened over TLS (`zabref.net.listener.Accepted.open`),
counted against the limits while it shakes hands; a failed handshake is logged and closed before any request is
read. A follower forwards with its own certificate.

The server. A client port reaches its server only through `ClientPortHost`: the configuration, the TLS contexts, the
node, the clock, and the pump (``enqueue`` and ``submit``). The server makes its client port and keeps it,
and hands the node's forwards to `ClientPort.forward`; nothing here sets anything on the server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from zabref.config import Config
from zabref.core.effects import READ_LIMIT, Effects
from zabref.core.node import Node
from zabref.net import clientwire, listener, peers, pipeline, wire
from zabref.net.security import AuthError, Guard

__all__ = ["ClientPort", "ClientPortHost", "Clock", "READ_LIMIT", "SUBMIT_TIMEOUT", "FRAME_TIMEOUT"]

log = logging.getLogger("zabref")

#: Seconds a submit waits for its transaction to be delivered here before answering "outcome unknown".
SUBMIT_TIMEOUT = 30.0
#: Seconds between the first byte of a request frame and its last.
FRAME_TIMEOUT = 10.0
#: Idle connections a follower keeps open to its leader's client port for forwarding (a new TCP connection per
#: forwarded request cost the follower about a fifth of its CPU under load: docs/performance.md).
FORWARD_POOL = 32


class Clock(Protocol):
    """The time to give the node (a `zabref.runtime.drivers` driver is one)."""

    def now(self) -> float: ...


class ClientPortHost(Protocol):
    """All that a `ClientPort` asks of its server (`zabref.runtime.server.Server` is one); it reads, never sets."""

    @property
    def config(self) -> Config: ...  # ``limits``; the leader's host and client port, for a forward

    @property
    def guard(self) -> Guard: ...  # ``client_server`` (TLS of accepted clients), ``forward_client`` (of forwards)

    @property
    def node(self) -> Node | None: ...  # None until the server starts; its client port listens only after

    @property
    def driver(self) -> Clock: ...

    def enqueue(self, event: Callable[[], Effects | None]) -> None:
        """Run ``event`` in the server's pump; nobody waits for it."""

    def submit(self, make: Callable[[int, float], Effects]) -> asyncio.Future[dict[str, Any]]:
        """Run ``make(rid, now)`` (one node entry point) in the pump; the future of the node's answer to ``rid``
        (cancelling it stops the wait)."""


class ClientPort:
    """The server's listener hands `handle` each connection it accepts on the client port; the server calls
    `forward` for the node's forwards."""

    def __init__(self, server: ClientPortHost) -> None:
        self.server = server
        self.limits = server.config.limits  # zabref.config.Limits
        self.open_connections = 0
        self.per_address: dict[str, int] = {}  # open client connections by the client's IP address
        #: Idle connections to a leader's client port, reused by `_forward` (at most FORWARD_POOL per address).
        self._forward_pool: dict[tuple[str, int], list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    @peers.quiet_cancel
    async def handle(self, accepted: listener.Accepted) -> None:
        address = accepted.address
        host = address[0] if isinstance(address, tuple) and address else str(address)
        limits = self.limits
        if self.open_connections >= limits.client_connections:
            log.warning("client connection from %s closed: %d client connections are open already (limits."
                        "client_connections)", address, self.open_connections)
            accepted.close()
            return
        if self.per_address.get(host, 0) >= limits.client_connections_per_address:
            log.warning("client connection from %s closed: %d client connections from %s are open already (limits."
                        "client_connections_per_address)", address, self.per_address[host], host)
            accepted.close()
            return
        self.open_connections += 1
        self.per_address[host] = self.per_address.get(host, 0) + 1
        try:
            try:
                reader, writer = await accepted.open(FRAME_TIMEOUT)
                reason = await self._serve(reader, writer)
            except AuthError as e:
                reason = str(e)
        finally:
            self.open_connections -= 1
            left = self.per_address[host] - 1
            if left:
                self.per_address[host] = left
            else:
                del self.per_address[host]
            accepted.close()
        if reason is not None:
            log.warning("client connection from %s closed: %s", address, reason)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """Answer requests until the client leaves (None) or misbehaves (the reason, for the log line)."""
        decoder = wire.FrameDecoder(self.limits.client_frame_bytes, "client request")
        try:
            await pipeline.serve(reader, writer, decoder, self._request, frame_timeout=FRAME_TIMEOUT)
        except pipeline.Close as e:
            return str(e)
        except (ConnectionError, OSError):
            return None
        return None

    def _request(self, body: bytes) -> tuple[pipeline.Entry, bool]:
        """A request's entry (`zabref.net.pipeline`; no request is a connection's last): a submit or a sync goes to
        the node now and is answered with the node's answer; a read is made at its turn; a request that cannot be
        served is answered with its error at its turn."""
        request = clientwire.decode_request(body)
        if "error" in request:
            return _now(request), False
        op = request.get("op")
        node = self._node
        if op == "submit":
            data = _value(request)
            if isinstance(data, str):
                return _now({"error": data, "retry": False}), False
            return (self.server.submit(lambda rid, now: node.client_submit(rid, data, now)), clientwire.encode), False
        if op == "read":
            return (None, lambda _: clientwire.encode(self.read(request))), False
        if op == "sync":
            return (self.server.submit(lambda rid, now: node.client_sync(rid, now)), clientwire.encode), False
        return _now({"error": f"unknown op {op!r} (submit, read, sync)", "retry": False}), False

    @property
    def _node(self) -> Node:
        node = self.server.node
        assert node is not None, "a client port serves a started server"
        return node

    # ------------------------------------------------------------------------------------------ ops

    async def forward(self, rid: int, leader: int, request: dict[str, Any]) -> None:
        """Carry a forwarded request to ``leader``'s client port; its answer (or why it failed) goes to the node."""
        target = self.server.config.server(leader)
        try:
            reply = await self._forward((target.host, target.client_port), request)
        except OSError as e:
            # A refused connection never reached the leader: asking again is safe; anything else is unknown.
            retry = request["op"] != "submit" or isinstance(e, ConnectionRefusedError)
            reply = {"error": f"forward to the leader at {target.host}:{target.client_port} failed: {e}",
                     "retry": retry}
        server = self.server
        server.enqueue(lambda: self._node.forward_reply(rid, reply, server.driver.now()))

    async def _forward(self, address: tuple[str, int], obj: dict[str, Any]) -> dict[str, Any]:
        idle = self._forward_pool.setdefault(address, [])
        conn = None
        while idle and conn is None:  # reuse an idle connection the leader has not closed
            conn = idle.pop()
            if conn[0].at_eof() or conn[1].is_closing():
                conn[1].close()
                conn = None
        answered = False
        try:
            if conn is None:
                conn = await asyncio.wait_for(asyncio.open_connection(*address, **self._tls(address[0])),
                                              SUBMIT_TIMEOUT + 5)
            answer = await clientwire.call_async(*conn, obj, SUBMIT_TIMEOUT + 5, f"{address[0]}:{address[1]}")
            answered = True
            return answer
        except TimeoutError as e:
            raise OSError(f"no answer within {SUBMIT_TIMEOUT + 5} s") from e
        finally:
            if conn is not None:
                if answered and len(idle) < FORWARD_POOL:
                    idle.append(conn)
                else:
                    conn[1].close()

    def _tls(self, host: str) -> dict[str, Any]:
        """open_connection's TLS arguments for the leader's client port (none when client TLS is off)."""
        ctx = self.server.guard.forward_client
        return {} if ctx is None else {"ssl": ctx, "server_hostname": host, "ssl_handshake_timeout": FRAME_TIMEOUT}

    def read(self, request: dict[str, Any]) -> dict[str, Any]:
        after = request.get("from_zxid", 0)
        limit = request.get("limit", READ_LIMIT)
        if not isinstance(after, int) or not isinstance(limit, int) or limit < 1:
            return {"error": '"from_zxid" must be an int and "limit" a positive int', "retry": False}
        return self._node.client_read(after, limit)


def _value(request: dict[str, Any]) -> bytes | str:
    """A submit's value as bytes; why not (text) when it is not text, or not Unicode that UTF-8 can carry."""
    value = request.get("value")
    if not isinstance(value, str):
        return '"value" must be text'
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: JSON's "\ud800" is a str that has no UTF-8 form
        return f'"value" is not valid Unicode text: {e.reason} at index {e.start}'


def _now(answer: dict[str, Any]) -> pipeline.Entry:
    """The entry of a request answered with ``answer`` at its turn, waiting for nothing."""
    return None, lambda _: clientwire.encode(answer)
