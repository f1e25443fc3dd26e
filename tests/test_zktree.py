"""ZooKeeper's data tree of a history (`zabref.core.zktree`) and a forwarded write prepared against it
(`zabref.core.zkprep`): the transactions ZooKeeper's PrepRequestProcessor would propose, its errors among them, and
the tree they leave, as its snapshot stream. tests/test_zk_mixed.py holds the same against real ZooKeeper
followers, whose clients get the answers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zabref.core import jute, payloads, zksnap, zktxn
from zabref.core.types import Txn
from zabref.core.zkclients import _answers, _result
from zabref.core.zkprep import RequestRefused, prepare, prepare_changes, prepare_value, valid_path
from zabref.core.zktree import ERR, OPEN_ACL, DataTree, HistoryTree, fields
from zabref.errors import CodecError

E1 = 1 << 32
OPEN = jute.INT.pack(1) + jute.INT.pack(31) + jute.ustring("s", "world") + jute.ustring("i", "anyone")
OP = {"create": 1, "delete": 2, "setData": 5, "setACL": 7, "check": 13, "multi": 14, "create2": 15,
      "createContainer": 19, "createTTL": 21}


def create(path: str, data: bytes = b"v", flags: int = 0, acl: bytes = OPEN) -> bytes:
    return jute.ustring("path", path) + jute.buffer("data", data) + acl + jute.INT.pack(flags)


def set_data(path: str, data: bytes, version: int = -1) -> bytes:
    return jute.ustring("path", path) + jute.buffer("data", data) + jute.INT.pack(version)


def delete(path: str, version: int = -1) -> bytes:
    return jute.ustring("path", path) + jute.INT.pack(version)


def multi(*ops: tuple[str, bytes]) -> bytes:
    head = struct.Struct(">i?i")
    return b"".join(head.pack(OP[name], False, -1) + rec for name, rec in ops) + head.pack(-1, True, -1)


class Leader:
    """A leader's history and its tree: each write prepared at the next zxid, then appended (as ClientRequest)."""

    def __init__(self) -> None:
        self.history: list[Txn] = []
        self.tree = HistoryTree()

    def own(self, value: bytes) -> int:
        self.history.append(Txn(E1 | len(self.history) + 1, value))
        return self.history[-1].zxid

    def write(self, op: str, record: bytes, session: int = 0x100, cxid: int = 1) -> dict:
        zxid = E1 | len(self.history) + 1
        txn = prepare(self.tree.follow(self.history), session, cxid, OP[op], record, zxid)
        self.history.append(Txn(zxid, zktxn.FOREIGN + txn))
        return zktxn.decode_txn(txn, "prepared")

    @property
    def nodes(self) -> dict:
        return self.tree.follow(self.history).nodes


