"""Listening ports: each connection accepted is handed to its port as an `Accepted`, which the port opens as a
stream -- over TLS when its port has TLS -- within its own deadline. asyncio only.

Theory of operation
-------------------
`Listener.open` listens on a port, for one of two kinds:

* **plain** (no TLS context): the loop's ``create_server``, each connection a stream at once (as
  ``asyncio.start_server`` makes it), which `Accepted.open` returns;
* **TLS**: a listening socket of its own (every address the host resolves to) and the loop's ``sock_accept``; an
  accepted socket is not read until its port calls `Accepted.open`, which opens it with the loop's
  ``connect_accepted_socket`` and the port's context: TLS from the first byte, the handshake bounded by the port's
  timeout. A failed handshake -- plain bytes, no certificate, a certificate of another CA, silence -- is an
  `zabref.net.security.AuthError` saying why, which the port logs with the stranger's address before one byte of the
  connection was read as protocol.

Either way each connection's handler runs in a task of its own, and `close` stops the accepting.

Why TLS is not an upgrade of an accepted stream (``StreamWriter.start_tls``, as before 2026-12-04): a stream reads
its socket as soon as the loop has it, and what it read before the upgrade is lost to TLS. uvloop reads before the
handler runs (its server-side ``start_tls`` completed no handshake of 30 in a standalone script, with reading paused
from ``connection_made`` or not; MagicStack/uvloop issue 707), while TLS given at the accept completed all 30, on
uvloop as on asyncio's loop (docs/performance.md, "uvloop"). Plain ports keep the loop's own server, which the
simulator's loop (`conformance.sim.loop`) provides over its in-memory network; it has no TLS.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

from zabref.net.security import AuthError

__all__ = ["Accepted", "Listener", "Handler", "BACKLOG"]

log = logging.getLogger("zabref.net")

#: Connections the kernel queues before they are accepted (asyncio.start_server's default).
BACKLOG = 100
#: A stream's buffer limit unless a port asks for another: asyncio's default.
LIMIT = 2**16
Handler = Callable[["Accepted"], Coroutine[Any, Any, None]]


class Accepted:
    """One accepted connection: ``address`` (the peer's); `open` it as a stream, or `close` it."""

    __slots__ = ("address", "_sock", "_tls", "_limit", "_stream")

    def __init__(self, address: object, *, sock: socket.socket | None = None, tls: ssl.SSLContext | None = None,
                 limit: int = LIMIT, stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None) -> None:
        self.address = address
        self._sock, self._tls, self._limit = sock, tls, limit
        self._stream = stream

    async def open(self, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The connection as a stream; on a TLS port, once its handshake is done within ``timeout`` s, or
        `AuthError` saying why it failed (the connection is closed then)."""
        if self._stream is not None:
            return self._stream
        sock, tls = self._sock, self._tls
        assert sock is not None and tls is not None, "an accepted connection is a stream or a socket of a TLS port"
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self._limit, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock, ssl=tls,
                                                              ssl_handshake_timeout=timeout)
        except BaseException as e:
            sock.close()  # failed or cancelled: nothing else closes it
            if isinstance(e, ssl.SSLError):
                raise AuthError(f"TLS handshake failed: {e.reason or e}") from None
            if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
                raise AuthError(f"TLS handshake failed: not complete within {timeout} s") from None
            if isinstance(e, OSError):
                raise AuthError(f"TLS handshake failed: {type(e).__name__}: {e}") from None
            raise
        self._stream = reader, asyncio.StreamWriter(transport, protocol, reader, loop)
        return self._stream

    def close(self) -> None:
        """Close the connection, opened or not (what an open stream has queued is written first)."""
        if self._stream is not None:
            self._stream[1].close()
        elif self._sock is not None:
            self._sock.close()


class Listener:
    """What listens on one port and hands each connection to ``handler`` (`open`)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[None]] = set()  # the handlers' (held: the loop keeps only weak references)
        self._accepting: dict[asyncio.Task[None], socket.socket] = {}
        self._server: asyncio.Server | None = None

    @classmethod
    async def open(cls, host: str, port: int, handler: Handler, *, tls: ssl.SSLContext | None = None,
                   limit: int = LIMIT, name: str = "") -> Listener:
        """Listen on ``host:port`` (module docstring); OSError if it cannot."""
        self = cls(name or f"{host}:{port}")
        loop = asyncio.get_running_loop()
        if tls is None:
            def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                self._run(handler(Accepted(writer.get_extra_info("peername"), stream=(reader, writer))))

            def protocol() -> asyncio.StreamReaderProtocol:
                return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=limit, loop=loop), connected, loop=loop)

            self._server = await loop.create_server(protocol, host, port)
            return self
        for s in _bind(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE), port):
            task = loop.create_task(self._accept(s, handler, tls, limit), name=f"accept {self._name}")
            self._accepting[task] = s
            task.add_done_callback(self._stopped)
        return self

    async def _accept(self, listening: socket.socket, handler: Handler, tls: ssl.SSLContext, limit: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except OSError as e:  # EMFILE and the like: the next accept may succeed
                log.warning("%s: accept failed: %s", self._name, e)
                await asyncio.sleep(0.1)
                continue
            self._run(handler(Accepted(address, sock=sock, tls=tls, limit=limit)))

    def _run(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: a connection's handler failed", self._name, exc_info=task.exception())

    @property
    def port(self) -> int:
        """The port it listens on (the one the kernel picked for port 0)."""
        sockets = list(self._accepting.values()) if self._server is None else list(self._server.sockets)
        return int(sockets[0].getsockname()[1])

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._accepting[task].close()  # only now: the loop no longer waits on it

    def close(self) -> None:
        """Stop accepting (connections already accepted are their handlers'). A TLS port's listening sockets close
        once their accepting tasks have ended, at the loop's next turns."""
        if self._server is not None:
            self._server.close()
        for task in self._accepting:
            task.cancel()


def _bind(infos: list[Any], port: int) -> list[socket.socket]:
    """A listening socket for each address (`socket.create_server`: SO_REUSEADDR, IPv6 only on an IPv6 socket; port
    0 binds the others to the port the first got); OSError, nothing left open, if one cannot."""
    sockets: list[socket.socket] = []
    try:
        for family, _, _, _, address in dict.fromkeys(infos):
            if port == 0 and sockets:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sockets.append(socket.create_server(address, family=family, backlog=BACKLOG))
            sockets[-1].setblocking(False)
    except OSError:
        for s in sockets:
            s.close()
        raise
    return sockets
