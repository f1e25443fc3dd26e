"""The client protocol's bytes, once: a request or an answer is one frame whose body is a JSON object.

Theory of operation: `encode` frames an object (`zabref.net.wire.frame`: ``int32 length, body``); `decode_request`
reads a request body on the server (an error answer, never an exception, for a body that is not a JSON object);
`decode_answer` reads an answer body on a client. A client asks with `call` or `read_answer` (a blocking socket),
`call_async` (asyncio streams) or `request_async` (a fresh connection); each check the length prefix against ``limit``
before reading the body, and raise OSError for an answer that does not come back whole or is not a JSON object, so that
a client treats a garbled answer as it treats a broken connection. Every client of the client port uses this module:
`zabref.client`, the client port's forwarding (`zabref.net.clientport`), the simulator, the fault runner's workload and
the benchmark's client.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from zabref.net import streams, wire

__all__ = ["MAX_ANSWER", "encode", "decode_request", "answer_length", "decode_answer", "recv_exactly", "read_answer",
           "call", "call_async", "read_answer_async", "request_async"]

#: The largest answer a client reads unless told otherwise (a request's bound is the configuration's
#: ``limits.client_frame_bytes``).
MAX_ANSWER = 64 * 1024 * 1024


def encode(obj: dict[str, Any]) -> bytes:
    """One frame carrying ``obj`` as compact JSON."""
    return wire.frame(json.dumps(obj, separators=(",", ":")).encode())


def decode_request(body: bytes) -> dict[str, Any]:
    """The request in ``body``, or the error answer to send back when it is not a JSON object (the connection stays
    usable: a request is checked op by op after this)."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, too many digits, nesting too deep
        return {"error": f"request is not JSON: {type(e).__name__}: {e}", "retry": False}
    if not isinstance(request, dict):
        return {"error": "a request is a JSON object", "retry": False}
    return request


def answer_length(prefix: bytes, limit: int) -> int:
    """The body length an answer's prefix announces; OSError outside 0..limit."""
    length = int.from_bytes(prefix, "big", signed=True)
    if not 0 <= length <= limit:
        raise OSError(f"answer length {length} outside 0..{limit}")
    return length


def decode_answer(body: bytes) -> dict[str, Any]:
    """The answer in ``body``; OSError if it is not a JSON object."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError) as e:  # bad UTF-8 or JSON, too many digits, nesting too deep
        raise OSError(f"answer is not JSON: {type(e).__name__}: {e}") from None
    if not isinstance(answer, dict):
        raise OSError(f"answer is a JSON {type(answer).__name__}, not an object")
    return answer


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ConnectionError if the server closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("server closed the connection")
        buf += chunk
    return bytes(buf)


def read_answer(sock: socket.socket, limit: int = MAX_ANSWER) -> dict[str, Any]:
    """The next answer on a blocking socket."""
    return decode_answer(recv_exactly(sock, answer_length(recv_exactly(sock, 4), limit)))


def call(sock: socket.socket, request: dict[str, Any], limit: int = MAX_ANSWER) -> dict[str, Any]:
    """One request and its answer on a connected blocking socket."""
    sock.sendall(encode(request))
    return read_answer(sock, limit)


async def request_async(host: str, port: int, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One request to a client port, on a fresh connection; OSError/TimeoutError if it cannot be done."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        return await call_async(reader, writer, request, timeout, f"{host}:{port}")
    finally:
        writer.close()


async def call_async(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: dict[str, Any],
                     timeout: float | None, where: str, limit: int = MAX_ANSWER) -> dict[str, Any]:
    """One request and its answer on open asyncio streams (``timeout`` per read; None waits); OSError or
    TimeoutError if it cannot be done, the error naming ``where``."""
    streams.write(writer, encode(request))
    return await read_answer_async(reader, timeout, where, limit)


async def read_answer_async(reader: asyncio.StreamReader, timeout: float | None, where: str,
                            limit: int = MAX_ANSWER) -> dict[str, Any]:
    """The next answer on an asyncio stream (``timeout`` per read; None waits); OSError or TimeoutError if it cannot
    be read, the error naming ``where``."""
    try:
        length = answer_length(await asyncio.wait_for(reader.readexactly(4), timeout), limit)
        return decode_answer(await asyncio.wait_for(reader.readexactly(length), timeout))
    except asyncio.IncompleteReadError:
        raise ConnectionError(f"{where} closed the connection") from None
    except OSError as e:
        if isinstance(e, ConnectionError):
            raise
        raise OSError(f"bad answer from {where}: {e}") from None
