"""The client protocol's decisions for a `zabref.core.node.Node`: submit, sync, forwarded replies and reads.

Theory of operation: the leader runs ClientRequest for a submitted value and answers once the transaction is
delivered here; a follower forwards a submit to its leader's client port and answers once the transaction is
delivered HERE, so that a later read here sees it. A sync takes spec/ZabSync.tla's steps on the quorum connection,
as ZooKeeper's does: the follower sends REQUEST of op sync (`ClientSync`) and keeps its client waiting, in order;
the leader keeps the sync in ``pending_syncs`` (`LeaderProcessREQUEST`) and answers SYNC once everything it had
proposed is committed and a quorum has answered a PING sent after the sync arrived (`LeaderSendSYNC`, the PING round
under ``SyncConfirms``); the follower answers its oldest waiting client with what it has delivered then, every COMMIT
sent before the SYNC taken before it (`FollowerProcessSYNC`). A sync at the leader itself waits for the same
confirmation (`client_sync`). Requests wait in `_waiting` (by zxid, answered in zxid order as deliveries come) and
expire after ``Timing.submit_timeout_s`` with "outcome unknown". `ClientRequests` is a part of `Node` (a mixin): it
uses the node's core, timing, learner connections and PING counts.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from typing import Any

from mypy_extensions import trait

from zabref.core import payloads, zkprep, zktxn
from zabref.core.effects import READ_LIMIT, Action, Effects, EffectsBuilder, refused
from zabref.core.nodeparts import NodeParts
from zabref.core.packets import PacketType, QuorumPacket, ServerState
from zabref.core.types import FORWARDING_PHASES
from zabref.core.zab import ZabState
from zabref.errors import RemoteProtocolError

__all__ = ["ClientRequests"]


@trait
class ClientRequests(NodeParts):
    """The client half of `Node` (module docstring)."""

    # What else it uses of its node, which sets them (`zabref.core.node.Node.__init__`): declared here for the type
    # checker only (no value: nothing at run time).
    learner_conns: set[int]
    _waiting: dict[int, list[tuple[int, float]]]
    _waiting_zxids: list[int]
    _forwarded: dict[int, float]
    pings: dict[int, list[int]]
    step_pings: dict[int, list[int]]
    _syncs: list[tuple[int, int, dict[int, int], float]]
    pending_syncs: deque[tuple[int, int, dict[int, int]]]
    follower_syncs: deque[tuple[int | None, float]]

    def client_submit(self, rid: int, value: bytes, now: float) -> Effects:
        """A client's value: ClientRequest at the leader; a follower forwards it. Answered once delivered here."""
        out = EffectsBuilder()
        core = self.core
        if core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST:
            output = core.client_request(value)
            self._wait(core.last_zxid, rid, now + self.timing.submit_timeout_s)  # the transaction just appended
            self._core(out, output, now, "ClientRequest", i=self.sid)
        elif core.state == ServerState.FOLLOWING and core.zab_state == ZabState.BROADCAST:
            self._forwarded[rid] = now + self.timing.submit_timeout_s
            out.forwards.append((rid, core.leader, {"op": "submit", "value": value.decode("utf-8")}))
        else:
            out.answers.append((rid, self._not_serving()))
        return out.build()

    def client_sync(self, rid: int, now: float) -> Effects:
        """Answered once this server has delivered what its leader had committed when the sync reached it.

        A leader answers only once a quorum has confirmed that it still leads: it PINGs every learner and waits
        until a quorum (itself included) has answered a PING sent after the sync arrived. A leader cut off from
        its followers may not know yet that others elected a new leader and committed more; its own commit point
        would then be stale (the fault runner's read checker found exactly that). A confirming follower had
        accepted this leader's epoch and still followed it after the sync arrived (`_ping_answered`), and a new
        leader commits only with a quorum that accepted a later epoch first, so nothing was committed elsewhere
        before the sync arrived (Raft's ReadIndex makes the same argument, a term in each answer). A follower sends
        the sync to its leader (`ClientSync`), which confirms it the same way (`leader_process_request`)."""
        out = EffectsBuilder()
        core = self.core
        if core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST:
            marks, _ = self._ping_all(out, step=False)
            self._syncs.append((rid, self.committed_zxid, marks, now + self.timing.submit_timeout_s))
            self._confirm_syncs(out)
        elif core.state == ServerState.FOLLOWING and core.zab_state == ZabState.BROADCAST and not self.leader_lost:
            # ClientSync(i): REQUEST of op sync in ZooKeeper's form, of no session (sessionId and cxid 0)
            self.follower_syncs.append((rid, now + self.timing.submit_timeout_s))
            request = payloads.encode_request_data(0, 0, payloads.OP_SYNC, "/")
            out.send.append((core.leader, QuorumPacket(PacketType.REQUEST, -1, request)))
            out.actions.append(Action("ZabSync", "ClientSync", (("i", self.sid),)))
        else:
            out.answers.append((rid, self._not_serving()))
        return out.build()

    def leader_process_request(self, peer: int, packet: QuorumPacket, now: float, tag: int | None = None) -> Effects:
        """LeaderProcessREQUEST(i, j): learner ``peer`` forwarded a client's sync (ZooKeeper's Leader.processSync).
        It waits in ``pending_syncs`` until everything this leader has proposed is committed and a quorum has
        answered a PING sent now (`LeaderSendSYNC`). A ZooKeeper follower's REQUEST of a write is its client's
        request to this leader: ClientRequest, its value the transaction ZooKeeper's leader would propose for it
        (`zabref.core.zkprep`, prepared against the tree of this leader's history, `zabref.core.zktree`); the
        follower answers its client when it applies it. A session's request (global sessions) is refused as the
        connection's error."""
        core = self.core
        if core.state != ServerState.LEADING or core.zab_state != ZabState.BROADCAST or peer not in self.pings:
            raise RemoteProtocolError(peer, f"server {self.sid}: REQUEST from {peer}, but no established leadership "
                                            "of this server has it as a learner")
        session, cxid, op, record = payloads.decode_request_data(packet.data)
        out = EffectsBuilder()
        if op != payloads.OP_SYNC:
            try:
                self.zk_propose(out, session, cxid, op, record, now)
            except zkprep.RequestRefused as e:
                raise RemoteProtocolError(peer, f"server {self.sid}: REQUEST of op {op} from {peer}: {e}") from None
            return out.build()
        out.actions.append(Action("ZabSync", "LeaderProcessREQUEST", (("i", self.sid), ("j", peer)), packet, tag))
        _, marks = self._ping_all(out, step=True)
        self.pending_syncs.append((peer, core.last_zxid, marks))
        self._confirm_syncs(out)
        return out.build()

    def follower_process_sync(self, peer: int, packet: QuorumPacket, tag: int | None = None) -> Effects:
        """FollowerProcessSYNC(i, j): the leader answered this server's oldest sync. Every COMMIT it sent before
        was taken before (one FIFO connection), so the client's next read here sees what was committed when the
        sync reached the leader; a client whose sync expired meanwhile kept its place (None) and gets nothing."""
        core = self.core
        if core.state != ServerState.FOLLOWING or peer != core.leader or core.zab_state != ZabState.BROADCAST:
            raise RemoteProtocolError(peer, f"server {self.sid}: SYNC from {peer}, which it does not follow in "
                                            "broadcast")
        if not self.follower_syncs:
            raise RemoteProtocolError(peer, f"server {self.sid}: SYNC from {peer} with no sync of this server "
                                            "waiting")
        out = EffectsBuilder()
        out.actions.append(Action("ZabSync", "FollowerProcessSYNC", (("i", self.sid), ("j", peer)), packet, tag))
        rid, _ = self.follower_syncs.popleft()
        if rid is not None:
            out.answers.append((rid, {"zxid": self.committed_zxid}))
        return out.build()

    def forward_reply(self, rid: int, reply: dict[str, Any], now: float) -> Effects:
        """The leader's answer to a forwarded request (or the carrier's error when the forward failed)."""
        out = EffectsBuilder()
        deadline = self._forwarded.pop(rid, None)
        if deadline is None:
            return out.build()  # answered already (timed out)
        zxid = reply.get("zxid")
        if "error" in reply or not isinstance(zxid, int) or isinstance(zxid, bool):
            out.answers.append((rid, reply if "error" in reply else refused(f"bad answer from the leader: {reply}",
                                                                             False)))
        else:
            self._wait(zxid, rid, deadline)
            self._answer_delivered(out)
        return out.build()

    def client_read(self, after: int, limit: int = READ_LIMIT) -> dict[str, Any]:
        """The delivered transactions after zxid ``after``, in delivery order (at most ``limit``), and ``zxid``: the
        last delivered here (0: none), as ZooKeeper's reply header carries the server's last zxid."""
        core = self.core
        delivered = core.last_committed  # history[:delivered]: bisect it in place (no copy per read)
        start = bisect.bisect_right(core.history, after, 0, delivered, key=lambda t: t.zxid)
        limit = max(1, min(limit, READ_LIMIT))
        chunk = core.history[start: min(start + limit, delivered)]
        return {"txns": [[t.zxid, zktxn.read_form(t.value)] for t in chunk],
                "more": start + limit < delivered, "zxid": core.history[delivered - 1].zxid if delivered else 0}

    def _ping_answered(self, peer: int, packet: QuorumPacket, out: EffectsBuilder, tag: int | None) -> None:
        """Learner ``peer`` answered this leader's oldest PING it had not answered; an answer to a step PING of
        the sync's round (its zxid echoed, `payloads.PING_STEP`) is ZabSync.tla's LeaderProcessPING. Every PING went
        to a learner whose sync this leader had sent (`_ping_all`), after its ACKEPOCH, so the answer was sent with
        this leader's epoch accepted (one FIFO stream): it confirms."""
        step = packet.zxid == payloads.PING_STEP
        steps, answers = self.step_pings[peer], self.pings[peer]
        if (step and steps[1] >= steps[0]) or answers[1] >= answers[0]:
            what = "a PING of the sync's round" if step and steps[1] >= steps[0] else "a PING"
            raise RemoteProtocolError(peer, f"server {self.sid}: an answer from {peer} to {what} that this leader did "
                                            "not send")
        answers[1] += 1
        if step:
            steps[1] += 1
            out.actions.append(Action("ZabSync", "LeaderProcessPING", (("i", self.sid), ("j", peer)), packet, tag))
        self._confirm_syncs(out)

    def _ping_all(self, out: EffectsBuilder, step: bool) -> tuple[dict[int, int], dict[int, int]]:
        """PingAll: a PING to every learner this leader PINGs (ZabSync.tla's Pinged: those whose synchronization it
        has sent, NEWLEADER and after, `FORWARDING_PHASES`). It is a step PING of ZabSync.tla's round (zxid
        `payloads.PING_STEP`) when ``step`` (a learner's sync arrived: part of LeaderProcessREQUEST) or when a
        learner's waiting sync needs more answers from such a learner than it owes (LeaderSendPING, taken here); else
        a keepalive carrying the commit point. Returns the marks a sync arriving now needs (learner -> the PINGs it
        must have answered: those owed and this one), counting every PING (for this leader's own clients' syncs) and
        counting the step PINGs (for its learners': a learner's sync is confirmed by answers to step PINGs only, as
        in the spec).

        None goes to a learner before its sync, as ZooKeeper's LearnerHandler.ping sends none before
        startSendingPackets: a ZooKeeper learner that reads a PING where it waits for LEADERINFO or for its sync's
        DIFF, TRUNC or SNAP leaves (it exits the JVM after ACKEPOCH, "Got unexpected packet from leader: PING";
        docs/zookeeper.md, item 7). A learner skipped now is marked for the next PING it will be sent: its answer to
        it confirms a sync arriving now (for a learner's sync, LeaderSendPING sends it once the learner's sync is
        sent)."""
        sending = step or self._ping_needed()
        if sending and not step:
            out.actions.append(Action("ZabSync", "LeaderSendPING", (("i", self.sid),)))
        ping = QuorumPacket(PacketType.PING, payloads.PING_STEP if sending else self.committed_zxid)
        marks, step_marks = {}, {}
        phases = self.core.learner_phase
        for f in sorted(self.learner_conns):
            if f not in self.pings:
                continue
            counts, steps = self.pings[f], self.step_pings[f]
            if phases.get(f) not in FORWARDING_PHASES:
                marks[f] = counts[0] + 1
                if sending:
                    step_marks[f] = steps[0] + 1
                continue
            out.send.append((f, ping))
            counts[0] += 1
            marks[f] = counts[0]
            if sending:
                steps[0] += 1
                step_marks[f] = steps[0]
        return marks, step_marks

    def _ping_needed(self) -> bool:
        """LeaderSendPING's guard: a learner's waiting sync needs more answers from a learner this leader PINGs than
        that learner owes (its connection closed and opened again since the sync arrived, or its sync was sent
        after the sync arrived)."""
        steps, learners, phases = self.step_pings, self.learner_conns, self.core.learner_phase
        return any(mark > steps[f][0] for _, _, marks in self.pending_syncs for f, mark in marks.items()
                   if f in learners and f in steps and phases.get(f) in FORWARDING_PHASES)

    def _confirmed(self, counts: dict[int, list[int]], marks: dict[int, int]) -> bool:
        confirmed = {f for f, mark in marks.items() if f in counts and counts[f][1] >= mark}
        return self.core.is_quorum(confirmed | {self.sid})

    def _confirm_syncs(self, out: EffectsBuilder) -> None:
        """Answer each waiting sync of this leader's clients that a quorum has confirmed (`client_sync`), and
        LeaderSendSYNC: the oldest of ``pending_syncs``, in order, once its point is committed and confirmed."""
        keep = []
        for rid, zxid, marks, deadline in self._syncs:
            if self._confirmed(self.pings, marks):
                out.answers.append((rid, {"zxid": zxid}))
            else:
                keep.append((rid, zxid, marks, deadline))
        self._syncs = keep
        pending = self.pending_syncs
        while pending and pending[0][1] <= self.committed_zxid and self._confirmed(self.step_pings, pending[0][2]):
            learner, _, _ = pending.popleft()
            out.send.append((learner, QuorumPacket(PacketType.SYNC, 0)))  # ZooKeeper's: zxid 0, no data
            out.actions.append(Action("ZabSync", "LeaderSendSYNC", (("i", self.sid),)))

    def leader_send_sync(self) -> Effects:
        """LeaderSendSYNC as an input of its own: what this leader decides about its waiting syncs now
        (`_confirm_syncs`). A running leader never needs it -- every input that can make a sync answerable ends in
        `_confirm_syncs` -- but the edge check (conformance/replay/edges.py) takes the spec's LeaderSendSYNC edges
        from a state the node is built in, where nothing has asked yet."""
        out = EffectsBuilder()
        self._confirm_syncs(out)
        return out.build()

    def pending_sync_variables(self) -> list[dict[str, Any]]:
        """ZabSync.tla's pendingSyncs[i] as this leader holds it (the spec's ghost, for checking only, aside): per
        waiting learner's sync, oldest first, the learner; point, how many transactions of the history it waits to see
        committed; and awaits, per server, the answers to step PINGs still to come before it confirms (0 once it has;
        -1 for a server that was not a learner when it arrived)."""
        core = self.core
        out = []
        steps = self.step_pings
        for learner, zxid, marks in self.pending_syncs:
            awaits = {f: -1 if f not in marks else max(0, marks[f] - (steps[f][1] if f in steps else 0))
                      for f in core.servers}
            out.append({"learner": learner, "point": core.index_of(core.history, zxid) if zxid else 0,
                        "awaits": awaits})
        return out

    def _not_serving(self) -> dict[str, Any]:
        core = self.core
        if core.state == ServerState.LEADING:
            return refused(f"leader {self.sid} is still establishing its epoch", True)
        return refused(f"server {self.sid} has no established leader yet ({core.state.name})", True)

    def _wait(self, zxid: int, rid: int, deadline: float) -> None:
        """Client request ``rid`` is answered once ``zxid`` is delivered here (or skipped), or at ``deadline``."""
        waiting = self._waiting.get(zxid)
        if waiting is None:
            self._waiting[zxid] = waiting = []
            heapq.heappush(self._waiting_zxids, zxid)
        waiting.append((rid, deadline))

    def _answer_delivered(self, out: EffectsBuilder) -> None:
        """Answer every waiting client whose transaction is now delivered, or was skipped by a later epoch."""
        core = self.core
        top = self.committed_zxid
        heap = self._waiting_zxids
        while heap and heap[0] <= top:  # in zxid order, and only the answered ones: a delivery costs O(log waiting)
            zxid = heapq.heappop(heap)
            if zxid not in self._waiting:
                continue  # expired, or a duplicate key of one answered already
            k = core.index_of(core.history, zxid)
            # zxid 0: a sync answered by a leader that had committed nothing yet -- delivered by every server
            answer = ({"zxid": zxid} if zxid == 0 or 0 < k <= core.last_committed else
                      refused(f"transaction {zxid:#x} was not committed: a later epoch skipped it", False))
            out.answers += [(rid, answer) for rid, _ in self._waiting.pop(zxid)]

    def _expire_clients(self, out: EffectsBuilder, now: float) -> None:
        for zxid in list(self._waiting):
            keep = []
            for rid, deadline in self._waiting[zxid]:
                if deadline <= now:
                    out.answers.append((rid, refused(f"transaction {zxid:#x} not delivered within "
                                                      f"{self.timing.submit_timeout_s:g} s: outcome unknown", False)))
                else:
                    keep.append((rid, deadline))
            if keep:
                self._waiting[zxid] = keep
            else:
                del self._waiting[zxid]
        for rid, _, _, deadline in self._syncs:
            if deadline <= now:
                out.answers.append((rid, refused("no quorum confirmed this leader within "
                                                  f"{self.timing.submit_timeout_s:g} s", True)))
        self._syncs = [s for s in self._syncs if s[3] > now]
        for k, (sync_rid, deadline) in enumerate(self.follower_syncs):
            if sync_rid is not None and deadline <= now:  # keeps its place: the leader's SYNC for it still comes
                self.follower_syncs[k] = (None, deadline)
                out.answers.append((sync_rid, refused("the leader did not answer the sync within "
                                                       f"{self.timing.submit_timeout_s:g} s", True)))
        for rid, deadline in list(self._forwarded.items()):
            if deadline <= now:
                del self._forwarded[rid]
                out.answers.append((rid, refused("the leader did not answer the forwarded request in time: "
                                                  "outcome unknown", False)))
