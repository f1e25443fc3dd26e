"""Tests of zabref.core.election: the sans-IO FastLeaderElection core (spec/FastLeaderElection.tla).

Scenario tests replay the three worked elections of seed 003 ("Election Mechanism in ZooKeeper"); property tests
check the vote order and run many cores over in-memory FIFO channels with random delivery.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabref.core.election import Decision, FastLeaderElection, Step, Vote, is_quorum, total_order_predicate
from zabref.core.packets import Notification, ServerState, make_zxid
from zabref.errors import LocalProtocolError, RemoteProtocolError, ZabError

LOOKING, FOLLOWING, LEADING = ServerState.LOOKING, ServerState.FOLLOWING, ServerState.LEADING
REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "spec" / "FastLeaderElection.tla"


class Cluster:
    """N cores joined by FIFO channels (the spec's electionMsgs), driven one event at a time."""

    def __init__(self, data: dict[int, tuple[int, int]]) -> None:
        self.data = data  # sid -> (zxid, epoch): the persistent state the election reads
        self.voters = frozenset(data)
        self.cores = {s: FastLeaderElection(s, self.voters) for s in data}
        self.channels: dict[tuple[int, int], deque[Notification]] = {
            (a, b): deque() for a in data for b in data if a != b}
        self.decisions: dict[int, list[Decision]] = {s: [] for s in data}
        self.actions: list[str] = []

    def _apply(self, sid: int, step: Step) -> Step:
        self.actions.append(step.action)
        for send in step.sends:
            self.channels[(sid, send.to)].append(send.notification)
        if step.decision is not None:
            self.decisions[sid].append(step.decision)
        return step

    def start(self, *sids: int) -> None:
        for s in sids or sorted(self.cores):
            self._apply(s, self.cores[s].start_election(*self.data[s]))

    def restart(self, sid: int) -> None:
        """Spec Restart(i): drop the channels to and from sid, then the core restarts."""
        for (a, b), ch in self.channels.items():
            if sid in (a, b):
                ch.clear()
        self._apply(sid, self.cores[sid].restart(*self.data[sid]))

    def deliver(self, sender: int, to: int) -> Step:
        n = self.channels[(sender, to)].popleft()
        return self._apply(to, self.cores[to].receive(sender, n))

    def timeout(self, sid: int) -> Step:
        return self._apply(sid, self.cores[sid].finalize_timeout())

    def pending(self) -> list[tuple[int, int]]:
        return [k for k, ch in self.channels.items() if ch]

    def drain(self) -> None:
        """Deliver in sid order until no notification is in flight."""
        while pending := self.pending():
            self.deliver(*pending[0])

    def settle(self) -> None:
        """Drain, then fire every finalize timer, until nothing is left to do."""
        while True:
            self.drain()
            waiting = [s for s, c in sorted(self.cores.items()) if c.finalizing]
            if not waiting:
                return
            self.timeout(waiting[0])

    def roles(self) -> dict[int, tuple[ServerState, int]]:
        return {s: (c.state, c.proposed_vote.leader) for s, c in self.cores.items()}


def data_of(**by_sid: tuple[int, int, int]) -> dict[int, tuple[int, int]]:
    """s1=(epoch, counter, currentEpoch) -> {1: (zxid, currentEpoch)}."""
    return {int(k[1:]): (make_zxid(e, c), ce) for k, (e, c, ce) in by_sid.items()}


# ---- seed 003's three worked scenarios ---------------------------------------------------------------------------


def test_seed003_scenario1_cluster_start_elects_greatest_sid() -> None:
    """Seed 003, first scenario: S1..S3 start with zxid 0; S3's vote wins on sid; S3 LEADING, S1/S2 FOLLOWING."""
    c = Cluster(data_of(s1=(0, 0, 0), s2=(0, 0, 0), s3=(0, 0, 0)))
    c.start()
    assert {s: core.logicalclock for s, core in c.cores.items()} == {1: 1, 2: 1, 3: 1}
    # "S1 receives ballots from S2 and S3 ... S3's ballot wins as it has the largest sid. S1 must change its ballot".
    assert c.deliver(2, 1).action == "HandleSameRound" and c.cores[1].proposed_vote.leader == 2
    c.deliver(3, 1)
    assert c.cores[1].proposed_vote == Vote(3, 0, 0)
    c.deliver(1, 2)
    c.deliver(3, 2)
    assert c.cores[2].proposed_vote.leader == 3
    c.deliver(1, 3)
    c.deliver(2, 3)
    assert c.cores[3].proposed_vote.leader == 3  # S3 never changes its vote
    c.settle()
    assert c.roles() == {1: (FOLLOWING, 3), 2: (FOLLOWING, 3), 3: (LEADING, 3)}
    assert {d.round for ds in c.decisions.values() for d in ds} == {1}


def _scenario1_settled() -> Cluster:
    c = Cluster(data_of(s1=(0, 0, 0), s2=(0, 0, 0), s3=(0, 0, 0)))
    c.start()
    c.settle()
    assert c.roles() == {1: (FOLLOWING, 3), 2: (FOLLOWING, 3), 3: (LEADING, 3)}
    return c


def test_seed003_scenario2_partitioned_follower_rejoins_leader() -> None:
    """Seed 003, second scenario: S1 loses S3 and looks again in round 2; S2 and S3 answer with their vote for S3.

    ZooKeeper's code (and the spec) answer with their own round (1), so S1 takes them into outofelection and joins
    the established ensemble behind S3 (checkLeader: S3 itself says LEADING), setting logicalclock back to 1.
    """
    c = _scenario1_settled()
    c.start(1)
    assert c.cores[1].logicalclock == 2 and c.cores[1].proposed_vote.leader == 1
    assert c.deliver(1, 2).action == "HandleAsDecided"
    assert c.channels[(2, 1)][0] == Notification(FOLLOWING, 3, 0, 1, 0)
    c.deliver(1, 3)
    assert c.deliver(2, 1).action == "HandleFromDecided" and c.cores[1].state is LOOKING  # no quorum yet
    step = c.deliver(3, 1)
    assert step.decision == Decision(FOLLOWING, 3, 1, Vote(3, 0, 0), frozenset({2, 3}), frozenset())
    assert c.cores[1].logicalclock == 1


@pytest.mark.parametrize("s3_counter", [4, 9], ids=["s3-behind", "s3-ahead"])
def test_seed003_scenario3_restarted_leader_follows_new_leader(s3_counter: int) -> None:
    """Seed 003, third scenario: leader S3 goes down; S1 (larger zxid) beats S2 in round 2; S3 restarts and follows S1.

    "As more than half of the nodes recognize S1 as the Leader, S3 becomes a Follower" -- whatever S3's own zxid:
    a server joins an established ensemble even with more data (Zab's discovery then deals with it).
    """
    c = Cluster(data_of(s1=(1, 7, 1), s2=(1, 5, 1), s3=(1, s3_counter, 1)))
    c.start()
    c.settle()
    leader = 3 if s3_counter > 7 else 1
    assert {s: r[1] for s, r in c.roles().items()} == {1: leader, 2: leader, 3: leader}
    # S3 leaves (crashes); S1 and S2 lose their leader and look in round 2.
    for key, ch in c.channels.items():
        if 3 in key:
            ch.clear()
    c.start(1, 2)
    assert (c.cores[1].logicalclock, c.cores[2].logicalclock) == (2, 2)
    c.deliver(1, 2)  # S2 adopts S1's vote (greater zxid): {1, 2} agree -> S2 waits in finalize
    c.deliver(2, 1)  # S2's own round-2 vote: not better
    c.deliver(2, 1)  # S2's vote for S1: {1, 2} agree -> S1 waits in finalize
    c.timeout(1)
    c.timeout(2)
    assert {s: c.roles()[s] for s in (1, 2)} == {1: (LEADING, 1), 2: (FOLLOWING, 1)}
    c.channels[(1, 3)].clear()  # S3 is down: whatever was sent to it is lost
    c.channels[(2, 3)].clear()
    c.restart(3)
    assert c.cores[3].logicalclock == 1
    c.settle()
    assert c.roles()[3] == (FOLLOWING, 1)
    assert c.decisions[3][-1].round == 2 and c.decisions[3][-1].quorum == {1, 2}


def test_round_agreement_fails_when_the_finalize_wait_is_short() -> None:
    """FLE is best-effort (seed 000): TLC's counterexample to RoundAgreement on MC_fle_tiny (spec/FLE.md), replayed.

    Vote order 1 > 3 > 2. S3 adopts S1's vote and S2 adopts S3's; both see a quorum and their finalize waits expire
    before the news arrives: in round 1, S2 follows S3 while S3 follows S1.
    """
    c = Cluster(data_of(s1=(1, 2, 1), s2=(1, 1, 1), s3=(1, 1, 1)))
    c.start()
    assert c.deliver(1, 3).action == "HandleSameRound" and c.cores[3].finalizing  # {1, 3} agree on S1
    assert c.deliver(3, 2).action == "HandleSameRound" and c.cores[2].finalizing  # {2, 3} agree on S3
    assert c.timeout(2).decision.leader == 3
    assert c.timeout(3).decision.leader == 1
    assert c.decisions[2][0].round == c.decisions[3][0].round == 1


# ---- the vote order -------------------------------------------------------------------------------------------------

votes = st.builds(Vote, leader=st.integers(1, 4), zxid=st.integers(0, 3), epoch=st.integers(0, 2))


@given(votes, votes, votes)
def test_total_order_predicate_is_a_strict_total_order(a: Vote, b: Vote, c: Vote) -> None:
    assert not total_order_predicate(a, a)
    assert not (total_order_predicate(a, b) and total_order_predicate(b, a))
    if a != b:
        assert total_order_predicate(a, b) or total_order_predicate(b, a)
    if total_order_predicate(a, b) and total_order_predicate(b, c):
        assert total_order_predicate(a, c)


@pytest.mark.parametrize("better, worse", [
    (Vote(1, make_zxid(0, 0), 2), Vote(3, make_zxid(1, 9), 1)),  # epoch first
    (Vote(1, make_zxid(1, 2), 1), Vote(3, make_zxid(1, 1), 1)),  # then zxid
    (Vote(2, make_zxid(1, 0), 1), Vote(1, make_zxid(0, 9), 1)),  # zxid's epoch half outweighs its counter
    (Vote(3, make_zxid(1, 1), 1), Vote(2, make_zxid(1, 1), 1)),  # then sid
])
def test_total_order_predicate_compares_epoch_then_zxid_then_sid(better: Vote, worse: Vote) -> None:
    assert total_order_predicate(better, worse) and not total_order_predicate(worse, better)


# ---- random delivery over FIFO channels -----------------------------------------------------------------------------

clusters = st.integers(3, 5).flatmap(lambda n: st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)), min_size=n, max_size=n))


