"""A client connection's requests, pipelined: read in the loop's read callback, answered in request order. asyncio
only. Both client ports serve their connections with `serve` (`zabref.net.clientport`, zabref's own protocol;
`zabref.net.zkclientport`, ZooKeeper's).

Theory of operation
-------------------
A port turns each request frame into an `Entry`: the future of the node's answer it waits for (None when it waits
for nothing: a read, a PING, an error found in the request itself) and what makes the reply's bytes of that answer,
called at the request's turn (so that a read made then sees the writes of the requests before it). The frames are
decoded in the loop's read callback (`zabref.net.peers.read_stream`, no task woken a read); a request that waits
for nothing while nothing before it waits is answered there, with the others of the same read in one write. The
rest wait in a `Pipeline`, and their replies leave in order: a reply leaves as soon as its answer is in and those
before it left, every reply ready then in one write (a write per reply and a task per request took 27-32 % of the
servers' CPU a write at 16 and 128 in flight: docs/performance.md). The head request's answer writes them in its own
callback while the reply task (`_reply_in_order`) waits for it, a turn of the loop sooner than waking the task; the
task writes them when it was busy (draining) and drains what the client has not read.

Bounds. The connection's reading pauses while `MAX_PIPELINED` requests wait (until half of them are answered; a
read's requests are all taken, so a read's worth more may wait) and while the replies written in the read callback
wait for the client to read them (more than `REPLY_BUFFER` unsent bytes; the reply task waits for the client, at
most `WRITE_TIMEOUT` s, then the reading goes on). A reply the client does not read within `WRITE_TIMEOUT` s closes
the connection (`Close`).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from zabref.net import peers, streams

__all__ = ["Close", "Entry", "Pipeline", "serve", "MAX_PIPELINED", "REPLY_BUFFER", "WRITE_TIMEOUT"]

#: Requests of one connection read and not answered yet, at most: past it the port reads no more until replies leave.
MAX_PIPELINED = 1024
#: Bytes of replies written in the read callback and not sent yet past which the connection's reading pauses until
#: the client has read them.
REPLY_BUFFER = 64 * 1024
#: Seconds a reply may wait for the client to read it.
WRITE_TIMEOUT = 30.0
#: `serve`'s end when a request was its connection's last (ZooKeeper's closeSession).
_LAST = "the client's last request was read"


class Close(Exception):
    """Close the connection; the message says why (logged). A reply's maker raises it where the connection must
    close instead of answering."""


#: A request's reply, made at its turn: (the node's answer it waits for, or None; what makes the reply's bytes -- the
#: whole frame -- of that answer, raising `Close` where the connection must close instead).
Entry = tuple["asyncio.Future[Any] | None", Callable[[Any], bytes]]


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, decoder: peers.Decoder[bytes],
                request: Callable[[bytes], tuple[Entry, bool]], *, idle_timeout: float | None = None,
                frame_timeout: float | None = None) -> None:
    """Serve the connection's requests (the module docstring) until the client closes its end or sends its last
    request (``request(body)`` gives a frame's `Entry` and whether it is the connection's last: nothing after it is
    read), and every reply has left. Raises `Close` with the reason the connection must close (a frame that does not
    decode or arrive in time: ``frame_timeout`` s from its first byte; no whole frame within ``idle_timeout`` s; a
    reply's maker's `Close`; a reply not read in time) and ConnectionError when the connection broke."""
    pipeline = Pipeline(writer)
    reading = asyncio.ensure_future(_read(reader, writer, decoder, request, pipeline, idle_timeout, frame_timeout))
    replying = asyncio.ensure_future(_reply_in_order(writer, pipeline))
    try:
        done, _ = await asyncio.wait({reading, replying}, return_when=asyncio.FIRST_COMPLETED)
        if reading in done:
            reading.result()  # why the requests stopped, raised
            await replying  # the replies of every request read, then the end
        else:
            replying.result()  # why the replies stopped, raised
            raise Close("the replies stopped")
    finally:
        reading.cancel()
        replying.cancel()
        pipeline.cancel()


async def _read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, decoder: peers.Decoder[bytes],
                request: Callable[[bytes], tuple[Entry, bool]], pipeline: Pipeline, idle_timeout: float | None,
                frame_timeout: float | None) -> None:
    """Read requests into ``pipeline`` until the client closes its end or sends its last request; answer at once,
    in the read callback, those whose turn is now and that wait for nothing (the module docstring)."""
    out: list[bytes] = []

    def on_frame(body: bytes) -> None:
        entry, last = request(body)
        if entry[0] is None and not pipeline.entries:
            out.append(_made(entry))
        else:
            pipeline.put(entry)
        if last:
            raise peers.EndReading(_LAST)

    def after_chunk() -> None:
        if out:
            streams.write(writer, b"".join(out))
            out.clear()
            pipeline.wrote()

    reason = await peers.read_stream(reader, writer, decoder, on_frame, frame_timeout=frame_timeout,
                                     idle_timeout=idle_timeout, peer_name="the client", after_chunk=after_chunk)
    if reason.startswith(peers.LOST):
        raise ConnectionResetError(reason)
    if reason not in (peers.PEER_CLOSED, _LAST):
        raise Close(reason)
    pipeline.end()


async def _reply_in_order(writer: asyncio.StreamWriter, pipeline: Pipeline) -> None:
    """Write the replies in request order: each as soon as its answer is in and those before it left, every reply
    ready then in the same write; drain what the read callback wrote when it asks (``draining``)."""
    while True:
        entry = await pipeline.next()
        if entry is not None:
            out = [_made(entry)]
            pipeline.make_ready(out)
            streams.write(writer, b"".join(out))
            if writer.transport.get_write_buffer_size():
                await _drain(writer)
        elif pipeline.draining:
            await _drain(writer)
            pipeline.drained()
        else:
            return


async def _drain(writer: asyncio.StreamWriter) -> None:
    """Wait until the client has read enough of its replies (the stream's drain), at most `WRITE_TIMEOUT` s."""
    try:
        async with asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()
    except TimeoutError:
        raise Close(f"the client did not read its answer within {WRITE_TIMEOUT:g} s") from None


def _made(entry: Entry) -> bytes:
    fut, make = entry
    if fut is None:
        return make(None)
    if fut.cancelled():
        raise Close("the server stopped before it answered")
    return make(fut.result())


class Pipeline:
    """One connection's requests read and not answered yet, in request order, and whether the reading ended (nothing
    more will come); it pauses and resumes the connection's reading (the module docstring's bounds)."""

    __slots__ = ("entries", "ended", "draining", "failed", "_paused", "_writer", "_transport", "_waiter", "_loop")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.entries: collections.deque[Entry] = collections.deque()
        self.ended = False
        self.draining = False  # replies written in the read callback wait for the client; the reply task drains
        self.failed: Exception | None = None  # what a reply's maker raised in an answer's callback (`next` raises it)
        self._paused = False
        self._writer = writer
        self._transport = peers.transport_of(writer)
        # `next` waits on a future of the loop kept here, not on an Event: an Event looks the running loop up at every
        # wait, a getpid() system call on Python 3.11 (`zabref.runtime.inbox`)
        self._waiter: asyncio.Future[None] | None = None
        self._loop = asyncio.get_running_loop()

    def put(self, entry: Entry) -> None:
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
        """Pause or resume the connection's reading as the bounds say."""
        if self.ended:
            return
        if not self._paused and (self.draining or len(self.entries) >= MAX_PIPELINED):
            self._paused = True
            self._transport.pause_reading()
        elif self._paused and not self.draining and len(self.entries) <= MAX_PIPELINED // 2:
            self._paused = False
            self._transport.resume_reading()

    def _answered(self, fut: asyncio.Future[Any]) -> None:
        """The head request's answer is in: while the reply task waits for it (nothing to drain, nothing failed),
        its reply and every one ready after it are written here, in the answer's callback, a turn of the loop
        sooner than the task would; else the task is woken."""
        if not self.entries or self.entries[0][0] is not fut:
            return
        if self._waiter is None or self.draining or self.failed is not None:
            self._wake()
            return
        out: list[bytes] = []
        try:
            self.make_ready(out)
        except Exception as raised:  # noqa: BLE001 -- the reply task raises it, as if the task had made the reply
            self.failed = raised
            self._wake()
        if out:
            streams.write(self._writer, b"".join(out))
            self.wrote()
        if self.ended and not self.entries:
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def end(self) -> None:
        self.ended = True
        self._wake()

    def make_ready(self, out: list[bytes]) -> None:
        """Append to ``out`` the reply of each entry ready now, in order, each taken as it is made (what a maker
        raises leaves the replies made before it in ``out``)."""
        while (entry := self.ready()) is not None:
            out.append(_made(entry))

    def ready(self) -> Entry | None:
        """The first entry, taken, if its answer is in; else None."""
        if self.entries:
            fut = self.entries[0][0]
            if fut is None or fut.done():
                entry = self.entries.popleft()
                if self._paused:
                    self._reading()
                return entry
        return None

    async def next(self) -> Entry | None:
        """The first entry, taken once its answer is in; None once the reading ended and every entry was taken, or
        when the replies written in the read callback must be drained first (``draining``). Raises what a reply's
        maker raised in an answer's callback (``failed``: `Close`, or a bug)."""
        while True:
            if self.failed is not None:
                raise self.failed
            if (entry := self.ready()) is not None:
                return entry
            if self.draining or (self.ended and not self.entries):
                return None
            self._waiter = self._loop.create_future()
            await self._waiter

    def cancel(self) -> None:
        """Stop waiting for the answers of requests not replied to (the connection is closing)."""
        for fut, _ in self.entries:
            if fut is not None:
                fut.cancel()
        self.entries.clear()
