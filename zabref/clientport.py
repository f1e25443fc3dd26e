"""The client protocol, server side: submit a value, read the delivered sequence, sync.

Theory of operation
-------------------
A client connection carries frames (`zabref.wire` framing: ``int32 length, body``, at most `MAX_CLIENT_FRAME`
bytes) whose bodies are JSON objects. Requests on one connection are answered in order:

* ``{"op": "submit", "value": text}`` -> ``{"zxid": z}`` once the transaction is committed AND delivered at this
  server. The leader runs ClientRequest; a follower forwards the request to its leader's client port, relays the
  zxid, and answers once it has delivered z itself (so a later ``read`` here sees it).
* ``{"op": "read", "from_zxid": z, "limit": n}`` -> ``{"txns": [[zxid, text], ...], "more": bool}``: the delivered
  transactions after z, in delivery order, at most n (default and cap `READ_LIMIT`).
* ``{"op": "sync"}`` -> ``{"zxid": z}``: returns when this server has delivered everything the leader had committed
  when the sync reached it (z is that commit point).

Errors are ``{"error": text, "retry": bool}``; ``retry`` is true when asking again later (or elsewhere) is safe --
no leader yet, the leader is still synchronizing, the forward failed before the leader took the value. A submit
whose outcome is unknown (the leader lost leadership while the value was in flight) says ``retry: false``: resending
could commit the value twice. In control mode ``submit`` is refused (the driver takes ClientRequest through the
control socket); ``read`` and ``sync`` work.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from typing import Any

from zabref import peers, wire
from zabref.errors import CodecError, LocalProtocolError, ProtocolError
from zabref.packets import ServerState

__all__ = ["ClientPort", "request_async", "MAX_CLIENT_FRAME", "READ_LIMIT", "SUBMIT_TIMEOUT"]

log = logging.getLogger("zabref")

MAX_CLIENT_FRAME = 1024 * 1024
READ_LIMIT = 10_000
#: Seconds a submit waits for its transaction to be delivered here before answering "outcome unknown".
SUBMIT_TIMEOUT = 30.0


class Refused(Exception):
    """A request this server cannot serve now; ``retry`` says whether asking again is safe."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


async def request_async(host: str, port: int, obj: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request to a client port, on a fresh connection; OSError/TimeoutError if it cannot be done."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(wire.frame(json.dumps(obj).encode()))
        prefix = await asyncio.wait_for(reader.readexactly(4), timeout)
        length = int.from_bytes(prefix, "big", signed=True)
        if not 0 <= length <= MAX_CLIENT_FRAME:
            raise OSError(f"bad response length {length}")
        body = await asyncio.wait_for(reader.readexactly(length), timeout)
        return json.loads(body)
    except (asyncio.IncompleteReadError, json.JSONDecodeError) as e:
        raise OSError(f"bad response from {host}:{port}: {e}") from None
    finally:
        writer.close()


class ClientPort:
    """``asyncio.start_server(ClientPort(server).handle, ...)``."""

    def __init__(self, server: Any) -> None:
        self.server = server  # zabref.runtime.Server

    @peers.quiet_cancel
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername")
        decoder = wire.FrameDecoder(MAX_CLIENT_FRAME, "client request")
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    decoder.close()
                    return
                for body in decoder.feed(chunk):
                    response = await self.answer(body)
                    writer.write(wire.frame(json.dumps(response, separators=(",", ":")).encode()))
                    await writer.drain()
        except CodecError as e:
            log.warning("client connection from %s closed: bad input: %s", address, e)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def answer(self, body: bytes) -> dict[str, Any]:
        try:
            request = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return {"error": f"request is not JSON: {e}", "retry": False}
        if not isinstance(request, dict):
            return {"error": "a request is a JSON object", "retry": False}
        op = request.get("op")
        try:
            if op == "submit":
                return await self.submit(request)
            if op == "read":
                return self.read(request)
            if op == "sync":
                return await self.sync()
            return {"error": f"unknown op {op!r} (submit, read, sync)", "retry": False}
        except Refused as e:
            return {"error": str(e), "retry": e.retry}
        except ProtocolError as e:
            return {"error": str(e), "retry": False}

    # ------------------------------------------------------------------------------------------ ops

    def _leader_address(self) -> tuple[str, int]:
        core = self.server.core
        if core.state != ServerState.FOLLOWING or str(core.zab_state) != "BROADCAST":
            raise Refused(f"server {self.server.sid} has no established leader yet ({core.state.name})", True)
        leader = self.server.config.server(core.leader)
        return leader.host, leader.client_port

    async def _forward(self, obj: dict[str, Any]) -> dict[str, Any]:
        host, port = self._leader_address()
        try:
            return await request_async(host, port, obj, SUBMIT_TIMEOUT + 5)
        except (OSError, TimeoutError) as e:
            retry = obj["op"] != "submit" or isinstance(e, ConnectionRefusedError)
            raise Refused(f"forward to the leader at {host}:{port} failed: {e}", retry) from None

    async def submit(self, request: dict[str, Any]) -> dict[str, Any]:
        value = request.get("value")
        if not isinstance(value, str):
            raise Refused('"value" must be text', False)
        s = self.server
        if s.control:
            raise Refused("control mode: ClientRequest goes through the control socket", False)
        if s.core.state == ServerState.LEADING:
            try:
                outs = await s.call(lambda: [s.core.client_request(value.encode("utf-8"))])
            except LocalProtocolError:
                raise Refused(f"leader {s.sid} is still establishing its epoch", True) from None
            zxid = outs[0].persist[0].txns[0].zxid
        else:
            answer = await self._forward({"op": "submit", "value": value})
            if "error" in answer:
                return answer
            zxid = answer["zxid"]
        await s.wait_delivered(zxid, SUBMIT_TIMEOUT)
        return {"zxid": zxid}

    def read(self, request: dict[str, Any]) -> dict[str, Any]:
        after = request.get("from_zxid", 0)
        limit = request.get("limit", READ_LIMIT)
        if not isinstance(after, int) or not isinstance(limit, int) or limit < 1:
            raise Refused('"from_zxid" must be an int and "limit" a positive int', False)
        core = self.server.core
        delivered = core.history[: core.last_committed]
        start = bisect.bisect_right(delivered, after, key=lambda t: t.zxid)
        limit = min(limit, READ_LIMIT)
        chunk = delivered[start : start + limit]
        return {"txns": [[t.zxid, t.value.decode("utf-8", "backslashreplace")] for t in chunk],
                "more": start + limit < len(delivered)}

    async def sync(self) -> dict[str, Any]:
        s = self.server
        if s.core.state == ServerState.LEADING:
            if str(s.core.zab_state) != "BROADCAST":
                raise Refused(f"leader {s.sid} is still establishing its epoch", True)
            return {"zxid": s.committed_zxid}
        answer = await self._forward({"op": "sync"})
        if "error" in answer:
            return answer
        zxid = answer["zxid"]
        await s.wait_delivered(zxid, SUBMIT_TIMEOUT)
        return {"zxid": zxid}
