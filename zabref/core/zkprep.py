"""A ZooKeeper client's write, forwarded to a zabref leader, as the transaction ZooKeeper's leader would propose.
Sans-IO.

Theory of operation
-------------------
A ZooKeeper follower sends its clients' writes to its leader as REQUEST (``long sessionId, int cxid, int type``,
then the request's record); the leader's PrepRequestProcessor turns each into a transaction against its data tree
and every change it has proposed before (``outstandingChanges``), and proposes it: TxnHeader ``{clientId = the
session, cxid, zxid, time, type}`` and the transaction's record, or, when the request fails (the node exists, a
version does not match, ...), the same header with type error (-1) and ``ErrorTxn {int err}``. The follower that
forwarded the request answers its client when it applies the transaction at its COMMIT, matching it by session and
cxid. `prepare` is that step for a zabref leader: the tree is the one its whole history makes, committed or not
(`zabref.core.zktree.HistoryTree`), which is what ZooKeeper's outstanding changes add to its applied tree. A leader
calls it as `prepare_value`: the value it proposes, the nodes the transaction changes (which its proposal tree takes)
and, for a plain create, the create kept for its delivered tree's apply at the COMMIT.

Requests, as PrepRequestProcessor.pRequest2Txn reads them (``zookeeper.jute``, module ``org.apache.zookeeper.proto``):

=====================================  =========================================================================
create 1, create2 15, createContainer  CreateRequest {ustring path; buffer data; vector<ACL> acl; int flags}
19
createTTL 21                           CreateTTLRequest {path; data; acl; flags; long ttl}
delete 2, deleteContainer 20           DeleteRequest {ustring path; int version}
setData 5                              SetDataRequest {ustring path; buffer data; int version}
setACL 7                               SetACLRequest {ustring path; vector<ACL> acl; int version}
check 13 (in a multi)                  CheckVersionRequest {ustring path; int version}
multi 14                               (MultiHeader {int type; boolean done; int err}, record)*, then a header
                                       with done
=====================================  =========================================================================

The checks are ZooKeeper's, in its order: a path as PathUtils.validatePath wants it (else BADARGUMENTS), the parent
and the node present or absent (NONODE, NODEEXISTS), an expected version (BADVERSION; -1 matches any; the next
version skips -1, ZOOKEEPER-4743), no children of a node to delete (NOTEMPTY) nor of an ephemeral parent
(NOCHILDRENFOREPHEMERALS), an ACL list that is not empty (INVALIDACL; the scheme ``auth`` is INVALIDACL too: a
forwarded request's credentials are not read here). A sequential node's name ends with the parent's child version,
ten digits. A multi's operations are prepared in order, each seeing the ones before; at the first failure the rest
are ErrorTxn(RUNTIMEINCONSISTENCY) and nothing of it is applied. Not served, each an error transaction as ZooKeeper
would send it: an ephemeral node (EPHEMERALONLOCALSESSION: a zabref leader tracks no session, so every session is a
local one of its follower, as ZooKeeper runs with ``localSessionsUpgradingEnabled=false``), TTL nodes (UNIMPLEMENTED,
ZooKeeper's answer while extended types are off, its default), reconfig (UNIMPLEMENTED). A record that cannot be
read is MARSHALLINGERROR, as ZooKeeper answers it. No ACL is checked (`zabref.core.zktree`). Session requests
(createSession, closeSession) are not prepared here: `RequestRefused`.
"""

from __future__ import annotations

import re

from zabref.core import jute
from zabref.core.zktree import CONTAINER_OWNER, ERR, ChangedChildren, DataTree, ZNode, acl_parts, parent_of
from zabref.core.zktxn import FOREIGN, HEADER, OPEN_ACL, OPS, WORLD_ANYONE_ALL, Create, TxnReader, keep_create
from zabref.errors import CodecError

__all__ = ["prepare", "prepare_changes", "prepare_value", "RequestRefused", "valid_path"]

