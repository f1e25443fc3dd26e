"""The client protocol's decisions for a `zabref.core.node.Node`: submit, sync, forwarded replies and reads.

Theory of operation: the leader runs ClientRequest for a submitted value and answers once the transaction is
delivered here; a follower forwards a submit or a sync to its leader and answers once the transaction is delivered
HERE, so that a later read here sees it. A sync at the leader waits until a quorum has answered a PING sent after the
sync arrived (`client_sync`). Requests wait in `_waiting` (by zxid, answered in zxid order as deliveries come) and
expire after ``Timing.submit_timeout_s`` with "outcome unknown". `ClientRequests` is a part of `Node` (a mixin): it
uses the node's core, timing, learner connections and PING counts.
"""

from __future__ import annotations

import bisect
import heapq
from typing import TYPE_CHECKING, Any

from zabref.core import zktxn
from zabref.core.effects import READ_LIMIT, Effects, EffectsBuilder, Timing, refused
from zabref.core.packets import PacketType, QuorumPacket, ServerState
from zabref.core.types import EPOCH_ACCEPTED
from zabref.core.zab import LearnerPhase, Output, ZabCore, ZabState

__all__ = ["ClientRequests"]


class ClientRequests:
    """The client half of `Node` (module docstring)."""

    # What it uses of its node, which sets them (`zabref.core.node.Node.__init__`): declared here for the type
    # checker only (no value: nothing at run time).
    sid: int
    timing: Timing
    core: ZabCore
    learner_conns: set[int]
    _waiting: dict[int, list[tuple[int, float]]]
    _waiting_zxids: list[int]
    _forwarded: dict[int, float]
    _pings: dict[int, list[int]]
    _syncs: list[tuple[int, int, dict[int, int], float]]

    if TYPE_CHECKING:
        @property
        def committed_zxid(self) -> int: ...

        def _core(self, out: EffectsBuilder, output: Output, now: float, action: str | None,
                  packet: QuorumPacket | None = None, tag: int | None = None, **params: int) -> None: ...

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
        """Answered once this server has delivered what the leader had committed when the sync reached it.

        A leader answers only once a quorum has confirmed that it still leads: it PINGs every learner and waits
        until a quorum (itself included) has answered a PING sent after the sync arrived. A leader cut off from
        its followers may not know yet that others elected a new leader and committed more; its own commit point
        would then be stale (the fault runner's read checker found exactly that). A confirming follower had
        accepted this leader's epoch and still followed it after the sync arrived (`_ping_answered`), and a new
        leader commits only with a quorum that accepted a later epoch first, so nothing was committed elsewhere
        before the sync arrived (Raft's ReadIndex makes the same argument, a term in each answer)."""
        out = EffectsBuilder()
        core = self.core
        if core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST:
            ping = QuorumPacket(PacketType.PING, self.committed_zxid)
            marks = {}
            for f in sorted(self.learner_conns):
                if f in self._pings:
                    out.send.append((f, ping))
                    self._pings[f][0] += 1
                    marks[f] = self._pings[f][0]
            self._syncs.append((rid, self.committed_zxid, marks, now + self.timing.submit_timeout_s))
            self._confirm_syncs(out)
        elif core.state == ServerState.FOLLOWING and core.zab_state == ZabState.BROADCAST:
            self._forwarded[rid] = now + self.timing.submit_timeout_s
            out.forwards.append((rid, core.leader, {"op": "sync"}))
        else:
            out.answers.append((rid, self._not_serving()))
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

    def _ping_answered(self, peer: int, out: EffectsBuilder) -> None:
        """Learner ``peer`` answered this leader's oldest PING it had not answered (ZabSync.tla's LeaderProcessPING).

        An answer read before the learner's ACKEPOCH confirms nothing: until then the learner may hold a later epoch
        it accepted, whose leader committed with it, and have come back to follow this deposed leader (its
        FOLLOWERINFO waiting here, or its LEADERINFO, which it will refuse, on the way). Counted, it would let this
        leader answer a sync that misses that commit (spec/MC_fivestale: 50 steps). After ACKEPOCH every packet on
        the connection was sent with this leader's epoch accepted (one FIFO stream). A sync whose mark this answer
        would reach needs one answer more, which the next tick's PING asks for."""
        answers = self._pings[peer]
        answers[1] += 1
        if self.core.learner_phase.get(peer, LearnerPhase.NONE) not in EPOCH_ACCEPTED:
            for _, _, marks, _ in self._syncs:
                if marks.get(peer) == answers[1]:
                    marks[peer] += 1
        self._confirm_syncs(out)

    def _confirm_syncs(self, out: EffectsBuilder) -> None:
        """Answer each waiting sync that a quorum has confirmed (`client_sync`)."""
        keep = []
        for rid, zxid, marks, deadline in self._syncs:
            confirmed = {f for f, mark in marks.items() if f in self._pings and self._pings[f][1] >= mark}
            if self.core.is_quorum(confirmed | {self.sid}):
                out.answers.append((rid, {"zxid": zxid}))
            else:
                keep.append((rid, zxid, marks, deadline))
        self._syncs = keep

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
        for rid, deadline in list(self._forwarded.items()):
            if deadline <= now:
                del self._forwarded[rid]
                out.answers.append((rid, refused("the leader did not answer the forwarded request in time: "
                                                  "outcome unknown", False)))