def _run(c: Cluster, choices: st.DataObject, patient: bool) -> None:
    """Random events until quiescent: deliver a channel head, or fire a finalize timer.

    A patient timer fires only when nothing is in flight to its server (finalizeWait outlasts the network).
    """
    for _ in range(2000):
        events = [("deliver", k) for k in c.pending()]
        events += [("timeout", s) for s, core in c.cores.items() if core.finalizing
                   and not (patient and any(c.channels[(o, s)] for o in c.cores if o != s))]
        if not events:
            return
        kind, arg = choices.draw(st.sampled_from(events))
        c.deliver(*arg) if kind == "deliver" else c.timeout(arg)
    raise AssertionError("the election did not quiesce within 2000 events")


def _check_decisions(c: Cluster) -> None:
    """What holds however timers fire (spec invariants LeaderGreatestAmongLookingVoters, RoleMatchesVote)."""
    own = {s: Vote(s, z, e) for s, (z, e) in c.data.items()}
    for sid, ds in c.decisions.items():
        for d in ds:
            assert is_quorum(d.quorum, c.voters)
            assert (d.state is LEADING) == (d.leader == sid)
            assert d.vote == own[d.leader]
            assert not any(total_order_predicate(own[q], own[d.leader]) for q in d.looking)


@settings(max_examples=150, deadline=None)
@given(clusters, st.data())
def test_patient_finalize_elects_the_greatest_vote_everywhere(data: list, choices: st.DataObject) -> None:
    c = Cluster({s: (make_zxid(e, k), ce) for s, (e, k, ce) in enumerate(data, start=1)})
    c.start()
    _run(c, choices, patient=True)
    _check_decisions(c)
    best = max(c.cores, key=lambda s: (c.data[s][1], c.data[s][0], s))
    assert c.roles() == {s: (LEADING if s == best else FOLLOWING, best) for s in c.cores}
    assert {d.round for ds in c.decisions.values() for d in ds} == {1}


