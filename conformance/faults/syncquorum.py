"""ZOOKEEPER-1675 ("Make sync a quorum operation", open in every version) recognised in a fault run's stale reads.

Theory of operation
-------------------
A ZooKeeper leader answers a client's sync from its own state, asking no quorum, and a follower forwards its
clients' syncs to its leader. So a leader deposed a moment ago (paused, or cut off, while a newer epoch formed and
committed) answers a sync, or its follower's, with none of the newer epoch's writes: the history check's stale read of
the usual form, a write acknowledged before the sync was sent and missing from what the read saw
(`conformance.faults.history`, ``Verdict.missed``). Such a read is put down to ZOOKEEPER-1675 only when, seen from
outside, all of this holds:

* the server that answered is a ZooKeeper server: a zabref leader asks a quorum before it answers a sync
  (spec/README.md, "Reads"), so a stale read there is zabref's own bug and is never named here;
* what the read saw is of an older epoch than the missed write (its last zxid's epoch is lower);
* by the time the read was answered, no NEWLEADER of the write's epoch or a newer one had crossed the proxy to or
  from that server (the recording's quorum packets; the proxy's ``t_ns`` and the readers' times are both the
  machine's monotonic clock): the server still served in an older epoch, whose leader answered the sync.

Anything else stays unexplained: a stale read at a server that had joined the newer epoch is another bug. The rule
leans that way when the times are close (a NEWLEADER forwarded just before the answer, not yet taken, counts as
joined), so it may leave a 1675 read unexplained but does not name one that is not.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from conformance.faults.history import Read
from conformance.zk.wire import Decoded

__all__ = ["JIRA", "SyncAnswer", "explain", "joined_epochs"]

JIRA = "ZOOKEEPER-1675"


@dataclass(frozen=True)
class SyncAnswer:
    """A stale read put down to ZOOKEEPER-1675: ``read`` missed the write of ``zxid``; its server had joined no
    epoch newer than ``joined`` when it answered."""

    read: Read
    zxid: int
    joined: int

    def line(self) -> str:
        r = self.read
        return (f"{JIRA}: reader {r.reader}'s sync+read at server {r.server} saw up to {r.end:#x}, missing "
                f"{self.zxid:#x}: server {r.server} had joined epoch {self.joined} at most, epoch "
                f"{self.zxid >> 32} had committed")


def joined_epochs(decoded: Decoded) -> dict[int, tuple[list[int], list[int]]]:
    """Per server, the times (ns) at which it first sent or was sent a NEWLEADER of a newer epoch, and the running
    greatest epoch from each: a server led or followed in epoch e from the first NEWLEADER of e on its links."""
    seen: dict[int, list[tuple[int, int]]] = {}
    for m in decoded.messages:
        if m.kind != "quorum" or m.name != "NEWLEADER" or m.zxid is None:
            continue
        for sid in (m.sender, m.receiver):
            if sid is not None:
                seen.setdefault(sid, []).append((m.t_ns, m.zxid >> 32))
    out: dict[int, tuple[list[int], list[int]]] = {}
    for sid, events in seen.items():
        times: list[int] = []
        epochs: list[int] = []
        for t, e in sorted(events):
            if not epochs or e > epochs[-1]:
                times.append(t)
                epochs.append(e)
        out[sid] = (times, epochs)
    return out


def _joined_by(joined: dict[int, tuple[list[int], list[int]]], sid: int, t_ns: int) -> int:
    times, epochs = joined.get(sid, ([], []))
    k = bisect.bisect_right(times, t_ns)
    return epochs[k - 1] if k else 0


def explain(missed: Iterable[tuple[Read, int]], decoded: Decoded, zabref: Collection[int]) -> list[SyncAnswer]:
    """The reads of ``missed`` (a read, the zxid of the write it missed) that ZOOKEEPER-1675 explains, in order;
    ``zabref`` are the ids of the run's zabref servers."""
    joined = joined_epochs(decoded)
    out = []
    for read, zxid in missed:
        epoch = zxid >> 32
        if read.server in zabref or read.end >> 32 >= epoch:
            continue
        at = _joined_by(joined, read.server, int(read.completed * 1e9))
        if at < epoch:
            out.append(SyncAnswer(read, zxid, at))
    return out