_OP = {name: code for code, name in OPS.items()}
_SEQUENTIAL = (2, 3, 6)  # CreateMode flags: PERSISTENT_SEQUENTIAL, EPHEMERAL_SEQUENTIAL, PERSISTENT_SEQUENTIAL_WITH_TTL
_EPHEMERAL = (1, 3)
_TTL = (5, 6)
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class RequestRefused(Exception):
    """A request a zabref leader does not turn into a transaction (a session's)."""


class _Failed(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.err = ERR[code]


#: The characters PathUtils.validatePath refuses anywhere in a path: NUL and the other controls, U+007F-U+009F, the
#: surrogates and the private use area (U+D800-U+F8FF), U+FFF0 and above (a Java char; a character outside the BMP is
#: a surrogate pair there). The surrogate is written as a call: a compiled build (mypyc) takes none in a literal.
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f" + chr(0xD800) + "-\uf8ff\ufff0-" + chr(0x10FFFF) + "]")


def valid_path(path: str) -> bool:
    """PathUtils.validatePath: absolute, no empty, "." or ".." name, no trailing "/", no control or private-use
    character (checked per Java char: a character outside the BMP is a surrogate pair, which it refuses)."""
    if not path.startswith("/") or (len(path) > 1 and path.endswith("/")):
        return False
    if len(path) == 1:
        return True
    names = path[1:].split("/")
    if any(n in ("", ".", "..") for n in names):
        return False
    return _REFUSED.search(path) is None


class _View:
    """The tree with the changes of a request's operations over it (copies; the tree itself is not changed): each
    changed node as applying the transaction would leave it (`changes`, None for a deleted one), so that a multi's
    operation sees the ones before it, and the tree of the leader's proposals can take them instead of applying the
    transaction again (`zabref.core.zktree.DataTree.take`)."""

    def __init__(self, tree: DataTree, zxid: int, time_ms: int) -> None:
        self.tree = tree
        self.zxid, self.time_ms = zxid, time_ms
        self.changes: dict[str, ZNode | None] = {}
        #: A plain create's node as its transaction holds it, for `prepare_value`: path, data, ACL, parent's cversion.
        self.created: tuple[str, bytes | None, tuple[str, ...], int] | None = None

    def get(self, path: str) -> ZNode:
        node = self.changes[path] if path in self.changes else self.tree.nodes.get(path)
        if node is None:
            raise _Failed("NONODE")
        return node

    def exists(self, path: str) -> bool:
        return (self.changes[path] if path in self.changes else self.tree.nodes.get(path)) is not None

    def change(self, path: str) -> ZNode:
        """The view's own copy of the node at ``path``, to change (an operation changes nodes only once its checks
        passed, so a copy the view made before is changed again in place)."""
        node = self.changes.get(path)
        if node is None:
            base = self.get(path)
            children = base.children
            if not isinstance(children, set):
                raise TypeError(f"the node {path!r} of the tree a request is prepared against is a prepared copy")
            node = base.with_children(ChangedChildren(children))
            self.changes[path] = node
        return node


def _next_version(current: int, expected: int) -> int:
    if expected != -1 and expected != current:
        raise _Failed("BADVERSION")
    nxt = current + 1 if current < _INT_MAX else _INT_MIN
    return 0 if nxt == -1 else nxt


def _acls(r: TxnReader, field: str) -> list[str]:
    return list(dict.fromkeys(r.acls(field)))  # duplicates removed, as ZooKeeper's fixupACL does (ZOOKEEPER-1877)


def _acl_bytes(acl: list[str]) -> bytes:
    if len(acl) == 1 and acl[0] == OPEN_ACL[0]:
        return WORLD_ANYONE_ALL
    out = [jute.INT.pack(len(acl))]
    for perms, scheme, ident in map(acl_parts, acl):
        out.append(jute.INT.pack(perms) + jute.ustring("scheme", scheme) + jute.ustring("id", ident))
    return b"".join(out)


