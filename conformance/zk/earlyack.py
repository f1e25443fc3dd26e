"""ZOOKEEPER-4685's order in a recording: a learner's ACK of a proposal before its ACK of NEWLEADER.

Theory of operation: the spec's follower sends nothing between the head of its synchronization (DIFF, TRUNC, SNAP)
and its ACK of NEWLEADER, so an ACK of any other zxid on that connection in between is a send no spec step makes.
ZooKeeper's follower sends one on the versions of `acks_before_newleader` (its SyncRequestProcessor logs and ACKs
the sync's proposals while the QuorumPeer thread is still on its way to the ACK of NEWLEADER). What a leader does
with it is the rest of the departure: ZooKeeper's LearnerHandler takes it for the ACK of NEWLEADER and may send
UPTODATE before the real one arrives; a zabref leader refuses it and closes the connection, which no spec step
explains either. The observation keeps such an ACK (`Observation.early_acks`; `ACK-SYNC` leaves out only the ACKs
after the ACK of NEWLEADER), and `name` says, for a validation's departure on or after one on the same connection,
what it is: ZooKeeper's known bug on the versions that have it, and on any other (or from a zabref seat) an order
no known bug explains.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.zk.observe import Observation
from conformance.zk.versions import acks_before_newleader

__all__ = ["JIRA", "EarlyAck", "first", "name"]

JIRA = "ZOOKEEPER-4685"


@dataclass(frozen=True)
class EarlyAck:
    """Observation ``g`` (1-based), the first early ACK of a recording: a send no behaviour makes, from any state. On
    its channel the learner's sends before it in its connection are FOLLOWERINFO and ACKEPOCH; the spec's follower,
    having sent those, next sends its ACK of NEWLEADER (<<e, 0>>, FollowerProcessNEWLEADER, which also takes it to
    BROADCAST) or, gone back to election, a FOLLOWERINFO: never an ACK of a proposal, which it sends in BROADCAST
    only (FollowerProcessPROPOSAL). The window search (conformance/validate/zkcheck.py) stops here once a behaviour
    makes every observation before it."""

    g: int
    sender: int
    receiver: int
    zxid: tuple[int, int]
    what = "an ACK before the learner's ACK of NEWLEADER"
    #: why no behaviour makes it: wrong if TLC makes it
    premise = "conformance/zk/earlyack.py's reading of the spec's follower steps"

    def why(self) -> str:
        return (f"server {self.sender}'s ACK of <<{self.zxid[0]}, {self.zxid[1]}>> to {self.receiver} comes after "
                "its synchronization began and before its ACK of NEWLEADER, and the spec's follower sends nothing "
                "between the two (its next send is the ACK of NEWLEADER, or a FOLLOWERINFO after an election), so "
                "no behaviour makes it, from any state")


def first(observation: Observation) -> EarlyAck | None:
    """The recording's first early ACK, or None."""
    if not observation.early_acks:
        return None
    o = observation.obs[observation.early_acks[0] - 1]
    return EarlyAck(o.g, o.sender, o.receiver, (o.zxid[0], o.zxid[1]))


def name(observation: Observation, frontier: int) -> tuple[str | None, str] | None:
    """For a departure at observation ``frontier`` (1-based): the first early ACK at or before it on its connection,
    as (the JIRA id, or None when no known bug explains it; one line saying so), or None when there is none."""
    if not 1 <= frontier <= len(observation.obs):
        return None
    conn = observation.obs[frontier - 1].conn
    g = next((g for g in observation.early_acks if g <= frontier and observation.obs[g - 1].conn == conn), None)
    if g is None:
        return None
    o = observation.obs[g - 1]
    what = (f"observation {g}: server {o.sender} ACKed <<{o.zxid[0]}, {o.zxid[1]}>> on connection {o.conn} after "
            f"its synchronization began and before its ACK of NEWLEADER, which no spec step sends")
    if o.sender in observation.zabref:
        return None, f"{what}; server {o.sender} is zabref, so no ZooKeeper bug explains it"
    if acks_before_newleader(observation.version):
        return JIRA, (f"{what}: {JIRA}'s order, which ZooKeeper {observation.version}'s follower has (it logs the "
                      "sync's proposals at NEWLEADER through its SyncRequestProcessor, which ACKs each one)")
    return None, (f"{what}; ZooKeeper {observation.version}'s follower is not known to send it "
                  f"({JIRA}'s order, conformance.zk.versions.ACKS_BEFORE_NEWLEADER)")
