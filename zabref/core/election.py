"""FastLeaderElection for one server, as a sans-IO core that mirrors spec/FastLeaderElection.tla.

Theory of operation
-------------------
A `FastLeaderElection` object is one server's election state: the fields of ZooKeeper's FastLeaderElection and
QuorumPeer that the spec models (``state``, ``logicalclock``, ``proposed_vote``, the ballot box ``recv_votes``,
``out_of_election``, ``finalizing``). It never touches a socket, a clock or a thread. Three kinds of input reach it,
and each returns a `Step` -- the notifications to send and, when the server leaves the election, a `Decision`:

* `start_election(zxid, epoch)` -- enter lookForLeader (spec `StartElection(i)`; on a fresh object, the spec's
  `Init` for this server): vote for itself, broadcast. `restart(zxid, epoch)` is the spec's `Restart(i)`.
* `receive(sender, notification)` -- the head notification from one peer's FIFO channel; dispatched to the one
  handler whose spec action is enabled (`HandleHigherRound`, `HandleSameRound`, `HandleLowerRound`,
  `HandleFromDecided`, `FinalizeDiscard`, `HandleAsDecided`). `action_for` names that action without running it.
* `finalize_timeout()` -- the runtime's finalizeWait timer expired (spec `FinalizeTimeout(i)`): decide.
* `update_election_vote(epoch)` -- after the election, Zab established ``epoch`` (spec `UpdateElectionVote(i)`,
  ZOOKEEPER-1732): the decided vote carries it from now on.

While ``finalizing`` is true the runtime must run that timer; a notification that arrives in the meantime goes
through `receive` as usual (a better one ends the wait, the others are dropped, exactly as lookForLeader's inner
poll does). Votes are compared by one function, `total_order_predicate` (ZooKeeper's totalOrderPredicate: epoch,
then zxid, then sid). zxids are the 64-bit ``epoch << 32 | counter`` of `zabref.core.packets`; the spec writes
``<<epoch, counter>>`` (`zxid_pair`).

A server's own vote enters its ballot box at once (ZooKeeper queues it to itself); spec/FLE.md lists this and the
other departures from ZooKeeper's code. Inputs are validated before anything changes: a `LocalProtocolError`
means the caller misused the core (for example `finalize_timeout` when not finalizing), a `RemoteProtocolError` a
peer sent something impossible (for example a vote for a non-member); either way the state is untouched.

Bad input. `check_notification` says whether a decoded notification can exist at all: every field non-negative and
the round (electionEpoch) at most `MAX_ROUND`. The runtime applies it as soon as a notification is decoded (the
connection is closed as bad input), and `receive` applies it again (`RemoteProtocolError`), so that a vote that
cannot exist never reaches `Vote` nor the ballot box. `MAX_ROUND` exists because a round is adopted: a server that
took round 2**63 - 1 could never start the next one (its number does not fit the wire's int64). A real ensemble's
rounds grow by one per election, so 2**62 refuses nothing a real server sends and leaves 2**62 rounds of headroom.
The check cannot protect against a configured peer that lies: a vote at round MAX_ROUND itself is valid, every server
adopts it, and the rounds they then start are above MAX_ROUND and refused by each other -- no election ends again.
A lying configured server is outside Zab's fault model (crash-recovery); the fuzzer's wild votes stay at or below
MAX_ROUND / 2 for that reason (docs/fuzzing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from zabref.core.packets import Notification, ServerState
from zabref.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["Vote", "Send", "Decision", "Step", "FastLeaderElection", "total_order_predicate",
           "is_quorum", "check_notification", "MAX_ROUND"]

LOOKING, FOLLOWING, LEADING = ServerState.LOOKING, ServerState.FOLLOWING, ServerState.LEADING

#: Largest election round (electionEpoch, logicalclock) taken from a peer; see the module docstring.
MAX_ROUND = 1 << 62


def check_notification(n: Notification) -> None:
    """Raise ValueError, naming the field, if ``n`` cannot come from a real server (see the module docstring)."""
    for name, value in (("leader", n.leader), ("zxid", n.zxid), ("electionEpoch", n.election_epoch),
                        ("peerEpoch", n.peer_epoch)):
        if value < 0:
            raise ValueError(f"notification {name} is negative ({value})")
    if n.election_epoch > MAX_ROUND:
        raise ValueError(f"notification electionEpoch {n.election_epoch} is above {MAX_ROUND} (MAX_ROUND): whoever "
                         "adopted it could run out of rounds")


def _checked(sender: int, n: Notification) -> None:
    try:
        check_notification(n)
    except ValueError as e:
        raise RemoteProtocolError(sender, str(e)) from None


@dataclass(frozen=True, slots=True, init=False)
class Vote:
    """The spec's ``[leader, zxid, epoch]``: (proposedLeader, proposedZxid, proposedEpoch) of FastLeaderElection."""

    leader: int
    zxid: int
    epoch: int

    def __init__(self, leader: int, zxid: int, epoch: int) -> None:
        object.__setattr__(self, "leader", leader)
        object.__setattr__(self, "zxid", zxid)
        object.__setattr__(self, "epoch", epoch)
        if leader < 0 or zxid < 0 or epoch < 0:
            raise ValueError(f"vote fields must be non-negative: {self}")

    @staticmethod
    def of(n: Notification) -> "Vote":
        """The spec's ``VoteOf(n)``."""
        return Vote(n.leader, n.zxid, n.peer_epoch)

    def notification(self, state: ServerState, election_epoch: int) -> Notification:
        """The spec's ``Notification(st, v, r)``."""
        return Notification(state, self.leader, self.zxid, election_epoch, self.epoch)