def _txn(view: _View, op: str, r: TxnReader) -> tuple[str, bytes]:
    """One operation's (type, record) against ``view``, which takes its changes; `_Failed` with ZooKeeper's code."""
    if op in ("create", "create2", "createContainer", "createTTL"):
        path, data, acl, flags = r.ustring("path"), r.buffer("data"), _acls(r, "acl"), r.i32("flags")
        ttl = r.i64("ttl") if op == "createTTL" else -1
        if flags not in range(7):
            raise _Failed("BADARGUMENTS")
        if flags in _TTL or op == "createTTL":
            raise _Failed("UNIMPLEMENTED")  # extended ephemeral types are off (ZooKeeper's default)
        if flags in _EPHEMERAL:
            raise _Failed("EPHEMERALONLOCALSESSION")
        if "/" not in path or "\0" in path:
            raise _Failed("BADARGUMENTS")
        if not acl or any(a.startswith("auth:") for a in acl):
            raise _Failed("INVALIDACL")
        parent = view.get(parent_of(path))
        if flags in _SEQUENTIAL:
            path += f"{parent.cversion:010d}"
        if not valid_path(path) or path == "/":
            raise _Failed("BADARGUMENTS")
        if view.exists(path):
            raise _Failed("NODEEXISTS")
        if parent.ephemeral_owner != 0 and parent.ephemeral_owner >> 56 == 0:
            raise _Failed("NOCHILDRENFOREPHEMERALS")
        parent = view.change(parent_of(path))
        parent.cversion += 1
        parent.pzxid = zxid = view.zxid
        parent.children.add(path.rsplit("/", 1)[1])
        view.changes[path] = ZNode(data, tuple(acl), zxid, zxid, zxid, view.time_ms, view.time_ms,
                                   ephemeral_owner=CONTAINER_OWNER if op == "createContainer" else 0)
        body = jute.ustring("path", path) + jute.buffer("data", data) + _acl_bytes(acl)
        if op in ("create", "create2"):
            body += b"\x00"  # ephemeral: false (ephemeral nodes are refused above)
        if op == "create":
            view.created = (path, data, OPEN_ACL if acl == list(OPEN_ACL) else tuple(acl), parent.cversion)
        return op, body + jute.INT.pack(parent.cversion) + (jute.LONG.pack(ttl) if op == "createTTL" else b"")
    if op in ("delete", "deleteContainer"):
        path, version = r.ustring("path"), r.i32("version")
        if not valid_path(path) or path == "/":
            raise _Failed("BADARGUMENTS")
        view.get(parent_of(path))
        node = view.get(path)
        if op == "delete":
            _next_version(node.version, version)
        if node.children:
            raise _Failed("NOTEMPTY")
        parent = view.change(parent_of(path))
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.pzxid = view.zxid
        view.changes[path] = None
        return op, jute.ustring("path", path)
    if op in ("setData", "setACL", "check"):
        path = r.ustring("path")
        data = r.buffer("data") if op == "setData" else None
        acl = _acls(r, "acl") if op == "setACL" else []
        version = r.i32("version")
        if not valid_path(path):
            raise _Failed("BADARGUMENTS")
        if op == "setACL" and (not acl or any(a.startswith("auth:") for a in acl)):
            raise _Failed("INVALIDACL")
        node = view.get(path)
        if op == "check":
            return op, jute.ustring("path", path) + jute.INT.pack(_next_version(node.version, version))
        if op == "setACL":
            aversion = _next_version(node.aversion, version)
            node = view.change(path)
            node.acl, node.aversion = tuple(acl), aversion
            return op, jute.ustring("path", path) + _acl_bytes(acl) + jute.INT.pack(node.aversion)
        version = _next_version(node.version, version)
        node = view.change(path)
        node.version, node.data, node.mzxid, node.mtime = version, data, view.zxid, view.time_ms
        return op, jute.ustring("path", path) + jute.buffer("data", data) + jute.INT.pack(node.version)
    raise _Failed("UNIMPLEMENTED")  # reconfig, and any other type a follower would forward


