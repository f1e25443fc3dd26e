"""ZooKeeper's client protocol's decisions for a `zabref.core.node.Node`: a ZooKeeper client's writes and reads.

Theory of operation
-------------------
A ZooKeeper client (kazoo, ZooKeeper's Java client) connected to a zabref server (`zabref.net.zkclientport`) is
served as ZooKeeper serves it, and its requests take the paths ZooKeeper's do:

* **A write** (create, delete, setData, setACL, multi) at the leader is prepared as the transaction ZooKeeper's
  leader would propose (`zabref.core.zkprep`, against the tree of the leader's whole history: `Node.zk_tree`) and
  proposed by ClientRequest with that transaction as its value. At a follower it is forwarded to the leader as
  REQUEST on the quorum connection, as ZooKeeper's FollowerRequestProcessor does (``sessionId, cxid, type`` and the
  request's record), so a zabref follower's client writes through a ZooKeeper leader as well as a zabref one, and
  the leader prepares it the same way. Either way the request waits, keyed by its session and cxid (which the
  transaction's header carries), until this server delivers that transaction, and is answered with what applying
  it gave (the created path, the node's Stat, ZooKeeper's error code of an error transaction, a multi's results):
  the tree of this server's delivered transactions (`zk_applied`) is brought up to date at every delivery on a
  server that serves ZooKeeper clients (`Node.zk_clients`: it has a ZooKeeper client port), as a ZooKeeper server
  applies each transaction it delivers; a server without that port follows it only when such a write waits or a
  read comes. Followed only then, the tree caught up in one step over all the transactions delivered since, and
  held the server's loop as long: after 150,000 writes through another server, longer than the 1.33 s a ZooKeeper
  client waits to hear from its server, and the first client to come lost its session (docs/performance.md, "Trees
  kept current"). The leader's proposal tree (`zk_tree`) takes each write it prepares as the nodes the write
  changes (`zabref.core.zktree.HistoryTree.take`), so a transaction it proposed is not read and applied again there;
  it applies what else the history gained (zabref's own clients' values, a new leader's history) only at a ZooKeeper
  client's write, catching up over what came since (not measured). ZooKeeper keeps one tree, the delivered one, and
  prepares against it and the changes still outstanding; zabref keeps the two trees, each changed once a
  transaction (docs/performance.md, "The proposal tree takes its changes"). A plain create the leader prepares is
  kept for the delivered tree's apply at its COMMIT (`zkprep.prepare_value`), and a waiting client's answer is made
  from the create applied, without the transaction's fields (`zktree.DataTree.apply_read`; docs/performance.md, "A
  waited write answered without its fields").

  A waiting write's transaction is one above this server's last zxid when it arrived (a leader proposes it next; a
  follower's leader proposes it after all it had sent), so a transaction at or below that zxid never answers it: a
  session's cxid may come again (kazoo numbers each connection's requests from 1), and an older transaction of the
  same session and cxid, delivered late, once answered a new request with the old one's result (a random mixed run,
  3.9.5, seed 4: "'c1-104' acknowledged as zxid 0x1000000c5, delivered as zxid 0x200000001").
* **A read** (getData, exists, getChildren) is answered from that delivered tree, with the last delivered zxid;
  **a sync** is the node's own `client_sync` (ZabSync.tla's steps at a follower).
* A request that cannot be served now (no established leader) or that is not answered within
  ``Timing.submit_timeout_s`` is answered with an error the port turns into a closed connection, which a ZooKeeper
  client reads as a connection loss (the outcome of a write is then unknown to it, as with ZooKeeper).

Sessions are the port's (local sessions: nothing of them is a transaction; `zabref.net.zkclientport`). Answers are
dicts: ``{"zk": {"err": code, "zxid": z, "op": name, ...}}`` (a result's fields: ``path``, ``stat``, ``data``,
``children``, ``ops``) or the node's usual ``{"error": text, "retry": bool}``.
"""

