"""The two modes of a server, as drivers of one step path: when inputs reach the node, and what time it is.

Theory of operation
-------------------
`zabref.runtime.server.Server` asks its driver exactly these things, and nothing else about the mode:

* ``now()`` -- the time to give the node (`zabref.core.node`: every timer compares times);
* ``start(server)`` -- the server is listening and the node started;
* ``arrived(server, conn)`` / ``vote_arrived(server, channel)`` -- a quorum packet (not a keepalive PING: those
  are never held; a sync's step PING is) or an election notification was read and queued on its connection;
* ``closed(server)`` -- a quorum connection was reported closed to the node;
* ``unblocked(server, conns)`` -- the node changed role or zabState: the packets it deferred on ``conns`` may be
  taken now;
* ``writes_late`` -- whether a late leader's log writes (LeaderLogsLate) go to disk right after their batch's sends,
  the node told at once (``Node.logged``: LeaderOwnACK), or wait for the control socket's ``log_late``.

`NormalDriver` delivers every input as it arrives (one pump event per packet or notification, in arrival order),
ticks the node every ``tick_s`` seconds of the loop's clock (``loop.time()``) -- and once more right after a
connection closed, so that a follower whose leader went away gives up at once instead of at the next tick -- and
tells the node when the loop itself stalled (the ticker woke more than two ticks late: a long batch, a SIGSTOP), so
that the node does not blame its peers for its own pause. Its clock may be moved forward (`NormalDriver.jump`, the
control op ``clock_jump`` of the fault runner): the node then sees every peer silent for that long and takes the
timeouts that are due -- the spec's spontaneous FollowerTimeout / LeaderTimeout, on a running cluster.

`ControlDriver` (``zabref serve --control``, for the conformance driver) delivers nothing by itself: packets and
notifications wait on their connection until the control socket releases one (`zabref.runtime.control`, ``release`` and
``release_vote``), and the clock is logical -- it starts at 0 and moves by ``tick_s`` only when the control socket
says ``tick``, each move followed by one tick of the node. So a timeout happens when, and only when, the driver lets
enough time pass, and the decision that it is due is the node's, as in normal mode.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from zabref.core.effects import Effects
from zabref.core.node import Node
from zabref.net.peers import Connection
from zabref.net.votes import VoteChannel

__all__ = ["DriverHost", "NormalDriver", "ControlDriver"]


class DriverHost(Protocol):
    """All that a driver asks of its server (`zabref.runtime.server.Server` is one): run events in the pump, start a
    task, and the node's entry points the drivers turn inputs into."""

    @property
    def node(self) -> Node | None: ...  # None only before the server starts; a driver runs after

    def enqueue(self, event: Callable[[], Effects | None]) -> None: ...

    async def call(self, event: Callable[[], Effects | None]) -> Effects: ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...

    def deliver(self, conn: Connection) -> Effects | None: ...  # the head packet of a quorum connection

    def deliver_vote(self, channel: VoteChannel) -> Effects | None: ...  # an election connection's head notification

    def tick(self, now: float) -> Effects: ...


class NormalDriver:
    """Inputs as they arrive, ticks on the loop's clock."""

    name = "normal"
    writes_late = True  # a late leader's log writes go to disk right after their batch's sends

    def __init__(self, tick_s: float) -> None:
        self.tick_s = tick_s
        self.skew = 0.0  # seconds the clock was moved forward (`jump`)
        self._clock: Callable[[], float] | None = None  # the running loop's `time`, looked up once (`start`)

    def now(self) -> float:
        clock = self._clock
        if clock is None:
            clock = self._clock = asyncio.get_running_loop().time
        return clock() + self.skew

    async def jump(self, server: DriverHost, seconds: float) -> Effects:
        """Move the clock ``seconds`` forward and tick the node at once (not as a stall: to the node, its peers
        were silent that long), both in one event of the pump: the events queued before it -- packets that arrived
        before the jump -- are taken first, on the clock before the jump (moved at once, the clock would make them
        news from after it, and a leader whose follower's PING waited in the queue took no LeaderTimeout). The
        tick's Effects once carried out."""
        def jumped() -> Effects:
            self.skew += seconds
            return server.tick(self.now())

        return await server.call(jumped)

    def start(self, server: DriverHost) -> None:
        self._clock = asyncio.get_running_loop().time
        server.spawn(self._ticker(server), "ticker")

    def arrived(self, server: DriverHost, conn: Connection) -> None:
        server.enqueue(lambda: server.deliver(conn))

    def vote_arrived(self, server: DriverHost, channel: VoteChannel) -> None:
        server.enqueue(lambda: server.deliver_vote(channel))

    def closed(self, server: DriverHost) -> None:
        server.enqueue(lambda: server.tick(self.now()))

    def unblocked(self, server: DriverHost, conns: list[Connection]) -> None:
        for conn in conns:
            for _ in range(len(conn.inbound)):
                server.enqueue(functools.partial(server.deliver, conn))

    async def _ticker(self, server: DriverHost) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            stalled = now - last > 2 * self.tick_s  # the loop did not run for over a tick: our stall, not theirs
            last = now
            server.enqueue(functools.partial(_tick, server, now + self.skew, stalled))


def _tick(server: DriverHost, now: float, stalled: bool) -> Effects:
    if stalled and server.node is not None:
        server.node.stalled(now)
    return server.tick(now)


class ControlDriver:
    """Inputs when the control socket releases them; a logical clock that moves when it says ``tick``."""

    name = "control"
    writes_late = False  # ... only when the control socket's ``log_late`` says so (the trace's LeaderOwnACK)

    def __init__(self) -> None:
        self.clock = 0.0

    def now(self) -> float:
        return self.clock

    def start(self, server: DriverHost) -> None:
        pass

    def arrived(self, server: DriverHost, conn: Connection) -> None:
        pass

    def vote_arrived(self, server: DriverHost, channel: VoteChannel) -> None:
        pass

    def closed(self, server: DriverHost) -> None:
        pass

    def unblocked(self, server: DriverHost, conns: list[Connection]) -> None:
        pass

    def advance(self, server: DriverHost) -> Effects:
        """One tick of logical time, then the node's timers (the event the control socket's ``tick`` runs)."""
        assert server.node is not None, "a control driver ticks a started server"
        self.clock += server.node.timing.tick_s
        return server.tick(self.clock)
