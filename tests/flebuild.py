"""Hand-built election notifications for the tests of the validation of ZooKeeper runs' elections against
spec/FastLeaderElection.tla (conformance/validate/flecheck.py): rows of (sender, receiver, state, leader, round, ms
[, zxid, peerEpoch[, connection]]) as a recording's notifications."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

#: The notifications of a healthy 3.8.0 start (recorded 2026-11-27, `zabref zk run --writes 3`): server 2 up first,
#: then 3, then 1. 2 voted for itself, then for 3, before 1 was up: QuorumCnxManager kept only the newer for 1, so
#: 2 -> 1 starts with "leader 3" (notification 5).
START = [(2, 3, "LOOKING", 2), (3, 2, "LOOKING", 3), (2, 3, "LOOKING", 3), (3, 1, "LOOKING", 3),
         (2, 1, "LOOKING", 3), (1, 3, "LOOKING", 1), (1, 3, "LOOKING", 3), (1, 2, "LOOKING", 1),
         (1, 2, "LOOKING", 3), (3, 1, "LEADING", 3), (3, 1, "LEADING", 3), (2, 1, "FOLLOWING", 3)]


STATES = {"L": "LOOKING", "F": "FOLLOWING", "E": "LEADING"}


def spaced(rows):
    """Rows (sender, receiver, state, leader[, round]) as `timed`'s rows, 300 ms apart: longer than a finalize
    wait."""
    return [(s, r, state, leader, rnd[0] if rnd else 1, 300 * g)
            for g, (s, r, state, leader, *rnd) in enumerate(rows, 1)]


def timed(rows, servers: int, change: dict | None = None):
    """Rows (sender, receiver, state, leader, round, ms[, zxid, peerEpoch[, connection]]) as a recording's
    notifications; with no connection, each notification is on a connection of its own."""
    from conformance.zk.elections import Elections, Notice

    notices = []
    for g, (s, r, state, leader, rnd, ms, *data) in enumerate(rows, 1):
        zxid, pe, conn = (*data, 10 + g)[:3] if data else ([0, 0], 0, 10 + g)
        n = Notice(g, s, r, STATES.get(state, state), leader, zxid, rnd, pe, conn, "c2s", 4 * g, ms * 1_000_000)
        notices.append(dataclasses.replace(n, **(change or {}).get(g, {})))
    return Elections("timed.zkrec", servers, notices, 0, None)


def one_connection_a_pair(rows):
    """`timed`'s rows on one connection for each pair of servers, as a run with no reconnection: only the first
    notification each server puts on it is one a starting SendWorker may send again (VFle's ResendLast)."""
    return [(*row[:6], *(row[6:8] or ([0, 0], 0)), 100 * min(row[0], row[1]) + max(row[0], row[1]))
            for row in rows]


#: The 333 election notifications of a paced 60 s fault run on 3.9.5 (18 rounds: pauses, cuts, isolations and kills
#: of the leader and of other servers), as `timed`'s rows with the proxy's connections.
FAULT_395 = Path(__file__).parent / "fixtures" / "zk" / "fault-395-elections.json"


def fixture_elections(path: Path):
    """A fixture's notifications (`FAULT_395`'s form) as a recording's."""
    data = json.loads(path.read_text())
    return timed([tuple(row) for row in data["notifications"]], data["servers"])



def needs_widening(path: Path, widening: str, *, budget: int, work: Path, monkeypatch):
    """A fixture's notifications are a behaviour of VFle, every window found by a guided search; returns the check of
    the same notifications without ``widening``, its searches cut at ``budget`` distinct states (for the caller to
    assert where the guided searches stopped: an INCONCLUSIVE verdict, never a departure)."""
    from conformance.validate import flecheck
    from conformance.validate.flemodule import WIDENINGS

    r = flecheck.validate_elections(fixture_elections(path), work=work)
    assert r.matched and r.guided, r.failure
    monkeypatch.setattr(flecheck, "BUDGET", budget)
    return flecheck.validate_elections(fixture_elections(path), work=work,
                                       widenings=tuple(w for w in WIDENINGS if w != widening))