def total_order_predicate(new: Vote, cur: Vote) -> bool:
    """Spec ``TotalOrderPredicate(new, cur)``: is ``new`` strictly better than ``cur``?

    ZooKeeper's FastLeaderElection.totalOrderPredicate and seed 002's rule: the greater epoch wins; on equal epochs
    the greater zxid; on equal zxids the greater sid. It is a strict total order on votes.
    """
    return (new.epoch, new.zxid, new.leader) > (cur.epoch, cur.zxid, cur.leader)


def is_quorum(sids: Iterable[int], voters: frozenset[int]) -> bool:
    """Spec ``IsQuorum``: a strict majority of the voting members (QuorumMaj)."""
    return 2 * len(set(sids) & voters) > len(voters)


@dataclass(frozen=True, slots=True, init=False)
class Send:
    """Send ``notification`` to server ``to`` (appended to the spec's channel ``electionMsgs[self][to]``)."""

    to: int
    notification: Notification

    def __init__(self, to: int, notification: Notification) -> None:
        object.__setattr__(self, "to", to)
        object.__setattr__(self, "notification", notification)


@dataclass(frozen=True, slots=True, init=False)
class Decision:
    """The server left the election: ``state`` is LEADING or FOLLOWING ``leader``, at election round ``round``.

    ``quorum`` holds the sids whose ballots agreed; ``looking`` those of them whose ballot was a LOOKING vote (the
    spec's ``decisions`` record).
    """

    state: ServerState
    leader: int
    round: int
    vote: Vote
    quorum: frozenset[int]
    looking: frozenset[int]

    def __init__(self, state: ServerState, leader: int, round: int, vote: Vote, quorum: frozenset[int],
                 looking: frozenset[int]) -> None:
        if state not in (LEADING, FOLLOWING):
            raise ValueError(f"a decision is LEADING or FOLLOWING, not {state.name}")
        if not looking <= quorum:
            raise ValueError("looking voters must be part of the quorum")
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "leader", leader)
        object.__setattr__(self, "round", round)
        object.__setattr__(self, "vote", vote)
        object.__setattr__(self, "quorum", quorum)
        object.__setattr__(self, "looking", looking)


@dataclass(frozen=True, slots=True, init=False)
class Step:
    """What one input did: the spec action taken, the notifications to send, the decision if any."""

    action: str
    sends: tuple[Send, ...]
    decision: Decision | None

    def __init__(self, action: str, sends: tuple[Send, ...] = (), decision: Decision | None = None) -> None:
        object.__setattr__(self, "action", action)
        object.__setattr__(self, "sends", sends)
        object.__setattr__(self, "decision", decision)


