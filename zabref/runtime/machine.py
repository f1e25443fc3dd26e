"""What a server runs on, besides its event loop: a disk, a source of connection ids, a clock for durations, a worker
for slow fsyncs, and the process's signals.

Theory of operation
-------------------
`zabref.runtime.server.Server` makes no decision about where it runs; everything it takes from its surroundings comes
through two objects, and nothing else:

* the running asyncio **event loop** -- the network (``asyncio.open_connection`` and `zabref.net.listener` call the
  loop's ``create_connection`` / ``create_server``, and on a TLS port its ``sock_accept`` and
  ``connect_accepted_socket``) and time (``loop.time()``, ``asyncio.sleep``, timeouts). A real server runs on uvloop
  (asyncio's own loop where uvloop is not installed: `zabref.runtime.server.run_server`); the simulator
  (`conformance.sim`) runs every server of a cluster on ONE loop with a virtual clock and an in-memory network
  (`conformance.sim.loop`), which has no TLS;
* a `Machine` -- what the loop does not carry: the `Disk` its storage lives on, the random connection ids of its
  handshakes (`new_connection_id`), the clock that times a sync (the runtime syncs in the loop's thread while
  syncs are quick and moves them to `executor` once one was slow), that executor, and whether SIGTERM/SIGINT stop
  the server.

`Machine()` is a real process: the disk `zabref.storage.disk_from_env` names, ids from `secrets`,
`time.perf_counter`, one worker thread, signal handlers. The simulator passes a machine whose disk is a
`zabref.storage.SimDisk`, whose ids come from the run's seeded random source, whose clock is virtual and whose
executor completes a sync after the simulated disk's latency. The runtime has no branch on which it got.
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor

from zabref.storage import Disk, disk_from_env

__all__ = ["Machine"]


class Machine:
    """A real process's surroundings (module docstring); every argument overrides one of them."""

    def __init__(self, disk: Disk | None = None, *, connection_ids: Callable[[], int] | None = None,
                 clock: Callable[[], float] = time.perf_counter, executor: Executor | None = None,
                 signals: bool = True) -> None:
        self.disk = disk_from_env() if disk is None else disk
        self._ids = connection_ids or (lambda: secrets.randbits(63))
        self.clock = clock
        self.executor = executor
        self.signals = signals

    def new_connection_id(self) -> int:
        """A non-negative int64: a quorum connection's id (`zabref.net.wire.with_connection_id`)."""
        return self._ids()

    def worker(self, name: str) -> Executor:
        """The executor slow syncs run in (a real machine: one thread, started at the first use)."""
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        return self.executor

    def install_signals(self, loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
        """SIGTERM and SIGINT call ``stop`` (a real process; a simulated one has no signals)."""
        if self.signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop)