@settings(max_examples=150, deadline=None)
@given(clusters, st.data())
def test_impatient_finalize_keeps_the_local_guarantees(data: list, choices: st.DataObject) -> None:
    c = Cluster({s: (make_zxid(e, k), ce) for s, (e, k, ce) in enumerate(data, start=1)})
    c.start()
    _run(c, choices, patient=False)
    _check_decisions(c)


# ---- misuse and bad input -------------------------------------------------------------------------------------------


def test_errors_name_the_fault_and_leave_state_untouched() -> None:
    core = FastLeaderElection(1, frozenset({1, 2, 3}))
    n = Notification(LOOKING, 2, 0, 1, 0)
    with pytest.raises(LocalProtocolError, match="before start_election"):
        core.receive(2, n)
    core.start_election(0, 0)
    before = (core.logicalclock, core.proposed_vote, dict(core.recv_votes), core.finalizing)
    with pytest.raises(RemoteProtocolError, match="peer 9: not a voting member"):
        core.receive(9, n)
    with pytest.raises(RemoteProtocolError, match="votes for 7"):
        core.receive(2, Notification(LOOKING, 7, 0, 1, 0))
    with pytest.raises(LocalProtocolError, match="own notification"):
        core.receive(1, n)
    with pytest.raises(LocalProtocolError, match="not waiting in finalize"):
        core.finalize_timeout()
    with pytest.raises(LocalProtocolError, match="not enabled"):
        core.handle_lower_round(2, n)
    with pytest.raises(LocalProtocolError, match="already looking"):
        core.start_election(0, 0)
    assert (core.logicalclock, core.proposed_vote, dict(core.recv_votes), core.finalizing) == before
    with pytest.raises(ZabError):
        FastLeaderElection(4, frozenset({1, 2, 3}))


