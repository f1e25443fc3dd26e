"""Connections between servers: first bytes, packets, bounded buffers, dialing with bounded backoff. asyncio only.

Theory of operation
-------------------
The bytes are ZooKeeper 3.8's (`zabref.net.wire`). A quorum connection opens with the learner's FOLLOWERINFO, whose
LearnerInfo names it (`accept_hello`; a zabref learner writes the connection's id after it), and then carries one
QuorumPacket after another, with no frame around them. An election connection opens with ZooKeeper's initial
message (its sid and election address, `zabref.net.zkwire`; `accept_initial`) and then carries frames (``int32
length, body``). With ``[security]`` on (`zabref.net.security`), a connection is TLS from its first byte and/or those
first bytes are followed by quorum authentication, which binds them; both are done before either end reads or sends
anything more. Two kinds exist:

* **quorum** -- ONE connection per follower-leader pair, opened by the follower to the leader's quorum port; it
  carries both directions (the spec's channels ``msgs[f][l]`` and ``msgs[l][f]``).
* **election** -- FastLeaderElection notifications (`zabref.net.votes`): as in ZooKeeper, ONE connection per pair of
  servers, the one the larger id dialed, carrying both directions (one `ElectionSender` per peer writes, a
  `VoteChannel` per connection reads); every ordered pair of servers is one FIFO channel, as the spec's
  ``electionMsgs[i][j]``.

A `Connection` is one quorum connection as the runtime sees it: ``connecting`` (packets written meanwhile wait in
``pending``: the first, FOLLOWERINFO, is the dial's to write, `take_hello`, and the rest leave in order once it is
out), ``open``, then ``closed`` with a reason. It counts the packets it wrote (``sent``) and read (``received``): the
conformance driver compares one side's ``sent`` with the other side's ``received`` to know that everything sent has
arrived. The runtime queues the packets of one pump batch (``send(..., flush=False)``) and writes them with one
`flush`: one transport write (``writes``) per connection per batch instead of one per packet (per `WRITE_CHUNK` bytes
for a large burst); ``sent`` counts a packet once it is written.

Reading. A connection's first bytes are read through its asyncio stream; then `read_stream` hands its transport to a
protocol that decodes each chunk in the loop's read callback and gives every whole item to the server there (no task
woken a chunk). A quorum connection pauses its reading while `INBOUND_PAUSE` packets wait for the node
(`Connection.hold`, `Connection.take`): the loop may read a socket many times before the server's pump runs once.
The client ports read their connections with `read_stream` too (`zabref.net.pipeline`).

Bounds (so a misbehaving peer cannot exhaust memory): a quorum packet's data is at most `MAX_QUORUM_DATA` bytes, a
SNAP's snapshot stream at most `MAX_SNAPSHOT`, and an election frame's body at most `MAX_ELECTION_FRAME` (a longer
length closes the connection before any of it is read); an inbound connection's whole admission -- TLS handshake,
first bytes, quorum authentication -- must be done within `HANDSHAKE_TIMEOUT` seconds of its accept
(`zabref.runtime.links`: one deadline, so a stranger that trickles each stage just inside its own bound is still
closed); an election frame must complete within `ELECTION_FRAME_TIMEOUT` seconds of its first byte (`read_stream`'s
``frame_timeout``, which does not count this end's own lag); an election sender keeps at most `ELECTION_QUEUE_LIMIT`
notifications.

Unsent bytes. A connection whose unsent bytes exceed `SEND_BUFFER_LIMIT` (the peer stopped reading) is closed --
except while ``catching_up`` is set: the runtime sets it on a leader's connection to a learner that is not UPTODATE
yet, whose catch-up (DIFF or SNAP, the missed proposals, NEWLEADER) is written in one burst as large as what the
learner missed. That burst may exceed the limit; its time is bounded instead, by ``init_limit`` ticks (the leader
closes a learner that has not synchronized and answered by then), as in ZooKeeper. Once the learner is UPTODATE it
has read the whole burst (it ACKs NEWLEADER, the burst's last packet) and the limit applies again. Closing a
connection that still has unsent bytes aborts its transport (RST): a graceful close would keep the buffer in memory
until a stalled peer reads it, perhaps never.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import itertools
import logging
import secrets
import struct
import termios
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from zabref.core import payloads
from zabref.core.packets import PacketType, QuorumPacket
from zabref.errors import CodecError
from zabref.net import streams, wire, zkwire
from zabref.net.security import Guard

__all__ = [
    "Connection",
    "accept_hello",
    "accept_initial",
    "new_connection_id",
    "next_serial",
    "quiet_cancel",
    "dial",
    "Decoder",
    "read_stream",
    "transport_of",
    "dropped_cancel",
    "MAX_QUORUM_DATA",
    "MAX_SNAPSHOT",
    "MAX_ELECTION_FRAME",
    "SEND_BUFFER_LIMIT",
    "WRITE_CHUNK",
    "HANDSHAKE_TIMEOUT",
    "ELECTION_FRAME_TIMEOUT",
    "ELECTION_QUEUE_LIMIT",
    "INBOUND_PAUSE",
    "EndReading",
    "PEER_CLOSED",
    "LOST",
]

log = logging.getLogger("zabref")

#: A quorum packet's data bound. A ZooKeeper learner reads at most its ``jute.maxbuffer`` (about 1 MiB,
#: `zabref.net.zkwire.JUTE_MAX`) in one buffer.
MAX_QUORUM_DATA = 16 * 1024 * 1024

#: A SNAP's snapshot stream bound: the leader's whole tree (zabref's: its whole history), which a learner that has
#: nothing the leader has needs however large it grew. ZooKeeper bounds the stream only element by element (each
#: buffer by ``jute.maxbuffer``; `zabref.core.zksnap` does too); this bounds what a misbehaving leader can make a
#: learner buffer, far above what a server here holds in memory. Before, the stream was bounded by
#: `MAX_QUORUM_DATA`: a learner could never join a leader holding more than 16 MiB once it needed a SNAP.
MAX_SNAPSHOT = 1 << 30
#: An election frame's bound: a notification carries the configuration's text (`zabref.net.wire`), about 50 bytes a
#: server; ZooKeeper's own bound is 512 KiB (QuorumCnxManager.PACKETMAXSIZE).
MAX_ELECTION_FRAME = 8 * 1024
SEND_BUFFER_LIMIT = 32 * 1024 * 1024
#: Most bytes of queued frames joined into one transport write by `Connection.flush`.
WRITE_CHUNK = 256 * 1024
HANDSHAKE_TIMEOUT = 5.0
#: Seconds an election frame (at most MAX_ELECTION_FRAME bytes) may take from its first byte to its last.
ELECTION_FRAME_TIMEOUT = 5.0
ELECTION_QUEUE_LIMIT = 1000
#: Packets waiting in a quorum connection's ``inbound`` at which its reading pauses, until the node has taken half of
#: them (`Connection.hold`, `Connection.take`).
INBOUND_PAUSE = 1000
_TYPE_NUMBERS = frozenset(map(int, PacketType))
T = TypeVar("T")
_serials = itertools.count(1)


def next_serial() -> int:
    """A number no other connection object of this process has (quorum or election): its key in the runtime's maps."""
    return next(_serials)