def _multi(view: _View, r: TxnReader) -> bytes:
    """MultiTxn: each operation in order against ``view``; from the first failure on, errors (module docstring)."""
    ops: list[tuple[int, bytes]] = []
    failed = False
    while True:
        op_type = r.i32("multi op type")
        done = r.boolean("multi done")
        r.i32("multi err")
        if done:
            break
        name = OPS.get(op_type)
        if name is None or name in ("multi", "error", "createSession", "closeSession", "reconfig"):
            raise r.fail(f"multi op of type {op_type}")
        if failed:
            _skip(name, r)
            ops.append((-1, jute.INT.pack(ERR["RUNTIMEINCONSISTENCY"])))
            continue
        try:
            kind, body = _txn(view, name, r)
            ops.append((_OP[kind], body))
        except _Failed as e:
            failed = True
            ops.append((-1, jute.INT.pack(e.err)))
    if failed:
        view.changes.clear()
    return jute.INT.pack(len(ops)) + b"".join(jute.INT.pack(t) + jute.buffer("txn", b) for t, b in ops)


def _skip(name: str, r: TxnReader) -> None:
    """Read the record of an operation after a failed one (its fields are not checked, as ZooKeeper's are not)."""
    r.ustring("path")
    if name in ("create", "create2", "createContainer", "createTTL"):
        r.buffer("data")
        r.acls("acl")
        r.i32("flags")
        if name == "createTTL":
            r.i64("ttl")
    elif name == "setData":
        r.buffer("data")
        r.i32("version")
    elif name == "setACL":
        r.acls("acl")
        r.i32("version")
    elif name in ("delete", "deleteContainer", "check"):
        r.i32("version")


def prepare(tree: DataTree, session: int, cxid: int, op: int, record: bytes, zxid: int, time_ms: int = 0) -> bytes:
    """The transaction (TxnHeader and record, no digest) ZooKeeper's leader proposes at ``zxid`` for a forwarded
    request of type ``op`` with ``record``, against ``tree`` (not changed). `RequestRefused` for a session's
    request (module docstring)."""
    return prepare_changes(tree, session, cxid, op, record, zxid, time_ms)[0]


def prepare_changes(tree: DataTree, session: int, cxid: int, op: int, record: bytes, zxid: int, time_ms: int = 0
                    ) -> tuple[bytes, dict[str, ZNode | None]]:
    """`prepare`, and the nodes applying its transaction to ``tree`` would change, as it would leave them (None:
    deleted; nothing for an error transaction), for `zabref.core.zktree.DataTree.take`."""
    txn, view = _prepare(tree, session, cxid, op, record, zxid, time_ms)
    return txn, view.changes


def prepare_value(tree: DataTree, session: int, cxid: int, op: int, record: bytes, zxid: int, time_ms: int = 0
                  ) -> tuple[bytes, dict[str, ZNode | None]]:
    """`prepare_changes`, the transaction as the value a zabref leader proposes (`zktxn.FOREIGN` first); a plain
    create's `zktxn.Create` is kept for the tree that applies the value at its COMMIT (`zktxn.keep_create`), so that
    the leader does not read again what it wrote."""
    txn, view = _prepare(tree, session, cxid, op, record, zxid, time_ms)
    value = FOREIGN + txn
    if view.created is not None:
        path, data, acl, parent_cversion = view.created
        keep_create(value, Create(session, cxid, zxid, time_ms, path, data, acl, False, parent_cversion, None))
    return value, view.changes


def _prepare(tree: DataTree, session: int, cxid: int, op: int, record: bytes, zxid: int, time_ms: int
             ) -> tuple[bytes, _View]:
    name = OPS.get(op)
    if name in ("createSession", "closeSession"):
        raise RequestRefused(f"{name}: a zabref leader tracks no sessions; run ZooKeeper with "
                             "localSessionsEnabled=true and localSessionsUpgradingEnabled=false")
    r = TxnReader(record, f"REQUEST of type {op} ({name or 'unknown'})")
    view = _View(tree, zxid, time_ms)
    try:
        try:
            if name == "multi":
                kind, body = "multi", _multi(view, r)
            elif name is None or name in ("error", "check"):
                raise _Failed("UNIMPLEMENTED")
            else:
                kind, body = _txn(view, name, r)
            r.end()
        except CodecError:
            raise _Failed("MARSHALLINGERROR") from None
    except _Failed as e:
        kind, body = "error", jute.INT.pack(e.err)
        view.changes.clear()
    if kind != "create":  # an error, or a multi whose creates `_txn` saw
        view.created = None
    return HEADER.pack(session, cxid, zxid, time_ms, _OP[kind]) + body, view
