"""A spec trace replayed against one real ZooKeeper server, the other servers played (issue 37).

Theory of operation
-------------------
The server under test (SUT) is the trace's first server that follows (a ``BecomeFollower(i, j)``), else its first
that leads; with ``every_seat``, each server that takes a role in the trace, one replay each (`seats_of`). It runs
as ZooKeeper server 1 of a 3-server configuration; the trace's other servers become 2 and 3 in
order (Zab.tla's servers are symmetric, so renaming them keeps the behaviour) and are played through
`conformance.zk.played`: each listens on its quorum port as a possible leader, has an election link dialed to the
real server, and connects to the real server's quorum port when it follows it.

Each step of the trace is one of three kinds:

* **a played server's step** (BecomeLeader, ClientRequest and Leader* of a played leader; a played follower's
  steps): nothing reaches the real server. The messages the step adds to a channel toward the SUT (``msgs[j][sut]``
  in the spec's state) are queued, written as ZooKeeper writes them (zxid ``[e, c]`` is ``e << 32 | c``; a
  PROPOSAL's data is a create of ``/zabref-<e>-<c>`` holding the value; LEADERINFO's data the protocol version;
  NEWLEADER's the configuration; FOLLOWERINFO's a LearnerInfo; ACKEPOCH's the epoch). A played follower that has
  taken UPTODATE sends the real leader a PING every 100 ms, as a learner answers its leader's;
* **a step of the SUT that takes a message** (``FollowerProcess<TYPE>(sut, j)``, or as leader
  ``LeaderProcess<TYPE>(sut, j)``): the head of the queue from ``j`` is written to the real server (a SNAP as
  ZooKeeper's leader sends one, `_send_snap`: its data tree, `conformance.zk.snapshot.write_snapshot`, a node a
  transaction, then the leader's outstanding proposals as PROPOSALs; a DIFF's or TRUNC's COMMITs as the spec's
  SyncPackets sends them, after each PROPOSAL the leader has committed or commits at its NEWLEADER quorum, as
  ZooKeeper's leader sends its committedLog; in a model with `NewLeaderDefers` the trace's NEWLEADER must leave
  staged what such a sync leaves a 3.9.3+ follower,
  `_deferral`), and what it sends back on
  that connection is read until it has sent the messages the spec's step adds toward ``j`` (type and zxid; a
  FOLLOWERINFO's sid, an ACKEPOCH's epoch; not UPTODATE's zxid, which no receiver reads: `ZXID_UNREAD`). A
  synchronization the real leader sends (DIFF, TRUNC or SNAP, through NEWLEADER) is compared by the history it
  leaves the follower with (`sync_result`), as validation compares one. Then its files must reach the spec's next
  state within `SETTLE` seconds (its threads may finish a step's writes after its messages; a step whose files
  lagged is noted): acceptedEpoch and currentEpoch, the transactions its files hold (its newest snapshot's and the
  logged ones after it, `conformance.zk.disk.history_zxids`) against ``history``, and after a COMMIT the last zxid
  it applied (``srvr``) against ``lastCommitted``. A step that takes a message and sends nothing back gives no sign
  of when the server has handled it, so its files must also stay in that state for `HOLD` seconds (`HOLD_WRITES`
  after a TRUNC or a NEWLEADER). What a follower
  sends for its clients (`CLIENT_TRAFFIC`: a session of the driver's client revalidated once the server follows)
  is noted and left out, as validation leaves it out;
* **a step of the SUT driven from outside**: BecomeFollower (the played leader's LEADING notification and a played
  follower's FOLLOWING one decide its election; it then connects and sends FOLLOWERINFO), BecomeLeader (both played
  servers vote for it with its own zxid and epoch; a LOOKING vote's answer says it decided LEADING), FollowerTimeout
  (its leader's connection is closed), LeaderTimeout (its followers' connections are closed; its LOOKING
  notification of a new round says it gave up), Crash (kill -9, and a new process on the same files). Before an
  election the driver waits for the real server's own LOOKING notification of a new round: a server that is not
  LOOKING only answers votes.

A message the real server sends that the spec's step does not, and one the spec sends that it does not, is a
departure, reported with the step's index, action and what was expected and seen -- unless it is one decided in
`DECIDED` (ZooKeeper's follower acknowledges UPTODATE; the spec's follower does not, and its leader would ignore the
ACK), or the order `EARLY_ACK` (ZOOKEEPER-4685: on the versions of `acks_before_newleader`, an ACK of a proposal of
the sync may overtake the ACK of NEWLEADER; it is noted and compared at the step whose message it is). A step the
driver cannot force yet ends the replay as *stopped*, with the step and why: the traces that stop say what the
driver still lacks. Every wait is bounded. Each outcome says what it reached of its trace (`reach`),
which `conformance.zk.coverage` sums into the run's coverage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import SpecFormatError
from conformance.graph.traces import Trace
from conformance.tla.labels import model_switch
from conformance.zk import WireError
from conformance.zk.disk import history_zxids, read_epochs
from conformance.zk.ensemble import ZkEnsemble, four_letter
from conformance.zk.observe import IGNORED, zxid_pair
from conformance.zk.payloads import decode_data
from conformance.zk.played import LEARNER_PROTOCOL, ElectionLink, PlayedLeader, QuorumLink, newleader_config
from conformance.zk.snapshot import write_snapshot
from conformance.zk.versions import acks_before_newleader, model_of
from zabref.core import payloads, zktxn
from zabref.net.zkwire import ZkNotification

__all__ = ["Outcome", "DECIDED", "EARLY_ACK", "sut_of", "seats_of", "replay_trace", "reach", "zxid_of", "sync_result",
           "run_traces", "summary", "model_note"]

#: What ZooKeeper sends that the spec does not, decided one by one: (after the SUT's step, message) -> why.
DECIDED = {("FollowerProcessUPTODATE", "ACK"): "ZooKeeper's Learner.syncWithLeader acknowledges UPTODATE with the "
                                               "new epoch's zxid; the spec's follower sends nothing, and a leader "
                                               "past NEWLEADER's quorum ignores the ACK. After a NEWLEADER that left "
                                               "proposals staged (NewLeaderDefers, 3.9.3+), ZooKeeper logs and ACKs "
                                               "each one, the spec the last only, which covers the others"}
#: A reordering decided as a ZooKeeper bug: the versions of `acks_before_newleader` log a sync's proposals at NEWLEADER
#: through the SyncRequestProcessor, whose ACK of one may overtake the QuorumPeer thread's ACK of NEWLEADER -- a race
#: inside the server that nothing outside steers. Such an ACK of a transaction the spec's follower holds after its
#: NEWLEADER is noted and compared at the step that sends it (UPTODATE's, `UptodateAcks`).
#: ZOOKEEPER-4785's fix (3.8.5, 3.9.2) removed the race.
EARLY_ACK = "ZOOKEEPER-4685"
#: What a follower sends its leader for its clients, and the leader's answer to a sync: no step of the traces
#: replayed here (Zab.tla's; validation keeps a sync's REQUEST and SYNC, against ZabSync.tla). A client of the real
#: server (the driver's, once it led) reconnects to it as a follower and its session is revalidated.
CLIENT_TRAFFIC = {"REVALIDATE": IGNORED["REVALIDATE"], "REQUEST": IGNORED["REQUEST"],
                  "SYNC": "a client's sync answered: the traces replayed here are of Zab.tla, which has no sync"}
#: Packets whose zxid the receiver does not read, so that it is not compared: UPTODATE (ZooKeeper's leader sends -1,
#: the spec's its last zxid; Learner.syncWithLeader reads only the type).
ZXID_UNREAD = {"UPTODATE"}
#: The packets that begin a synchronization (through NEWLEADER): compared by what they leave the follower with.
SYNC_HEADS = ("DIFF", "TRUNC", "SNAP")
#: The SUT's steps, as leader, that take one message from a played follower.
LEADER_TAKES = ("LeaderProcessFOLLOWERINFO", "LeaderProcessACKEPOCH", "LeaderProcessACKNEWLEADER", "LeaderProcessACK")
STATE_LEADING = 2
#: The SUT's steps that take one message from the leader's channel.
TAKES = ("FollowerProcessLEADERINFO", "FollowerProcessDIFF", "FollowerProcessSNAP", "FollowerProcessTRUNC",
         "FollowerProcessNEWLEADER", "FollowerProcessUPTODATE",
         "FollowerProcessPROPOSAL", "FollowerProcessCOMMIT", "FollowerProcessPROPOSALInSync",
         "FollowerProcessCOMMITInSync")
REPLY_TIMEOUT = 10.0
#: How long the real server's files may take to reach the spec's next state after its step's messages.
SETTLE = 2.0
#: How long the files must stay in the spec's state after a step that takes a message and sends nothing back.
HOLD = 0.15
#: The same for the steps that change the files most (a TRUNC's truncation, NEWLEADER's writes): rare in a trace,
#: and a loaded machine (the test command's workers) can delay those writes past `HOLD`, where the next step's state
#: may no longer show them (a truncation at TRUNC is the spec's own by NEWLEADER in ci).
HOLD_WRITES = 0.5
SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
#: The real server's initLimit and syncLimit, in ticks of 200 ms: 5 s each, so that a loaded machine (the test
#: command's workers beside it) does not make it give up between two steps; a LeaderTimeout with no follower waits
#: for the real leader's own initLimit.
INIT_LIMIT = SYNC_LIMIT = 25


@dataclass
class Outcome:
    """How a trace went: ``followed`` every step; or ``stopped`` at a step the driver cannot force yet; or
    ``departed`` at a step where the real server did not do what the spec did."""

    trace: str
    steps: int
    done: int = 0  # steps carried out and compared
    verdict: str = "followed"
    at: int | None = None
    action: str | None = None
    why: str = ""
    decided: list[str] = field(default_factory=list)
    lagged: list[str] = field(default_factory=list)  # steps whose files reached the spec's state late (`SETTLE`)
    synced: list[str] = field(default_factory=list)  # the real leader's synchronizations, as ZooKeeper made them
    # what the run reached of the trace (`conformance.zk.coverage`): the model, the server under test, and the edge
    # labels (action instances) and state-graph edges of the steps carried out, those of the real server's own
    # steps among them, and the labels of the steps not reached
    config: str = ""
    sut: int | None = None
    reached: list[str] = field(default_factory=list)
    own: list[str] = field(default_factory=list)
    edges: list[list[int]] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def line(self) -> str:
        where = "" if self.at is None else f" at step {self.at} ({self.action})"
        return f"{self.verdict:<8} {self.done}/{self.steps} steps{where}{': ' + self.why if self.why else ''}"


class _Stop(Exception):
    pass


class _Departure(Exception):
    pass


def zxid_of(z: list[int]) -> int:
    return (z[0] << 32) | z[1]


def sut_of(trace: Trace) -> int | None:
    """The trace's server under test: the first that follows, else the first that leads; None if none does."""
    for action in ("BecomeFollower", "BecomeLeader"):
        for step in trace.steps[1:]:
            if step.action == action:
                return int(step.params["i"])
    return None


