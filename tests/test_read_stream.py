"""`zabref.net.peers.read_stream`: a connection's transport handed to a protocol that decodes each chunk in its read
callback, on both event loops a server may run on (asyncio's own and uvloop), plain and over TLS. What the stream
read before the handover is decoded first, an end the stream saw already ends the reading, the writer still drains
and closes, and an error of the callee is raised where the reading is awaited."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable

import pytest
import trustme
import uvloop

from zabref.core.packets import PacketType, QuorumPacket
from zabref.net import peers, wire

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
HELLO = b"helo"

#: (server side) reader, writer -> what the test returns
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[object]]
#: (client side) reader, writer -> None: what the client does before the server's answer is awaited
Client = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture(scope="module")
def contexts() -> dict[str, tuple[ssl.SSLContext | None, ssl.SSLContext | None]]:
    """(a server's TLS context, a client's that trusts it) by mode; plain: none."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return {"plain": (None, None), "tls": (server, client)}


def _scenario(loop: str, tls: tuple[ssl.SSLContext | None, ssl.SSLContext | None], handle: Handler,
              client: Client) -> object:
    """A server on ``loop`` whose one connection ``handle`` serves (its result, or the error it raised, is
    returned) and a client that does ``client`` on its end."""
    server_ctx, client_ctx = tls

    async def main() -> object:
        result: asyncio.Future[object] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                result.set_result(await handle(reader, writer))
            except Exception as e:  # the test's assertion looks at it
                result.set_result(e)
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        try:
            await client(reader, writer)
            return await asyncio.wait_for(result, 5)
        finally:
            writer.close()
            server.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


def _sends(data: bytes, *, close: bool) -> Client:
    """A client that writes ``data`` in one write and, with ``close``, closes its end."""
    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(data)
        await writer.drain()
        if close:
            writer.close()
    return client


MODES = [(loop, mode) for loop in sorted(LOOPS) for mode in ("plain", "tls")]


def _pausing_on(got: list[bytes], transport: asyncio.Transport) -> Callable[[bytes], None]:
    """An ``on_item`` that keeps each body in ``got`` and, at the body ``pause``, pauses the reading for 1 s (as the
    caller of `read_stream` may)."""
    def on_item(body: bytes) -> None:
        got.append(body)
        if body == b"pause":
            transport.pause_reading()
            asyncio.get_running_loop().call_later(1.0, transport.resume_reading)
    return on_item


@pytest.mark.parametrize(("loop", "mode"), MODES)
def test_what_the_stream_read_past_the_handshake_is_decoded_first(loop: str, mode: str, contexts) -> None:
    """The handshake reads its bytes through the stream, which has read the frames after them too (one write):
    they are the first items, in order; then the connection's end."""
    frames = [b"one", b"two", b"three"]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        assert await reader.readexactly(len(HELLO)) == HELLO
        await asyncio.sleep(0.1)  # the rest and the end are in the stream's buffer by now
        got: list[bytes] = []
        reason = await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), got.append)
        return got, reason

    sent = HELLO + b"".join(map(wire.frame, frames))
    assert _scenario(loop, contexts[mode], handle, _sends(sent, close=True)) == (frames, "peer closed the connection")


@pytest.mark.parametrize(("loop", "mode"), MODES)
def test_the_writer_drains_and_closes_once_the_protocol_is_handed_over(loop: str, mode: str, contexts) -> None:
    """The stream's own protocol still hears of the writing side and of the end: ``drain`` returns once the peer
    read what was written, and ``wait_closed`` ends once the peer closed (it would wait forever if the end stopped at
    the new protocol)."""
    size = 8 * 1024 * 1024  # more than the sockets hold: drain waits for the peer's reading

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        reading = asyncio.ensure_future(peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), got.append))
        await asyncio.sleep(0)  # the transport is the new protocol's from here
        writer.write(b"x" * size)
        await asyncio.wait_for(writer.drain(), 5)
        assert writer.transport.get_write_buffer_size() <= writer.transport.get_write_buffer_limits()[1]
        reason = await asyncio.wait_for(reading, 5)
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 2)
        return got, reason

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.frame(b"a"))
        await asyncio.wait_for(reader.readexactly(size), 5)
        writer.close()

    assert _scenario(loop, contexts[mode], handle, client) == ([b"a"], "peer closed the connection")


