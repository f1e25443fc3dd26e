"""A sync no behaviour of spec/Zab.tla makes, read from the observation alone: its proposals are no run of a history.

Every history of the spec holds each epoch's counters 1, 2, ... in turn (the invariant ``HistoryContiguous``, which
TLC checks on every model and the simulator after every step), and every sync of the spec leaves its follower with
its leader's history (`SyncAgree` in conformance/validate/zkmodule.py): a DIFF or a TRUNC appends the leader's history
after a point, a SNAP gives the rest of it after the snapshot's. The proposals a sync carries are therefore
consecutive entries of one history: within an epoch each counter is one more than the one before, and an epoch that
begins after the first proposal begins at counter 1. A recorded sync that breaks this -- a ZooKeeper DIFF across a
hole in its leader's committedLog, ZOOKEEPER-4925 -- is made by no behaviour, from any state, so the window search
(conformance/validate/zkcheck.py) stops there instead of searching further back for one.

It reads only what the sync carries, not the follower's history before it: where the first proposal joins that
history is left to TLC.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.zk.observe import SYNC_GROUP, Observation

__all__ = ["Hole", "first_hole"]


@dataclass(frozen=True)
class Hole:
    """Observation ``g`` (1-based), a sync whose proposal ``after`` is followed by ``then``, not by ``expected``."""

    g: int
    after: tuple[int, int]
    then: tuple[int, int]
    expected: tuple[int, int]
    what = "a sync whose proposals skip a counter"
    #: why no behaviour makes it: wrong if TLC makes it
    premise = "HistoryContiguous and conformance/validate/synccheck.py"

    def why(self) -> str:
        a, t, x = (f"<<{z[0]}, {z[1]}>>" for z in (self.after, self.then, self.expected))
        return (f"its proposals are no run of a history: {t} follows {a}, and a history of the spec that holds "
                f"both holds {x} between them (HistoryContiguous: each epoch's counters 1, 2, ... in turn), so no "
                "behaviour makes it, from any state")


def first_hole(observation: Observation) -> Hole | None:
    """The first observed sync whose proposals skip a counter of their epoch, or enter an epoch past its first."""
    for o in observation.obs:
        if o.type != SYNC_GROUP or o.sync is None:
            continue
        zxids = [(t["zxid"][0], t["zxid"][1]) for t in o.sync["txns"]]
        for before, z in zip(zxids, zxids[1:]):
            expected = (before[0], before[1] + 1) if z[0] == before[0] else (z[0], 1)
            if z != expected:
                return Hole(o.g, before, z, expected)
    return None