def test_action_for_names_the_action_without_running_it() -> None:
    core = FastLeaderElection(1, frozenset({1, 2, 3}))
    core.start_election(0, 0)
    assert core.action_for(2, Notification(LOOKING, 2, 0, 3, 0)) == "HandleHigherRound"
    assert core.action_for(2, Notification(FOLLOWING, 3, 0, 1, 0)) == "HandleFromDecided"
    assert core.logicalclock == 1 and core.recv_votes.keys() == {1}


def test_a_resend_takes_its_own_notification_and_waits_in_finalize_again_with_a_quorum() -> None:
    """ResendNotifications re-checks the quorum (ZooKeeper takes its own resent notification like a peer's; 3.9.5's
    run of docs/zookeeper.md, "Windows for elections"): a better notification from a decided server of another round
    ended the finalize wait and left the vote and its quorum; the resend waits again. Without a quorum it does not."""
    core = FastLeaderElection(1, frozenset({1, 2, 3}))
    core.start_election(0, 0)
    assert core.resend_notifications().sends and not core.finalizing  # its own ballot only: no quorum
    core.receive(2, Notification(LOOKING, 2, 0, 1, 0))
    assert core.finalizing and core.proposed_vote == Vote(2, 0, 0)
    assert core.receive(3, Notification(LEADING, 3, 0, 5, 0)).action == "HandleFromDecided"
    assert not core.finalizing and core.state is LOOKING
    step = core.resend_notifications()
    assert step.action == "ResendNotifications" and core.finalizing
    assert sorted(x.to for x in step.sends) == [2, 3] and {x.notification.leader for x in step.sends} == {2}
    # in the wait, 2's LEADING answer (no better) is discarded, 3's better vote ends it
    assert core.receive(2, Notification(LEADING, 2, 0, 1, 0)).action == "FinalizeDiscard" and core.finalizing
    with pytest.raises(LocalProtocolError):
        core.resend_notifications()


# ---- spec <-> code names --------------------------------------------------------------------------------------------


def _next_actions() -> set[str]:
    text = SPEC.read_text()
    body = text[text.index("\nNext ==") : text.index("\nSpec ==")]
    return set(re.findall(r"\b([A-Z][A-Za-z]+)\(i", body))


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_every_spec_action_has_a_handler_that_names_it() -> None:
    """Read in the source (a compiled build keeps no docstrings): each action's method names it."""
    actions = _next_actions()
    assert len(actions) == 11
    source = ast.parse((REPO / "zabref" / "core" / "election.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in source.body if isinstance(n, ast.ClassDef) and n.name == "FastLeaderElection"]
    docs = {n.name: ast.get_docstring(n) or "" for n in cls.body if isinstance(n, ast.FunctionDef)}
    for action in actions:
        assert callable(getattr(FastLeaderElection, _snake(action)))
        assert f"Spec ``{action}(i" in docs[_snake(action)], action


def test_a_decided_vote_takes_the_established_epoch_and_answers_with_it() -> None:
    """UpdateElectionVote (ZOOKEEPER-1732): once decided, the vote's epoch moves to the one Zab established, and a
    LOOKING server is answered with it; a LOOKING server's vote, or an epoch not above the vote's, is refused."""
    f = FastLeaderElection(2, frozenset({1, 2, 3}))
    f.start_election(make_zxid(1, 1), 1)
    with pytest.raises(LocalProtocolError, match="only a decided server"):
        f.update_election_vote(2)
    f.receive(3, Notification(ServerState.LEADING, 3, make_zxid(1, 1), 1, 1))
    f.receive(1, Notification(ServerState.FOLLOWING, 3, make_zxid(1, 1), 1, 1))
    assert f.state is ServerState.FOLLOWING and f.proposed_vote == Vote(3, make_zxid(1, 1), 1)
    with pytest.raises(LocalProtocolError, match="epoch 1 is not above its vote's"):
        f.update_election_vote(1)
    assert f.update_election_vote(2) == Step("UpdateElectionVote")
    (reply,) = f.receive(1, Notification(ServerState.LOOKING, 1, make_zxid(1, 1), 1, 1)).sends
    assert reply.to == 1 and reply.notification == Notification(ServerState.FOLLOWING, 3, make_zxid(1, 1), 1, 2)