def quiet_cancel(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a port's connection handler so that cancelling it at shutdown is not logged as an error."""

    @functools.wraps(handler)
    async def wrapper(*args: Any) -> None:
        try:
            await handler(*args)
        except asyncio.CancelledError:
            pass

    return wrapper


class HandshakeError(Exception):
    """The first bytes of an inbound connection (a quorum port's FOLLOWERINFO, an election port's initial message)
    do not open it."""


async def accept_hello(reader: asyncio.StreamReader) -> tuple[QuorumPacket, bytes, int | None]:
    """Read the first packet of an inbound quorum connection, as a ZooKeeper or zabref learner writes it: FOLLOWERINFO,
    whose LearnerInfo names the learner (ZooKeeper's LearnerHandler takes no other first packet). Returns the packet,
    its bytes (what quorum authentication binds) and the connection id a zabref learner writes after the LearnerInfo
    (None from a ZooKeeper learner; `zabref.net.wire.connection_id`). Raises HandshakeError saying why."""
    got = b""

    async def more(n: int) -> None:
        nonlocal got
        got += await asyncio.wait_for(reader.readexactly(n), HANDSHAKE_TIMEOUT)

    try:
        await more(4)  # the type: anything but FOLLOWERINFO is refused at once
        (ptype,) = struct.unpack(">i", got)
        if ptype != PacketType.FOLLOWERINFO:
            name = PacketType(ptype).name if ptype in _TYPE_NUMBERS else f"type {ptype}"
            raise HandshakeError(f"the first packet is {name}, not FOLLOWERINFO"
                                 + (" (zabref has no observers)" if ptype == PacketType.OBSERVERINFO else ""))
        await more(12)  # zxid, data length
        (length,) = struct.unpack_from(">i", got, 12)
        if length not in (payloads.LEARNER_INFO_SIZE, payloads.LEARNER_INFO_SIZE + 8):
            raise HandshakeError(f"FOLLOWERINFO's data is {length} bytes: a LearnerInfo is "
                                 f"{payloads.LEARNER_INFO_SIZE}, or {payloads.LEARNER_INFO_SIZE + 8} with a "
                                 "connection id")
        await more(length + 4)  # the data, the authinfo count
        if got[-4:] not in (b"\xff\xff\xff\xff", bytes(4)):
            raise HandshakeError("FOLLOWERINFO carries authinfo")
        packet = wire.decode_quorum_packet(got)
        return packet, got, wire.connection_id(packet)
    except asyncio.IncompleteReadError as short:
        ended = len(got) + len(short.partial)
        raise HandshakeError(f"connection ended after {ended} bytes of the first packet (FOLLOWERINFO)") from None
    except TimeoutError:
        raise HandshakeError(f"no FOLLOWERINFO within {HANDSHAKE_TIMEOUT} s") from None
    except CodecError as bad:
        raise HandshakeError(str(bad)) from None


async def accept_initial(reader: asyncio.StreamReader) -> tuple[zkwire.Initial, bytes]:
    """Read the initial message of an inbound election connection, as ZooKeeper's QuorumCnxManager writes it
    (`zabref.net.zkwire.read_initial`: a protocol version, the sid, the dialer's election address; or a sid alone, the
    form before 3.5): the message and its bytes. Raises HandshakeError saying why."""
    got = b""

    async def more(n: int) -> None:
        nonlocal got
        got += await asyncio.wait_for(reader.readexactly(n), HANDSHAKE_TIMEOUT)

    try:
        await more(8)
        if int.from_bytes(got, "big", signed=True) < 0:
            await more(12)  # sid, address length
            length = int.from_bytes(got[16:], "big", signed=True)
            if 0 < length <= zkwire.INITIAL_MAX:
                await more(length)
        cur = zkwire.Cursor(got, "initial message")
        initial = zkwire.read_initial(cur)  # every check of the bytes is the reader's (a bad version, length, text)
        if cur.remaining:
            raise HandshakeError(f"initial message: {cur.remaining} bytes after it")  # pragma: no cover (read exactly)
        return initial, got
    except zkwire.Short:  # pragma: no cover -- read exactly what the reader needs
        raise HandshakeError("initial message: incomplete") from None
    except asyncio.IncompleteReadError as short:
        ended = len(got) + len(short.partial)
        raise HandshakeError(f"connection ended after {ended} bytes of the initial message") from None
    except TimeoutError:
        raise HandshakeError(f"no initial message within {HANDSHAKE_TIMEOUT} s") from None
    except CodecError as bad:
        raise HandshakeError(str(bad)) from None


def new_connection_id() -> int:
    """A random, non-negative int64: a quorum connection's id (`zabref.net.wire.with_connection_id`)."""
    return secrets.randbits(63)


async def dial(host: str, port: int, hello: bytes, *, peer: int, attempts: int, timeout: float,
               first_delay: float = 0.02, max_delay: float = 1.0,
               guard: Guard | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to ``host:port`` (server ``peer``) and write ``hello``: on a quorum port the learner's first packet
    (FOLLOWERINFO), on an election port ZooKeeper's initial message; up to ``attempts`` tries with exponential backoff.

    With a ``guard`` (`zabref.net.security`), the connection is TLS when quorum TLS is on, and quorum authentication,
    bound to ``hello``, is done before this returns. Raises the last OSError (or TimeoutError;
    `zabref.net.security.AuthError`, an OSError, for a failed authentication) when every attempt failed.
    """
    tls: dict[str, Any] = {}
    if guard is not None and guard.quorum_client is not None:
        tls = {"ssl": guard.quorum_client, "server_hostname": host, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT}
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(max(1, attempts)),
        wait=wait_exponential(multiplier=first_delay, max=max_delay),
        retry=retry_if_exception_type((OSError, TimeoutError)),
        reraise=True,
    ):
        with attempt:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, **tls), timeout)
            if dropped_cancel():
                writer.close()
                raise asyncio.CancelledError
            streams.write(writer, hello)
            if guard is not None:
                try:
                    await guard.prove(reader, writer, hello, peer, HANDSHAKE_TIMEOUT)
                except OSError:
                    writer.close()
                    raise
            return reader, writer
    raise AssertionError("unreachable")  # pragma: no cover


def dropped_cancel() -> bool:
    """Whether the running task was cancelled and an `asyncio.wait_for` it awaited dropped the cancellation: on
    Python 3.11 wait_for returns the result of an awaitable that completed as the cancellation came (gh-86296), and
    a task that loops on (an election sender, a dial) would then outlive its server's stop. Checked after such a wait
    in a task that must end when cancelled (it awaits nothing: no schedule changes)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


#: `read_stream`'s reason when the peer closed its end (what it sent is all read).
PEER_CLOSED = "peer closed the connection"
#: How `read_stream`'s reason begins when the connection broke (the exception follows).
LOST = "connection lost"


class EndReading(Exception):
    """Raised by `read_stream`'s ``on_item`` to end the reading (nothing after the item reaches it); the message is
    the reason `read_stream` returns."""


class Decoder(Protocol[T]):
    """What `read_stream` reads with: `zabref.net.wire.FrameDecoder` (election, client) or `wire.PacketDecoder`."""

    @property
    def buffered(self) -> int: ...

    def feed(self, data: bytes) -> list[T]: ...

    def close(self) -> None: ...


async def read_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, decoder: Decoder[T],
                      on_item: Callable[[T], None], *, frame_timeout: float | None = None,
                      idle_timeout: float | None = None, peer_name: str = "the peer",
                      after_chunk: Callable[[], None] | None = None) -> str:
    """Feed ``on_item`` everything ``decoder`` makes of the stream (frame bodies, packets) until it ends; return why it
    ended (for the log line): `PEER_CLOSED` when the peer closed its end, a reason beginning with `LOST` when the
    connection broke, ``bad input: ...``, or the message of an `EndReading` that ``on_item`` raised.

    The connection's transport is handed to a `_Frames` protocol for the rest of its life: each chunk the loop reads
    is decoded in its read callback and every whole item in it goes to ``on_item`` there, with no task woken a chunk
    (the stream's own protocol still hears of the writing side and of the end, so ``writer`` drains and closes as
    before); then ``after_chunk``, if given, runs (to write at once what the chunk's items made), also when an item
    ended the reading. Bytes the stream had read and not returned yet (after a handshake read through ``reader``) are
    decoded first. ``on_item`` may raise CodecError (a body that does not decode) or ValueError (one that is not
    allowed): the reading stops and the message becomes the reason; `EndReading` ends it with its message; any other
    error of it (or of ``after_chunk``) is raised here. With ``frame_timeout``, a frame or packet must be complete
    within that many seconds of its first byte (the time between them is not bounded); with ``idle_timeout``, a
    whole one must arrive within that many seconds of the reading's start and of the last one (``nothing from
    {peer_name} within ... s``; a pause of the reading is not the peer's silence: the wait starts again at the first
    look after it, so a silence after a pause may last up to twice ``idle_timeout``). Neither counts this end's own
    lag against the peer: a timer that runs more than `TIMER_LAG` after it was due, or while bytes wait in the kernel
    that this loop has not read yet (`unread`: its process was stopped or starved, and the timer runs before the
    reads its lag delayed), or while the reading is paused (``frame_timeout``), gives the peer the time again. (A
    peer that trickles its bytes gains nothing by it: its bytes do not wait unless this loop lags.) The caller may
    pause and resume the transport's reading (a chunk read before the pause is still decoded whole). Cancelled,
    nothing more reaches ``on_item``.
    """
    frames = _Frames(transport_of(writer), decoder, on_item, frame_timeout, idle_timeout, peer_name, after_chunk)
    try:
        return await frames.run(reader)
    finally:
        frames.stop()


#: A `read_stream` timer that runs this many seconds after it was due ran late because this loop lagged (its process
#: was stopped or starved, or a callback ran long): the wait is not the peer's.
TIMER_LAG = 0.1


def unread(transport: asyncio.BaseTransport) -> int:
    """How many bytes the kernel holds for ``transport``'s socket that its loop has not read yet (FIONREAD on the
    socket: over TLS, the encrypted bytes); 0 when it cannot tell (no socket, closed)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        held = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", held)[0])  # a C int, in the machine's order


def transport_of(writer: asyncio.StreamWriter) -> asyncio.Transport:
    """A stream's transport, which reads as well as writes (typeshed names it a WriteTransport)."""
    return cast(asyncio.Transport, writer.transport)


class _Frames(asyncio.Protocol):
    """A connection's protocol while `read_stream` reads it: decodes each chunk as it arrives (its docstring)."""

    def __init__(self, transport: asyncio.Transport, decoder: Decoder[Any], on_item: Callable[[Any], None],
                 frame_timeout: float | None, idle_timeout: float | None, peer_name: str,
                 after_chunk: Callable[[], None] | None) -> None:
        self.transport = transport
        # the stream's protocol: told of writing and of the end, as before
        self.stream = cast(asyncio.Protocol, transport.get_protocol())
        self.decoder = decoder
        self.on_item = on_item
        self.after_chunk = after_chunk
        self.frame_timeout = frame_timeout
        self.idle_timeout = idle_timeout
        self.peer_name = peer_name
        self.loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[str] = self.loop.create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.last_item = 0.0  # the loop's time of the last whole item (or of the start), with idle_timeout
        self.was_paused = False  # the idle timer found the reading paused when it last looked

    async def run(self, reader: asyncio.StreamReader) -> str:
        self.transport.set_protocol(self)
        if self.idle_timeout is not None:
            self.last_item = self.loop.time()
            self.idle_timer = self.loop.call_later(self.idle_timeout, self._idle)
        if reader.exception() is not None:
            self._lost(reader.exception())
        else:
            buffer: bytearray = reader._buffer  # type: ignore[attr-defined]  # read, not returned: asyncio's own
            held = bytes(buffer)
            buffer.clear()
            if held:
                self.data_received(held)
            if reader.at_eof():
                self._eof()
            elif not self.transport.is_reading():  # the stream paused it (its buffer was full)
                self.transport.resume_reading()
        return await self.ended

    def stop(self) -> None:
        """Nothing more reaches ``on_item`` (the reading ended or was cancelled)."""
        for timer in (self.timer, self.idle_timer):
            if timer is not None:
                timer.cancel()
        self.timer = self.idle_timer = None
        if not self.ended.done():
            self.ended.cancel()

    def _end(self, reason: str | BaseException) -> None:
        if not self.ended.done():
            if isinstance(reason, str):
                self.ended.set_result(reason)
            else:
                self.ended.set_exception(reason)
        self.stop()

    def data_received(self, data: bytes) -> None:
        if self.ended.done():
            return
        decoder = self.decoder
        items: list[Any] = []
        try:
            try:
                items = decoder.feed(data)
                for item in items:
                    self.on_item(item)
                    if self.ended.done():
                        return
            finally:
                if self.after_chunk is not None:
                    self.after_chunk()
        except EndReading as end:
            self._end(str(end))
            return
        except (CodecError, ValueError) as bad:
            self._end(f"bad input: {bad}")
            return
        except OSError as lost:
            self._end(f"{LOST}: {type(lost).__name__}: {lost}")
            return
        except Exception as bug:  # a bug of on_item's: raised where read_stream is awaited
            self._end(bug)
            return
        if items and self.idle_timer is not None:
            self.last_item = self.loop.time()
        if self.frame_timeout is None:
            return
        if not decoder.buffered:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
        elif items or self.timer is None:  # the incomplete item began in this chunk
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_later(self.frame_timeout, self._too_slow)

    def _idle(self) -> None:
        """The idle timer: end the reading if no whole item came within ``idle_timeout`` (the reading not paused
        meanwhile), else look again when it would be due."""
        assert self.idle_timeout is not None
        now = self.loop.time()
        if not self.transport.is_reading():  # paused by the caller: its peer is not the one that is silent
            self.last_item = now
            self.was_paused = True
        elif self.was_paused:  # the pause ended since the last look, when is not known: the wait starts again
            self.last_item = now
            self.was_paused = False
        elif self._late(self.idle_timer) or unread(self.transport):  # this loop lagged, not the peer
            self.last_item = now
        due = self.last_item + self.idle_timeout
        if now >= due:
            self.idle_timer = None
            self._end(f"nothing from {self.peer_name} within {self.idle_timeout:g} s")
        else:
            self.idle_timer = self.loop.call_at(due, self._idle)

    def _late(self, timer: asyncio.TimerHandle | None) -> bool:
        """Whether ``timer`` (the one running now) runs more than `TIMER_LAG` seconds after it was due."""
        return timer is not None and self.loop.time() - timer.when() > TIMER_LAG

    def _too_slow(self) -> None:
        assert self.frame_timeout is not None
        if self._late(self.timer) or not self.transport.is_reading() or unread(self.transport):
            # This loop lagged (its process was stopped or starved, or a callback ran long: the timer runs late, or
            # before the reads the lag delayed, with the rest of the frame waiting in the kernel), or the caller
            # paused the reading. Either way the slowness is this end's, not the peer's: the peer gets the time again.
            self.timer = self.loop.call_later(self.frame_timeout, self._too_slow)
            return
        self.timer = None
        self._end(f"bad input: a frame or packet is still incomplete {self.frame_timeout} s after its first byte "
                  f"({self.decoder.buffered} bytes of it received)")

    def eof_received(self) -> bool | None:
        self._eof()
        # the stream's answer: whether the transport stays open for writing (a client that shut down its sending
        # side still gets its replies); the stream's reader hears of the end too
        return self.stream.eof_received()

    def _eof(self) -> None:
        try:
            self.decoder.close()
        except CodecError as e:
            self._end(f"bad input: {e}")
        self._end(PEER_CLOSED)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stream.connection_lost(exc)
        self._lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        if exc is None:
            self._eof()
        else:
            self._end(f"{LOST}: {type(exc).__name__}: {exc}")

    def pause_writing(self) -> None:
        self.stream.pause_writing()

    def resume_writing(self) -> None:
        self.stream.resume_writing()


class Connection:
    """One quorum connection with a peer server (see the module docstring)."""

    def __init__(self, peer: int, *, initiated: bool, cid: int | None = None) -> None:
        self.peer = peer
        self.initiated = initiated  # True: we connected to the peer (we follow it); False: it connected to us
        self.cid = new_connection_id() if cid is None else cid  # the connection id both ends know (FOLLOWERINFO)
        self.serial = next_serial()
        self.state = "connecting"
        self.sent = 0
        self.received = 0
        self.close_reason: str | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.pending: list[bytes] = []  # packets sent while connecting
        self.hello_sent = False  # an outbound connection's first packet (FOLLOWERINFO) is written by the dial
        self._out: list[bytes] = []  # packets queued with send(flush=False), written by the next flush
        self.writes = 0  # transport writes made (each carries one or more packets)
        self.inbound: deque[QuorumPacket] = deque()  # packets read and not yet taken by the node, in order
        self.paused = False  # reading paused: INBOUND_PAUSE packets waited in ``inbound`` (`hold`)
        # the node deferred the head packet; it is offered again after the node's next change of role or zabState
        self.blocked = False
        self.reported = False  # whether the core was told (connection_closed) or needs no telling
        self.catching_up = False  # set by the runtime: SEND_BUFFER_LIMIT is suspended (module docstring)
        self.dialing = False  # an outbound connection whose dial task runs
        self.opened: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    @property
    def closed(self) -> bool:
        return self.state == "closed"

    def take_hello(self) -> bytes:
        """An outbound connection's first packet, taken from ``pending`` for the dial to write (`dial`'s ``hello``):
        the learner's FOLLOWERINFO, with this connection's id (`send`). Empty if nothing was sent yet."""
        if not self.pending:
            return b""
        self.hello_sent = True
        return self.pending.pop(0)

    def attach(self, writer: asyncio.StreamWriter) -> None:
        """The TCP connection is up (first bytes written or read): flush what waited, in order."""
        if self.closed:
            writer.close()
            return
        self.writer = writer
        self.state = "open"
        if self.hello_sent:
            self.sent += 1
        waiting, self.pending = self.pending, []
        self._out[:0] = waiting  # what waited goes first, in one write with anything queued since
        self.flush()
        if not self.opened.done():
            self.opened.set_result(True)

    def hold(self, packet: QuorumPacket) -> None:
        """A packet read, to wait in ``inbound`` for the node. At `INBOUND_PAUSE` waiting, the connection's reading
        pauses (the rest of a burst -- a leader's catch-up -- waits in the kernel and then in the peer's send buffer,
        as it did in the stream's buffer when a task read it): the loop may read a socket many times before the pump
        runs once."""
        self.inbound.append(packet)
        if len(self.inbound) >= INBOUND_PAUSE and not self.paused and self.writer is not None:
            self.paused = True
            transport_of(self.writer).pause_reading()

    def take(self) -> QuorumPacket:
        """The head packet of ``inbound``, for the node; the reading resumes once half of `INBOUND_PAUSE` wait."""
        packet = self.inbound.popleft()
        if self.paused and len(self.inbound) <= INBOUND_PAUSE // 2:
            self.paused = False
            if self.writer is not None and not self.closed:
                transport_of(self.writer).resume_reading()
        return packet

    def send(self, packet: QuorumPacket, *, flush: bool = True) -> bool:
        """Queue one packet for the peer; False if the connection is closed (the packet is lost, as in the spec).

        With ``flush=False`` the packet waits in this connection's output until `flush`: the runtime queues every
        packet of one pump batch and then writes them with ONE transport write per connection.
        """
        if self.closed:
            return False
        if self.initiated and packet.type == PacketType.FOLLOWERINFO:  # a learner's first packet names the connection
            packet = wire.with_connection_id(packet, self.cid)
        framed = wire.encode_quorum_packet(packet)
        if self.state == "connecting":
            if sum(map(len, self.pending)) + len(framed) > SEND_BUFFER_LIMIT:
                self.close(f"more than {SEND_BUFFER_LIMIT} bytes wait for the connection to open")
                return False
            self.pending.append(framed)
            return True
        self._out.append(framed)
        if flush:
            self.flush()
        return not self.closed

    def flush(self) -> None:
        """Write the queued packets: one ``transport.write`` (one send syscall when the kernel takes it all) for up to
        `WRITE_CHUNK` bytes of them, so that a large catch-up burst is not copied whole into one buffer."""
        if not self._out or self.closed or self.writer is None:
            return
        out, self._out = self._out, []
        start = 0
        while start < len(out) and not self.closed:
            end, size = start + 1, len(out[start])
            while end < len(out) and size + len(out[end]) <= WRITE_CHUNK:
                size += len(out[end])
                end += 1
            streams.write(self.writer, out[start] if end == start + 1 else b"".join(out[start:end]))
            self.sent += end - start
            self.writes += 1
            start = end
            if not self.catching_up and self.writer.transport.get_write_buffer_size() > SEND_BUFFER_LIMIT:
                self.close(f"peer is not reading: more than {SEND_BUFFER_LIMIT} bytes unsent")

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) until the kernel took what was written."""
        if self.writer is not None and not self.closed:
            try:
                await asyncio.wait_for(self.writer.drain(), timeout)
            except (ConnectionError, OSError, TimeoutError):
                pass

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.state = "closed"
        self.close_reason = reason
        self.pending = []
        self._out = []
        if self.writer is not None:
            if self.writer.transport.get_write_buffer_size():
                self.writer.transport.abort()  # the peer is behind: free the unsent bytes now (module docstring)
            else:
                self.writer.close()
        if not self.opened.done():
            self.opened.set_result(False)

    def describe(self) -> dict[str, Any]:
        return {"peer": self.peer, "cid": self.cid, "initiated": self.initiated, "state": self.state,
                "sent": self.sent, "received": self.received}