def _reading_with(on_item: Callable[[bytes], None]) -> Handler:
    """A server that reads its connection with ``on_item`` and returns why the reading ended."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        return await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), on_item)
    return handle


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_bad_bytes_end_the_reading_with_their_reason(loop: str, contexts) -> None:
    got: list[bytes] = []
    frames = wire.frame(b"fine") + (1000).to_bytes(4, "big") + wire.frame(b"never")
    reason = _scenario(loop, contexts["plain"], _reading_with(got.append), _sends(frames, close=False))
    assert b"never" not in got  # a chunk with a bad frame in it gives nothing (the decoder raises for the chunk)
    assert reason == "bad input: cannot decode test at byte 8: length prefix 1000 is outside 0..64"


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_value_error_of_the_callee_is_bad_input_and_any_other_error_is_raised(loop: str, contexts) -> None:
    def refuse(body: bytes) -> None:
        raise ValueError(f"not allowed: {body!r}")

    def bug(body: bytes) -> None:
        raise KeyError(body)

    refused = _scenario(loop, contexts["plain"], _reading_with(refuse), _sends(wire.frame(b"a"), close=False))
    assert refused == "bad input: not allowed: b'a'"
    raised = _scenario(loop, contexts["plain"], _reading_with(bug), _sends(wire.frame(b"b"), close=False))
    assert isinstance(raised, KeyError) and raised.args == (b"b",)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_once_the_reading_is_cancelled_nothing_more_reaches_the_callee(loop: str, contexts) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        reading = asyncio.ensure_future(peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), got.append))
        while not got:
            await asyncio.sleep(0.01)
        reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        writer.write(b"k")  # the client sends its second frame only now
        await asyncio.sleep(0.3)  # it arrives meanwhile
        return got

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.frame(b"first"))
        await asyncio.wait_for(reader.readexactly(1), 5)
        writer.write(wire.frame(b"second"))

    assert _scenario(loop, contexts["plain"], handle, client) == [b"first"]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_quorum_connection_pauses_its_reading_while_the_node_has_packets_to_take(loop: str, contexts) -> None:
    """A burst (a leader's catch-up) larger than the connection's queue bound: the loop may read the socket many
    times before the pump runs once, so at `peers.INBOUND_PAUSE` packets waiting the reading pauses, and resumes
    once the node took half; every packet arrives, in order."""
    burst = 3 * peers.INBOUND_PAUSE
    packets = [QuorumPacket(PacketType.PROPOSAL, k + 1, b"v" * 200) for k in range(burst)]  # many reads' worth

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        conn = peers.Connection(2, initiated=False)
        conn.attach(writer)
        reading = asyncio.ensure_future(peers.read_stream(reader, writer, wire.PacketDecoder(1024, "test"),
                                                          conn.hold))
        await asyncio.sleep(0.5)  # the whole burst was written: the kernel holds what was not read
        waiting, paused = len(conn.inbound), conn.paused
        taken = []
        while len(taken) < burst:
            if conn.inbound:
                taken.append(conn.take().zxid)
            else:
                await asyncio.sleep(0.01)
        reading.cancel()
        return waiting, paused, taken

    sent = b"".join(map(wire.encode_quorum_packet, packets))
    waiting, paused, taken = _scenario(loop, contexts["plain"], handle, _sends(sent, close=False))
    assert paused and waiting < burst, (waiting, paused)
    assert taken == [p.zxid for p in packets]


@pytest.mark.parametrize(("loop", "mode"), MODES)
def test_a_frame_timeout_does_not_count_while_the_caller_paused_the_reading(loop: str, mode: str, contexts) -> None:
    """``frame_timeout`` 0.3 s: a frame whose first bytes came with the one before it, which paused the reading for
    1 s (as a quorum connection does while its node has packets to take), is decoded once the reading resumes: the
    pause is this end's (over TLS its rest waits in the TLS layer, not the kernel). Before, it was cut ("still
    incomplete")."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        on_item = _pausing_on(got, peers.transport_of(writer))

        reason = await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), on_item, frame_timeout=0.3)
        return got, reason

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        after = wire.frame(b"after")
        writer.write(wire.frame(b"pause") + after[:3])
        await asyncio.sleep(0.1)
        writer.write(after[3:])
        await asyncio.sleep(1.5)
        writer.close()

    assert _scenario(loop, contexts[mode], handle, client) == ([b"pause", b"after"], peers.PEER_CLOSED)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_half_closed_peer_still_gets_what_is_written_after_its_end(loop: str, contexts) -> None:
    """A client that shuts down its sending side (a request, then its end) still reads the answers written once its
    end was read: the transport stays open for writing, as the stream's own protocol keeps it. (TLS has no half
    close.)"""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        reason = await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), got.append)
        writer.write(b"answer")
        await writer.drain()
        return got, reason

    answers: list[bytes] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.frame(b"ask"))
        writer.write_eof()
        answers.append(await asyncio.wait_for(reader.read(), 5))

    assert _scenario(loop, contexts["plain"], handle, client) == ([b"ask"], "peer closed the connection")
    assert answers == [b"answer"]


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_after_chunk_runs_once_a_read_once_its_items_are_in_and_when_an_item_ends_the_reading(loop: str,
                                                                                            contexts) -> None:
    """Two chunks: after each, ``after_chunk`` sees all of its items; an `EndReading` in the second chunk ends the
    reading with its message, the items after it never reach the callee, and ``after_chunk`` still runs."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        seen: list[list[bytes]] = []

        def on_item(body: bytes) -> None:
            got.append(body)
            if body == b"end":
                raise peers.EndReading("asked to end")

        reason = await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), on_item,
                                         after_chunk=lambda: seen.append(list(got)))
        return seen, reason

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.frame(b"a") + wire.frame(b"b"))
        await asyncio.sleep(0.1)
        writer.write(wire.frame(b"c") + wire.frame(b"end") + wire.frame(b"never"))

    seen, reason = _scenario(loop, contexts["plain"], handle, client)
    assert seen == [[b"a", b"b"], [b"a", b"b", b"c", b"end"]] and reason == "asked to end"


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_the_idle_timeout_ends_a_silent_reading_and_does_not_count_while_it_is_paused(loop: str, contexts) -> None:
    """``idle_timeout`` 0.5 s: items 0.1 s apart keep the reading (five times the spacing: a loaded machine's late
    wake-up does not end it early); a pause of 1 s by the caller is not silence of the peer's (the wait starts again
    after it); 0.5 s with no whole item (half a frame does not count) ends it, naming the peer."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> object:
        got: list[bytes] = []
        on_item = _pausing_on(got, peers.transport_of(writer))

        loop_ = asyncio.get_running_loop()
        start = loop_.time()
        reason = await peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"), on_item, idle_timeout=0.5,
                                         peer_name="the tester")
        return got, reason, loop_.time() - start

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in (b"a", b"b", b"pause"):
            writer.write(wire.frame(body))
            await asyncio.sleep(0.1)
        writer.write(wire.frame(b"after")[:3])  # half a frame, then silence

    got, reason, took = _scenario(loop, contexts["plain"], handle, client)
    assert got == [b"a", b"b", b"pause"] and reason == "nothing from the tester within 0.5 s"
    assert 0.2 + 1.0 + 0.5 - 0.01 <= took < 5, took  # the items, the pause, then the peer's silence


