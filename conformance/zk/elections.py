"""The election notifications of a ZooKeeper recording, as spec/FastLeaderElection.tla's notifications.

Theory of operation
-------------------
Every election connection crosses the proxy, so every notification one server's QuorumCnxManager put on the wire
to another is in the recording (`conformance.zk.wire` decodes it: state, leader, zxid, electionEpoch, peerEpoch).
`elections` keeps them in the proxy's order, numbered ``g`` from 1, each as the spec's notification ``[state,
leader, zxid <<epoch, counter>>, electionEpoch, peerEpoch]`` with where it lies in the recording. The INITIAL
message of a connection (protocol version, sid, address) is QuorumCnxManager's, not the election's: left out.
What the proxy read after the run's end (`conformance.zk.observe`'s ``end_ns``: the harness killing the servers,
whose survivors then look for a leader) is left out and counted. So is a notification that crossed the proxy after
its receiver had closed that connection (the receiver's end of file came first, `unread`): no one read it, and to
the validation it is one its sender lost, as QuorumCnxManager's SendWorker loses what it writes on a dead socket.
Seen at a mixed run's start, 2026-12-03: ZooKeeper server 3 closed its dial to the zabref server (the two had dialed
each other at once) a millisecond before zabref wrote its two round-1 votes on it, and resent its own vote 200 ms
later, having heard nothing; with those two votes counted as read the guided search could not make that resend. Both
implementations close an election socket whole (never only its writing half), so an end of file from the receiver
means it reads no more. A notification in the old 28-byte format has no peerEpoch; ZooKeeper then takes the epoch of
its zxid, and so does this.

**A whole run's elections.** FastLeaderElection.tla takes each server's zxid and epoch as constants (what it read
from disk when it started looking); between two elections Zab changes them. Every notification before the run's end
is kept, from the first election (an empty ensemble: every server votes with zxid <<0, 0>> and epoch 0) to the last;
`conformance.validate.flecheck` lets a server's data change where Zab could have changed it (while it is decided, or
while it is down) and to a value some notification of the run carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from conformance.zk.observe import Observation, observe_dir_decoded, zxid_pair
from conformance.zk.recording import Kind
from conformance.zk.wire import Decoded

__all__ = ["Elections", "Notice", "elections", "elections_dir", "elections_observed"]


@dataclass(frozen=True)
class Notice:
    """One notification on the wire."""

    g: int  # 1-based, in the proxy's order
    sender: int
    receiver: int
    state: str
    leader: int
    zxid: list[int]
    round: int  # electionEpoch: the sender's logicalclock
    peer_epoch: int
    conn: int
    direction: str
    offset: int
    t_ns: int

    def where(self, path: str = "") -> str:
        return (f"{path + ': ' if path else ''}connection {self.conn} {self.direction} ({self.sender} to "
                f"{self.receiver}), byte {self.offset}")

    def describe(self) -> str:
        return (f"{self.state} vote (leader {self.leader}, zxid <<{self.zxid[0]}, {self.zxid[1]}>>, peerEpoch "
                f"{self.peer_epoch}) of round {self.round}")


@dataclass
class Elections:
    recording: str
    servers: int
    notices: list[Notice]
    after_end: int  # notifications read after the run's end, left out
    end_ns: int | None
    unread: int = 0  # notifications that crossed after their receiver closed the connection, left out

    @property
    def rounds(self) -> int:
        """The greatest round (electionEpoch) of a notification kept."""
        return max((n.round for n in self.notices), default=1)


def elections(decoded: Decoded, servers: int, end_ns: int | None, recording: str = "") -> Elections:
    """The notifications of ``decoded`` before ``end_ns`` (module docstring)."""
    out: list[Notice] = []
    after = unread = 0
    closed = _receivers_closed(decoded)
    for m in decoded.messages:
        if m.kind != "election" or m.name != "NOTIFICATION" or m.sender is None or m.receiver is None:
            continue
        if end_ns is not None and m.t_ns >= end_ns:
            after += 1
            continue
        if closed.get((m.conn, m.direction), m.t_ns) < m.t_ns:
            unread += 1
            continue
        f = m.fields
        zxid = zxid_pair(int(m.zxid or 0))
        out.append(Notice(len(out) + 1, m.sender, m.receiver, f["state"], int(f["leader"]), zxid,
                          int(f["electionEpoch"]), int(f.get("peerEpoch", zxid[0])), m.conn, m.direction, m.offset,
                          m.t_ns))
    return Elections(recording, servers, out, after, end_ns, unread)


def _receivers_closed(decoded: Decoded) -> dict[tuple[int, str], int]:
    """(connection, direction) -> when the receiving side of that direction closed the connection: the dialer's end
    of file (EOF_C2S) for what the acceptor writes (s2c), the acceptor's (EOF_S2C) for what the dialer writes."""
    out: dict[tuple[int, str], int] = {}
    for r in decoded.recording.records:
        if r.kind == Kind.EOF_C2S:
            out.setdefault((r.conn, "s2c"), r.t_ns)
        elif r.kind == Kind.EOF_S2C:
            out.setdefault((r.conn, "c2s"), r.t_ns)
    return out


def elections_observed(decoded: Decoded, observation: Observation) -> Elections:
    """The notifications of a recording `conformance.zk.observe.observe_dir_decoded` decoded and observed."""
    return elections(decoded, observation.servers, observation.end_ns, observation.recording)


def elections_dir(folder: str | Path) -> Elections:
    """``folder``'s recording (as `conformance.zk.observe.observe_dir` finds it) and its notifications."""
    return elections_observed(*observe_dir_decoded(folder))
