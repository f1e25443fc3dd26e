"""Election connections: FastLeaderElection's notifications out (`ElectionSender`) and in (`VoteChannel`).

Theory of operation: each server sends on connections it opened itself to the other servers' election ports, one
`ElectionSender` per peer, and receives on the connections the others opened (a `VoteChannel` each), so every
ordered pair of servers is one FIFO channel, as the spec's ``electionMsgs[i][j]``. A sender keeps at most
`zabref.net.peers.ELECTION_QUEUE_LIMIT` notifications (the oldest are dropped: FastLeaderElection resends its vote
anyway), drops with a log line one it cannot encode, redials with bounded backoff, and while the fault layer cuts its
link (``set_link_cut``) closes its connection and drops everything. Handshake, framing and bounds are
`zabref.net.peers`'.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from zabref.core.packets import Notification
from zabref.net import wire
from zabref.net.peers import ELECTION_QUEUE_LIMIT, dial, new_connection_id, next_serial
from zabref.net.security import AuthError, Guard

log = logging.getLogger("zabref")

__all__ = ["VoteChannel", "ElectionSender", "REDIAL_FIRST", "REDIAL_MAX"]

#: Seconds before an election sender dials a peer again after a failed dial, doubling up to `REDIAL_MAX`. A peer
#: that is down costs a dial (a refused connect on the LAN, a few hundred microseconds) at 5, 10, 20, ... ms: cheap,
#: and servers started together (a cluster's boot, a replay's) find each other within milliseconds, not 50.
REDIAL_FIRST = 0.005
REDIAL_MAX = 1.0


class VoteChannel:
    """One inbound election connection: notifications read and not yet taken by the node, in order."""

    def __init__(self, peer: int, writer: asyncio.StreamWriter) -> None:
        self.peer = peer
        self.serial = next_serial()
        self.writer = writer
        self.inbound: deque[Notification] = deque()
        self.received = 0
        self.closed = False

    def close(self) -> None:
        """Stop reading: what was not taken yet is dropped with the connection (the spec's lost channel)."""
        if not self.closed:
            self.closed = True
            self.inbound.clear()
            self.writer.close()

    def describe(self) -> dict[str, Any]:
        return {"peer": self.peer, "serial": self.serial, "received": self.received}


class ElectionSender:
    """Sends FastLeaderElection notifications to one peer over a connection this server opened (FIFO, best effort).

    Reconnects with bounded backoff when the connection fails; notifications queued while the peer is down are kept
    up to `ELECTION_QUEUE_LIMIT` (oldest dropped) and a notification being written when the connection breaks is lost:
    FastLeaderElection tolerates loss because the runtime rebroadcasts its vote while LOOKING.

    Fault layer (docs/faults.md): while ``link_cut`` is set, the connection is closed, nothing is dialed and every
    notification is dropped -- as a network partition would lose them.
    """

    def __init__(self, sid: int, peer: int, host: str, port: int, *,
                 new_id: Callable[[], int] = new_connection_id, guard: Guard | None = None,
                 config: str | None = None) -> None:
        self.sid, self.peer, self.host, self.port = sid, peer, host, port
        self.config = config  # the configuration text every notification carries (`zabref.net.wire`), or None
        self.guard = guard  # TLS and quorum authentication (`zabref.net.security`), None: neither
        self._new_id = new_id  # the handshake's connection id (`zabref.runtime.machine.Machine.new_connection_id`)
        self.queue: deque[Notification] = deque(maxlen=ELECTION_QUEUE_LIMIT)
        self.link_cut = False
        self.sent = 0  # notifications written on the current connection
        self._writer: asyncio.StreamWriter | None = None
        self._watcher: asyncio.Task[None] | None = None  # reads the current connection until it ends
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"election-to-{peer}")
        self._task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:  # never silently: the peer would hear nothing
            log.error("election sender to %d failed", self.peer, exc_info=task.exception())

    def send(self, n: Notification) -> None:
        if self.link_cut:
            return
        self.queue.append(n)
        self._wake.set()

    def set_link_cut(self, cut: bool) -> None:
        """Fault layer: cut (close the connection, drop everything) or heal the link to this peer."""
        self.link_cut = cut
        if cut:
            self.queue.clear()
        self._wake.set()

    def describe(self) -> dict[str, Any]:
        """For the control socket's ``state``: is a connection up, how many notifications wait, how many were
        written on the current connection (the conformance driver compares it with the receiver's count)."""
        return {"peer": self.peer, "connected": self._writer is not None, "queued": len(self.queue),
                "sent": self.sent}

    def _drop_connection(self, why: str) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            log.info("election connection to %d closed: %s", self.peer, why)

    async def _watch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The peer never writes on this connection: EOF (or an error) means it closed or died; stop using it, so
        that the next notification opens a new connection instead of vanishing into a dead one."""
        try:
            while await reader.read(4096):
                pass
        except (ConnectionError, OSError):
            pass
        if self._writer is writer:
            self._drop_connection("the peer closed it")
            self._wake.set()

    async def _run(self) -> None:
        delay = REDIAL_FIRST
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.link_cut:
                self._drop_connection("link cut by the fault layer")
            while self.queue and not self.link_cut:
                writer = self._writer
                if writer is None or writer.is_closing():
                    try:
                        reader, writer = await dial(self.host, self.port, self.sid, peer=self.peer, attempts=1,
                                                    timeout=1.0, cid=self._new_id(), guard=self.guard)
                        self._writer, self.sent = writer, 0
                        self._watcher = asyncio.get_running_loop().create_task(self._watch(reader, writer))
                        log.info("election connection to %d open", self.peer)
                        delay = REDIAL_FIRST
                    except (OSError, TimeoutError) as e:
                        self._writer = None
                        refused = isinstance(e, (AuthError, ssl.SSLError))  # a stranger, not a peer that is down
                        log.log(logging.WARNING if refused else logging.DEBUG, "election connection to %d failed: %s",
                                self.peer, e)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, REDIAL_MAX)
                    continue  # a cut may have emptied the queue while the dial was awaited: check again
                n = self.queue.popleft()
                try:
                    framed = wire.frame(wire.encode_notification(n, self.config))
                except ValueError as e:  # a field the wire cannot carry: a bug upstream, never a dead sender
                    log.error("election notification to %d dropped: %s (%s)", self.peer, e, n)
                    continue
                try:
                    writer.write(framed)
                    self.sent += 1
                    await asyncio.wait_for(writer.drain(), 2.0)
                except (ConnectionError, OSError, TimeoutError) as e:
                    self._drop_connection(f"lost: {e}")

    def close(self) -> None:
        self._task.cancel()
