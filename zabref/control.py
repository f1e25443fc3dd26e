"""The control socket: inspect a server and, in control mode, take its protocol steps one at a time.

Theory of operation
-------------------
Each server listens on its ``control_port`` (loopback) for JSON Lines: one request object a line, one response
object a line, in order, on any number of connections. Every response has ``"ok": true`` or an ``"error"`` text; a
failed request never stops the server. docs/runtime.md lists every request and response shape.

Read-only requests (``ping``, ``state``) work in both modes. The requests that take a protocol step (``release``,
``elect``, ``join``, ``timeout``, ``client_request``) work only in control mode (``zabref serve --control``), where
the server does nothing by itself: each one runs exactly one core entry point through the runtime's event pump and
is answered after that step's storage operations were made durable and its packets were written to the sockets.

Fault injection (``partition``, ``heal``) works only in normal mode: it cuts or heals this server's links with the
named peers (`zabref.runtime.Server.cut_links`; docs/faults.md). In control mode the driver already decides every
delivery, so a cut there would only be a second, unrecorded way of losing packets.

``state`` maps the server onto the spec: every spec variable the core holds (`zabref.core.SPEC_VARIABLES`; zxids
as ints, transaction values as UTF-8 text, per-learner maps keyed by the sid as a string, since JSON keys are text);
the packets held per peer -- the spec's ``msgs[peer][sid]`` -- as ``{type, zxid, data}`` with ``data`` decoded per
type; the open quorum connections with their packet counters.

Bad input: a line that is not a JSON object with a known ``op`` (including what the JSON parser itself refuses --
nesting too deep, an integer of too many digits) gets an ``error`` answer and the connection stays open. A line
longer than `MAX_LINE` bytes is answered with an error and closes the connection; so does a line still unfinished
`LINE_TIMEOUT` seconds after its first byte. A connection idle BETWEEN requests is never timed out: the conformance
driver keeps one open per server for a whole replay.

`ControlClient` is a small blocking client for tests and the conformance driver.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from typing import Any

from zabref import peers, wire
from zabref.core import Output
from zabref.errors import CodecError, ZabError
from zabref.packets import PacketType, QuorumPacket, ServerState

__all__ = ["ControlPort", "ControlClient", "ControlError", "MAX_LINE", "LINE_TIMEOUT", "describe_packet", "settle"]

log = logging.getLogger("zabref")

#: Longest request line accepted (a longer one closes that control connection).
MAX_LINE = 1024 * 1024
#: Seconds a request line may take from its first byte to its newline (a longer one closes that connection).
LINE_TIMEOUT = 10.0
_STEP_OPS = ("release", "elect", "join", "timeout", "client_request")
_FAULT_OPS = ("partition", "heal")


class ControlError(ZabError):
    """A control request failed; the message is the server's ``error`` text."""


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def describe_packet(p: QuorumPacket) -> dict[str, Any]:
    """A held packet as JSON: ``{type, zxid, data}`` with ``data`` decoded per type (seed 000's table)."""
    data: Any = None
    try:
        match p.type:
            case PacketType.LEADERINFO:
                data = wire.decode_leaderinfo_data(p.data)
            case PacketType.ACKEPOCH:
                data = wire.decode_ackepoch_data(p.data)
            case PacketType.FOLLOWERINFO:
                data = wire.decode_followerinfo_data(p.data).serverid
            case PacketType.PROPOSAL:
                data = _text(wire.decode_proposal_data(p.data))
            case PacketType.SNAP:
                data = [[z, _text(v)] for z, v in wire.decode_snap_data(p.data)]
    except CodecError as e:
        return {"type": p.type.name, "zxid": p.zxid, "data": None, "data_error": str(e)}
    return {"type": p.type.name, "zxid": p.zxid, "data": data}


