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

from conformance.zk.observe import Observation
from conformance.zk.versions import acks_before_newleader

__all__ = ["JIRA", "name"]

JIRA = "ZOOKEEPER-4685"


def name(observation: Observation, frontier: int) -> tuple[str | None, str] | None:
    """For a departure at observation ``frontier`` (1-based): the first early ACK at or before it on its connection,
    as (the JIRA id, or None when no known bug explains it; one line saying so), or None when there is none."""
    if not 1 <= frontier <= len(observation.obs):
        return None
    conn = observation.obs[frontier - 1].conn
    first = next((g for g in observation.early_acks if g <= frontier and observation.obs[g - 1].conn == conn), None)
    if first is None:
        return None
    o = observation.obs[first - 1]
    what = (f"observation {first}: server {o.sender} ACKed <<{o.zxid[0]}, {o.zxid[1]}>> on connection {o.conn} after "
            f"its synchronization began and before its ACK of NEWLEADER, which no spec step sends")
    if o.sender in observation.zabref:
        return None, f"{what}; server {o.sender} is zabref, so no ZooKeeper bug explains it"
    if acks_before_newleader(observation.version):
        return JIRA, (f"{what}: {JIRA}'s order, which ZooKeeper {observation.version}'s follower has (it logs the "
                      "sync's proposals at NEWLEADER through its SyncRequestProcessor, which ACKs each one)")
    return None, (f"{what}; ZooKeeper {observation.version}'s follower is not known to send it "
                  f"({JIRA}'s order, conformance.zk.versions.ACKS_BEFORE_NEWLEADER)")
