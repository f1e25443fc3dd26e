"""The listeners (`zabref.net.listener`) and the writes to a closing stream (`zabref.net.streams`), on both event
loops a server may run on: asyncio's own and uvloop (`zabref.runtime.server.run_server`)."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
import trustme
import uvloop

from zabref.net import streams
from zabref.net.listener import Accepted, Listener
from zabref.net.security import AuthError

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def _run(loop: str, coro) -> object:
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(coro)


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(a listener's context, a client's that trusts it)."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def _echo_port(tls_server: ssl.SSLContext | None, outcomes: list) -> Listener:
    """A listener whose handler opens each connection within 1 s, echoes 5 bytes upper-cased, and records the
    outcome: (the peer's address, the echoed bytes or the AuthError)."""
    async def handle(accepted: Accepted) -> None:
        try:
            reader, writer = await accepted.open(1.0)
            data = await asyncio.wait_for(reader.readexactly(5), 2.0)
            streams.write(writer, data.upper())
            await writer.drain()
            outcomes.append((accepted.address, data))
        except AuthError as e:
            outcomes.append((accepted.address, e))
        finally:
            accepted.close()

    return await Listener.open("127.0.0.1", 0, handle, tls=tls_server)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_tls_port_shakes_hands_at_the_accept_and_names_a_stranger(loop: str, tls) -> None:
    """Twenty members in a row are served over TLS on both loops (uvloop's upgrade of a stream already read,
    ``start_tls``, completed none of 30 in a script: the listener opens TLS at the accept instead); plain bytes and
    silence are refused as TLS failures, each with the stranger's address."""
    server_ctx, client_ctx = tls

    async def main() -> list:
        outcomes: list = []
        port = await _echo_port(server_ctx, outcomes)
        try:
            for _ in range(20):
                reader, writer = await asyncio.open_connection("127.0.0.1", port.port, ssl=client_ctx,
                                                               server_hostname="127.0.0.1")
                writer.write(b"hello")
                assert await asyncio.wait_for(reader.readexactly(5), 3.0) == b"HELLO"
                writer.close()
            for payload in (b"GET / HTTP/1.0\r\n\r\n", b""):  # plain bytes; silence until the handshake's bound
                reader, writer = await asyncio.open_connection("127.0.0.1", port.port)
                stranger = writer.get_extra_info("sockname")
                writer.write(payload)
                assert await asyncio.wait_for(reader.read(), 3.0) == b""
                writer.close()
                for _ in range(100):
                    if outcomes[-1][0] == stranger:
                        break
                    await asyncio.sleep(0.02)
                address, outcome = outcomes[-1]
                assert address == stranger and isinstance(outcome, AuthError), outcomes[-1]
                assert str(outcome).startswith("TLS handshake failed: "), outcome
                if payload:
                    assert "WRONG_VERSION_NUMBER" in str(outcome) or "HTTP_REQUEST" in str(outcome), outcome
        finally:
            port.close()
        return outcomes

    outcomes = _run(loop, main())
    assert [data for _, data in outcomes[:20]] == [b"hello"] * 20


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_plain_port_hands_over_streams_and_frees_its_port_when_closed(loop: str) -> None:
    """A plain port's connections are streams at once; once closed (and the loop has turned) it accepts nothing and
    its port can be bound again."""
    async def main() -> None:
        outcomes: list = []
        port = await _echo_port(None, outcomes)
        number = port.port
        reader, writer = await asyncio.open_connection("127.0.0.1", number)
        writer.write(b"plain")
        assert await asyncio.wait_for(reader.readexactly(5), 3.0) == b"PLAIN"
        writer.close()
        port.close()
        await asyncio.sleep(0.05)
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", number), 1.0)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", number))
        assert outcomes[0][1] == b"plain"

    _run(loop, main())


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_write_to_a_closed_stream_is_dropped(loop: str) -> None:
    """A stream closed a loop turn ago: `streams.write` drops what a late writer gives it, on both loops (uvloop's
    own write raises there, which no writer here expects)."""
    async def main() -> None:
        port = await _echo_port(None, [])
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port.port)
            writer.close()
            await asyncio.sleep(0.05)
            streams.write(writer, b"late")  # dropped, on both loops
            if loop == "uvloop":
                with pytest.raises(RuntimeError, match="closed"):
                    writer.write(b"late")
        finally:
            port.close()

    _run(loop, main())
