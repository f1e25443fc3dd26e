"""Steer a server's real FastLeaderElection to the decision a Zab trace step names (BecomeLeader, BecomeFollower).

Theory of operation
-------------------
spec/Zab.tla abstracts the election: a LOOKING server decides to lead, or to follow a server (spec/FLE.md says why
any decision is possible). A conformance trace names such a decision; the server must take it through its own code:
the election port, `zabref.core.election.FastLeaderElection`, and the node's glue (`zabref.core.node`) that turns a
Decision into the core's ``become_leader`` or ``become_follower``. No control request decides for it.

So the driver plays the other voters on the server's election port (`conformance.replay.harness.Cluster.vote`: a
connection whose handshake names another server) and sends notifications that FastLeaderElection may receive --
FOLLOWING or LEADING ballots of the server's current round, agreeing on a vote for the target leader -- then releases
them one at a time (the control socket's ``release_vote``) until the server decides. The vote is made strictly
better than anything the server proposes (one epoch above both its proposal and its own vote), so that a server
waiting in finalize takes it too (FastLeaderElection drops a notification that is not better during the wait):

* BecomeLeader(i): FOLLOWING ballots for i from the other servers; with a quorum of them (i's round, CheckLeader of
  itself) FastLeaderElection's HandleFromDecided decides LEADING. When i proposes its own vote already, the ballots
  carry exactly that vote, so that i's own ballot counts too (two servers need it); and when i waits in finalize on
  its own vote, the finalize wait simply runs out (the control socket's ``tick``: FinalizeTimeout);
* BecomeFollower(i, j): first j's own LEADING ballot, then FOLLOWING ballots for j from the others; with a quorum
  agreeing and j LEADING in the box (CheckLeader), HandleFromDecided decides FOLLOWING j.

`plan` computes the notifications from the server's state as the control socket reports it; `steer` sends and
releases them and checks that the decision (and only it) was taken.
"""

from __future__ import annotations

from typing import Any

from zabref.core.packets import Notification, ServerState
from zabref.errors import ZabError
from zabref.runtime.control import ControlError

__all__ = ["plan", "steer", "SteerError"]


class SteerError(Exception):
    """The server did not take the decision the step names (the message says what it did instead)."""


def _better_epoch(fle: dict[str, Any], own_epoch: int) -> int:
    proposed = fle.get("proposedVote") or {}
    return max(int(proposed.get("epoch", 0)), own_epoch) + 1


def plan(state: dict[str, Any], leader: int, n: int) -> list[tuple[int, Notification]] | None:
    """(sender, notification) pairs, in order, that make the server of ``state`` decide for ``leader``; None when
    letting its finalize wait run out does it (it waits on its own vote and ``leader`` is itself)."""
    sid = int(state["sid"])
    fle = state["fle"]
    if fle["state"] != "LOOKING" or not fle["logicalclock"]:
        raise SteerError(f"server {sid}'s election is not looking (FastLeaderElection state {fle['state']}, "
                         f"round {fle['logicalclock']})")
    r = int(fle["logicalclock"])
    proposed = fle["proposedVote"]
    others = [s for s in range(1, n + 1) if s != sid]
    if leader == sid and proposed["leader"] == sid:
        if fle["finalizing"]:
            return None
        v = proposed  # i's own ballot agrees too
        return [(s, Notification(ServerState.FOLLOWING, sid, int(v["zxid"]), r, int(v["epoch"]))) for s in others]
    epoch = _better_epoch(fle, int(state["variables"]["current_epoch"]))
    zxid = int(state["variables"]["history"][-1][0]) if state["variables"]["history"] else 0
    if leader != sid:
        others.remove(leader)
        others.insert(0, leader)
    out = []
    for s in others:
        st = ServerState.LEADING if s == leader else ServerState.FOLLOWING
        out.append((s, Notification(st, leader, zxid, r, epoch)))
    return out


def _held(state: dict[str, Any], sender: int, n: Notification) -> int | None:
    """The serial of the newest election connection from ``sender`` whose last waiting notification is ``n``."""
    want = {"state": n.state.name, "leader": n.leader, "zxid": n.zxid, "electionEpoch": n.election_epoch,
            "peerEpoch": n.peer_epoch}
    found = [v["serial"] for v in state["votes"] if v["peer"] == sender and v["held"] and v["held"][-1] == want]
    return max(found) if found else None


def steer(cluster: Any, sid: int, leader: int, n: int, state: dict[str, Any], wait: Any,
          step: Any = None) -> list[dict[str, Any]]:
    """Make server ``sid`` decide for ``leader`` (itself: LEADING) through its election port; return the actions
    it took. SteerError when it decides otherwise or not at all. ``step(op, fields)``: sends one request that steps
    the server and returns the answer (the conformance driver's watches the step's fsync); default: a plain
    request."""
    if step is None:
        def step(op: str, fields: dict[str, Any]) -> dict[str, Any]:
            return cluster.request(sid, op, **fields)
    taken: list[dict[str, Any]] = []
    want = "BecomeLeader" if leader == sid else "BecomeFollower"
    steps = plan(state, leader, n)
    if steps is None:
        answer = step("tick", {"count": 100, "until_action": "FinalizeTimeout"})
        taken = answer["actions"]
        _check(sid, leader, want, [a for a in taken if a["module"] == "Zab"], taken)
        return taken
    try:
        for sender, notification in steps:
            for attempt in (1, 2):
                cluster.vote(sid, sender, notification)
                try:
                    serial = wait(f"server {sid} to hold the notification from {sender}",
                                  lambda: _held(cluster.request(sid, "state"), sender, notification))
                    answer = step("release_vote", {"conn": serial})
                    break
                except ZabError as e:
                    if attempt == 2 or (isinstance(e, ControlError) and "no notification waits" not in str(e)):
                        raise
                    # The real server ``sender`` dialed ``sid`` meanwhile (before the hold, or between the hold and
                    # its release): its connection became the pair's and the played one was dropped with what it
                    # carried, never taken (`zabref.net.votes.ElectionSender.adopt`). Once more, on a new connection,
                    # which stays the pair's: in control mode the real server dials again only when a tick or a
                    # step of its own makes it send, and none comes while this server is steered.
                    cluster.close_votes(sid)
            taken += answer["actions"]
            zab = [a for a in taken if a["module"] == "Zab"]
            if zab:
                _check(sid, leader, want, zab, taken)
                return taken
    finally:
        cluster.close_votes(sid)  # a played voter's connection must not stay the pair's (`Cluster.close_votes`)
    raise SteerError(f"server {sid} did not decide after {len(steps)} ballots for {leader} (it took "
                     f"{', '.join(a['name'] for a in taken) or 'nothing'})")


def _check(sid: int, leader: int, want: str, zab: list[dict[str, Any]], taken: list[dict[str, Any]]) -> None:
    if not zab:
        raise SteerError(f"server {sid} did not decide (it took {', '.join(a['name'] for a in taken) or 'nothing'})")
    got = zab[0]
    if got["name"] != want or (leader != sid and got["params"].get("j") != leader):
        raise SteerError(f"server {sid} took {got['name']}({got['params']}) instead of {want} for {leader}")