def test_a_create_is_zookeepers_create_transaction_and_its_errors_are_error_transactions() -> None:
    lead = Leader()
    lead.own(b"zabref's")  # /zabref-1-1: the root's child version 1
    txn = lead.write("create", create("/a", b"x"), session=0x10000A, cxid=7)
    assert txn == {"op": "create", "session": "0x10000a", "cxid": 7, "zxid": E1 | 2, "time": 0, "path": "/a",
                   "data": b"x", "acl": ["world:anyone:31"], "ephemeral": False, "parentCVersion": 2}
    assert lead.nodes["/a"].data == b"x" and lead.nodes["/"].cversion == 2 and lead.nodes["/"].pzxid == E1 | 2
    errors = [("create", create("/a")), ("create", create("/none/b")), ("create", create("/e", flags=1)),
              ("create", create("/t", flags=5)), ("create", create("/b", acl=jute.INT.pack(0))),
              ("create", create("a")), ("create", create("/a/")), ("create", create("/a//b")),  # parent "/a/"
              ("create", create("/a/..")), ("create", create("/a/\x01")), ("delete", delete("/none")),
              ("delete", delete("/a", version=3)), ("setData", set_data("/none", b"y")),
              ("setData", set_data("/a", b"y", version=1)), ("create", b"\x00\x00"), ("check", delete("/a"))]
    codes = [lead.write(op, rec)["err"] for op, rec in errors]
    assert codes == [ERR[c] for c in ("NODEEXISTS", "NONODE", "EPHEMERALONLOCALSESSION", "UNIMPLEMENTED",
                                      "INVALIDACL", "BADARGUMENTS", "BADARGUMENTS", "NONODE", "BADARGUMENTS",
                                      "BADARGUMENTS", "NONODE", "BADVERSION", "NONODE", "BADVERSION",
                                      "MARSHALLINGERROR", "UNIMPLEMENTED")]
    assert all(t.zxid == E1 | (i + 3) for i, t in enumerate(lead.history[2:]))  # each error took its zxid
    assert sorted(lead.nodes) == ["/", "/a", "/zabref-1-1", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"]


def test_versions_sequential_names_children_and_deletes() -> None:
    lead = Leader()
    lead.write("create", create("/p"))
    assert [lead.write("create", create("/p/s-", flags=2))["path"] for _ in range(2)] == \
        ["/p/s-0000000000", "/p/s-0000000001"]
    assert lead.write("setData", set_data("/p", b"1", version=0))["version"] == 1
    assert lead.write("setData", set_data("/p", b"2"))["version"] == 2
    assert lead.write("delete", delete("/p"))["err"] == ERR["NOTEMPTY"]
    assert lead.write("delete", delete("/p/s-0000000000", version=0))["op"] == "delete"
    assert lead.write("create", create("/p/s-", flags=2))["path"] == "/p/s-0000000002"  # cversion: creates only
    node = lead.nodes["/p"]
    assert (node.data, node.version, node.cversion, sorted(node.children)) == \
        (b"2", 2, 3, ["s-0000000001", "s-0000000002"])
    # the next version skips -1 (ZOOKEEPER-4743) and wraps as Java's int does
    lead.nodes["/p"].version = (1 << 31) - 1
    assert lead.write("setData", set_data("/p", b"3"))["version"] == -(1 << 31)
    lead.nodes["/p"].version = -2
    assert lead.write("setData", set_data("/p", b"4"))["version"] == 0


def test_a_multi_sees_its_earlier_operations_and_fails_whole() -> None:
    lead = Leader()
    txn = lead.write("multi", multi(("create", create("/m")), ("create", create("/m/c")),
                                    ("setData", set_data("/m", b"w", version=0)), ("check", delete("/m", 1))))
    assert [o["op"] for o in txn["ops"]] == ["create", "create", "setData", "check"]
    assert lead.nodes["/m"].data == b"w" and "/m/c" in lead.nodes
    failed = lead.write("multi", multi(("create", create("/n")), ("delete", delete("/m")),
                                       ("create", create("/o"))))
    assert [(o["op"], o.get("err")) for o in failed["ops"]] == \
        [("create", None), ("error", ERR["NOTEMPTY"]), ("error", ERR["RUNTIMEINCONSISTENCY"])]
    assert "/n" not in lead.nodes and "/o" not in lead.nodes  # nothing of a failed multi is applied
    assert lead.write("create", create("/n"))["op"] == "create"  # its creates were rolled back in the prep too


def test_session_requests_are_refused_and_garbled_multis_are_marshalling_errors() -> None:
    with pytest.raises(RequestRefused, match="createSession: a zabref leader tracks no sessions"):
        prepare(DataTree(), 1, 1, -10, jute.INT.pack(3000), E1 | 1)
    lead = Leader()
    assert lead.write("multi", multi(("create", create("/m")))[:-4])["err"] == ERR["MARSHALLINGERROR"]
    assert lead.write("create", create("/m") + b"\x00")["err"] == ERR["MARSHALLINGERROR"]  # trailing bytes


def test_the_history_tree_follows_appends_and_starts_again_when_the_history_was_cut() -> None:
    lead = Leader()
    lead.own(b"a")
    lead.write("create", create("/x"))
    tree = lead.tree.follow(lead.history)
    assert lead.tree.follow(lead.history) is tree and lead.tree.count == 2
    cut = lead.history[:1] + [Txn(E1 | 9, b"b")]  # another transaction in the second place
    assert sorted(lead.tree.follow(cut).nodes) == ["/", "/zabref-1-1", "/zabref-1-9", "/zookeeper",
                                                   "/zookeeper/config", "/zookeeper/quota"]
    assert lead.tree.follow([]).nodes.keys() == DataTree().nodes.keys()


def test_ephemerals_and_sessions_of_a_zookeeper_leaders_history() -> None:
    """Transactions a ZooKeeper leader proposed (kept whole by a zabref follower): a session's ephemeral node goes
    with its closeSession; the sessions go in the snapshot."""
    header = struct.Struct(">qiqqi")
    session = 0x20000B
    txns = [header.pack(session, 0, E1 | 1, 5, -10) + jute.INT.pack(4000),
            header.pack(session, 1, E1 | 2, 6, 1) + create("/eph", b"e")[:-4] + b"\x01" + jute.INT.pack(1),
            header.pack(7, 1, E1 | 3, 7, 1) + create("/keep")[:-4] + b"\x00" + jute.INT.pack(2)]
    history = [Txn(E1 | i + 1, zktxn.FOREIGN + t) for i, t in enumerate(txns)]
    tree = HistoryTree().follow(history)
    assert tree.nodes["/eph"].ephemeral_owner == session and tree.sessions == {session: 4000}
    stream = tree.snapshot()
    read = zksnap.read_snapshot(jute.Cursor(stream, "snapshot"))
    assert read.sessions == 1 and [n.path for n in read.nodes] == ["/", "/eph", "/keep", "/zookeeper",
                                                                   "/zookeeper/config", "/zookeeper/quota"]
    tree.apply(fields(Txn(E1 | 4, zktxn.FOREIGN + header.pack(session, 2, E1 | 4, 8, -11) + jute.INT.pack(0))))
    assert "/eph" not in tree.nodes and "/keep" in tree.nodes and not tree.sessions


def test_a_snap_of_a_history_with_zookeepers_transactions_is_the_tree_they_make() -> None:
    """What a ZooKeeper follower synchronized by a zabref leader's SNAP must hold: the nodes ZooKeeper's clients
    wrote (not their transactions' bytes under zabref's node names), with their ACLs in the cache; without the
    SNAP's zxid a reader refuses that tree, naming the node it cannot hold as a transaction of its own."""
    lead = Leader()
    lead.own(b"mine")
    digest = jute.INT.pack(1) + jute.INT.pack(1) + jute.ustring("s", "digest") + jute.ustring("i", "u:h=")
    lead.write("create", create("/zk", b"x", acl=digest))
    lead.write("setData", set_data("/zk", b"y"))
    stream = payloads.encode_snap_data(lead.history)
    read = zksnap.read_snapshot(jute.Cursor(stream, "snapshot"))
    assert read.acl_lists == 1
    assert [(n.path, n.data) for n in read.nodes][:3] == [("/", b""), ("/zabref-1-1", b"mine"), ("/zk", b"y")]
    with pytest.raises(CodecError, match="node '/zk' .* a zabref server keeps no ZooKeeper data tree"):
        payloads.decode_snap_data(stream)
    own = [Txn(E1 | 1, b"a"), Txn(E1 | 2, b"b")]  # zabref's own history: the stream as before, read back whole
    assert payloads.encode_snap_data(own) == zksnap.write_snapshot([("/zabref-1-1", b"a", E1 | 1),
                                                                   ("/zabref-1-2", b"b", E1 | 2)])


def test_a_zookeeper_tree_is_the_base_of_a_zabref_history_and_a_later_snap_writes_it_again() -> None:
    """A ZooKeeper leader's SNAP of its clients' nodes (docs/zookeeper.md, item 1 (a)): a zabref follower keeps the
    stream whole as one base transaction at the SNAP's zxid; its trees start from the base's nodes, stats, ACLs and
    sessions; transactions after it apply on top; the SNAP it sends later is that tree; a base is never a PROPOSAL."""
    lead = Leader()
    lead.own(b"mine")
    digest = jute.INT.pack(1) + jute.INT.pack(1) + jute.ustring("s", "digest") + jute.ustring("i", "u:h=")
    header = zktxn.HEADER
    lead.history.append(Txn(E1 | 2, zktxn.FOREIGN + header.pack(0x200, 0, E1 | 2, 5, -10) + jute.INT.pack(4000)))
    lead.write("create", create("/zk", b"x", acl=digest))
    lead.write("setData", set_data("/zk", b"y"))
    stream = payloads.encode_snap_data(lead.history)
    snap_zxid = lead.history[-1].zxid
    (base,) = [Txn(z, v) for z, v in payloads.decode_snap_data(stream, snap_zxid)]
    assert base.zxid == snap_zxid and base.value == zktxn.SNAPSHOT + stream
    assert zktxn.read_form(base.value) == {"zookeeper": "snapshot", "bytes": len(stream)}
    tree = HistoryTree().follow([base])
    want = lead.nodes
    assert {p: (n.data, n.acl, n.stat()) for p, n in tree.nodes.items()} == \
        {p: (n.data, n.acl, n.stat()) for p, n in want.items()}
    assert tree.sessions == {0x200: 4000} and tree.last_zxid == snap_zxid
    assert tree.snapshot() == stream  # the tree of the base alone is written as the leader wrote it
    held = DataTree()  # a session's ephemeral node (a ZooKeeper leader's: zabref's refuses them) is its again
    held.apply({"op": "createSession", "session": "0x300", "zxid": 1, "time": 0, "timeout": 5000})
    held.apply({"op": "create", "session": "0x300", "zxid": 2, "time": 0, "path": "/e", "data": b"", "acl": OPEN_ACL,
                "ephemeral": True, "parentCVersion": -1})
    loaded = DataTree()
    loaded.load(held.snapshot(), "a tree with an ephemeral node")
    assert loaded.ephemerals == {0x300: {"/e"}} and loaded.sessions == {0x300: 5000}
    # a transaction after the base applies on top of its tree, and the SNAP of the history is the tree of both
    lead.write("delete", delete("/zk"))
    after = [base, lead.history[-1]]
    assert "/zk" not in HistoryTree().follow(after).nodes
    assert payloads.encode_snap_data(after) == payloads.encode_snap_data(lead.history)
    with pytest.raises(ValueError, match="is a snapshot, the base of a history"):
        payloads.encode_proposal_data(base.zxid, base.value)
    with pytest.raises(CodecError, match="the snapshot stream ends before its signature"):
        DataTree().load(stream[:-20], "a cut stream")
    with pytest.raises(CodecError, match="names ACL list 7, which the snapshot's ACL cache lacks"):
        DataTree().load(zksnap.write_stream((), {}, [("", b"", 7, (0,) * 9)]), "a stream without its ACL cache")


@pytest.mark.parametrize("path, ok", [("/", True), ("/a", True), ("/a/b.c", True), ("/a/...", True), ("", False),
                                      ("a", False), ("/a/", False), ("//a", False), ("/a/.", False),
                                      ("/./a", False), ("/a/\x7f", False), ("/a/\ue000", False), ("/\U0001f600", False),
                                      ("/a\x00", False), ("/a\x01", False), ("/a\x1f", False), ("/a ", True),
                                      ("/a\x9f", False), ("/a\xa0", True), ("/a\ud7ff", True),
                                      ("/a" + chr(0xD800), False), ("/a\uf8ff", False), ("/a\uf900", True),
                                      ("/a\uffef", True), ("/a\ufff0", False), ("/a/\x80b", False)])
def test_paths_as_zookeepers_path_utils_reads_them(path: str, ok: bool) -> None:
    assert valid_path(path) is ok


def test_a_multi_counts_the_children_its_own_operations_add_and_remove_without_changing_the_tree() -> None:
    """The prepared view keeps a changed parent's children as the tree's plus what the multi added and removed (a
    parent with many children is not copied for each create): an existing node whose only child the multi deletes
    is empty for a later delete in it, one whose child the multi creates is not, and the tree is untouched until
    the transaction is applied."""
    lead = Leader()
    lead.write("create", create("/x"))
    lead.write("create", create("/x/c"))
    before = set(lead.nodes["/x"].children)
    ok = lead.write("multi", multi(("delete", delete("/x/c")), ("create", create("/x/d")), ("delete", delete("/x/d")),
                                   ("delete", delete("/x"))))
    assert [o["op"] for o in ok["ops"]] == ["delete", "create", "delete", "delete"]
    failed = Leader()
    failed.write("create", create("/y"))
    txn = failed.write("multi", multi(("create", create("/y/c")), ("delete", delete("/y"))))
    assert [(o["op"], o.get("err")) for o in txn["ops"]] == [("create", None), ("error", ERR["NOTEMPTY"])]
    assert failed.nodes["/y"].children == set() and before == {"c"}
    assert "/x" not in lead.nodes and "/x/c" not in lead.nodes  # applied: the tree follows the transaction


def set_acl(path: str, acl: bytes, version: int = -1) -> bytes:
    return jute.ustring("path", path) + acl + jute.INT.pack(version)


def _attributes(create: zktxn.Create) -> tuple:
    return (create.session, create.cxid, create.zxid, create.time, create.path, create.data, type(create.data),
            create.acl, create.ephemeral, create.parent_cversion, create.digest)


def state(tree: DataTree) -> tuple:
    """Everything a tree holds, children as sets (a taken node's children are its old node's set, changed)."""
    nodes = {path: (n.data, n.acl, n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime, n.version, n.cversion, n.aversion,
                    n.ephemeral_owner, sorted(n.children), type(n.children).__name__) for path, n in tree.nodes.items()}
    return nodes, {s: sorted(p) for s, p in tree.ephemerals.items()}, tree.sessions, tree.last_zxid


_IP_ACL = jute.INT.pack(2) + jute.INT.pack(1) + jute.ustring("s", "ip") + jute.ustring("i", "127.0.0.1") + OPEN[4:]
_OPEN_TWICE = jute.INT.pack(2) + (OPEN[4:]) * 2  # world:anyone twice: one after ZooKeeper's fixupACL
_PATHS = st.sampled_from(["/a", "/b", "/a/x", "/a/y", "/b/z", "/a/x/q", "/eph", "/c"])
_VERSION = st.sampled_from([-1, 0, 1])
_ONE = st.one_of(
    st.builds(lambda p, flags: ("create", create(p, b"d" + p.encode(), flags)), _PATHS, st.sampled_from([0, 2])),
    st.builds(lambda p: ("createContainer", create(p, b"c", 0)), _PATHS),
    st.builds(lambda p, acl: ("create", create(p, b"a", 0, acl)), _PATHS, st.sampled_from([_IP_ACL, _OPEN_TWICE])),
    st.builds(lambda p, v: ("delete", delete(p, v)), _PATHS, _VERSION),
    st.builds(lambda p, v: ("setData", set_data(p, b"s" + p.encode(), v)), _PATHS, _VERSION),
    st.builds(lambda p, v: ("setACL", set_acl(p, jute.INT.pack(1) + jute.INT.pack(1) + jute.ustring("s", "ip")
                                           + jute.ustring("i", "127.0.0.1"), v)), _PATHS, _VERSION))
_CHECK = st.builds(lambda p, v: ("check", delete(p, v)), _PATHS, _VERSION)
_WRITES = st.lists(st.one_of(_ONE, st.builds(lambda ops: ("multi", multi(*ops)), st.lists(st.one_of(_ONE, _CHECK),
                                                                                         min_size=1, max_size=4)),
                             st.builds(lambda p: ("create", create(p) + b"\x00"), _PATHS),  # a trailing byte
                             st.builds(lambda v: ("own", b"v" + v), st.binary(max_size=3))), min_size=1, max_size=25)


@given(_WRITES)
def test_the_proposal_tree_takes_a_prepared_write_as_applying_its_transaction_would_leave_it(writes: list) -> None:
    """`HistoryTree.take` (a leader's proposal tree takes the nodes `prepare_value` changed) leaves the tree that
    reading and applying each transaction makes (a fresh `HistoryTree` following the same history): every field of
    every node (times too: these writes are prepared at a time), children, a ZooKeeper session's ephemeral node
    deleted, sessions; a request whose record has a byte too many changes nothing; with zabref's own values
    between, which the taking tree applies by `follow`. The create `prepare_value` keeps for the leader's apply at
    the COMMIT is the one reading the value gives, field by field, and none is kept for any other transaction (a
    multi's creates, an error among them)."""
    header = struct.Struct(">qiqqi")
    session = 0x20000B
    base = [header.pack(session, 0, E1 | 1, 5, -10) + jute.INT.pack(4000),
            header.pack(session, 1, E1 | 2, 6, 1) + create("/eph", b"e")[:-4] + b"\x01" + jute.INT.pack(1)]
    history = [Txn(E1 | i + 1, zktxn.FOREIGN + t) for i, t in enumerate(base)]
    taking = HistoryTree()
    for i, (op, record) in enumerate(writes):
        zxid = E1 | len(history) + 1
        if op == "own":
            history.append(Txn(zxid, record))
            continue
        value, changes = prepare_value(taking.follow(history), session + i, i, OP[op], record, zxid, 1000 + i)
        kept, read = zktxn._KEPT.pop(value, None), zktxn.read_create(value, 1)
        assert (kept and _attributes(kept)) == (read and _attributes(read)), (i, op)  # a plain create's, else none
        history.append(Txn(zxid, value))
        assert taking.take(history, changes)
        assert state(taking.tree) == state(HistoryTree().follow(history)), (i, op, zktxn.decode_txn(value[1:], "t"))
    assert state(taking.follow(history)) == state(HistoryTree().follow(history))


@given(_WRITES, st.lists(st.tuples(st.integers(0, 60), st.booleans(), st.booleans()), max_size=6),
       st.sampled_from([0x20000B, -(1 << 63) + 0x7A]))
def test_a_tree_applies_each_transaction_as_applying_its_fields_would(writes: list, again: list, session: int) -> None:
    """`DataTree.apply_txn` -- the way past the fields' dict for zabref's own value and a client's plain create --
    answers and leaves what `apply` of the transaction's fields does, transaction after transaction: every kind a
    leader prepares (a create with a byte too many, which the quick read leaves to the field by field one, among
    them), then creates of an earlier create's node again (it exists, or its parent was deleted since) or of a child
    of it, ephemeral or not, with a digest. `DataTree.apply_read` too, and a waiting client's answer from what it
    read is the one from the fields: the request it answers (a session with its top bit set among them), the result
    and the node's stat after the transaction."""
    header = struct.Struct(">qiqqi")
    history = [Txn(E1 | 1, zktxn.FOREIGN + header.pack(session, 0, E1 | 1, 5, -10) + jute.INT.pack(4000))]
    proposing = HistoryTree()
    for i, (op, record) in enumerate(writes):
        zxid = E1 | len(history) + 1
        if op != "own":
            record = zktxn.FOREIGN + prepare(proposing.follow(history), session, i, OP[op], record, zxid, 1000 + i)
        history.append(Txn(zxid, record))
    creates = [t for t in history if zktxn.read_create(t.value, 1) is not None]
    for j, (k, ephemeral, child) in enumerate(again):
        if creates:
            old = zktxn.read_create(creates[k % len(creates)].value, 1)
            zxid = E1 | len(history) + 1
            path = f"{old.path}/again{j}" if child else old.path
            body = zktxn.encode_create(zxid, path, old.data, session=session, parent_cversion=k % 7 - 1) + \
                b"\x00\x00\x00\x02" * 3
            if ephemeral:  # encode_create writes a persistent node; its flag is the 17th byte from the end here
                body = body[:-17] + b"\x01" + body[-16:]
            history.append(Txn(zxid, zktxn.FOREIGN + body))
    quick, read, answering = DataTree(), DataTree(), DataTree()
    for i, txn in enumerate(history):
        err = read.apply(fields(txn))
        assert quick.apply_txn(txn) == err, i
        got, got_err = answering.apply_read(txn)
        assert got_err == err, i
        assert _answers(got) == _answers(fields(txn)), i
        assert _result(answering, got, err) == _result(read, fields(txn), err), i
        assert state(quick) == state(read) == state(answering), i


def test_the_proposal_tree_takes_only_the_transaction_after_the_one_it_followed() -> None:
    """A tree that did not follow the history up to the transaction before the prepared one takes nothing, and its
    next `follow` applies the transaction as read."""
    lead = Leader()
    lead.write("create", create("/x"))
    zxid = E1 | 2
    txn, changes = prepare_changes(lead.tree.follow(lead.history), 1, 1, OP["create"], create("/y"), zxid)
    lead.history.append(Txn(zxid, zktxn.FOREIGN + txn))
    lead.own(b"after")  # appended after it: the prepared transaction is no longer the last
    assert not lead.tree.take(lead.history, changes) and lead.tree.count == 1
    assert "/y" in lead.tree.follow(lead.history).nodes and lead.tree.count == 3


def test_each_create_carries_its_own_acl_list() -> None:
    """The ACL vector a transaction carries is its request's (duplicates removed), list after list."""
    def acl(*entries: tuple[int, str, str]) -> bytes:
        return jute.INT.pack(len(entries)) + b"".join(jute.INT.pack(p) + jute.ustring("s", s) + jute.ustring("i", i)
                                                      for p, s, i in entries)
    world, ip = (31, "world", "anyone"), (1, "ip", "10.0.0.1")
    lists = [(world,), (world, ip), (ip,), (world, world), (ip, world)] * 2
    lists += [((1, "ip", f"10.1.0.{k}"),) for k in range(20)] + [(world, ip)]
    lead = Leader()
    for k, entries in enumerate(lists):
        txn = lead.write("create", create(f"/n{k}", acl=acl(*entries)))
        assert txn["acl"] == list(dict.fromkeys(f"{s}:{i}:{p}" for p, s, i in entries)), k


def test_a_multi_that_replaces_a_sessions_ephemeral_node_leaves_the_session_without_it() -> None:
    """A ZooKeeper leader's session owns /eph; a zabref leader's multi deletes it and creates a container at its
    path: the proposal tree (`take`) no longer counts /eph among the session's ephemeral nodes, as applying the
    transaction does not, so the session's closeSession leaves the container (found by the property test above)."""
    header = struct.Struct(">qiqqi")
    session = 0x20000B
    history = [Txn(E1 | 1, zktxn.FOREIGN + header.pack(session, 0, E1 | 1, 5, -10) + jute.INT.pack(4000)),
               Txn(E1 | 2, zktxn.FOREIGN + header.pack(session, 1, E1 | 2, 6, 1) + create("/eph", b"e")[:-4] + b"\x01"
                   + jute.INT.pack(1))]
    taking = HistoryTree()
    zxid = E1 | 3
    txn, changes = prepare_changes(taking.follow(history), 7, 1, OP["multi"],
                                   multi(("delete", delete("/eph")), ("createContainer", create("/eph", b"c"))), zxid)
    history.append(Txn(zxid, zktxn.FOREIGN + txn))
    assert taking.take(history, changes)
    assert taking.tree.ephemerals.get(session, set()) == set() and taking.tree.nodes["/eph"].data == b"c"
    history.append(Txn(E1 | 4, zktxn.FOREIGN + header.pack(session, 2, E1 | 4, 8, -11) + jute.INT.pack(0)))
    assert taking.follow(history).nodes["/eph"].data == b"c"
    assert state(taking.tree) == state(HistoryTree().follow(history))
