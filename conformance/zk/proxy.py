"""The recording proxy between ZooKeeper servers, which is also their network's fault layer.

Theory of operation
-------------------
One asyncio event loop in a thread of its own listens on every link's proxy port (`conformance.zk.ports`). A server
that connects to a proxy port is, by that port, server ``link.src`` reaching ``link.dst``'s quorum or election port;
the proxy connects on to the real port and copies bytes both ways, writing each read to the recording before passing
it on (`conformance.zk.recording`), so the recording is what crossed, in the order the proxy saw it.

Faults are blocked directed pairs and port kinds ``(a, b, kind)``: bytes from server a to server b stop on every
connection between them to the ``kind`` port (quorum or election), whoever opened it. A blocked direction is not
read: the proxy pauses reading that socket, the kernel's buffers fill and the sender's writes stall, as in a network
partition; nothing is dropped, and on ``heal`` what was held flows on (a FIN included). A connection accepted while
either direction of its pair is blocked is not connected on until both are open -- a TCP handshake needs both -- and
if its server gave up meanwhile (the socket is no longer ESTABLISHED, read from TCP_INFO) it is closed without ever
reaching the target, as a connection that never got through. ``cut(a, b)`` blocks both directions, ``cut(a, b,
both=False)`` only a -> b; ``isolate(a)`` blocks every pair with a; ``heal`` lifts some or all; each takes
``kinds``, both port kinds unless told (a cut of the quorum port alone lets an election through and no leader's
sync: a leader elected that never establishes). Each change is a FAULT record with the blocked set after it
(`folded`: ``[a, b]`` for a pair blocked on both kinds, ``[a, b, kind]`` on one).

An election connection opens with QuorumCnxManager's initial message, which carries the connector's election
address; a server that drops a smaller id's dial dials back to that address (`handleConnection`), which is the
connector's own port, so the dial-back would bypass the proxy and go unrecorded (a zabref member, started before the
JVMs, dials first and was reached so; docs/zookeeper.md). The proxy presents in its place the proxy port at which the
target reaches the connector (`advertised`), and records the message as it passed it on.

A target that refuses (a killed server) gets the connector's connection closed: at once on an election port, after
`REFUSED_WAIT` on a quorum port, where the proxy tries again every `REFUSED_RETRY` meanwhile. The proxy accepts
every dial before it connects on, so a learner that dials its new leader in the milliseconds before the leader
listens (`Leader.lead` snapshots first) would read an EOF and go back to election, where without the proxy its
connect would be refused and tried again (`Learner.connectToLeader`, every 100 ms within initLimit); the wait gives
the leader that time. An election connection is not held so: QuorumCnxManager dials again by itself, and what its
sender wrote into a connection the proxy then closed would be lost without crossing. A slow reader slows its writer:
when a socket's write buffer fills, the proxy stops reading the other socket until it drains. ``stop()`` closes
every listener and connection, ends the loop and the thread, and closes the recording; it is idempotent, and the
``with`` block calls it.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from conformance.zk import ZkEnsembleError
from conformance.zk.ports import KINDS, Link
from conformance.zk.recording import Kind, RecordingWriter

__all__ = ["Proxy", "advertised", "folded"]

TCP_ESTABLISHED = 1
#: A quorum connection whose target refuses is tried again every REFUSED_RETRY s for up to REFUSED_WAIT s (module
#: docstring).
REFUSED_RETRY = 0.02
REFUSED_WAIT = 0.5
#: QuorumCnxManager's initial message: protocol version (negative: -65536 or -65535), sid, the length of the address
#: text, the text. A first long that is not negative is an old server's bare sid, which carries no address.
_INITIAL_HEAD = struct.Struct(">qqi")
#: The longest address text passed on rewritten; a longer one (ZooKeeper refuses above 4096) is passed on as it came.
_MAX_ADDRESS = 4096


def advertised(head: bytes, port: int) -> bytes | None:
    """The first bytes ``head`` of an election connection with the address its initial message advertises replaced
    by ``127.0.0.1:port``; None while the message is not whole yet. Bytes that are no such message come back as
    they are (the target judges them)."""
    if len(head) < 8:
        return None
    if struct.unpack_from(">q", head)[0] >= 0:
        return head
    if len(head) < _INITIAL_HEAD.size:
        return None
    version, sid, n = _INITIAL_HEAD.unpack_from(head)
    if not 0 <= n <= _MAX_ADDRESS:
        return head
    end = _INITIAL_HEAD.size + n
    if len(head) < end:
        return None
    text = f"127.0.0.1:{port}".encode()
    return _INITIAL_HEAD.pack(version, sid, len(text)) + text + head[end:]


def folded(blocked: Iterable[tuple[int, int, str]]) -> list[list[Any]]:
    """A blocked set as a FAULT record holds it: ``[a, b]`` for a pair blocked on every port kind, ``[a, b, kind]``
    for one blocked on that kind alone, sorted (a recording made before port kinds holds pairs only)."""
    kinds: dict[tuple[int, int], set[str]] = {}
    for a, b, kind in blocked:
        kinds.setdefault((a, b), set()).add(kind)
    out: list[list[Any]] = []
    for (a, b), ks in kinds.items():
        out += [[a, b]] if ks >= set(KINDS) else [[a, b, k] for k in sorted(ks)]
    return sorted(out)


def _now() -> int:
    return time.monotonic_ns()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: ``role`` "c" (the connector, accepted here) or "s" (the target)."""

    def __init__(self, conn: _Conn, role: str) -> None:
        self.conn, self.role = conn, role

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.conn.made(self.role, transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.conn.data(self.role, data)

    def eof_received(self) -> bool:
        self.conn.eof(self.role)
        return True  # keep the other direction open (a half close)

    def connection_lost(self, exc: Exception | None) -> None:
        self.conn.lost(self.role, exc)

    def pause_writing(self) -> None:
        self.conn.pressure(self.role, True)

    def resume_writing(self) -> None:
        self.conn.pressure(self.role, False)


class _Conn:
    """One proxied connection: the connector's socket ``c``, the target's ``s``, and why each is not being read."""

    def __init__(self, proxy: Proxy, cid: int, link: Link) -> None:
        self.proxy, self.id, self.link = proxy, cid, link
        self.t: dict[str, asyncio.Transport] = {}
        self.holds: dict[str, set[str]] = {"c": set(), "s": set()}
        self.connecting: asyncio.Task[None] | None = None  # connecting on to the target (`_connect`)
        self.held = False  # accepted while its pair was blocked: not connected on at once
        self.eofs: set[str] = set()
        self.closed = False
        # an election connection's first bytes from its connector, until its initial message is whole (`advertised`)
        self.initial: bytearray | None = bytearray() if link.kind == "election" else None

    # -- which way is blocked
    def blocked(self, role: str) -> bool:
        """Are bytes read from ``role``'s socket blocked (its sender -> its receiver)?"""
        a, b = (self.link.src, self.link.dst) if role == "c" else (self.link.dst, self.link.src)
        return (a, b, self.link.kind) in self.proxy.blocked

    def _set_hold(self, role: str, reason: str, on: bool) -> None:
        held = self.holds[role]
        before = bool(held)
        (held.add if on else held.discard)(reason)
        tr = self.t.get(role)
        if tr is None or tr.is_closing() or before == bool(held):
            return
        tr.pause_reading() if held else tr.resume_reading()

    def apply_faults(self) -> None:
        if self.closed:
            return
        if "s" not in self.t:
            if self.connecting is not None:
                return
            if self.blocked("c") or self.blocked("s"):
                self.held = True
                return
            self.connecting = self.proxy.loop.create_task(self._connect())
            return
        for role in ("c", "s"):
            self._set_hold(role, "cut", self.blocked(role))

    # -- the target side
    @staticmethod
    def _gave_up(c: asyncio.Transport) -> bool:
        """Is the connector's socket no longer ESTABLISHED (its server closed it; read from TCP_INFO)?"""
        try:
            state = c.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        except OSError:
            return False
        return state != TCP_ESTABLISHED

    async def _connect(self) -> None:
        c = self.t.get("c")
        if c is None or self.closed:
            return
        if self.held and self._gave_up(c):  # its server gave up while the link held it: it never got through
            self.close_all("the connector gave up before the link let it through")
            return
        loop = self.proxy.loop
        deadline = loop.time() + (REFUSED_WAIT if self.link.kind == "quorum" else 0.0)
        while True:
            try:
                await loop.create_connection(lambda: _Side(self, "s"), "127.0.0.1", self.link.target)
                return
            except OSError as e:
                if loop.time() >= deadline or self.closed or self._gave_up(c):
                    self.close_all(f"the target refused: {e.strerror or e}")
                    return
            await asyncio.sleep(REFUSED_RETRY)

    # -- events from the sockets
    def made(self, role: str, transport: asyncio.Transport) -> None:
        self.t[role] = transport
        if role == "c":
            transport.pause_reading()  # until the target is connected
            self.holds["c"].add("connecting")
            peer = transport.get_extra_info("peername")
            self.proxy.record(Kind.OPEN, self.id, {**self.link.to_json(), "peer_port": peer[1] if peer else None})
            self.apply_faults()
            return
        if self.closed:
            transport.close()
            return
        self.proxy.record(Kind.CONNECTED, self.id, {"local_port": transport.get_extra_info("sockname")[1]})
        self._set_hold("c", "connecting", False)
        self.apply_faults()

    def data(self, role: str, data: bytes) -> None:
        if role == "c" and self.initial is not None:
            self.initial += data
            back = self.proxy.reaching(self.link.dst, self.link.src, "election")
            whole = advertised(bytes(self.initial), back.listen) if back is not None else bytes(self.initial)
            if whole is None:
                return
            data, self.initial = whole, None
        self.proxy.record(Kind.DATA_C2S if role == "c" else Kind.DATA_S2C, self.id, data)
        other = self.t.get("s" if role == "c" else "c")
        if other is not None and not other.is_closing():
            other.write(data)

    def eof(self, role: str) -> None:
        if role == "c" and self.initial:  # an initial message cut short: what came is passed on as it came
            head, self.initial = bytes(self.initial), None
            self.data(role, head)
        self.proxy.record(Kind.EOF_C2S if role == "c" else Kind.EOF_S2C, self.id)
        self.eofs.add(role)
        other = self.t.get("s" if role == "c" else "c")
        if other is not None and not other.is_closing() and other.can_write_eof():
            other.write_eof()
        if self.eofs == {"c", "s"}:
            self.close_all("both sides closed")

    def lost(self, role: str, exc: Exception | None) -> None:
        who = "src" if role == "c" else "dst"
        self.close_all(f"{who} closed" + (f" ({exc})" if exc else ""))

    def pressure(self, role: str, on: bool) -> None:
        """``role``'s write buffer is full (on) or drained: stop or restart reading the other side."""
        self._set_hold("s" if role == "c" else "c", "pressure", on)

    def close_all(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.proxy.record(Kind.CLOSE, self.id, {"reason": reason})
        for tr in self.t.values():
            tr.close()  # flushes what is buffered first
        self.proxy.conns.pop(self.id, None)


class Proxy:
    """``with Proxy(links, recording).start() as p: p.cut(1, 2) ...``: the proxy of one run."""

    def __init__(self, links: Iterable[Link], recording: str | Path, meta: dict[str, Any] | None = None) -> None:
        self.links = list(links)
        self.recording = Path(recording)
        self.meta = meta or {}
        self.blocked: set[tuple[int, int, str]] = set()  # (from, to, port kind)
        self.conns: dict[int, _Conn] = {}
        self.accepted = 0
        self.loop = asyncio.new_event_loop()
        self._servers: list[asyncio.base_events.Server] = []
        self._thread: threading.Thread | None = None
        self._writer: RecordingWriter | None = None
        self._stopped = False

    # -- life cycle
    def start(self) -> Proxy:
        self.recording.parent.mkdir(parents=True, exist_ok=True)
        self._writer = RecordingWriter(self.recording)
        self.record(Kind.META, 0, {"format": 1, "started_wall": time.time(), "started_ns": _now(),
                                   "links": [link.to_json() for link in self.links], **self.meta})
        self._thread = threading.Thread(target=self.loop.run_forever, name="zk-proxy", daemon=True)
        self._thread.start()
        try:
            self._call(self._listen())
        except BaseException:
            self.stop()
            raise
        return self

    async def _listen(self) -> None:
        for link in self.links:
            try:
                server = await self.loop.create_server(lambda link=link: self._accept(link), "127.0.0.1",
                                                       link.listen, reuse_address=True)
            except OSError as e:
                raise ZkEnsembleError(f"proxy cannot listen on 127.0.0.1:{link.listen} for {link.name}: {e}") from e
            self._servers.append(server)

    def reaching(self, src: int, dst: int, kind: str) -> Link | None:
        """The link by which server ``src`` reaches ``dst``'s ``kind`` port."""
        return next((k for k in self.links if (k.src, k.dst, k.kind) == (src, dst, kind)), None)

    def _accept(self, link: Link) -> _Side:
        self.accepted += 1
        conn = _Conn(self, self.accepted, link)
        self.conns[conn.id] = conn
        return _Side(conn, "c")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None and self._thread.is_alive():
            try:
                self._call(self._shutdown(), timeout=10)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self._thread.join(10)
        if not self.loop.is_running():
            self.loop.close()
        if self._writer is not None:
            self._writer.close()

    async def _shutdown(self) -> None:
        for server in self._servers:
            server.close()
        connecting = [c.connecting for c in self.conns.values() if c.connecting is not None]
        for conn in list(self.conns.values()):
            conn.close_all("the proxy stopped")
        for task in connecting:  # a quorum dial waiting for its target (REFUSED_WAIT)
            task.cancel()
        await asyncio.gather(*connecting, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        await asyncio.sleep(0)  # let the transports finish closing

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- recording
    def record(self, kind: Kind, conn: int, body: bytes | dict[str, Any] = b"") -> None:
        if self._writer is not None:
            self._writer.write(kind, _now(), conn, body)

    def flush(self) -> None:
        """Make the recording so far readable (the proxy keeps recording)."""
        if self._writer is not None:
            self._writer.flush()

    @property
    def bytes_recorded(self) -> int:
        return self._writer.bytes_data if self._writer is not None else 0

    # -- faults (called from any thread; applied on the loop before they return)
    def cut(self, a: int, b: int, *, both: bool = True, kinds: Iterable[str] = KINDS) -> None:
        """Stop bytes from server a to server b (and from b to a when ``both``) on the ``kinds`` ports."""
        self._change("cut", self._triples({(a, b), (b, a)} if both else {(a, b)}, kinds), add=True)

    def isolate(self, a: int, *, kinds: Iterable[str] = KINDS) -> None:
        """Cut every link of server a, both ways, on the ``kinds`` ports."""
        others = {s for link in self.links for s in (link.src, link.dst)} - {a}
        self._change("isolate", self._triples({p for b in others for p in ((a, b), (b, a))}, kinds), add=True)

    def heal(self, a: int | None = None, b: int | None = None, *, both: bool = True,
             kinds: Iterable[str] = KINDS) -> None:
        """Let bytes flow again on the ``kinds`` ports: from a to b (and back when ``both``); every pair of a when
        only a is given; everything when neither is."""
        ks = self._kinds(kinds)
        if a is None:
            triples = {t for t in self.blocked if t[2] in ks}
        elif b is None:
            triples = {t for t in self.blocked if a in t[:2] and t[2] in ks}
        else:
            triples = self._triples({(a, b), (b, a)} if both else {(a, b)}, ks)
        self._change("heal", triples, add=False)

    @staticmethod
    def _kinds(kinds: Iterable[str]) -> tuple[str, ...]:
        ks = tuple(kinds)
        if not ks or not set(ks) <= set(KINDS):
            raise ZkEnsembleError(f"port kinds {list(ks)}: one or more of {', '.join(KINDS)}")
        return ks

    def _triples(self, pairs: set[tuple[int, int]], kinds: Iterable[str]) -> set[tuple[int, int, str]]:
        ks = self._kinds(kinds)
        return {(a, b, k) for a, b in pairs for k in ks}

    def _change(self, action: str, triples: set[tuple[int, int, str]], *, add: bool) -> None:
        async def apply() -> None:
            if add:
                self.blocked |= triples
            else:
                self.blocked -= triples
            self.record(Kind.FAULT, 0, {"action": action, "pairs": folded(triples), "blocked": folded(self.blocked)})
            for conn in list(self.conns.values()):
                conn.apply_faults()

        self._call(apply())

    def _call(self, coro: Any, timeout: float = 30.0) -> Any:
        if self._thread is None or not self._thread.is_alive():
            coro.close()
            raise ZkEnsembleError("the proxy is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
