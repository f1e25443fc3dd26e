"""An in-memory TCP network for `conformance.sim.loop.SimLoop`: seeded delays, resets, partitions, machines losing
power.

Theory of operation
-------------------
A connection is two `_End`\\ s, each an asyncio transport for the protocol of one process (asyncio's
``StreamReaderProtocol``: the servers' and clients' streams run unchanged on it). What one end writes reaches the
other after a delay drawn from the run's random source, in order: TCP's guarantee is FIFO per direction, so a chunk
never overtakes an earlier one of its direction, while chunks of different connections interleave freely (reorder
across connections). Nothing is duplicated: data appears twice only when a client sends it again on a new
connection, as with TCP.

Faults, all driven by the simulator (`conformance.sim.cluster`):

* ``reset(conn)`` -- a drop: the connection breaks (a RST), both ends learn it after a delay, data in flight is lost;
* ``partition(groups)`` / ``heal()`` -- machines in different groups cannot reach each other: data between them is
  held (TCP retransmits until the link is back, then it arrives, in order: every chunk passes through its arrival
  time, a chunk arriving while anything of its direction is held is held behind it, and healing delivers what was
  held at once, ahead of what is still in flight), and a new connection across waits (the
  dialer's timeout gives up). Healing delivers what was held;
* ``power_off(machine)`` -- the machine's process is gone: its ends stop existing, its listeners too; what it wrote
  before is on the wire and still arrives; then the peers hear nothing (no FIN, no RST: a dead machine says nothing)
  until the machine comes back (`power_on`), when each peer end gets a RST, as a packet reaching the rebooted
  machine would.

A connection to an address nobody listens on is refused after one delay (ConnectionRefusedError). Every callback
into a protocol runs in the context of the process that owns it (`conformance.sim.loop.OWNER`).
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import random
from collections import deque
from typing import Any

from conformance.sim.loop import OWNER, Process

__all__ = ["SimNetwork", "Link"]

#: The context the wire's own callbacks run in (no process owns it): data in flight arrives whatever its sender does.
_WIRE = contextvars.Context()

_EOF = object()


class _Direction:
    """One direction of a connection: FIFO arrival times and what a partition holds."""

    __slots__ = ("last", "held")

    def __init__(self) -> None:
        self.last = 0.0
        self.held: list[Any] = []


class _End(asyncio.Transport):
    """One end of a connection: a transport for ``protocol``, owned by ``owner``."""

    def __init__(self, link: Link, owner: Process, address: tuple[str, int]) -> None:
        super().__init__()
        self.link = link
        self.owner = owner
        self.address = address  # this end's (host, port)
        self.protocol: Any = None
        self.peer: _End | None = None
        self.out = _Direction()  # data this end writes
        self.closing = False
        self.lost = False
        self.paused = False
        self.inbox: deque[Any] = deque()  # arrived while reading was paused

    # ---- asyncio.Transport
    def write(self, data: Any) -> None:
        if not self.closing and data:
            self.link.net.transmit(self, bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.link.net.transmit(self, _EOF)
            self.link.net.loop.call_soon(self._lose, None, context=self.owner.context)

    def abort(self) -> None:
        if not self.closing:
            self.closing = True
            self.link.net.transmit(self, ConnectionResetError("connection reset by peer"))
            self.link.net.loop.call_soon(self._lose, None, context=self.owner.context)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer.address if self.peer is not None else default
        if name == "sockname":
            return self.address
        return default

    def get_write_buffer_size(self) -> int:
        return sum(len(c) for c in self.out.held if isinstance(c, bytes))

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            self.link.net.loop.call_soon(self._drain_inbox, context=self.owner.context)

    def is_reading(self) -> bool:
        return not self.paused

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    # ---- arrivals
    def receive(self, item: Any) -> None:
        if self.lost or not self.owner.alive:
            return
        self.inbox.append(item)
        self._drain_inbox()

    def _drain_inbox(self) -> None:
        while self.inbox and not self.paused and not self.lost:
            item = self.inbox.popleft()
            if item is _EOF:
                self.closing = True
                self.protocol.eof_received()
                self._lose(None)
            elif isinstance(item, BaseException):
                self.closing = True
                self._lose(item)
            else:
                self.protocol.data_received(item)

    def _lose(self, exc: BaseException | None) -> None:
        if not self.lost:
            self.lost = True
            self.closing = True
            self.inbox.clear()
            if self.owner.alive:
                self.protocol.connection_lost(exc)


class Link:
    """One connection: ``a`` dialed ``b``."""

    def __init__(self, net: SimNetwork, serial: int) -> None:
        self.net = net
        self.serial = serial
        self.a: _End
        self.b: _End
        self.broken = False  # reset or one side powered off: nothing more arrives

    def ends(self) -> tuple[_End, _End]:
        return self.a, self.b


class _Listener:
    """What ``asyncio.start_server`` returns, for an address of the simulated network."""

    def __init__(self, net: SimNetwork, owner: Process, factory: Any, address: tuple[str, int]) -> None:
        self.net, self.owner, self.factory, self.address = net, owner, factory, address
        self.serving = True
        self.sockets: tuple[Any, ...] = ()

    def close(self) -> None:
        if self.serving:
            self.serving = False
            if self.net.listeners.get(self.address) is self:
                del self.net.listeners[self.address]

    def is_serving(self) -> bool:
        return self.serving

    async def wait_closed(self) -> None:
        return None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self.net.loop


class SimNetwork:
    """The network of one simulation (module docstring). ``delay`` gives a one-way latency in seconds."""

    def __init__(self, rng: random.Random, *, min_delay: float = 0.0002, max_delay: float = 0.003) -> None:
        self.rng = rng
        self.loop: Any = None  # set by the SimLoop's owner
        self.min_delay, self.max_delay = min_delay, max_delay
        self.listeners: dict[tuple[str, int], _Listener] = {}
        self.links: dict[int, Link] = {}  # open links, in creation order
        self.groups: dict[str, int] | None = None  # partition: machine -> group (None: fully connected)
        self.silent: dict[str, list[_End]] = {}  # powered-off machine -> peer ends that will hear a RST
        self._serials = itertools.count(1)
        self._ports = itertools.count(40000)
        self._healed: asyncio.Future[None] | None = None
        self.machine_of: dict[str, str] = {}  # host -> machine name (for addresses of listeners)

    # ---- paths
    def delay(self) -> float:
        return self.rng.uniform(self.min_delay, self.max_delay)

    def cut(self, m1: str, m2: str) -> bool:
        g = self.groups
        return g is not None and g.get(m1, -1) != g.get(m2, -1) and m1 in g and m2 in g

    # ---- asyncio's entry points (SimLoop)
    def listen(self, factory: Any, host: Any, port: int | None) -> _Listener:
        owner = OWNER.get()
        if owner is None:
            raise RuntimeError("only a simulated process listens")
        address = (str(host), int(port or 0))
        if address in self.listeners:
            raise OSError(98, f"address already in use: {address[0]}:{address[1]}")
        listener = self.listeners[address] = _Listener(self, owner, factory, address)
        return listener

    async def connect(self, factory: Any, host: str | None, port: int | None) -> tuple[_End, Any]:
        owner = OWNER.get()
        if owner is None:
            raise RuntimeError("only a simulated process connects")
        address = (str(host), int(port or 0))
        await asyncio.sleep(self.delay())  # SYN
        while True:
            listener = self.listeners.get(address)
            target = listener.owner.machine if listener is not None else self.machine_of.get(address[0], "")
            if not self.cut(owner.machine, target):
                break
            if self._healed is None or self._healed.done():
                self._healed = self.loop.create_future()
            await asyncio.shield(self._healed)  # the SYN is lost until the partition heals
        await asyncio.sleep(self.delay())  # SYN-ACK
        listener = self.listeners.get(address)
        if listener is None or not listener.owner.alive:
            raise ConnectionRefusedError(111, f"connection refused: {address[0]}:{address[1]}")
        link = Link(self, next(self._serials))
        link.a = a = _End(link, owner, (owner.machine, next(self._ports)))
        link.b = b = _End(link, listener.owner, address)
        a.peer, b.peer = b, a
        a.out.last = b.out.last = self.loop.time()
        self.links[link.serial] = link
        a.protocol = factory()
        b.protocol = listener.owner.context.run(listener.factory)
        a.protocol.connection_made(a)
        self.loop.call_soon(b.protocol.connection_made, b, context=listener.owner.context)
        return a, a.protocol

    # ---- carrying data
    def transmit(self, end: _End, item: Any) -> None:
        link, direction = end.link, end.out
        if link.broken or self.loop.is_closed():  # after the run: a coroutine's finally block closing its stream
            return
        # Strictly after the previous chunk of this direction: asyncio's timer heap does not keep ties in order.
        arrival = max(direction.last + 1e-6, self.loop.time() + self.delay())
        direction.last = arrival
        self.loop.call_at(arrival, self._arrive, end, item, context=_WIRE)  # not held if the sender is paused

    def _arrive(self, end: _End, item: Any) -> None:
        link = end.link
        if link.broken:
            return
        if self.cut(end.owner.machine, end.peer.owner.machine) or end.out.held:
            end.out.held.append(item)
            return
        peer = end.peer
        peer.owner.context.run(peer.receive, item)
        if isinstance(item, BaseException) or item is _EOF:
            if end.lost and peer.lost:
                self.links.pop(link.serial, None)

    # ---- faults
    def reset(self, link: Link) -> None:
        """Break ``link`` (a RST): both ends learn it after a delay; what was in flight is lost."""
        if link.broken:
            return
        link.broken = True
        self.links.pop(link.serial, None)
        for end in link.ends():
            end.out.held.clear()
            self.loop.call_later(self.delay(), self._reset_end, end, context=_WIRE)

    def _reset_end(self, end: _End) -> None:
        end.owner.context.run(end._lose, ConnectionResetError("connection reset by peer"))

    def partition(self, groups: list[list[str]]) -> None:
        """Machines in different groups cannot reach each other (a machine in no group reaches everyone)."""
        self.groups = {m: k for k, group in enumerate(groups) for m in group}

    def open_links(self) -> list[Link]:
        """Links whose both ends are open (what a reset may break); links with both ends gone are forgotten."""
        for serial in [k for k, link in self.links.items() if link.broken or (link.a.lost and link.b.lost)]:
            del self.links[serial]
        return [link for link in self.links.values() if not (link.a.lost or link.b.lost)]

    def heal(self) -> None:
        """Every machine reaches every other again; what the partition held arrives, in order."""
        self.groups = None
        if self._healed is not None and not self._healed.done():
            self._healed.set_result(None)
        for link in list(self.links.values()):
            for end in link.ends():
                held, end.out.held = end.out.held, []
                for item in held:  # now, ahead of anything still in flight on that direction (FIFO)
                    self._arrive(end, item)

    def power_off(self, machine: str) -> None:
        """``machine`` lost power: its ends and listeners are gone; its peers hear nothing until `power_on`. What it
        sent before is still on the wire and arrives (a packet does not need its sender alive)."""
        for address, listener in list(self.listeners.items()):
            if listener.owner.machine == machine:
                listener.close()
        silent = self.silent.setdefault(machine, [])
        for link in list(self.links.values()):
            mine = [e for e in link.ends() if e.owner.machine == machine]
            if not mine:
                continue
            for end in mine:  # the link stays listed: its RST (power_on) may have to wait for a partition to heal
                end.lost = end.closing = True
                end.out.held.clear()  # held back by a partition: only the dead sender would have retransmitted it
                if end.peer.owner.machine != machine:
                    silent.append(end)

    def power_on(self, machine: str) -> None:
        """``machine`` is back: every peer end still open gets a RST, after what was in flight from the dead end."""
        for dead in self.silent.pop(machine, []):
            if not dead.peer.lost and not dead.link.broken:
                self.transmit(dead, ConnectionResetError("connection reset by peer (the machine restarted)"))
