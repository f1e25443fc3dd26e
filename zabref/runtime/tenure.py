"""The garbage collector in a server process: what survives a full collection is tenured (``gc.freeze``).

Why. CPython's full collection walks every object its collector tracks, and a server keeps most of its objects for
good: the history, and ZooKeeper's data tree (twice at a leader: `zabref.core.zktree`'s tree of delivered
transactions and the proposal tree), several tracked objects a transaction. So each full collection took longer as
the tree grew: on a 3-server bench cluster (docs/performance.md, "Tenured objects, and trees kept current"), 0.05 s
at 230,000 objects and 0.48 s at 1.75 million, 4.1 s of one leader's time in those of over 50 ms while it took
300,000 writes, and the event loop stands still meanwhile: a ZooKeeper client that hears nothing for two thirds of
its session timeout drops the connection, and the bench's ZkLoad did (ConnectionLoss, its session expired).

What this does. After every full collection (`gc.callbacks`), the survivors move to the permanent generation, which no
collection walks again; the young generations are collected as before, and a later full collection walks only what
survived since the last. Tenured objects that lose their last reference are still freed at once (reference counts
are untouched); what is kept is a garbage *cycle* that reaches a tenured object, until `Tenuring.release` -- which
`zabref.runtime.server.run_server` calls at a reset (the old incarnation's objects go before the new one starts)
and a process's end frees anyway. The servers' resident memory stayed where it was in the measurement above.

The collector is the process's, so only the process's main installs this (`run_server`); a server run in another
process -- the simulator, the tests -- leaves the collector alone.
"""

from __future__ import annotations

import gc
import time
from typing import Any

__all__ = ["Tenuring", "TENURING"]


class Tenuring:
    """Tenure the survivors of every full collection while installed; `report` says what it did."""

    def __init__(self) -> None:
        self.full_collections = 0  # full collections seen while installed, each followed by a freeze
        self.longest = 0.0  # the longest collection seen while installed, in seconds
        self._started = 0.0

    @property
    def installed(self) -> bool:
        return self._callback in gc.callbacks

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)

    def remove(self) -> None:
        """Stop tenuring; what is tenured stays so (`release` returns it to the collector)."""
        while self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def release(self) -> None:
        """Return every tenured object to the collector and collect it all once (a reset's fresh start); while
        installed, the survivors of that collection are tenured again."""
        gc.unfreeze()
        gc.collect()

    def report(self) -> dict[str, Any]:
        """For the control socket's ``ping``: whether it is installed, the objects tenured now, the full collections
        seen, and the longest collection in ms."""
        return {"tenuring": self.installed, "tenured": gc.get_freeze_count(),
                "full_collections": self.full_collections, "longest_collection_ms": round(self.longest * 1000, 3)}

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.longest = max(self.longest, time.perf_counter() - self._started)
        if info["generation"] == 2:
            self.full_collections += 1
            gc.freeze()


#: The process's one: `run_server` installs it, the control socket's ``ping`` reports it.
TENURING = Tenuring()
