"""Election connections: FastLeaderElection's notifications out (`ElectionSender`) and in (`VoteChannel`).

Theory of operation: as in ZooKeeper's QuorumCnxManager, two servers hold ONE election connection, the one the larger
id dialed, and it carries both directions: every ordered pair of servers is one FIFO channel, as the spec's
``electionMsgs[i][j]``, and a ZooKeeper server and a zabref one find each other. The dialer writes ZooKeeper's initial
message (`zabref.net.zkwire`: protocol version, its sid, its election address) and then notifications; the acceptor
only notifications. A server with something to send to a larger id dials it too, but that connection only asks: the
larger id closes it and dials back (QuorumCnxManager: "Have smaller server identifier, so dropping the connection").

`ElectionSender` (one per peer) owns the connection with that peer: it dials (the larger id) or asks and waits for the
peer's dial (`adopt`), writes the queued notifications, keeps at most `zabref.net.peers.ELECTION_QUEUE_LIMIT` (the
oldest are dropped: FastLeaderElection resends its vote anyway), drops with a log line one it cannot encode, redials
with bounded backoff, and while the fault layer cuts its link (``set_link_cut``) closes its connection and drops
everything. The runtime resends the node's vote only while no sender ``holds`` a notification (the spec's ``Quiet``,
`zabref.core.node`). A peer that refuses the dial (or does not answer it) is down: its sender then keeps only the
newest notification for it, as ZooKeeper's send queue does while its connection is not there (``SEND_CAPACITY`` 1),
and holds nothing, so that one peer that is down holds up no resend to the others; the next connection ends that.
A peer that took the dial but has not dialed back yet is not down. A `VoteChannel` is the reading half of one
connection (dialed or accepted): the notifications read and not yet taken by the node. Handshake, framing and bounds
are `zabref.net.peers`'.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from zabref.core.packets import Notification
from zabref.net import streams, wire
from zabref.net.peers import ELECTION_QUEUE_LIMIT, dial, dropped_cancel, next_serial
from zabref.net.zkwire import PROTOCOL_V1, Initial, encode_initial
from zabref.net.security import AuthError, Guard

log = logging.getLogger("zabref")

__all__ = ["VoteChannel", "ElectionSender", "DIAL_BACK_WAIT", "REDIAL_FIRST", "REDIAL_MAX"]

#: Seconds a smaller id waits for the larger peer's connection after asking for it, before it asks again.
DIAL_BACK_WAIT = 0.5
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
    """Sends FastLeaderElection notifications to one peer over the pair's one connection (FIFO, best effort).

    Reconnects with bounded backoff when the connection fails; notifications queued while the peer is down are kept
    up to `ELECTION_QUEUE_LIMIT` (oldest dropped) and a notification being written when the connection breaks is lost:
    FastLeaderElection tolerates loss because the runtime rebroadcasts its vote while LOOKING. ``on_connection``
    (the runtime's) reads what the peer writes on a connection this sender dialed and kept.

    Fault layer (docs/faults.md): while ``link_cut`` is set, the connection is closed, nothing is dialed and every
    notification is dropped -- as a network partition would lose them.
    """

    def __init__(self, sid: int, peer: int, host: str, port: int, *, address: str,
                 on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], None] | None = None,
                 guard: Guard | None = None, config: str | None = None) -> None:
        self.sid, self.peer, self.host, self.port = sid, peer, host, port
        # this server's election address (host:port), as the initial message names it: a ZooKeeper server dials a
        # smaller id back there
        self.address = address
        self.config = config  # the configuration text every notification carries (`zabref.net.wire`), or None
        self.guard = guard  # TLS and quorum authentication (`zabref.net.security`), None: neither
        self._on_connection = on_connection
        self.queue: deque[Notification] = deque(maxlen=ELECTION_QUEUE_LIMIT)
        self.link_cut = False
        self.sent = 0  # notifications written on the current connection
        self._writing = False  # a notification taken from the queue is being written
        self._down = False  # the last dial was refused or not answered, and no connection came since
        self._writer: asyncio.StreamWriter | None = None
        self._dialed = False  # whether this server dialed the current connection (else the peer did)
        self._dial_back = False  # the (smaller) peer asked for a connection: dial it even with nothing to send
        self._adopted = asyncio.Event()  # the (larger) peer's connection arrived
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
        self._keep_newest_if_down()
        self._wake.set()

    def _keep_newest_if_down(self) -> None:
        """While the peer is down, only the newest notification waits for it (module docstring)."""
        if self._down and len(self.queue) > 1:
            newest = self.queue.pop()
            self.queue.clear()
            self.queue.append(newest)

    def holds(self) -> bool:
        """A notification waits to be written to a peer that is not down, or is being written (the node's resend
        waits for none)."""
        return not self._down and (bool(self.queue) or self._writing)

    def set_link_cut(self, cut: bool) -> None:
        """Fault layer: cut (close the connection, drop everything) or heal the link to this peer."""
        self.link_cut = cut
        if cut:
            self.queue.clear()
            self._dial_back = False
        self._wake.set()

    def adopt(self, writer: asyncio.StreamWriter) -> None:
        """The larger peer dialed this server: its connection is the pair's from now on (an older one is closed)."""
        if self._writer is not None and self._writer is not writer:
            self._drop_connection("the peer opened a new connection")
        self._writer, self.sent, self._dialed, self._down = writer, 0, False, False
        log.info("election connection from %d open", self.peer)
        self._adopted.set()
        self._wake.set()

    def dial_back(self) -> None:
        """The smaller peer dialed this server, asking for the pair's connection: dial it."""
        if not self.link_cut:
            self._dial_back = True
            self._wake.set()

    def connection_ended(self, writer: asyncio.StreamWriter, why: str) -> None:
        """The reading half of ``writer``'s connection ended: stop writing on it, so that the next notification
        opens a new connection instead of vanishing into a dead one."""
        if self._writer is writer:
            self._drop_connection(why)
            self._wake.set()

    def describe(self) -> dict[str, Any]:
        """For the control socket's ``state``: is a connection up (and did this server dial it: the larger id of
        the pair does), how many notifications wait, how many were written on the current connection (the
        conformance driver compares it with the receiver's count)."""
        return {"peer": self.peer, "connected": self._writer is not None, "dialed": self._dialed,
                "queued": len(self.queue), "sent": self.sent}

    def _drop_connection(self, why: str) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            log.info("election connection with %d closed: %s", self.peer, why)

    async def _connect(self) -> bool:
        """Dial the peer; True if this server now holds the pair's connection. The smaller id's dial asks the peer
        to dial back, and waits (bounded) for that connection (`adopt`)."""
        self._adopted.clear()
        hello = encode_initial(Initial(self.sid, PROTOCOL_V1, (self.address,)))
        reader, writer = await dial(self.host, self.port, hello, peer=self.peer, attempts=1, timeout=1.0,
                                    guard=self.guard)
        self._down = False  # it took the dial
        if self.sid > self.peer:
            self._writer, self.sent, self._dial_back, self._dialed = writer, 0, False, True
            log.info("election connection to %d open", self.peer)
            if self._on_connection is not None:
                self._on_connection(reader, writer)
            return True
        writer.close()  # the peer keeps only the larger id's connection: it dials back
        try:
            await asyncio.wait_for(self._adopted.wait(), DIAL_BACK_WAIT)
        except TimeoutError:
            return False
        return self._writer is not None

    async def _run(self) -> None:
        delay = REDIAL_FIRST
        while True:
            if dropped_cancel():  # closed while a dial or a drain was awaited (`zabref.net.peers.dropped_cancel`)
                raise asyncio.CancelledError
            await self._wake.wait()
            self._wake.clear()
            if self.link_cut:
                self._drop_connection("link cut by the fault layer")
            while (self.queue or self._dial_back) and not self.link_cut:
                if dropped_cancel():
                    raise asyncio.CancelledError
                writer = self._writer
                if writer is None or writer.is_closing():
                    self._writer = None
                    try:
                        if await self._connect():
                            delay = REDIAL_FIRST
                            continue
                        why: object = f"no connection from {self.peer} within {DIAL_BACK_WAIT} s of asking for it"
                        refused = False
                    except (OSError, TimeoutError) as e:
                        why, refused = e, isinstance(e, (AuthError, ssl.SSLError))  # a stranger, not a peer down
                        self._down = not refused
                        self._keep_newest_if_down()
                    log.log(logging.WARNING if refused else logging.DEBUG, "election connection to %d failed: %s",
                            self.peer, why)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, REDIAL_MAX)
                    continue  # a cut may have emptied the queue while the dial was awaited: check again
                self._dial_back = False
                if not self.queue:
                    break
                n = self.queue.popleft()
                try:
                    framed = wire.frame(wire.encode_notification(n, self.config))
                except ValueError as e:  # a field the wire cannot carry: a bug upstream, never a dead sender
                    log.error("election notification to %d dropped: %s (%s)", self.peer, e, n)
                    continue
                self._writing = True
                try:
                    streams.write(writer, framed)
                    self.sent += 1
                    await asyncio.wait_for(writer.drain(), 2.0)
                except (ConnectionError, OSError, TimeoutError) as e:
                    self._drop_connection(f"lost: {e}")
                finally:
                    self._writing = False

    def close(self) -> None:
        self._task.cancel()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