@dataclass(slots=True, init=False)
class FastLeaderElection:
    """One server's FastLeaderElection state (spec variables indexed by this server's sid)."""

    sid: int
    voters: frozenset[int]
    state: ServerState
    logicalclock: int  # 0: lookForLeader never entered (the spec starts every server at round 1)
    own_vote: Vote | None  # InitVote(i): (getInitId, getInitLastLoggedZxid, getPeerEpoch)
    proposed_vote: Vote | None
    recv_votes: dict[int, Notification] = field(init=False)
    out_of_election: dict[int, Notification] = field(init=False)
    finalizing: bool

    def __init__(self, sid: int, voters: frozenset[int], state: ServerState = LOOKING, logicalclock: int = 0,
                 own_vote: Vote | None = None, proposed_vote: Vote | None = None, finalizing: bool = False) -> None:
        self.sid = sid
        self.voters = frozenset(voters)
        if sid not in self.voters:
            raise LocalProtocolError(f"server {sid} is not one of the voters {sorted(self.voters)}")
        self.state = state
        self.logicalclock = logicalclock
        self.own_vote = own_vote
        self.proposed_vote = proposed_vote
        self.recv_votes = {}
        self.out_of_election = {}
        self.finalizing = finalizing

    @property
    def _proposal(self) -> Vote:
        """``proposed_vote``, which every election round sets (`start_election`) before any handler runs."""
        assert self.proposed_vote is not None, f"server {self.sid} has no proposal before its first election"
        return self.proposed_vote

    @property
    def _own(self) -> Vote:
        """``own_vote`` (InitVote), set with the first proposal."""
        assert self.own_vote is not None, f"server {self.sid} has no initial vote before its first election"
        return self.own_vote

    # ---- inputs ---------------------------------------------------------------------------------------------------

    def start_election(self, zxid: int, epoch: int) -> Step:
        """Spec ``StartElection(i)`` (and ``Init`` on a fresh object); seed 003 steps 1-3.

        lookForLeader's prologue: ``logicalclock`` + 1, vote for itself with its last logged ``zxid`` and its
        currentEpoch ``epoch``, fresh ballot boxes, sendNotifications to every other voter.
        """
        if self.state is LOOKING and self.logicalclock > 0:
            raise LocalProtocolError(f"server {self.sid} is already looking in round {self.logicalclock}")
        own = Vote(self.sid, zxid, epoch)
        self.state, self.logicalclock = LOOKING, self.logicalclock + 1
        self.own_vote = self.proposed_vote = own
        self.recv_votes = {self.sid: own.notification(LOOKING, self.logicalclock)}
        self.out_of_election = {}
        self.finalizing = False
        return Step("StartElection", self._broadcast(own))

    def restart(self, zxid: int, epoch: int) -> Step:
        """Spec ``Restart(i)``: the process crashed and restarted, then entered lookForLeader.

        Everything in memory is lost, logicalclock included (it starts again from 0, so the election runs at round
        1); the persistent ``zxid`` and ``epoch`` are read back. The runtime drops the notifications in flight to and
        from this server (its TCP connections died with it).
        """
        self.state, self.logicalclock, self.finalizing = LOOKING, 0, False
        step = self.start_election(zxid, epoch)
        return Step("Restart", step.sends)

    def resend_notifications(self) -> Step:
        """Spec ``ResendNotifications(i)``: a LOOKING server whose vote did not change for a while (notTimeout)
        sends its current proposal to every other voter again -- notifications lost with a broken connection are
        replaced. ZooKeeper queues the same notification to the server itself, and lookForLeader takes it like a
        peer's: with a quorum agreeing with the proposal in the ballot box (left there by a better notification that
        ended a finalize wait without changing the vote), the server waits in finalize again. The caller decides
        when (`zabref.core.node`)."""
        if self.state is not LOOKING or self.logicalclock == 0 or self.finalizing:
            raise LocalProtocolError(f"server {self.sid} re-sends its vote only while LOOKING and not finalizing")
        self.finalizing = self._quorum_in_round(self._proposal, self.logicalclock)
        return Step("ResendNotifications", self._broadcast(self._proposal))

    def update_election_vote(self, epoch: int) -> Step:
        """Spec ``UpdateElectionVote(i)`` (ZOOKEEPER-1732, QuorumPeer.updateElectionVote): a decided server's vote
        takes the epoch Zab established -- a leader's at its NEWLEADER quorum, a follower's at UPTODATE -- so that
        every member of an ensemble answers a LOOKING server with one vote (`handle_as_decided`), on which it can
        join. The caller (`zabref.core.node`) gives Zab's epoch, for which the spec writes ``EstablishedEpoch``."""
        v = self.proposed_vote
        if self.state is LOOKING or v is None:
            raise LocalProtocolError(f"server {self.sid}: only a decided server's vote takes an established epoch")
        if epoch <= v.epoch:
            raise LocalProtocolError(f"server {self.sid}: epoch {epoch} is not above its vote's ({v.epoch})")
        self.proposed_vote = Vote(v.leader, v.zxid, epoch)
        return Step("UpdateElectionVote")

    def receive(self, sender: int, n: Notification) -> Step:
        """The head notification of ``sender``'s channel: run the one spec action it enables."""
        return self._handler(sender, n)(sender, n)

    def action_for(self, sender: int, n: Notification) -> str:
        """The name of the spec action that ``receive(sender, n)`` would take."""
        return _ACTION_OF[self._handler(sender, n).__name__]

    def finalize_timeout(self) -> Step:
        """Spec ``FinalizeTimeout(i)``; seed 003 steps 7-8: finalizeWait passed with no better notification.

        The server decides for its proposal: LEADING if it proposes itself, else FOLLOWING.
        """
        if not (self.state is LOOKING and self.finalizing):
            raise LocalProtocolError(f"server {self.sid} is not waiting in finalize")
        v = self._proposal
        quorum = self._agreeing_in_round(self.recv_votes, v, self.logicalclock)
        return Step("FinalizeTimeout", (), self._decide(v, self.logicalclock, self.recv_votes, quorum))

    # ---- handlers, one per spec action ------------------------------------------------------------------------------

    def handle_higher_round(self, sender: int, n: Notification) -> Step:
        """Spec ``HandleHigherRound(i, j)``; seed 003 step 5, first case.

        A LOOKING notification of a later round: join that round, clear the ballot box, vote for the better of the
        notification's vote and this server's own initial vote, broadcast, count the sender's ballot.
        """
        self._require(self._can_handle(n) and n.state is LOOKING and n.election_epoch > self.logicalclock, n)
        r, theirs = n.election_epoch, Vote.of(n)
        v = theirs if total_order_predicate(theirs, self._own) else self._own
        self.logicalclock, self.proposed_vote = r, v
        self.recv_votes = {self.sid: v.notification(LOOKING, r), sender: n}
        self.finalizing = self._quorum_in_round(v, r)
        return Step("HandleHigherRound", self._broadcast(v))

    def handle_same_round(self, sender: int, n: Notification) -> Step:
        """Spec ``HandleSameRound(i, j)``; seed 003 steps 5-6, second case, and termPredicate.

        A LOOKING notification of this round: adopt its vote if better (totalOrderPredicate) and broadcast; count
        the sender's ballot; with a quorum agreeing on this server's vote, start the finalize wait.
        """
        self._require(self._can_handle(n) and n.state is LOOKING and n.election_epoch == self.logicalclock, n)
        r, theirs = self.logicalclock, Vote.of(n)
        better = total_order_predicate(theirs, self._proposal)
        if better:
            self.proposed_vote = theirs
            self.recv_votes[self.sid] = theirs.notification(LOOKING, r)
        self.recv_votes[sender] = n
        self.finalizing = self._quorum_in_round(self._proposal, r)
        return Step("HandleSameRound", self._broadcast(theirs) if better else ())

    def handle_lower_round(self, sender: int, n: Notification) -> Step:
        """Spec ``HandleLowerRound(i, j)``; seed 003 step 5, third case.

        A LOOKING notification of an older round is discarded; WorkerReceiver answers the sender with this
        server's vote so that it catches up.
        """
        self._require(self._can_handle(n) and n.state is LOOKING and n.election_epoch < self.logicalclock, n)
        self.finalizing = False
        return Step("HandleLowerRound", self._receiver_reply(sender, n))

    def handle_from_decided(self, sender: int, n: Notification) -> Step:
        """Spec ``HandleFromDecided(i, j)``; seed 003 scenarios 2 and 3 (checkLeader).

        A notification from a FOLLOWING or LEADING server. Of this round, it enters the ballot box, and the server
        decides if a quorum there agrees with it and checkLeader holds. Of any round, it enters outofelection, and
        the server joins the established ensemble if a quorum there follows the same leader and checkLeader holds.
        """
        self._require(self._can_handle(n) and n.state is not LOOKING, n)
        r, v = n.election_epoch, Vote.of(n)
        box = dict(self.recv_votes)
        if r == self.logicalclock:
            box[sender] = n
            quorum = self._agreeing_in_round(box, v, r)
            if is_quorum(quorum, self.voters) and self._check_leader(box, n.leader, r):
                return Step("HandleFromDecided", (), self._decide(v, r, box, quorum))
        ooe = {**self.out_of_election, sender: n}
        quorum = frozenset(s for s, b in ooe.items() if b.leader == v.leader and b.peer_epoch == v.epoch)
        if is_quorum(quorum, self.voters) and self._check_leader(ooe, n.leader, r):
            return Step("HandleFromDecided", (), self._decide(v, r, ooe, quorum))
        self.recv_votes, self.out_of_election, self.finalizing = box, ooe, False
        return Step("HandleFromDecided")

    def finalize_discard(self, sender: int, n: Notification) -> Step:
        """Spec ``FinalizeDiscard(i, j)``; the finalize wait of lookForLeader.

        While waiting, a notification that is not better than this server's proposal is taken and dropped;
        WorkerReceiver still answers a LOOKING sender of an older round.
        """
        self._require(
            self.state is LOOKING and self.finalizing
            and not total_order_predicate(Vote.of(n), self._proposal), n)
        return Step("FinalizeDiscard", self._receiver_reply(sender, n))

    def handle_as_decided(self, sender: int, n: Notification) -> Step:
        """Spec ``HandleAsDecided(i, j)``; seed 003 scenario 2 ("S2 ... returns ballot [2,3,3] to S1").

        WorkerReceiver of a FOLLOWING or LEADING server: a LOOKING sender is answered with the current vote.
        """
        self._require(self.state is not LOOKING, n)
        return Step("HandleAsDecided", self._receiver_reply(sender, n))

    # ---- helpers (spec operators) --------------------------------------------------------------------------------

    def _handler(self, sender: int, n: Notification) -> Callable[[int, Notification], Step]:
        if sender == self.sid:
            raise LocalProtocolError(f"server {self.sid} cannot receive its own notification")
        if sender not in self.voters:
            raise RemoteProtocolError(sender, "not a voting member")
        _checked(sender, n)
        if n.leader not in self.voters:
            raise RemoteProtocolError(sender, f"votes for {n.leader}, not a voting member")
        if n.state is ServerState.OBSERVING:
            raise RemoteProtocolError(sender, "zabref has no observers: no server sends OBSERVING")
        if self.state is not LOOKING:
            return self.handle_as_decided
        if self.logicalclock == 0:
            raise LocalProtocolError(f"server {self.sid} received a notification before start_election")
        if self.finalizing and not total_order_predicate(Vote.of(n), self._proposal):
            return self.finalize_discard
        if n.state is not LOOKING:
            return self.handle_from_decided
        if n.election_epoch > self.logicalclock:
            return self.handle_higher_round
        if n.election_epoch == self.logicalclock:
            return self.handle_same_round
        return self.handle_lower_round

    def _require(self, enabled: bool, n: Notification) -> None:
        if not enabled:
            raise LocalProtocolError(f"server {self.sid}: this handler is not enabled for {n}")

    def _can_handle(self, n: Notification) -> bool:
        """Spec ``CanHandle(i, j)``: LOOKING and, while finalizing, only a better notification."""
        return self.state is LOOKING and self.logicalclock > 0 and (
            not self.finalizing or total_order_predicate(Vote.of(n), self._proposal))

    def _broadcast(self, v: Vote) -> tuple[Send, ...]:
        """Spec ``Broadcast``: sendNotifications to every other voter, in sid order."""
        n = v.notification(LOOKING, self.logicalclock)
        return tuple(Send(s, n) for s in sorted(self.voters) if s != self.sid)

    def _receiver_reply(self, sender: int, n: Notification) -> tuple[Send, ...]:
        """Spec ``ReceiverReply``: WorkerReceiver's answer to a LOOKING sender that is behind or still looking."""
        if n.state is LOOKING and (self.state is not LOOKING or n.election_epoch < self.logicalclock):
            return (Send(sender, self._proposal.notification(self.state, self.logicalclock)),)
        return ()

    @staticmethod
    def _agreeing_in_round(box: dict[int, Notification], v: Vote, r: int) -> frozenset[int]:
        """Spec ``AgreeingInRound``."""
        return frozenset(s for s, b in box.items() if Vote.of(b) == v and b.election_epoch == r)

    def _quorum_in_round(self, v: Vote, r: int) -> bool:
        return is_quorum(self._agreeing_in_round(self.recv_votes, v, r), self.voters)

    def _check_leader(self, box: dict[int, Notification], leader: int, r: int) -> bool:
        """Spec ``CheckLeader``: another leader must itself have said LEADING; this server only in its round."""
        if leader != self.sid:
            return leader in box and box[leader].state is LEADING
        return self.logicalclock == r

    def _decide(self, v: Vote, r: int, box: dict[int, Notification], quorum: frozenset[int]) -> Decision:
        """Spec ``Decide``: setPeerState + leaveInstance."""
        self.state = LEADING if v.leader == self.sid else FOLLOWING
        self.logicalclock, self.proposed_vote = r, v
        self.recv_votes, self.out_of_election, self.finalizing = {}, {}, False
        looking = frozenset(s for s in quorum if box[s].state is LOOKING)
        return Decision(self.state, v.leader, r, v, quorum, looking)


#: Handler method name -> spec action name.
_ACTION_OF = {
    "handle_higher_round": "HandleHigherRound",
    "handle_same_round": "HandleSameRound",
    "handle_lower_round": "HandleLowerRound",
    "handle_from_decided": "HandleFromDecided",
    "finalize_discard": "FinalizeDiscard",
    "handle_as_decided": "HandleAsDecided",
}