from __future__ import annotations

from typing import Any

from mypy_extensions import trait

from zabref.core import payloads, zkprep, zktree, zktxn
from zabref.core.effects import Effects, EffectsBuilder, refused
from zabref.core.nodeparts import NodeParts
from zabref.core.packets import AuthId, PacketType, QuorumPacket, ServerState
from zabref.core.zab import ZabState

__all__ = ["ZkClients", "WRITES", "READS"]

#: The write requests a ZooKeeper client sends that this server serves (ZooKeeper's OpCode).
WRITES = frozenset({1, 2, 5, 7, 14, 15, 19, 20})
#: getData, exists, getChildren, getChildren2.
READS = {4: "getData", 3: "exists", 8: "getChildren", 12: "getChildren2"}


@trait
class ZkClients(NodeParts):
    """The ZooKeeper-client half of `Node` (module docstring)."""

    # What else it uses of its node, which sets them (`zabref.core.node.Node.__init__`): declared for the type checker.
    zk_clients: bool
    zk_tree: zktree.HistoryTree
    zk_applied: zktree.HistoryTree
    _zk_waiting: dict[tuple[int, int], tuple[int, float, int]]

    def zk_write(self, rid: int, session: int, cxid: int, op: int, record: bytes, now: float,
                 client: str = "") -> Effects:
        """A ZooKeeper client's write (``op`` one of `WRITES`, ``record`` its request's record), answered once this
        server delivers its transaction. ``client``: its address, the ``ip`` identity a forwarded REQUEST carries
        as ZooKeeper's does (a ZooKeeper leader checks ACLs against a request's identities, and reads none from a
        REQUEST without them)."""
        out = EffectsBuilder()
        core = self.core
        key = (session, cxid)
        if key in self._zk_waiting:
            out.answers.append((rid, refused(f"request {cxid} of session {session:#x} is already waiting", False)))
        elif core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST:
            self._zk_waiting[key] = (rid, now + self.timing.submit_timeout_s, core.last_zxid)
            self.zk_propose(out, session, cxid, op, record, now)
        elif core.state == ServerState.FOLLOWING and core.zab_state == ZabState.BROADCAST and not self.leader_lost:
            self._zk_waiting[key] = (rid, now + self.timing.submit_timeout_s, core.last_zxid)
            data = payloads.encode_request(session, cxid, op, record)
            out.send.append((core.leader, QuorumPacket(PacketType.REQUEST, -1, data, (AuthId("ip", client),))))
        else:
            out.answers.append((rid, self._not_serving()))
        return out.build()

    def zk_propose(self, out: EffectsBuilder, session: int, cxid: int, op: int, record: bytes, now: float) -> None:
        """ClientRequest of the transaction ZooKeeper's leader would propose for a ZooKeeper client's write: this
        leader's own client's, or one a learner forwarded (`leader_process_request`). `zkprep.RequestRefused` for a
        session's request."""
        core = self.core
        value, changes = zkprep.prepare_value(self.zk_tree.follow(core.history), session, cxid, op, record,
                                              core.next_zxid())
        self._core(out, core.client_request(value), now, "ClientRequest", i=self.sid)
        self.zk_tree.take(core.history, changes)

    def zk_read(self, op: int, path: str) -> dict[str, Any]:
        """A read (`READS`) of the tree of the transactions delivered here."""
        core = self.core
        tree = self.zk_applied.follow(core.history, core.last_committed)
        zxid = core.history[core.last_committed - 1].zxid if core.last_committed else 0
        node = tree.nodes.get(path)
        if node is None:
            return {"zk": {"err": zktree.ERR["NONODE"], "zxid": zxid, "op": READS[op]}}
        result: dict[str, Any] = {"err": 0, "zxid": zxid, "op": READS[op], "stat": node.stat()}
        if op == 4:
            result["data"] = node.data
        elif op in (8, 12):
            result["children"] = sorted(node.children)
        return {"zk": result}

    def _zk_delivered(self, out: EffectsBuilder) -> None:
        """Answer the ZooKeeper clients' writes whose transactions were just delivered; with `zk_clients`, keep the
        delivered tree current even when none waits (module docstring)."""
        core = self.core
        if not self._zk_waiting:
            if self.zk_clients:
                self.zk_applied.follow(core.history, core.last_committed)
            return

        def applied(txn: zktxn.Create | dict[str, Any], err: int) -> None:
            key, zxid = _answers(txn)
            waiting = self._zk_waiting.get(key)
            if waiting is not None and zxid > waiting[2]:
                del self._zk_waiting[key]
                out.answers.append((waiting[0], {"zk": _result(self.zk_applied.tree, txn, err)}))

        self.zk_applied.follow(core.history, core.last_committed, applied)

    def _zk_role_changed(self, out: EffectsBuilder) -> None:
        """This server stopped leading or following: a waiting write's transaction may never come (module
        docstring); its client learns now that the outcome is unknown."""
        for (session, cxid), (rid, _, _) in self._zk_waiting.items():
            out.answers.append((rid, refused(f"server {self.sid} changed its role before request {cxid} of session "
                                              f"{session:#x} was delivered: outcome unknown", False)))
        self._zk_waiting.clear()

    def _zk_expire(self, out: EffectsBuilder, now: float) -> None:
        for key, (rid, deadline, _) in list(self._zk_waiting.items()):
            if deadline <= now:
                del self._zk_waiting[key]
                out.answers.append((rid, refused(f"request {key[1]} of session {key[0]:#x} was not delivered "
                                                  f"within {self.timing.submit_timeout_s:g} s: outcome unknown",
                                                  False)))


