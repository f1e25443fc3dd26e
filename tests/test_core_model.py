"""A hypothesis state machine over three in-memory `ZabCore`s and FIFO channels: one rule per spec action.

The model is spec/Zab.tla's Next with the network made of deques (``msgs[j][i]`` is ``channels[j, i]``) and each
server's disk made of a `MemoryStorage` that only ever sees the core's ``Output.persist``. Each rule's precondition is
the spec action's enabling condition; Crash rebuilds a core from its MemoryStorage alone, so the invariants also check
that what a core persists is enough to recover it. The invariants are the paper properties of seed 001 (agreement,
total order, local primary order) and seed 004's Fig. 3 (a delivered transaction is in a quorum's history), checked
on what the cores actually delivered (``Output.deliver``), not on their fields.

A packet at the head of a channel must always be accepted: the spec takes every packet that reaches the head of a
channel, so a `RemoteProtocolError` here would be the core refusing a step the spec takes (docs/core.md lists where
the core is stricter than the spec; this test is what shows those checks never fire on a spec behaviour).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from zabref.core import payloads
from zabref.core.packets import PacketType, QuorumPacket, ServerState, zxid_pair
from zabref.core.zab import LearnerPhase, Output, Persistent, Txn, ZabCore, ZabState, apply_persist
from zabref.storage import SimDisk, Storage, read_durable

N = 3
SERVERS = tuple(range(1, N + 1))
MAX_TXNS = 6  # ClientRequest is enabled while fewer than this many were broadcast (the spec's MaxTxns)
MAX_FAULTS = 4  # the spec's MaxFaults: crashes, and follower timeouts while the leader's end is still connected


def is_quorum(s: Iterable[int]) -> bool:
    return 2 * len(set(s)) > N


def is_prefix(a: list[Txn], b: list[Txn]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


def _storage(disk: SimDisk, s: int) -> Storage:
    """Server s's real Storage, on the machine's simulated disk (a power cut keeps only what was synced)."""
    path = f"/data/{s}"
    disk.mkdir(path)
    return Storage.open(path, disk=disk)[0]


class ZabModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.disk = {s: SimDisk() for s in SERVERS}
        self.storage = {s: _storage(self.disk[s], s) for s in SERVERS}
        self.core = {s: ZabCore(s, SERVERS, Persistent.from_storage(self.storage[s])) for s in SERVERS}
        self.channels: dict[tuple[int, int], deque[QuorumPacket]] = {
            (a, b): deque() for a in SERVERS for b in SERVERS if a != b
        }
        self.delivered: dict[int, list[Txn]] = {s: [] for s in SERVERS}  # per incarnation, from Output.deliver
        self.committed: list[Txn] = []  # the spec's checking variable: first-delivery order over all servers
        self.proposed = 0
        self.faults = 0  # the spec's bound-only variable `faults`

    # ------------------------------------------------------------------------------------------ plumbing

    def route(self, s: int, out: Output) -> None:
        """Do what server s's Output says: persist, then send, deliver, close (as the runtime does)."""
        apply_persist(out.persist, self.storage[s])
        for peer, packet in out.send:
            self.channels[s, peer].append(packet)
        if out.deliver:
            self.delivered[s].extend(out.deliver)
            d = self.delivered[s]
            if len(d) > len(self.committed) and is_prefix(self.committed, d):
                self.committed = list(d)
        for peer in out.close:
            self.close(s, peer)

    def close(self, s: int, peer: int) -> None:
        """The connection between s and peer closes: both channels empty, peer forgets s as a learner."""
        self.channels[s, peer].clear()
        self.channels[peer, s].clear()
        self.route(peer, self.core[peer].connection_closed(s))

    def var(self, s: int, name: str):
        """Spec variable ``name`` of server s, as the conformance mapping reads it."""
        return self.core[s].variables()[name]

    def looking(self) -> list[int]:
        return [s for s in SERVERS if self.var(s, "state") == "LOOKING"]

    def vote(self, s: int) -> tuple[int, int, int]:
        """Vote(s) == <<currentEpoch[s], LastZxid(history[s]), s>>."""
        return (self.core[s].current_epoch, self.core[s].last_zxid, s)

    # ------------------------------------------------------------------------------------------ enabling conditions

    def plausible_leader(self, i: int) -> bool:
        """PlausibleLeader(i): a quorum of LOOKING servers with lower votes, or of servers still following i."""
        ok = {s for s in SERVERS if s != i and (
            (self.var(s, "state") == "LOOKING" and self.vote(s) < self.vote(i))
            or (self.var(s, "state") == "FOLLOWING" and self.var(s, "leader") == i))}
        return is_quorum(ok | {i})

    def plausible_follower(self, i: int, j: int) -> bool:
        """PlausibleFollower(i, j): j leads, or j is LOOKING with a better vote."""
        return self.var(j, "state") == "LEADING" or (self.var(j, "state") == "LOOKING" and self.vote(i) < self.vote(j))

    def leaders_to_be(self) -> list[int]:
        """BecomeLeader(i): LOOKING; a decision that is not plausible needs a fault left. (The spec's MaxEpoch bound
        is for TLC; runs here are short.)"""
        return [i for i in self.looking() if self.faults < MAX_FAULTS or self.plausible_leader(i)]

    def followers_to_be(self) -> list[tuple[int, int]]:
        """BecomeFollower(i, j): i LOOKING, j another server; not plausible only with a fault left."""
        return [(i, j) for i in self.looking() for j in SERVERS
                if i != j and (self.faults < MAX_FAULTS or self.plausible_follower(i, j))]

    def takeable(self, j: int, i: int) -> bool:
        """A channel's head some action takes now: everything, except FOLLOWERINFO at a server that does not lead
        (LeaderProcessFOLLOWERINFO needs state[i] = LEADING) and ACKEPOCH(-1) at a leader in DISCOVERY
        (LeaderProcessACKEPOCH: it waits for the epoch's establishment). The packet waits."""
        head = self.channels[j, i][0]
        if head.type == PacketType.FOLLOWERINFO:
            return self.var(i, "state") == "LEADING"
        return not self.held_ack(j, i)

    def held_ack(self, f: int, i: int) -> bool:
        """HeldAck(i, f): f's ACKEPOCH(-1) heads its channel to leader i, and i is in DISCOVERY."""
        q = self.channels[f, i]
        return (bool(q) and q[0].type == PacketType.ACKEPOCH and payloads.decode_ackepoch_data(q[0].data) == -1
                and self.var(i, "state") == "LEADING" and self.var(i, "zab_state") == "DISCOVERY")

    def nonempty_channels(self) -> list[tuple[int, int]]:
        return [ch for ch, q in self.channels.items() if q and self.takeable(*ch)]

    def broadcasting_leaders(self) -> list[int]:
        """ClientRequest(i): LEADING in BROADCAST, fewer than MaxTxns broadcast."""
        if self.proposed >= MAX_TXNS:
            return []
        return [s for s in SERVERS if self.var(s, "state") == "LEADING" and self.var(s, "zab_state") == "BROADCAST"]

    def leader_connected(self, i: int) -> bool:
        """LeaderConnected(i): the leader's end of i's connection is open, or i's FOLLOWERINFO is on its way."""
        ld = self.var(i, "leader")
        return self.var(ld, "state") == "LEADING" and (
            self.var(ld, "learner_phase")[i] != "NONE" or bool(self.channels[i, ld])
        )

    def followers(self) -> list[int]:
        """FollowerTimeout(i): state[i] = FOLLOWING /\\ (LeaderConnected(i) => faults < MaxFaults)."""
        return [
            s
            for s in SERVERS
            if self.var(s, "state") == "FOLLOWING" and (self.faults < MAX_FAULTS or not self.leader_connected(s))
        ]

    def leader_connected_quorum(self, s: int) -> bool:
        """IsQuorum({i} \\cup {f : Counted(i, f)})."""
        return is_quorum({s} | {f for f in SERVERS if f != s and self.core[s].counted(f, self.head(f, s))})

    def head(self, j: int, i: int) -> QuorumPacket | None:
        return self.channels[j, i][0] if self.channels[j, i] else None

    def leaders_without_quorum(self) -> list[int]:
        """LeaderTimeout(i): LEADING; with a quorum of counted learners only with a fault left."""
        return [s for s in SERVERS if self.var(s, "state") == "LEADING"
                and (self.faults < MAX_FAULTS or not self.leader_connected_quorum(s))]

    def followers_of(self, i: int) -> set[int]:
        return {s for s in SERVERS if self.core[s].state == ServerState.FOLLOWING and self.core[s].leader == i}

    def crashable(self) -> list[int]:
        """Crash(i): (state[i] /= LOOKING \\/ lastCommitted[i] > 0) /\\ faults < MaxFaults."""
        if self.faults >= MAX_FAULTS:
            return []
        return [s for s in SERVERS if self.var(s, "state") != "LOOKING" or self.var(s, "last_committed") > 0]

    # ------------------------------------------------------------------------------------------ rules: one per action

    @initialize(establish=st.booleans())
    def start(self, establish: bool) -> None:
        """Half the runs start from an established epoch: ElectLeader(N, Server), then every packet taken in turn
        until the channels are empty -- spec steps too, done here so that short runs reach broadcast and failures
        during it (TRUNC, DIFF with PROPOSALs) often. The other half start from Init."""
        if establish:
            for s in SERVERS:
                self.route(s, self.core[s].become_leader() if s == N else self.core[s].become_follower(N))
            while self.nonempty_channels():
                j, i = self.nonempty_channels()[0]
                self.route(i, self.core[i].receive(j, self.channels[j, i].popleft()))

    @precondition(lambda self: self.leaders_to_be())
    @rule(data=st.data())
    def become_leader(self, data: st.DataObject) -> None:
        """BecomeLeader(i)."""
        i = data.draw(st.sampled_from(self.leaders_to_be()), label="i")
        self.faults += not self.plausible_leader(i)
        self.route(i, self.core[i].become_leader())

    @precondition(lambda self: self.followers_to_be())
    @rule(data=st.data())
    def become_follower(self, data: st.DataObject) -> None:
        """BecomeFollower(i, j)."""
        i, j = data.draw(st.sampled_from(self.followers_to_be()), label="(i, j)")
        self.faults += not self.plausible_follower(i, j)
        self.route(i, self.core[i].become_follower(j))

    @precondition(lambda self: self.nonempty_channels())
    @rule(data=st.data())
    def process_packet(self, data: st.DataObject) -> None:
        """Every <Role>Process<PACKET>(i, j): server i takes the head of msgs[j][i]."""
        j, i = data.draw(st.sampled_from(self.nonempty_channels()), label="msgs[j][i]")
        packet = self.channels[j, i].popleft()
        self.route(i, self.core[i].receive(j, packet))

    @precondition(lambda self: self.broadcasting_leaders())
    @rule(data=st.data())
    def client_request(self, data: st.DataObject) -> None:
        """ClientRequest(i): the value is the number of the broadcast, so every transaction is unique."""
        i = data.draw(st.sampled_from(self.broadcasting_leaders()), label="i")
        self.proposed += 1
        self.route(i, self.core[i].client_request(b"v%d" % self.proposed))

    @precondition(lambda self: self.followers())
    @rule(data=st.data())
    def follower_timeout(self, data: st.DataObject) -> None:
        """FollowerTimeout(i)."""
        i = data.draw(st.sampled_from(self.followers()), label="i")
        self.faults += self.leader_connected(i)
        self.route(i, self.core[i].follower_timeout())

    @precondition(lambda self: self.leaders_without_quorum())
    @rule(data=st.data())
    def leader_timeout(self, data: st.DataObject) -> None:
        """LeaderTimeout(i)."""
        i = data.draw(st.sampled_from(self.leaders_without_quorum()), label="i")
        self.faults += self.leader_connected_quorum(i)
        self.route(i, self.core[i].leader_timeout())

    @precondition(lambda self: self.crashable())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """Crash(i): the power goes out (the disk keeps only what a sync made durable), a new process reads the
        disk and starts LOOKING."""
        i = data.draw(st.sampled_from(self.crashable()), label="i")
        self.faults += 1
        self.disk[i].crash()
        self.storage[i] = _storage(self.disk[i], i)
        self.core[i] = ZabCore(i, SERVERS, Persistent.from_storage(self.storage[i]))
        self.delivered[i] = []
        for peer in SERVERS:
            if peer != i:
                self.close(i, peer)

    def quiescent(self) -> bool:
        """No spec action is enabled: the run has reached a terminal state of the bounded model."""
        return not (
            self.leaders_to_be()
            or self.followers_to_be()
            or self.nonempty_channels()
            or self.broadcasting_leaders()
            or self.followers()
            or self.leaders_without_quorum()
            or self.crashable()
        )

    @precondition(lambda self: self.quiescent())
    @rule()
    def quiescence(self) -> None:
        """Not a spec action: with nothing left to do, every follower that is UPTODATE with a leader in BROADCAST has
        delivered exactly what the leader delivered (COMMIT and UPTODATE carried the leader's commit point to it),
        and a leader with a quorum of UPTODATE followers has committed its whole history: every transaction reached
        them either as a PROPOSAL they ACKed or in their sync, whose last transaction they ACK at UPTODATE (the
        liveness gap this closed: docs/core.md)."""
        for i, c in self.core.items():
            if c.state == ServerState.LEADING and c.zab_state == ZabState.BROADCAST:
                uptodate = {f for f, phase in c.learner_phase.items() if phase == LearnerPhase.UPTODATE}
                for f in uptodate:
                    leader_delivered = c.history[: c.last_committed]
                    assert self.delivered[f] == leader_delivered, f"follower {f} of {i}: {self.delivered[f]}"
                if c.is_quorum(uptodate | {i}):
                    assert c.last_committed == len(c.history), f"leader {i} left {c.history[c.last_committed:]}"

    # ------------------------------------------------------------------------------------------ invariants

    @invariant()
    def outputs_match_fields(self) -> None:
        """What a core delivered (Output.deliver) is history[1..lastCommitted]; its disk holds its persistent vars."""
        for s in SERVERS:
            c = self.core[s]
            assert self.delivered[s] == c.history[: c.last_committed], f"server {s}"
            assert self.storage[s].persistent() == c.persistent(), f"server {s}: storage != core"
            assert read_durable(f"/data/{s}", self.disk[s]).persistent() == c.persistent(), \
                f"server {s}: what the disk holds durably != core"

    @invariant()
    def agreement(self) -> None:
        """Seed 001, Agreement: any two servers' deliveries are prefixes of one another."""
        for p, q in itertools.combinations(SERVERS, 2):
            dp, dq = self.delivered[p], self.delivered[q]
            assert is_prefix(dp, dq) or is_prefix(dq, dp), f"servers {p} and {q} disagree: {dp} vs {dq}"

    @invariant()
    def total_order(self) -> None:
        """Seed 001, Total order: every server's deliveries, in every incarnation, are a prefix of one order."""
        for s in SERVERS:
            assert is_prefix(self.delivered[s], self.committed), f"server {s}: {self.delivered[s]} vs {self.committed}"

    @invariant()
    def local_primary_order(self) -> None:
        """Seed 001, Local primary order: <<e, c>> is delivered after <<e, c - 1>>."""
        seen: set[tuple[int, int]] = set()
        for t in self.committed:
            e, c = zxid_pair(t.zxid)
            assert c == 1 or (e, c - 1) in seen, f"{(e, c)} delivered before {(e, c - 1)}"
            seen.add((e, c))

    @invariant()
    def committed_never_lost(self) -> None:
        """Seed 004, Fig. 3: a delivered transaction is on the disks of a quorum."""
        for t in self.committed:
            holders = {s for s in SERVERS if t in read_durable(f"/data/{s}", self.disk[s]).history}
            assert is_quorum(holders), f"{t} is on the disks of {sorted(holders)} only"

    @invariant()
    def leader_uniqueness(self) -> None:
        """At most one established leader per epoch."""
        established = [
            c.current_epoch
            for c in self.core.values()
            if c.state == ServerState.LEADING and c.zab_state in (ZabState.SYNCHRONIZATION, ZabState.BROADCAST)
        ]
        assert len(established) == len(set(established)), f"two established leaders in one epoch: {established}"

    @invariant()
    def type_ok(self) -> None:
        for c in self.core.values():
            assert c.current_epoch <= c.accepted_epoch
            assert 0 <= c.last_committed <= len(c.history)
            assert (c.state == ServerState.LEADING) or all(p == LearnerPhase.NONE for p in c.learner_phase.values())


# About 10 s. Rules are filtered by their preconditions (the spec's enabling conditions) by design, hence the
# suppressed filter_too_much; too_slow because a step runs every invariant over three cores.
ZabModel.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestZabModel = ZabModel.TestCase