def seats_of(trace: Trace) -> list[int]:
    """Every server that takes a role in the trace (follows or leads), `sut_of`'s first, then by first role."""
    first = sut_of(trace)
    seats = [int(s.params["i"]) for s in trace.steps[1:] if s.action in ("BecomeFollower", "BecomeLeader")]
    return list(dict.fromkeys(([first] if first is not None else []) + seats))


class _Replay:
    def __init__(self, trace: Trace, ensemble: ZkEnsemble, sut: int) -> None:
        self.trace, self.e, self.sut = trace, ensemble, sut
        others = sorted({int(s) for s in range(1, len(trace.steps[0].state["state"]) + 1)} - {sut})
        self.zk_id = {sut: 1, **{s: k for k, s in enumerate(others, 2)}}  # trace server -> ZooKeeper sid
        self.config = newleader_config(ensemble.members)
        self.leaders: dict[int, PlayedLeader] = {}
        self.links: dict[int, ElectionLink] = {}
        self.quorum: QuorumLink | None = None
        self.leader: int | None = None  # the played leader the SUT follows (trace server)
        self.queue: dict[int, list[dict[str, Any]]] = {}  # trace server j -> messages j -> sut not yet written
        self.round = 0  # the real server's last election round the driver decided
        self.leading = False  # the real server decided LEADING (the driver plays its followers)
        self.learners: dict[int, QuorumLink] = {}  # played followers' connections to the real leader
        self.queue_to_sut: dict[int, list[dict[str, Any]]] = {}  # played follower j -> messages to the leader
        self.tasks: list[asyncio.Task[None]] = []
        self.pending: set[int] = set()  # played servers following the real server before it decided to lead
        self.client: Any = None  # a kazoo client of the real leader (`_client_request`)
        self.outcome = Outcome(trace_name(trace), len(trace.steps) - 1)
        # the trace's model lets NEWLEADER leave the new epoch's proposals staged, and so does the real server's
        # version (3.9.3+, `_deferral`); a version that logs them all there follows the traces that defer nothing
        try:
            self.defers = (model_switch(SPEC_DIR, trace.header.config, "NewLeaderDefers")
                           and model_switch(SPEC_DIR, model_of(ensemble.distribution.version), "NewLeaderDefers"))
        except SpecFormatError as e:
            raise SpecFormatError(f"trace {trace_name(trace)} names its model {trace.header.config!r}: {e}") from None
        self.sync_open = 0  # proposals of the sync in progress sent without a COMMIT
        # the real server's version may ACK a proposal of its sync before it ACKs NEWLEADER (ZOOKEEPER-4685's order)
        self.version = ensemble.distribution.version
        self.acks_early = acks_before_newleader(self.version)

    # -------------------------------------------------------------------------------------------- set-up

    async def start(self) -> None:
        for s, z in self.zk_id.items():
            if s != self.sut:
                self.leaders[s] = await PlayedLeader(self.e.member(z).quorum_port, z).start()
        await self._dial()

    async def _dial(self) -> None:
        for link in self.links.values():
            link.close()
        self.links = {}
        zk = self.e.member(1)
        for s, z in self.zk_id.items():
            if s == self.sut:
                continue
            for _ in range(150):
                try:
                    self.links[s] = await ElectionLink.dial(zk, z, f"127.0.0.1:{self.e.member(z).election_port}")
                    break
                except OSError:
                    await asyncio.sleep(0.2)
            else:
                raise _Stop(f"ZooKeeper server 1 never listened on its election port {zk.election_port}")

    async def close(self) -> None:
        await asyncio.to_thread(self._stop_client)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for link in [*self.links.values(), *self.learners.values()]:
            link.close()
        if self.quorum is not None:
            self.quorum.close()
        for leader in self.leaders.values():
            await leader.close()

    # -------------------------------------------------------------------------------------------- steps

    async def run(self) -> Outcome:
        steps = self.trace.steps
        for k in range(1, len(steps)):
            before, step = steps[k - 1].state, steps[k]
            try:
                await self._step(step.action, {p: int(v) for p, v in step.params.items()}, before, step.state)
            except _Stop as e:
                self._end("stopped", k, step.action, str(e))
                return self.outcome
            except _Departure as e:
                self._end("departed", k, step.action, str(e))
                return self.outcome
            except (TimeoutError, ConnectionError, WireError) as e:
                self._end("departed", k, step.action, f"{type(e).__name__}: {e}")
                return self.outcome
            self.outcome.done = k
        return self.outcome

    def _end(self, verdict: str, k: int, action: str, why: str) -> None:
        self.outcome.verdict, self.outcome.at, self.outcome.action, self.outcome.why = verdict, k, action, why

    async def _step(self, action: str, p: dict[str, int], before: dict, after: dict) -> None:
        sut = self.sut
        if p.get("i") != sut:  # a played server's step
            if action == "BecomeFollower" and p["j"] == sut:
                await self._learner_joins(p["i"])
            elif action == "FollowerProcessUPTODATE" and p["j"] == sut:
                self._learner_pings(p["i"])
            self._queue(before, after)
            return
        if action == "BecomeFollower":
            await self._become_follower(p["j"], after)
        elif action in TAKES:
            await self._take(action, p["j"], before, after)
        elif action == "FollowerTimeout":
            await self._timeout()
        elif action == "Crash":
            await self._crash()
        elif action == "BecomeLeader":
            await self._become_leader(before)
        elif action in LEADER_TAKES:
            await self._leader_take(action, p["j"], before, after)
        elif action == "LeaderTimeout":
            await self._leader_timeout()
        elif action == "ClientRequest":
            await self._client_request(before, after)
        else:
            raise _Stop(f"{action} of the server under test is not driven yet")
        self._queue(before, after, skip_from=sut)
        # a message taken with nothing sent back: no reply says the server has handled it, so its files are also
        # watched for `HOLD` seconds after they match (a change in that time would otherwise go unseen); a TRUNC and
        # a NEWLEADER for `HOLD_WRITES`, NEWLEADER although it is answered: a follower may ACK it before its log
        # thread writes what the sync brought (3.8's Learner.syncWithLeader hands the proposals to the asynchronous
        # SyncRequestProcessor, then ACKs)
        silent = action in TAKES and all(len(a) <= len(b) for a, b in zip(after["msgs"][sut - 1],
                                                                           before["msgs"][sut - 1]))
        writes = action in ("FollowerProcessTRUNC", "FollowerProcessNEWLEADER")
        await self._settle(action, after, HOLD_WRITES if writes else HOLD if silent else 0.0)

    # -------------------------------------------------------------------------------------------- the leader role

    async def _looking(self, via: int) -> ZkNotification:
        """The real server's LOOKING notification of a round above the last one the driver decided (it is LOOKING)."""
        while True:
            n = await self.links[via].recv(REPLY_TIMEOUT * 3)
            if n.state == 0 and n.election_epoch > self.round:
                return n

    async def _become_leader(self, before: dict) -> None:
        """Both played servers vote for the real server, with its own zxid and epoch; it decides LEADING (after
        FastLeaderElection's finalize wait), which a played LOOKING vote then gets back as its answer."""
        i = self.sut - 1
        history = before["history"][i]
        zxid = zxid_of(history[-1]["zxid"]) if history else 0
        voters = sorted(self.links)
        n = await self._looking(voters[0])
        self.round = n.election_epoch
        for s in voters:
            self.links[s].send("LOOKING", 1, zxid, self.round, before["currentEpoch"][i], self.config)
        loop = asyncio.get_running_loop()
        end = loop.time() + REPLY_TIMEOUT
        while loop.time() < end:
            await asyncio.sleep(0.3)
            self.links[voters[0]].send("LOOKING", 1, zxid, self.round, before["currentEpoch"][i], self.config)
            try:
                while True:
                    answer = await self.links[voters[0]].recv(0.5)
                    if answer.state == STATE_LEADING:
                        self.leading = True
                        for j in sorted(self.pending):  # played servers that chose to follow it before
                            await self._connect_learner(j)
                        return
            except TimeoutError:
                continue
        raise _Departure(f"the real server did not decide LEADING within {REPLY_TIMEOUT} s of a quorum of votes")

    async def _learner_joins(self, j: int) -> None:
        """Played server j follows the real server: it connects to its quorum port (its FOLLOWERINFO is written when
        the leader's step takes it); if the real server has not decided to lead yet, once it has."""
        self.queue_to_sut[j] = []
        if not self.leading:
            self.pending.add(j)
            return
        await self._connect_learner(j)

    async def _connect_learner(self, j: int) -> None:
        z = self.zk_id[j]
        for _ in range(50):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.e.member(1).quorum_port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            raise _Departure(f"the real leader does not accept connections on its quorum port")
        old = self.learners.pop(j, None)
        if old is not None:
            old.close()
        self.learners[j] = QuorumLink(reader, writer, f"quorum link {z} -> leader 1", from_leader=True)
        self.pending.discard(j)

    def _learner_pings(self, j: int) -> None:
        """A synced played follower answers the real leader's PINGs in time: it sends one every 100 ms."""
        link = self.learners.get(j)
        if link is None:
            return

        async def ping() -> None:
            while not link.writer.is_closing():
                link.send("PING", 0, b"")
                await asyncio.sleep(0.1)

        self.tasks.append(asyncio.get_running_loop().create_task(ping()))

    async def _leader_take(self, action: str, j: int, before: dict, after: dict) -> None:
        link = self.learners.get(j)
        if link is None:
            raise _Departure(f"server {j} has no connection to the real leader")
        head = (self.queue_to_sut.get(j) or [None])[0]
        if head is None:
            raise _Departure(f"the spec's leader takes a message from {j}, none was queued")
        self.queue_to_sut[j].pop(0)
        z = zxid_of(head["zxid"])
        data: bytes | None = None
        if head["type"] == "FOLLOWERINFO":
            data = (self.zk_id[j].to_bytes(8, "big") + LEARNER_PROTOCOL.to_bytes(4, "big")
                    + (0).to_bytes(8, "big"))
        elif head["type"] == "ACKEPOCH":
            data = int(head["data"]).to_bytes(4, "big", signed=True)
        link.send(head["type"], z, data)
        new = after["msgs"][self.sut - 1][j - 1][len(before["msgs"][self.sut - 1][j - 1]):]
        await self._expect(new, action, link, sync=(before["history"][j - 1], before["history"][self.sut - 1]))

    async def _client_request(self, before: dict, after: dict) -> None:
        """A client's create reaches the real leader (a local session: no createSession proposal; the request is
        not waited for, its commit comes with the leader's later steps); the PROPOSALs it sends its followers are
        compared with the spec's."""
        if not self.leading:
            raise _Departure("a client request to the server under test, which does not lead")
        entry = after["history"][self.sut - 1][-1]
        if self.client is None:
            from kazoo.client import KazooClient  # noqa: PLC0415 -- optional: the dev extra

            logging.getLogger("kazoo").setLevel(logging.ERROR)
            self.client = KazooClient(hosts=f"127.0.0.1:{self.e.member(1).client_port}", timeout=REPLY_TIMEOUT)
            await asyncio.to_thread(self.client.start, REPLY_TIMEOUT)
        self.client.create_async(_node(entry["zxid"]), str(entry["value"]).encode())
        for j, link in sorted(self.learners.items()):
            new = after["msgs"][self.sut - 1][j - 1][len(before["msgs"][self.sut - 1][j - 1]):]
            await self._expect(new, "ClientRequest", link)

    def _stop_client(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            client.stop()
            client.close()

    async def _leader_timeout(self) -> None:
        """The real leader loses its quorum: its followers' connections close (or none ever came); it goes back to
        LOOKING, which its notification of a new round says."""
        for link in self.learners.values():
            link.close()
        self.learners = {}
        for task in self.tasks:
            task.cancel()
        self.leading = False
        await self._looking(sorted(self.links)[0])

    def _queue(self, before: dict, after: dict, skip_from: int | None = None) -> None:
        """Messages a played server's step added to its channel toward the SUT."""
        n = len(before["state"])
        for j in range(1, n + 1):
            if j == self.sut or j == skip_from:
                continue
            old, new = before["msgs"][j - 1][self.sut - 1], after["msgs"][j - 1][self.sut - 1]
            added = new[len(old):]  # a played step never takes from j -> sut: the old messages are a prefix
            if j in self.learners or j in self.pending:
                self.queue_to_sut.setdefault(j, []).extend(added)
            else:
                self.queue.setdefault(j, []).extend(added)

    async def _become_follower(self, j: int, after: dict) -> None:
        if j not in self.leaders:
            raise _Departure(f"the spec's leader {j} is not a played server")
        # the real server must be LOOKING before the played votes reach it (a FOLLOWING server only answers them):
        # it says so to every peer as it starts an election, with a round above the one it last decided in
        while True:
            n = await self.links[j].recv(REPLY_TIMEOUT * 3)
            if n.state == 0 and n.election_epoch > self.round:
                break
        self.round = n.election_epoch
        follower = next(s for s in self.links if s != j)
        z = self.zk_id[j]
        epoch = after["acceptedEpoch"][j - 1]
        self.links[j].send("LEADING", z, 0, self.round, epoch, self.config)
        self.links[follower].send("FOLLOWING", z, 0, self.round, epoch, self.config)
        self.leader = j
        self.queue[j] = []
        self.quorum = await self.leaders[j].learner(REPLY_TIMEOUT * 3)
        await self._expect([m for m in after["msgs"][self.sut - 1][j - 1]], "BecomeFollower")

    async def _take(self, action: str, j: int, before: dict, after: dict) -> None:
        if self.quorum is None or self.leader != j:
            raise _Departure(f"no quorum connection to the played leader {j}")
        head = (self.queue.get(j) or [None])[0]
        if head is None:
            raise _Departure(f"the spec takes a message from {j}, none was queued")
        self.queue[j].pop(0)
        data: bytes | None = None
        if head["type"] == "LEADERINFO":
            data = (0x10000).to_bytes(4, "big")
        elif head["type"] == "NEWLEADER":
            data = self.config.encode()
        elif head["type"] == "PROPOSAL":
            data = _proposal_data(head["zxid"], head["data"])
        if head["type"] in SYNC_HEADS:
            self.sync_open = 0
        if action == "FollowerProcessNEWLEADER":
            self._deferral(after)
        if head["type"] == "SNAP":
            self._send_snap(head["data"], j, before)
        else:
            self.quorum.send(head["type"], zxid_of(head["zxid"]), data)
        if action == "FollowerProcessPROPOSALInSync":
            self.sync_open += 1
        elif action == "FollowerProcessCOMMITInSync":
            self.sync_open -= 1
        if head["type"] == "UPTODATE":
            self.leaders[j].ping(self.quorum)
        if head["type"] in ("PROPOSAL", "COMMIT"):
            self.leaders[j].zxid = max(self.leaders[j].zxid, zxid_of(head["zxid"]))
        new = after["msgs"][self.sut - 1][j - 1][len(before["msgs"][self.sut - 1][j - 1]):]
        early: set[int] = set()
        if action == "FollowerProcessNEWLEADER" and self.acks_early:
            early = {zxid_of(t["zxid"]) for t in after["history"][self.sut - 1]}
        await self._expect(new, action, early=early)
        if action == "FollowerProcessCOMMIT":  # in a sync, a COMMIT is applied when ZooKeeper's follower chooses
            await self._applied(after)

    def _send_snap(self, history: list[dict[str, Any]], leader: int, state: dict[str, Any]) -> None:
        """The spec's SNAP of ``history`` sent as ZooKeeper's leader would send it (`LearnerHandler.syncFollower`):
        the SNAP packet at the leader's last processed zxid, its data tree (a node a transaction, as PROPOSALs
        create), then the leader's outstanding proposals as PROPOSALs of their own. ZooKeeper's snapshot is of the
        leader's data tree: before its NEWLEADER quorum, everything it loaded (its whole history, what the spec's
        leader will commit at that quorum); in broadcast, what it committed, and its last processed zxid is then at
        least ``<<epoch, 0>>`` (set when its epoch began, as the recorded runs show). The follower's history at
        NEWLEADER is the same as the spec's (spec/README.md, sync-snap); what differs is that it logs, and later
        acknowledges, the outstanding ones. ``state``: the spec's state when the leader sent the SNAP."""
        assert self.quorum is not None
        broadcast = state["zabState"][leader - 1] == "BROADCAST"
        cut = _applied(state, leader, len(history))
        head, tail = history[:cut], history[cut:]
        last = zxid_of(head[-1]["zxid"]) if head else 0
        self.quorum.send("SNAP", max(last, state["currentEpoch"][leader - 1] << 32) if broadcast else last)
        self.quorum.writer.write(write_snapshot(
            [(_node(t["zxid"]), str(t["value"]).encode(), zxid_of(t["zxid"])) for t in head]))
        for t in tail:
            self.quorum.send("PROPOSAL", zxid_of(t["zxid"]), _proposal_data(t["zxid"], t["value"]))
        self.sync_open += len(tail)

    def _deferral(self, after: dict) -> None:
        """Before the real follower takes NEWLEADER, in a trace of a model with `NewLeaderDefers` (cizk39) on a
        version that defers (3.9.3+, `model_of`): the trace leaves d transactions staged, ZooKeeper the proposals its
        sync did not COMMIT (`sync_open`; a ZooKeeper leader COMMITs there every proposal it had committed). Another
        d is a choice of the spec that no ZooKeeper leader's sync makes such a follower take: the replay stops
        there. (A version that logs everything at NEWLEADER is compared as it is: a trace that defers is then a
        departure at that step.)"""
        if not self.defers:
            return
        d = len(after["stagedHistory"][self.sut - 1])
        if d != self.sync_open:
            raise _Stop(f"the trace's NEWLEADER leaves {d} transaction(s) staged; a ZooKeeper leader's sync leaves a "
                        f"3.9.3+ follower {self.sync_open} (the proposals it did not COMMIT)")

    async def _expect(self, expected: list[dict[str, Any]], action: str, link: QuorumLink | None = None,
                      sync: tuple[list, list] | None = None, early: Collection[int] = frozenset()) -> None:
        """Read what the real server sends on ``link`` (default: to its leader) until it has sent ``expected`` (in
        order); decided extras are noted. A synchronization the spec sends (DIFF, TRUNC or SNAP through NEWLEADER)
        is compared by what it leaves the follower with (`_expect_sync`); ``sync``: the follower's and the leader's
        histories before the step. ``early``: zxids whose ACK may come before an ACK the spec sends here, read
        then handed back to the link for the step that sends it (`EARLY_ACK`)."""
        link = link or self.quorum
        assert link is not None
        k = 0
        while k < len(expected):
            m = expected[k]
            k += 1
            if m["type"] in SYNC_HEADS and sync is not None:
                end = next((n for n in range(k, len(expected)) if expected[n]["type"] == "NEWLEADER"), None)
                if end is None:
                    raise _Departure(f"the spec's {m['type']} is not followed by NEWLEADER in the same step")
                await self._expect_sync(expected[k - 1:end + 1], link, *sync)
                k = end + 1
                continue
            ahead: list[tuple[str, Any]] = []
            while True:
                name, got = await link.recv(REPLY_TIMEOUT)
                if name == "ACK" == m["type"] and got.zxid != zxid_of(m["zxid"]) and got.zxid in early:
                    ahead.append((name, got))
                    self.outcome.decided.append(f"{action}: ACK 0x{got.zxid:x} before the ACK of NEWLEADER "
                                                f"0x{zxid_of(m['zxid']):x} ({EARLY_ACK}, {self.version})")
                    continue
                if (action, name) in DECIDED and not (name == m["type"] and got.zxid == zxid_of(m["zxid"])):
                    self.outcome.decided.append(f"{action}: {name} 0x{got.zxid & (1 << 64) - 1:x}")
                    continue
                if name in CLIENT_TRAFFIC:  # a client's session or request, not a step of the spec
                    self.outcome.decided.append(f"{action}: {name} (client traffic: {CLIENT_TRAFFIC[name]})")
                    continue
                break
            if name != m["type"] or (got.zxid != zxid_of(m["zxid"]) and name not in ZXID_UNREAD):
                raise _Departure(f"the spec sends {m['type']} zxid {m['zxid']}; ZooKeeper sent {name} "
                                 f"0x{got.zxid & (1 << 64) - 1:x}")
            link.hand_back(ahead)
            fields = decode_data(got.type, got.data, False, name)
            if name == "FOLLOWERINFO" and fields.get("sid") != self.zk_id[self.sut]:
                raise _Departure(f"FOLLOWERINFO names server {fields.get('sid')}")
            if name == "ACKEPOCH" and fields.get("currentEpoch") != m["data"]:
                raise _Departure(f"ACKEPOCH says currentEpoch {fields.get('currentEpoch')}, the spec {m['data']}")
        if (action, "ACK") in DECIDED:  # the extra comes after the spec's messages, if any: take it now
            try:
                name, got = await link.recv(1.0)
                self.outcome.decided.append(f"{action}: {name} 0x{got.zxid & (1 << 64) - 1:x}")
            except TimeoutError:
                pass

    async def _expect_sync(self, spec: list[dict[str, Any]], link: QuorumLink, follower: list, leader: list) -> None:
        """The real leader's synchronization of a played follower, read up to its NEWLEADER, against the spec's
        ``spec`` (a DIFF, TRUNC or SNAP, PROPOSALs, NEWLEADER): equal when both leave the follower with the same
        transactions and name the same new epoch (`sync_result`). The kind and a DIFF's zxid are not compared: no
        learner reads a DIFF's zxid, and which kind reaches a history is the leader's choice of means (its
        committedLog and snapshot, ZooKeeper's `LearnerHandler.syncFollower`): ZooKeeper's SNAP carries its
        *committed* state and sends an outstanding proposal after it as a PROPOSAL of its own, the spec's SNAP the
        leader's whole history. Validation compares a sync the same way (`SyncAgree` in
        conformance/validate/zkmodule.py). A DIFF's or TRUNC's COMMITs must name the PROPOSALs the spec's COMMIT
        (SyncPackets: what the leader has committed, or all it holds before its NEWLEADER quorum)."""
        got: list[dict[str, Any]] = []
        commits: list[int] = []
        while True:
            name, p = await link.recv(REPLY_TIMEOUT)
            if name == "COMMIT" and got:
                commits.append(p.zxid)
                continue
            got.append({"type": name, "zxid": zxid_pair(p.zxid)})
            if name == "NEWLEADER":
                break
            if name not in (*SYNC_HEADS, "PROPOSAL") or (len(got) == 1) != (name in SYNC_HEADS):
                raise _Departure(f"ZooKeeper's synchronization holds {name} 0x{p.zxid & (1 << 64) - 1:x} after "
                                 f"{[g['type'] for g in got[:-1]]}; the spec sends {[m['type'] for m in spec]}")
        want, have = sync_result(spec, follower, leader), sync_result(got, follower, leader)
        if want != have or spec[-1]["zxid"] != got[-1]["zxid"]:
            raise _Departure(f"the spec's {spec[0]['type']} leaves the follower with {_hexes(want)} at NEWLEADER "
                             f"{spec[-1]['zxid']}; ZooKeeper's {got[0]['type']} 0x{zxid_of(got[0]['zxid']):x} "
                             f"(+{len(got) - 2} packets) with {_hexes(have)} at NEWLEADER {got[-1]['zxid']}")
        spec_commits = [zxid_of(m["zxid"]) for m in spec if m["type"] == "COMMIT"]
        if got[0]["type"] != "SNAP" and spec[0]["type"] != "SNAP" and commits != spec_commits:
            raise _Departure(f"ZooKeeper's {got[0]['type']} COMMITs {_hexes(commits)}; the spec's "
                             f"{spec[0]['type']} {_hexes(spec_commits)}")
        self.outcome.synced.append(f"{spec[0]['type']} as {got[0]['type']} 0x{zxid_of(got[0]['zxid']):x}"
                                   f"{' + ' + str(len(got) - 2) + ' PROPOSAL' if len(got) > 2 else ''}")

    async def _applied(self, after: dict) -> None:
        k = after["lastCommitted"][self.sut - 1]
        want = zxid_of(after["history"][self.sut - 1][k - 1]["zxid"]) if k else 0
        seen = None
        for _ in range(50):
            seen = int(_srvr(self.e.member(1).client_port).get("Zxid", "0x-1"), 16)
            if seen == want:
                return
            await asyncio.sleep(0.1)
        raise _Departure(f"applied up to 0x{seen:x}, the spec's lastCommitted is 0x{want:x}")

    async def _timeout(self) -> None:
        if self.quorum is not None:
            self.quorum.close()
            self.quorum = None
        if self.leader is not None:
            self.queue[self.leader] = []
        self.leader = None

    async def _crash(self) -> None:
        self.e.kill(1)
        await asyncio.to_thread(self._stop_client)
        self.quorum, self.leader = None, None
        self.queue = {}
        for link in self.learners.values():
            link.close()
        self.learners, self.queue_to_sut, self.leading = {}, {}, False
        self.pending = set()
        self.e.start_server(1)
        self.round = 0  # a new process starts its elections at round 1 again
        await self._dial()

    async def _settle(self, action: str, after: dict, hold: float = 0.0) -> None:
        """The real server's files reach the spec's next state within `SETTLE` seconds (its threads finish a step's
        writes after its messages: a leader's currentEpoch is written by its main thread while a LearnerHandler
        already sends NEWLEADER; a txnlog it has just created may not hold its header yet), and then stay in it for
        ``hold`` seconds; a step whose files lagged is noted in the outcome."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for attempt in itertools.count():
            try:
                self._compare_files(after)
            except (_Departure, WireError):  # a file ZooKeeper has just created may not hold its header yet
                if loop.time() - start > SETTLE:
                    raise
                await asyncio.sleep(0.02)
                continue
            if attempt:
                self.outcome.lagged.append(f"{action}: {1000 * (loop.time() - start):.0f} ms")
            break
        end = loop.time() + hold
        while loop.time() < end:
            await asyncio.sleep(0.02)
            try:
                self._compare_files(after)
            except _Departure as e:
                raise _Departure(f"{e} (within {hold} s after matching the spec's state)") from None
            except WireError:  # a txnlog just created, header not yet written: the next look decides
                continue

    def _compare_files(self, after: dict) -> None:
        i = self.sut - 1
        data = self.e.data_dir(1)
        epochs = read_epochs(data)
        for name in ("acceptedEpoch", "currentEpoch"):
            have = epochs[name] or 0
            if have != after[name][i]:
                raise _Departure(f"{name} on disk is {have}, the spec's {after[name][i]}")
        logged = history_zxids(data)
        spec = [zxid_of(t["zxid"]) for t in after["history"][i]]
        if logged != spec:
            raise _Departure(f"the files hold {[hex(z) for z in logged]}, the spec's history "
                             f"{[hex(z) for z in spec]}")


def _node(zxid: list[int]) -> str:
    """The node a played or driven transaction creates (`zabref.core.zktxn.node_of`)."""
    return zktxn.node_of(zxid_of(zxid))


def _proposal_data(zxid: list[int], value: Any) -> bytes:
    """A played PROPOSAL's data, as zabref's leader writes it: the create of the transaction's own node, holding its
    value."""
    return payloads.encode_proposal_data(zxid_of(zxid), str(value).encode())


def _applied(state: dict, leader: int, length: int) -> int:
    """How many of the first ``length`` transactions of the spec's ``leader``'s history a ZooKeeper leader in its
    place has applied: in broadcast, what the spec's leader delivered; before its NEWLEADER quorum, all it loaded
    (the spec's leader commits its whole history at that quorum)."""
    if state["zabState"][leader - 1] != "BROADCAST":
        return length
    return min(state["lastCommitted"][leader - 1], length)


def _hexes(zxids: list[int]) -> str:
    return "[" + ", ".join(f"0x{z:x}" for z in zxids) + "]"


def sync_result(packets: list[dict[str, Any]], follower: list, leader: list) -> list[int]:
    """The zxids a follower whose history is ``follower`` holds after the synchronization ``packets`` (a DIFF, TRUNC
    or SNAP, then PROPOSALs; a NEWLEADER at the end is not read) from a leader whose history is ``leader``: DIFF keeps
    the follower's history, TRUNC(z) keeps what is at or below z, SNAP(z) gives the leader's up to z; each PROPOSAL is
    appended. Histories are lists of {"zxid": [e, c], ...}; zxids as ZooKeeper's 64-bit numbers."""
    head, z = packets[0]["type"], zxid_of(packets[0]["zxid"])
    if head == "DIFF":
        base = [zxid_of(t["zxid"]) for t in follower]
    elif head == "TRUNC":
        base = [zxid_of(t["zxid"]) for t in follower]
        base = base[:next((k for k, x in enumerate(base) if x > z), len(base))]
    elif head == "SNAP":
        base = [zxid_of(t["zxid"]) for t in leader if zxid_of(t["zxid"]) <= z]
    else:
        raise ValueError(f"not a synchronization: {head}")
    return base + [zxid_of(p["zxid"]) for p in packets[1:] if p["type"] == "PROPOSAL"]


def _srvr(port: int) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in four_letter(port, "srvr").splitlines() if ": " in line)


def trace_name(trace: Trace) -> str:
    return trace.header.covers[0] if trace.header.covers else "trace"


async def _replay(trace: Trace, ensemble: ZkEnsemble, sut: int) -> Outcome:
    r = _Replay(trace, ensemble, sut)
    try:
        try:
            await r.start()
        except _Stop as e:
            r._end("stopped", 0, "Init", str(e))
            return r.outcome
        return await r.run()
    finally:
        await r.close()


def replay_trace(trace: Trace, folder: Path, base_port: int, *, timeout: float = 120.0,
                 distribution: Any = None, sut: int | None = None) -> Outcome:
    """Replay ``trace`` with a new ZooKeeper server 1 (files under ``folder``) as its server under test: ``sut``,
    else `sut_of`."""
    sut = sut_of(trace) if sut is None else sut
    if sut is None:
        return reach(Outcome(trace_name(trace), len(trace.steps) - 1, 0, "stopped", 1, trace.steps[1].action,
                             "no server follows or leads in this trace"), trace, None)
    if Path(folder).exists() and any(Path(folder).iterdir()):
        raise ValueError(f"{folder}: not empty (a server under test starts from empty files)")
    e = ZkEnsemble(folder, base_port, len(trace.steps[0].state["state"]), tick_time_ms=200, heap_mb=256,
                   distribution=distribution, extra_config=("localSessionsEnabled=true",), init_limit=INIT_LIMIT,
                   sync_limit=SYNC_LIMIT)
    try:
        e.start_server(1)
        return reach(asyncio.run(asyncio.wait_for(_replay(trace, e, sut), timeout)), trace, sut)
    finally:
        e.stop()


def reach(o: Outcome, trace: Trace, sut: int | None) -> Outcome:
    """``o`` with what it reached of ``trace`` with the real server in ``sut``'s seat: the steps 1..``o.done`` were
    carried out and compared."""
    done, steps = trace.steps[1:o.done + 1], trace.steps[o.done + 1:]
    o.config, o.sut = trace.header.config, sut
    o.reached = [s.label or s.action for s in done]
    o.own = [s.label or s.action for s in done if o.sut is not None and s.params.get("i") == o.sut]
    o.edges = [[a.node, b.node] for a, b in zip(trace.steps[:o.done], done)]
    o.left = [s.label or s.action for s in steps]
    return o


def run_traces(paths: list[Path], version: str, work: Path, echo: Any = print, *,
               every_seat: bool = False) -> list[Outcome]:
    """Replay each trace file against a new ZooKeeper ``version`` server, one at a time, in the seat of `sut_of` or
    (``every_seat``) in each seat of `seats_of` in turn; a line per replay."""
    from conformance.graph.traces import read_trace  # noqa: PLC0415 -- the trace reader pulls in the pipeline
    from conformance.zk.versions import resolve  # noqa: PLC0415 -- fetches a version on first use
    from zabref.net.ports import find_free_base_port, release_base_port  # noqa: PLC0415

    dist = resolve(version, echo=echo)
    shutil.rmtree(work, ignore_errors=True)  # a former run's kept files would be the new servers' data
    out = []
    for k, path in enumerate(paths):
        trace = read_trace(path)
        seats = (seats_of(trace) or [None]) if every_seat else [sut_of(trace)]
        for sut in seats:
            folder = work / (f"{k:05d}" if not every_seat else f"{k:05d}-{sut}")
            base = find_free_base_port(3)
            try:
                o = replay_trace(trace, folder, base, distribution=dist, sut=sut)
            finally:
                release_base_port(base)
            o.trace = path.name
            if o.verdict != "departed":  # a departure's files stay for reading; the others' go
                shutil.rmtree(folder, ignore_errors=True)
            echo(f"{o.verdict.upper():<8} {path.name}{f' as server {sut}' if every_seat else ''}: {o.line()}")
            out.append(o)
    return out


def model_note(outcomes: list[Outcome], version: str) -> str | None:
    """A line for traces of a Zab model other than ``version``'s own (`model_of`; ci's are the seed's follower):
    their departures at a TRUNC or a NEWLEADER may be the difference between the models, decided in
    docs/zookeeper.md, not news. None when every trace is of the version's model or of no Zab model."""
    own = model_of(version)
    others = sorted({o.config for o in outcomes if o.config and o.config != own and not o.config.startswith("fle")})
    if not others:
        return None
    count = sum(o.config in others for o in outcomes)
    return (f"note: ZooKeeper {version}'s follower is model {own}'s (spec/README.md, departures 11 and 12); {count} "
            f"replay{'s' if count != 1 else ''} here {'are' if count != 1 else 'is'} of {', '.join(others)}, whose "
            f"TRUNC and NEWLEADER differ from it (docs/zookeeper.md: a departure there may be that difference)")


def summary(outcomes: list[Outcome], version: str) -> str:
    """One line: how many traces were followed, stopped and departed, and the steps carried out of all."""
    count = {v: sum(1 for o in outcomes if o.verdict == v) for v in ("followed", "stopped", "departed")}
    done, steps = sum(o.done for o in outcomes), sum(o.steps for o in outcomes)
    return (f"conform --system zookeeper@{version}: traces={len(outcomes)} followed={count['followed']} "
            f"stopped={count['stopped']} departed={count['departed']} steps={done}/{steps}")