def _answers(txn: zktxn.Create | dict[str, Any]) -> tuple[tuple[int, int], int]:
    """The request a transaction just applied answers, (session, cxid), and its zxid; ``txn`` read as a
    `zktxn.Create` or as its fields (`zktree.DataTree.apply_read`)."""
    if isinstance(txn, zktxn.Create):
        return (txn.session, txn.cxid), txn.zxid
    return (zktree.session_of(txn), txn["cxid"]), txn["zxid"]


def _result(tree: zktree.DataTree, txn: zktxn.Create | dict[str, Any], err: int) -> dict[str, Any]:
    """What a ZooKeeper server answers for a transaction it just applied (its FinalRequestProcessor), read as a
    `zktxn.Create` (the same answer as its fields give, without them) or as its fields."""
    if isinstance(txn, zktxn.Create):
        return _create_result(tree, txn, err)
    op = txn["op"]
    out: dict[str, Any] = {"err": err, "zxid": txn["zxid"], "op": op}
    if op == "multi":  # its failure is in its results: the reply's err stays 0 (FinalRequestProcessor)
        failed = any(o["op"] == "error" for o in txn["ops"])
        out["err"] = 0
        out["ops"] = [_op_result(tree, o, failed) for o in txn["ops"]]
    elif err == 0 and op != "error":
        out.update(_op_result(tree, txn, False))
    return out


def _create_result(tree: zktree.DataTree, create: zktxn.Create, err: int) -> dict[str, Any]:
    """`_result` of a create, as `_op_result` answers its fields."""
    if err != 0:
        return {"err": err, "zxid": create.zxid, "op": "create"}
    node = tree.nodes.get(create.path)
    return {"err": 0, "zxid": create.zxid, "op": "create", "path": create.path,
            "stat": None if node is None else node.stat()}


def _op_result(tree: zktree.DataTree, op: dict[str, Any], failed: bool) -> dict[str, Any]:
    if failed or op["op"] == "error":
        return {"op": "error", "err": int(op.get("err", 0))}
    node = tree.nodes.get(op.get("path", ""))
    stat = node.stat() if node is not None else None
    return {"op": op["op"], "path": op.get("path"), "stat": stat}
