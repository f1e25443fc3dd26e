"""A deterministic asyncio event loop: virtual time, no I/O, every task owned by one simulated process.

Theory of operation
-------------------
`SimLoop` is asyncio's own `BaseEventLoop` -- the same ready queue, the same timer heap, the same task stepping --
with two things replaced:

* **time**: ``time()`` is a number the loop keeps. When nothing is ready, asyncio asks its selector to wait until
  the next timer; the `_VirtualSelector` does not wait, it moves the clock to that timer. So a run of minutes of
  virtual time takes what its callbacks take, and timeouts, ticks and backoffs happen at the same virtual times in
  every run. A loop with nothing ready and no timer is stuck: `Stuck` (a real loop would sleep forever);
* **the network**: ``create_connection`` and ``create_server`` -- what ``asyncio.open_connection`` and
  ``asyncio.start_server`` call -- go to an in-memory network (`conformance.sim.net.SimNetwork`).

Ownership. Every task belongs to the simulated process that created it: `OWNER` (a context variable) names the
`Process`; a task copies its creator's context, so everything a server's ``run()`` spawns -- pump, ticker, dialers,
election senders, client handlers -- is that server's. A power cut (`Process.kill`) cancels exactly those tasks, in
the order they were created.

Pauses. `SimLoop.pause` stops a process the way SIGSTOP does: its callbacks and timers that come due are held back
(`Process.held`, in the order they came due) by the loop's ready queue, `_ReadyQueue`, while what others send it still
arrives in its buffers; `SimLoop.resume` (SIGCONT) puts them back in that order, so, as with asyncio after a real
SIGCONT, a task woken by data that arrived during the pause runs before a task whose timer fired meanwhile (a fired
timer only schedules its task's wake-up, behind the ones already queued).

Nothing in asyncio's scheduling depends on anything but the order of calls: callbacks run first in first out, timers
by due time (ties in an order fixed by the sequence of pushes and pops -- deterministic, but not first in first out:
whoever needs an order gives its timers distinct times, as `conformance.sim.net` does), and this loop has no threads,
signals or selector. The executor of
``run_in_executor`` is whatever the caller passes (`conformance.sim.cluster` passes one that runs inline).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
from typing import Any

__all__ = ["SimLoop", "Process", "OWNER", "Stuck"]

#: The simulated process the running code belongs to (None: the simulator itself).
OWNER: contextvars.ContextVar[Process | None] = contextvars.ContextVar("zabref_sim_owner", default=None)


class Stuck(RuntimeError):
    """Nothing is ready and no timer is set: the simulated world would wait forever."""


class Process:
    """One incarnation of a simulated process on ``machine`` (a name: ``"s1"``, ``"client"``)."""

    def __init__(self, machine: str) -> None:
        self.machine = machine
        self.alive = True
        self.paused = False
        self.held: list[asyncio.Handle] = []  # its callbacks that came due while it was paused, in that order
        self.tasks: dict[asyncio.Task[Any], None] = {}
        self.context = contextvars.copy_context()
        self.context.run(OWNER.set, self)

    def spawn(self, loop: asyncio.AbstractEventLoop, coro: Any, name: str) -> asyncio.Task[Any]:
        """Start ``coro`` as a task of this process."""
        return loop.create_task(coro, name=name, context=self.context)

    def kill(self) -> None:
        """The process ends at once: its tasks are cancelled in creation order (the network forgets it apart)."""
        self.alive = False
        for task in list(self.tasks):
            task.cancel()


class _VirtualSelector:
    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Stuck(f"nothing to run and no timer at virtual time {self.loop.now:.6f}")
        if timeout > 0:
            self.loop.now += timeout
        return []

    def close(self) -> None:
        pass


class _ReadyQueue(collections.deque):  # type: ignore[type-arg]
    """asyncio's ready queue, except that a callback of a paused process is held back in its `Process.held`: in its
    place ``popleft`` returns a cancelled stand-in, which asyncio's ``_run_once`` skips."""

    def __init__(self, stand_in: asyncio.Handle) -> None:
        super().__init__()
        self.stand_in = stand_in

    def popleft(self) -> asyncio.Handle:
        handle = super().popleft()
        context = handle._context  # noqa: SLF001 (asyncio keeps each callback's context here)
        owner = context.get(OWNER) if context is not None else None
        if owner is not None and owner.paused:
            owner.held.append(handle)
            return self.stand_in
        return handle


class SimLoop(asyncio.BaseEventLoop):
    """asyncio's loop on virtual time, over ``network`` (module docstring)."""

    def __init__(self, network: Any = None, start: float = 0.0) -> None:
        super().__init__()
        self.now = start
        self.network = network
        self._selector = _VirtualSelector(self)
        self._clock_resolution = 1e-9
        stand_in = asyncio.Handle(lambda: None, (), self)
        stand_in.cancel()
        self._ready = _ReadyQueue(stand_in)

    def pause(self, process: Process) -> None:
        """SIGSTOP: from now on nothing of ``process`` runs (module docstring)."""
        process.paused = True

    def resume(self, process: Process) -> None:
        """SIGCONT: what came due during the pause runs, in the order it came due."""
        process.paused = False
        held, process.held = process.held, []
        self._ready.extend(held)

    def time(self) -> float:
        return self.now

    def create_task(self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None) -> Any:
        task = super().create_task(coro, name=name, context=context)
        owner = OWNER.get() if context is None else context.get(OWNER)
        if owner is not None:
            owner.tasks[task] = None
            task.add_done_callback(lambda t, o=owner: o.tasks.pop(t, None))
        return task

    async def create_connection(self, protocol_factory: Any, host: str | None = None, port: int | None = None,
                                **_: Any) -> tuple[Any, Any]:
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(self, protocol_factory: Any, host: Any = None, port: int | None = None,
                            **_: Any) -> Any:
        return self.network.listen(protocol_factory, host, port)

    # BaseEventLoop's hooks for a selector and a self-pipe: there is neither.
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass

    def add_signal_handler(self, sig: int, callback: Any, *args: Any) -> None:
        raise RuntimeError("a simulated process has no signals (zabref.runtime.machine.Machine(signals=False))")
