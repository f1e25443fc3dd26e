"""Failover under load: kill -9 the leader, time until a new leader serves and until a write issued after the kill
commits.

Theory of operation
-------------------
For each trial: find the leader L and a surviving server F; start the background load (`run_load`: 16 writers on
F, retrying after failures); once writes commit, after ``warmup`` more seconds, SIGKILL L (time t0, taken when the
kill returns: the process is gone) and at once start a probe (one more writer on F, also retrying). Then measure, on
`time.monotonic`:

* ``leader_s``: until a surviving server serves as leader -- ZooKeeper: its ``srvr`` answers ``Mode: leader``
  (ZooKeeper answers ``srvr`` only once the server runs, i.e. after synchronization with a quorum); zabref: a
  survivor answers ``sync`` on its client port (the leader once a quorum confirmed it, in BROADCAST; a follower
  once its established leader's SYNC came back), polled every 10 ms;
* ``first_write_s``: until the first write *issued after t0* (by any writer) is answered as committed.

Then L is restarted, the load stopped, and the next trial waits until all servers serve again. The restart goes
through the system's own start function, so the data dir (and what was fsynced) survives as in a real crash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from conformance.bench import BenchError
from conformance.bench.workload import Attempt

__all__ = ["FailoverResult", "run_trial", "first_commit_after"]


@dataclass(frozen=True, slots=True)
class FailoverResult:
    system: str
    trial: int
    killed: int
    probe_server: int
    leader_s: float
    first_write_s: float
    new_leader: int | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def first_commit_after(attempts: list[Attempt], t0: float) -> float | None:
    """The earliest completion of a successful attempt issued at or after ``t0``, as seconds after ``t0``."""
    done = [t_done for t_issue, t_done, ok in attempts if ok and t_issue >= t0]
    return min(done) - t0 if done else None


def run_trial(system: str, trial: int, adapter: Any, leader: int, survivor: int, kill: Callable[[], None],
              serving_leader: Callable[[], tuple[int | None, float] | None], *, warmup: float = 2.0,
              timeout: float = 60.0, in_flight: int = 16) -> FailoverResult:
    """One kill of ``leader`` with load on ``survivor``.

    ``serving_leader()`` returns None, or (the surviving leader's id, the monotonic time it was seen serving).
    """
    stop = threading.Event()
    attempts: list[Attempt] = []
    probe: list[Attempt] = []
    load = threading.Thread(target=adapter.run_load, args=(survivor, in_flight, stop, attempts), daemon=True)
    load.start()
    started = time.monotonic()  # a server restarted by the previous trial may take a while to serve (JIT, session)
    while not any(ok for _, _, ok in attempts):
        if time.monotonic() - started > timeout:
            stop.set()
            raise BenchError(f"{system}: no write committed on server {survivor} within {timeout} s before the kill")
        time.sleep(0.05)
    time.sleep(warmup)
    kill()
    t0 = time.monotonic()
    probe_stop = threading.Event()
    prober = threading.Thread(target=adapter.run_load, args=(survivor, 1, probe_stop, probe), daemon=True)
    prober.start()
    leader_s = None
    new_leader = None
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if leader_s is None:
            seen = serving_leader()
            if seen is not None:
                new_leader, leader_s = seen[0], seen[1] - t0
        first = first_commit_after(attempts + probe, t0)
        if leader_s is not None and first is not None:
            break
        time.sleep(0.01)
    probe_stop.set()
    stop.set()
    prober.join(30)
    load.join(30)
    first = first_commit_after(attempts + probe, t0)
    if leader_s is None or first is None:
        raise BenchError(f"{system}: after killing leader {leader}, no new leader and committed write within "
                         f"{timeout} s (leader after {leader_s} s, first write after {first} s)")
    return FailoverResult(system, trial, leader, survivor, round(leader_s, 3), round(first, 3), new_leader)
