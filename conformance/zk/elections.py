"""The election notifications of a ZooKeeper recording, as spec/FastLeaderElection.tla's notifications.

Theory of operation
-------------------
Every election connection crosses the proxy, so every notification one server's QuorumCnxManager put on the wire
to another is in the recording (`conformance.zk.wire` decodes it: state, leader, zxid, electionEpoch, peerEpoch).
`elections` keeps them in the proxy's order, numbered ``g`` from 1, each as the spec's notification ``[state,
leader, zxid <<epoch, counter>>, electionEpoch, peerEpoch]`` with where it lies in the recording. The INITIAL
message of a connection (protocol version, sid, address) is QuorumCnxManager's, not the election's: left out.
What the proxy read after the run's end (`conformance.zk.observe`'s ``end_ns``: the harness killing the servers,
whose survivors then look for a leader) is left out and counted. A notification in the old 28-byte format has no
peerEpoch; ZooKeeper then takes the epoch of its zxid, and so does this.

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

    @property
    def rounds(self) -> int:
        """The greatest round (electionEpoch) of a notification kept."""
        return max((n.round for n in self.notices), default=1)


def elections(decoded: Decoded, servers: int, end_ns: int | None, recording: str = "") -> Elections:
    """The notifications of ``decoded`` before ``end_ns`` (module docstring)."""
    out: list[Notice] = []
    after = 0
    for m in decoded.messages:
        if m.kind != "election" or m.name != "NOTIFICATION" or m.sender is None or m.receiver is None:
            continue
        if end_ns is not None and m.t_ns >= end_ns:
            after += 1
            continue
        f = m.fields
        zxid = zxid_pair(int(m.zxid or 0))
        out.append(Notice(len(out) + 1, m.sender, m.receiver, f["state"], int(f["leader"]), zxid,
                          int(f["electionEpoch"]), int(f.get("peerEpoch", zxid[0])), m.conn, m.direction, m.offset,
                          m.t_ns))
    return Elections(recording, servers, out, after, end_ns)


def elections_observed(decoded: Decoded, observation: Observation) -> Elections:
    """The notifications of a recording `conformance.zk.observe.observe_dir_decoded` decoded and observed."""
    return elections(decoded, observation.servers, observation.end_ns, observation.recording)


def elections_dir(folder: str | Path) -> Elections:
    """``folder``'s recording (as `conformance.zk.observe.observe_dir` finds it) and its notifications."""
    return elections_observed(*observe_dir_decoded(folder))