def _variables(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("history", "staged_history"):
            out[key] = [[z, _text(v)] for z, v in value]
        elif isinstance(value, dict):
            out[key] = {str(k): v for k, v in sorted(value.items())}
        else:
            out[key] = value
    return out


class ControlPort:
    """The server side: ``asyncio.start_server(ControlPort(server).handle, ...)``."""

    def __init__(self, server: Any) -> None:
        self.server = server  # zabref.runtime.Server

    @peers.quiet_cancel
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername")
        try:
            while True:
                try:
                    first = await reader.readexactly(1)  # between requests: no timeout
                except asyncio.IncompleteReadError:
                    return
                try:
                    line = first if first == b"\n" else first + await asyncio.wait_for(reader.readline(),
                                                                                        LINE_TIMEOUT)
                except (ValueError, asyncio.LimitOverrunError):
                    await self._write(writer, {"error": f"request line longer than {MAX_LINE} bytes"})
                    log.warning("control connection from %s closed: request line too long", address)
                    return
                except TimeoutError:
                    log.warning("control connection from %s closed: bad input: a request line is still incomplete "
                                "%s s after its first byte", address, LINE_TIMEOUT)
                    return
                response = await self.answer(line)
                await self._write(writer, response)
        except (ConnectionError, OSError):
            return
        finally:
            writer.close()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
        writer.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        await writer.drain()

    async def answer(self, line: bytes) -> dict[str, Any]:
        """One request line -> one response object (never raises)."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, too many digits, too deep
            return {"error": f"request is not JSON: {_short(e)}"}
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"error": 'a request is an object with a text "op"'}
        op = request["op"]
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"error": f"unknown op {op!r} (ops: ping, state, {', '.join(_STEP_OPS + _FAULT_OPS)})"}
        if op in _STEP_OPS and not self.server.control:
            return {"error": f"{op} is a protocol step: only in control mode (zabref serve --control)"}
        if op in _FAULT_OPS and self.server.control:
            return {"error": f"{op} is fault injection: only in normal mode (the driver decides deliveries here)"}
        try:
            result = await handler(request)
        except (ZabError, ValueError, TypeError, KeyError) as e:
            return {"error": f"{op}: {e}"}
        return {"ok": True, **result}

    # ------------------------------------------------------------------------------------------ read-only

    async def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"sid": self.server.sid, "pid": os.getpid(), "mode": "control" if self.server.control else "normal"}

    async def op_state(self, request: dict[str, Any]) -> dict[str, Any]:
        s = self.server
        # Run every event queued before this request first: a connection that closed has left `conns` already, but
        # the core hears of it through a pump event; reading the core before that event would show a mix.
        await s.call(lambda: [])
        return {
            "sid": s.sid,
            "mode": "control" if s.control else "normal",
            "variables": _variables(s.core.variables()),
            "held": {str(p): [describe_packet(m) for m in c.held] for p, c in sorted(s.conns.items())},
            "connections": [c.describe() for _, c in sorted(s.conns.items())],
            "committed_zxid": s.committed_zxid,
        }

    # ------------------------------------------------------------------------------------------ steps

    async def _step(self, event: Any) -> list[Output]:
        outs = await self.server.call(event)
        for conn in list(self.server.conns.values()):
            await conn.drain(2.0)
        return outs

    async def op_release(self, request: dict[str, Any]) -> dict[str, Any]:
        j = _sid(request, "from")
        conn = self.server.conns.get(j)
        if conn is None or not conn.held:
            raise ValueError(f"no packet held from server {j}")
        packet = conn.held.popleft()
        await self._step(lambda: self.server.receive(conn, packet))
        return {"released": describe_packet(packet)}

    async def op_elect(self, request: dict[str, Any]) -> dict[str, Any]:
        leader = _sid(request, "leader")
        quorum = request.get("quorum")
        if not isinstance(quorum, list) or not all(isinstance(q, int) and not isinstance(q, bool) for q in quorum):
            raise ValueError('"quorum" must be a list of sids')
        await self._step(lambda: [self.server.core.elect_leader(leader, quorum)])
        await self._await_leader_connection()
        return {}

    async def op_join(self, request: dict[str, Any]) -> dict[str, Any]:
        leader = _sid(request, "leader")
        await self._step(lambda: [self.server.core.join_leader(leader)])
        await self._await_leader_connection()
        return {}

    async def _await_leader_connection(self) -> None:
        core = self.server.core
        if core.state != ServerState.FOLLOWING:
            return
        conn = self.server.conns.get(core.leader)
        if conn is None:
            raise ControlError(f"no connection to leader {core.leader}")
        try:
            ok = await asyncio.wait_for(asyncio.shield(conn.opened), 15.0)
        except TimeoutError:
            ok = False
        if not ok:
            raise ControlError(f"cannot connect to leader {core.leader}: {conn.close_reason or 'timed out'}")
        await conn.drain(2.0)

    async def op_timeout(self, request: dict[str, Any]) -> dict[str, Any]:
        kind = request.get("kind")
        if kind == "follower":
            await self._step(lambda: [self.server.core.follower_timeout()])
        elif kind == "leader":
            await self._step(lambda: [self.server.core.leader_timeout()])
        else:
            raise ValueError(f'"kind" must be "follower" or "leader", not {kind!r}')
        return {}

    async def op_client_request(self, request: dict[str, Any]) -> dict[str, Any]:
        value = request.get("value")
        if not isinstance(value, str):
            raise ValueError('"value" must be text')
        try:  # here, not inside the pump event: an exception there would stop the server
            data = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f'"value" is not valid Unicode text: {e.reason} at index {e.start}') from None
        outs = await self._step(lambda: [self.server.core.client_request(data)])
        return {"zxid": outs[0].persist[0].txns[0].zxid}


    # ------------------------------------------------------------------------------------------ fault injection

    async def op_partition(self, request: dict[str, Any]) -> dict[str, Any]:
        self.server.cut_links(_sids(request, "peers"))
        return {"cut": sorted(self.server.cut_peers)}

    async def op_heal(self, request: dict[str, Any]) -> dict[str, Any]:
        """Heal the links to ``peers`` (every cut link when ``peers`` is absent)."""
        sids = set(self.server.cut_peers) if request.get("peers") is None else _sids(request, "peers")
        self.server.heal_links(sids)
        return {"cut": sorted(self.server.cut_peers)}


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _sids(request: dict[str, Any], key: str) -> set[int]:
    value = request.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f'"{key}" must be a list of server ids')
    return set(value)


def _sid(request: dict[str, Any], key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f'"{key}" must be a server id')
    return value


class ControlClient:
    """A blocking client of one server's control socket (JSON Lines over TCP)."""

    def __init__(self, host: str, port: int, timeout: float = 30.0) -> None:
        self.address = (host, port)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._file: Any = None

    def _connect(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout)
        self._file = self._sock.makefile("rwb")

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; return the response, or raise ControlError with its error text."""
        response = self.raw({"op": op, **fields})
        if "error" in response:
            raise ControlError(f"server {self.address[1]}: {response['error']}")
        return response

    def raw(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request object and return the response object as it is (OSError if the server is gone)."""
        if self._file is None:
            self._connect()
        try:
            self._file.write(json.dumps(request).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
        except OSError:
            self.close()
            raise
        if not line:
            self.close()
            raise ConnectionError(f"control connection to {self.address} closed")
        return json.loads(line)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
                self._sock.close()
            except OSError:
                pass
        self._file = self._sock = None

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def settle(controls: dict[int, ControlClient], timeout: float = 10.0) -> dict[int, dict[str, Any]]:
    """Wait until every packet one server sent has arrived at its peer (held there, in control mode) and every
    connection is open or closed at both ends; return every server's ``state``. ControlError on timeout.

    This is what the conformance driver does after each step, before it compares states.
    """
    deadline = time.monotonic() + timeout
    while True:
        states = {sid: c.request("state") for sid, c in controls.items()}
        if _settled(states):
            return states
        if time.monotonic() > deadline:
            summary = {sid: s["connections"] for sid, s in states.items()}
            raise ControlError(f"not settled within {timeout} s: connections {summary}")
        time.sleep(0.005)


def _settled(states: dict[int, dict[str, Any]]) -> bool:
    ends = {(sid, c["peer"]): c for sid, s in states.items() for c in s["connections"]}
    for (i, j), c in ends.items():
        if j not in states:
            continue
        other = ends.get((j, i))
        if c["state"] != "open" or other is None or other["state"] != "open":
            return False
        if c["sent"] != other["received"]:
            return False
    return True