@pytest.mark.parametrize(("loop", "mode"), MODES)
def test_unread_counts_the_bytes_the_kernel_holds_for_the_socket(loop: str, mode: str, contexts) -> None:
    """`peers.unread`: 0 once the loop read everything; the bytes written to it while the loop does not run (over TLS
    the encrypted ones: at least the plaintext's length)."""
    async def main(server_ctx: ssl.SSLContext | None, client_ctx: ssl.SSLContext | None) -> tuple[int, int]:
        ready: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()
        done = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readexactly(4)
            ready.set_result(peers.transport_of(writer))
            await done.wait()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1], ssl=client_ctx)
        try:
            writer.write(b"head")
            transport = await asyncio.wait_for(ready, 5)
            before = peers.unread(transport)
            writer.write(b"x" * 1000)
            time.sleep(0.2)  # the loop does not run: the bytes wait in the server's socket, unread
            return before, peers.unread(transport)
        finally:
            done.set()
            writer.close()
            server.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        before, after = runner.run(main(*contexts[mode]))
    assert before == 0 and after >= 1000


@pytest.mark.parametrize("timeout", ["frame_timeout", "idle_timeout"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_frame_whose_rest_waits_unread_while_this_loop_lags_is_not_the_peers_slowness(loop: str,
                                                                                       timeout: str) -> None:
    """A timeout of 0.3 s; the frame's first bytes are read, then its rest (512 KiB: more than one read of the loop)
    is written and this loop does not run for 1 s (a SIGSTOP, a process starved of the processor, a long callback).
    When it runs again its timer is due before the reads that finish the frame: the lag is this end's, and the frame
    is decoded. Before, the reading ended ("still incomplete 0.3 s after its first byte", or "nothing from the
    peer"). A rest that never comes is still cut (test_fuzz_codec); which of this end's lags counts, the test
    below."""
    body = bytes(range(256)) * 2048

    async def main() -> tuple[list[bytes], str]:
        got: list[bytes] = []
        read: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                read.set_result(await peers.read_stream(reader, writer, wire.FrameDecoder(1 << 20, "test"),
                                                        got.append, **{timeout: 0.3}))
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        frame = wire.frame(body)
        with socket.create_connection(server.sockets[0].getsockname()[:2]) as sock:
            sock.sendall(frame[:100])
            await asyncio.sleep(0.1)  # the first bytes are read: the frame's timer runs
            sender = threading.Thread(target=sock.sendall, args=(frame[100:],))
            sender.start()
            time.sleep(1.0)  # this loop does not run; the rest reaches the kernel
            await asyncio.to_thread(sender.join, 10)
            sock.shutdown(socket.SHUT_WR)
            reason = await asyncio.wait_for(read, 10)
        server.close()
        return got, reason

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        got, reason = runner.run(main())
    assert reason == peers.PEER_CLOSED and got == [body]


class _Due:
    """A timer that was due at ``when`` (uvloop makes a handle due in the past one without ``when``)."""

    def __init__(self, when: float) -> None:
        self._when = when

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        pass


@pytest.mark.parametrize("case", ["on time", "late", "unread", "paused"])
@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_due_frame_timer_blames_the_peer_only_when_this_end_did_not_lag(loop: str, case: str) -> None:
    """The frame timer's verdict, with the frame's first 3 bytes read: on time, the reading not paused and nothing
    waiting unread, it ends the reading ("still incomplete"); run more than `peers.TIMER_LAG` after it was due, or
    with bytes waiting unread in the kernel (written while the loop did not run), or with the reading paused, it
    gives the peer the time again (a new timer, a frame_timeout away) -- each alone."""
    async def main() -> tuple[str | None, float | None]:
        loop_ = asyncio.get_running_loop()
        accepted: asyncio.Future[tuple[asyncio.Task[str], asyncio.StreamWriter]] = loop_.create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"),
                                                           lambda body: None, frame_timeout=30.0))
            accepted.set_result((task, writer))
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = socket.create_connection(server.sockets[0].getsockname()[:2])
        try:
            frame = wire.frame(b"abcdef")
            client.sendall(frame[:3])
            task, writer = await asyncio.wait_for(accepted, 5)
            transport = peers.transport_of(writer)
            frames = transport.get_protocol()
            for _ in range(100):  # until the first bytes are read: the frame's timer runs
                if frames.timer is not None:
                    break
                await asyncio.sleep(0.01)
            assert frames.timer is not None
            if case == "late":
                frames.timer.cancel()
                frames.timer = _Due(loop_.time() - 2 * peers.TIMER_LAG)  # the timer running now was due a while ago
            elif case == "unread":
                client.sendall(frame[3:5])
                time.sleep(0.2)  # this loop does not run: the bytes wait in the kernel
            elif case == "paused":
                transport.pause_reading()
            frames._too_slow()
            await asyncio.sleep(0)
            if task.done():
                return task.result(), None
            again = frames.timer.when() - loop_.time() if frames.timer is not None else None
            task.cancel()
            return None, again
        finally:
            client.close()
            server.close()

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        ended, again = runner.run(main())
    if case == "on time":
        assert ended is not None and ended.startswith("bad input: a frame or packet is still incomplete 30.0 s")
    else:
        assert ended is None and again is not None and again > 25, (ended, again)
