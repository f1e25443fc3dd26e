"""ZooKeeper's data tree as its transactions leave it: what a zabref leader prepares a ZooKeeper client's write
against, and what its SNAP gives a ZooKeeper follower when its history holds ZooKeeper's transactions. Sans-IO.

Theory of operation
-------------------
zabref's state is a history of transactions, not a tree: its own transactions each create a node of their own
(`zabref.core.zktxn`), so the tree they make is the history itself, one node per transaction. A ZooKeeper client's
write forwarded to a zabref leader by a ZooKeeper follower (REQUEST; `zabref.core.zkprep`) is different: whether a
create fails because the node exists, which version a setData writes, the name of a sequential node, all depend on
the tree every earlier transaction made. `DataTree` applies transactions as ZooKeeper's ``DataTree.processTxn``
does (create with the parent's child version ``parentCVersion``, -1 meaning one more; delete; setData; setACL;
check; error; a multi applied whole or, when one of its operations is an error, not at all; closeSession deleting
the session's ephemeral nodes), one transaction being the dict `zktxn.decode_txn` reads, or zabref's own value
(`fields`); the two transactions nearly every one is, zabref's own value and a ZooKeeper client's plain create, are
applied without that dict (`DataTree.apply_txn`, `zktxn.read_create`; `DataTree.apply_read` also gives what it read,
from which a waiting client's answer is made). A history's base (`zktxn.SNAPSHOT`: a
ZooKeeper leader's snapshot stream, kept whole by a zabref follower) is applied as the tree it holds, sessions, ACLs
and every node's stat (`DataTree.load`). `HistoryTree` keeps one tree up to date with a history that grows by
appends, starting again when the history it followed was cut (its last applied zxid is no longer where it was: a
zxid names one transaction).

What it does not do: watches, quotas, the digest (a ZooKeeper follower compares none when the transaction carries
none), ACL checks (zabref's clients hold no credentials: no request is refused for its ACL), sessions' expiry (a
zabref leader tracks no session: `zabref.core.zkprep` refuses an ephemeral node, as ZooKeeper does for a local
session), containers' and TTL nodes' removal (ZooKeeper's ContainerManager runs on its leader).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from zabref.core import jute, zksnap, zktxn
from zabref.core.types import Txn
from zabref.errors import CodecError

__all__ = ["ZNode", "Children", "ChangedChildren", "DataTree", "HistoryTree", "fields", "parent_of", "session_of",
           "acl_parts", "OPEN_ACL", "CONTAINER_OWNER", "ERR"]

#: world:anyone with every permission: ZooKeeper's OPEN_ACL_UNSAFE, its snapshot's ACL key -1.
OPEN_ACL = zktxn.OPEN_ACL
#: The ephemeral owner ZooKeeper gives a container node (EphemeralType.CONTAINER_EPHEMERAL_OWNER).
CONTAINER_OWNER = -(1 << 63)
#: ZooKeeper's KeeperException.Code values this package names.
ERR = {"OK": 0, "RUNTIMEINCONSISTENCY": -2, "MARSHALLINGERROR": -5, "UNIMPLEMENTED": -6, "BADARGUMENTS": -8,
       "NONODE": -101, "BADVERSION": -103, "NOCHILDRENFOREPHEMERALS": -108, "NODEEXISTS": -110, "NOTEMPTY": -111,
       "INVALIDACL": -114, "EPHEMERALONLOCALSESSION": -120}
_CREATES = ("create", "create2", "createContainer", "createTTL")
_SESSION = struct.Struct(">qi")  # a snapshot's session: long id, int timeout


class Children(Protocol):
    """A node's children's names, as they are read and changed: a set (the tree's), or a prepared request's changes
    over the tree's set (`ChangedChildren`)."""

    def add(self, name: str, /) -> None: ...

    def discard(self, name: str, /) -> None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[str]: ...


class ChangedChildren:
    """A changed node's children in a request prepared against a tree (`zabref.core.zkprep`): the tree's set and
    what the request added and removed, so that a change of a parent with many children costs what it changes, not a
    copy of them all (the root of a tree of 60,000 nodes was copied for each create)."""

    __slots__ = ("base", "added", "removed")

    def __init__(self, base: set[str]) -> None:
        self.base, self.added, self.removed = base, set[str](), set[str]()

    def add(self, name: str) -> None:
        self.removed.discard(name)
        if name not in self.base:
            self.added.add(name)

    def discard(self, name: str) -> None:
        self.added.discard(name)
        if name in self.base:
            self.removed.add(name)

    def folded(self) -> set[str]:
        """The tree's set itself, changed as the request changed it: for the tree that takes the prepared changes
        (`DataTree.take`), whose node the prepared copy replaces."""
        self.base -= self.removed
        self.base |= self.added
        return self.base

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)

    def __iter__(self) -> Iterator[str]:
        yield from (name for name in self.base if name not in self.removed)
        yield from self.added


@dataclass(slots=True, init=False)
class ZNode:
    """A node: its data, ACL (``scheme:id:perms`` each), ZooKeeper's StatPersisted, and its children's names."""

    data: bytes | None
    acl: tuple[str, ...]
    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    aversion: int
    ephemeral_owner: int
    children: Children = field(init=False)

    def __init__(self, data: bytes | None, acl: tuple[str, ...], czxid: int, mzxid: int, pzxid: int, ctime: int = 0,
                 mtime: int = 0, version: int = 0, cversion: int = 0, aversion: int = 0, ephemeral_owner: int = 0
                 ) -> None:
        self.data = data
        self.acl = acl
        self.czxid = czxid
        self.mzxid = mzxid
        self.pzxid = pzxid
        self.ctime = ctime
        self.mtime = mtime
        self.version = version
        self.cversion = cversion
        self.aversion = aversion
        self.ephemeral_owner = ephemeral_owner
        self.children: Children = set()

    def with_children(self, children: Children) -> ZNode:
        """A copy of this node holding ``children``."""
        node = ZNode(self.data, self.acl, self.czxid, self.mzxid, self.pzxid, self.ctime, self.mtime, self.version,
                     self.cversion, self.aversion, self.ephemeral_owner)
        node.children = children
        return node

    def stat(self) -> tuple[int, ...]:
        """ZooKeeper's Stat, as a client reads it: czxid, mzxid, ctime, mtime, version, cversion, aversion,
        ephemeralOwner, dataLength, numChildren, pzxid."""
        return (self.czxid, self.mzxid, self.ctime, self.mtime, self.version, self.cversion, self.aversion,
                self.ephemeral_owner, len(self.data or b""), len(self.children), self.pzxid)


def parent_of(path: str) -> str:
    """The parent's path ("/" for a child of the root)."""
    return path[: path.rfind("/")] or "/"


def fields(txn: Txn) -> dict[str, Any]:
    """Transaction ``txn`` as `zktxn.decode_txn` reads one: zabref's own value as the create of its node; a base
    (`zktxn.SNAPSHOT`) as op ``snapshot`` carrying the stream."""
    if txn.value[:1] == zktxn.SNAPSHOT:
        return {"op": "snapshot", "session": "0x0", "cxid": 0, "zxid": txn.zxid, "time": 0, "stream": txn.value[1:]}
    if txn.value[:1] == zktxn.FOREIGN:
        return zktxn.decode_txn(txn.value[1:], f"the ZooKeeper transaction {txn.zxid:#x}")
    return _own_create(txn).fields()


def _own_create(txn: Txn) -> zktxn.Create:
    """zabref's own value as the create of its node (`zktxn.node_of`): persistent, world:anyone, the parent's child
    version one more, no session, cxid or time."""
    return zktxn.Create(0, 0, txn.zxid, 0, zktxn.node_of(txn.zxid), txn.value, OPEN_ACL, False, -1, None)


def _create_of(txn: Txn) -> zktxn.Create | None:
    """The create ``txn`` is when it is zabref's own value or a ZooKeeper client's plain create; else None."""
    marker = txn.value[:1]
    return zktxn.foreign_create(txn.value) if marker == zktxn.FOREIGN else \
        None if marker == zktxn.SNAPSHOT else _own_create(txn)


def session_of(txn: dict[str, Any]) -> int:
    """The header's session as a signed long (`zktxn.decode_txn` gives it as unsigned hex)."""
    s = int(txn["session"], 16)
    return s - (1 << 64) if s >= 1 << 63 else s


class DataTree:
    """The nodes (by path, the root "/"), each session's ephemeral nodes and the sessions; a new tree is a fresh
    server's: the root, ``/zookeeper``, its ``config`` and ``quota``."""

    def __init__(self) -> None:
        self.nodes: dict[str, ZNode] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self.sessions: dict[int, int] = {}  # session -> timeout (ms), from createSession to closeSession
        self.last_zxid = 0
        for path in ("/", zksnap.SYSTEM_ROOT, zksnap.SYSTEM_ROOT + "/config", zksnap.SYSTEM_ROOT + "/quota"):
            self.nodes[path] = ZNode(b"", OPEN_ACL, 0, 0, 0)
            if path != "/":
                self.nodes[parent_of(path)].children.add(path.rsplit("/", 1)[1])

    def apply(self, txn: dict[str, Any]) -> int:
        """Apply one transaction (ZooKeeper's processTxn): the error code its result carries (0: applied)."""
        self.last_zxid = max(self.last_zxid, txn["zxid"])
        return self._apply(txn["op"], txn, txn["zxid"], txn["time"], session_of(txn))

    def apply_txn(self, txn: Txn) -> int:
        """`apply` of ``fields(txn)``, without the fields' dict for the two transactions nearly every one is: zabref's
        own value (the create of its node, `fields`) and a ZooKeeper client's plain create (`zktxn.foreign_create`)."""
        create = _create_of(txn)
        return self.apply(fields(txn)) if create is None else self._apply_create(create)

    def apply_read(self, txn: Txn) -> tuple[zktxn.Create | dict[str, Any], int]:
        """`apply_txn`, and the transaction as it was read to be applied: the `zktxn.Create` of one of the two
        creates `apply_txn` applies without a dict, else ``fields(txn)``."""
        create = _create_of(txn)
        if create is None:
            read = fields(txn)
            return read, self.apply(read)
        return create, self._apply_create(create)

    def _apply_create(self, create: zktxn.Create) -> int:
        self.last_zxid = max(self.last_zxid, create.zxid)
        return self._create(create.path, create.data, create.acl, create.session if create.ephemeral else 0,
                            create.parent_cversion, create.zxid, create.time)

    def take(self, zxid: int, changes: dict[str, ZNode | None]) -> None:
        """Apply transaction ``zxid`` as the nodes it changes, prepared against this tree
        (`zabref.core.zkprep.prepare_changes`): the tree `apply` of the transaction would leave, without reading it
        again. The prepared copies replace their nodes, each holding its node's set of children as the request
        changed it. A node replaced by another one's (a multi that deletes a session's ephemeral node and creates
        one at its path) leaves its session's ephemeral nodes, as `apply`'s delete and create do."""
        self.last_zxid = max(self.last_zxid, zxid)
        nodes = self.nodes
        for path, node in changes.items():
            if node is None:
                self._drop(path)
                continue
            children = node.children
            if isinstance(children, ChangedChildren):
                node.children = children.folded()
            old = nodes.get(path)
            if old is not None and 0 < old.ephemeral_owner != node.ephemeral_owner:
                self.ephemerals.get(old.ephemeral_owner, set()).discard(path)
            if node.ephemeral_owner > 0:
                self.ephemerals.setdefault(node.ephemeral_owner, set()).add(path)
            nodes[path] = node

    def _apply(self, op: str, rec: dict[str, Any], zxid: int, time: int, session: int) -> int:
        if op == "snapshot":
            self.load(rec["stream"], f"the snapshot at {zxid:#x}")
            self.last_zxid = zxid
            return 0
        if op in _CREATES:
            owner = (session if rec.get("ephemeral") else 0) if op in ("create", "create2") else \
                CONTAINER_OWNER if op == "createContainer" else (0xFF << 56 | rec["ttl"]) - (1 << 64)
            return self._create(rec["path"], rec["data"], tuple(rec["acl"]), owner, rec["parentCVersion"], zxid, time)
        if op in ("delete", "deleteContainer"):
            return self._delete(rec["path"], zxid)
        if op in ("setData", "reconfig"):
            node = self.nodes.get(rec["path"])
            if node is None:
                return ERR["NONODE"]
            node.data, node.mtime, node.mzxid, node.version = rec["data"], time, zxid, rec["version"]
            return 0
        if op == "setACL":
            node = self.nodes.get(rec["path"])
            if node is None:
                return ERR["NONODE"]
            node.acl, node.aversion = tuple(rec["acl"]), rec["version"]
            return 0
        if op == "createSession":
            self.sessions[session] = int(rec["timeout"])
            return 0
        if op == "closeSession":
            self.sessions.pop(session, None)
            owned = self.ephemerals.pop(session, set())
            for path in sorted(set(rec.get("paths2Delete") or ()) | owned, key=len, reverse=True):
                self._delete(path, zxid)
            return 0
        if op == "error":
            return int(rec["err"])
        if op == "multi":
            if any(o["op"] == "error" for o in rec["ops"]):
                return next(int(o.get("err", 0)) for o in rec["ops"] if o["op"] == "error" and o.get("err", 0))
            for o in rec["ops"]:
                err = self._apply(o["op"], o, zxid, time, session)
                if err:
                    return err
            return 0
        return 0  # check: nothing in the tree

    def _create(self, path: str, data: bytes | None, acl: tuple[str, ...], owner: int, parent_cversion: int,
                zxid: int, time: int) -> int:
        parent = self.nodes.get(parent_of(path))
        if parent is None:
            return ERR["NONODE"]
        if path in self.nodes:
            return ERR["NODEEXISTS"]
        if parent_cversion == -1:
            parent_cversion = parent.cversion + 1
        if parent_cversion > parent.cversion:
            parent.cversion, parent.pzxid = parent_cversion, zxid
        parent.children.add(path.rsplit("/", 1)[1])
        self.nodes[path] = ZNode(data, acl, zxid, zxid, zxid, time, time, ephemeral_owner=owner)
        if owner > 0:
            self.ephemerals.setdefault(owner, set()).add(path)
        return 0

    def _delete(self, path: str, zxid: int) -> int:
        parent = self.nodes.get(parent_of(path))
        if parent is None:
            return ERR["NONODE"]
        parent.children.discard(path.rsplit("/", 1)[1])
        parent.pzxid = max(parent.pzxid, zxid)
        return 0 if self._drop(path) is not None else ERR["NONODE"]

    def _drop(self, path: str) -> ZNode | None:
        """Remove the node at ``path`` (its session's ephemeral index too); the node, or None if there was none."""
        node = self.nodes.pop(path, None)
        if node is not None and node.ephemeral_owner > 0:
            self.ephemerals.get(node.ephemeral_owner, set()).discard(path)
        return node

    def load(self, stream: bytes, what: str) -> None:
        """Become the tree of a ZooKeeper leader's snapshot stream (`zksnap`'s format, with its signature): its
        sessions, its nodes with their ACLs and StatPersisted, each session's ephemeral nodes; `CodecError` (naming
        ``what`` and the offset) for a stream that is not one."""
        try:
            self._load(jute.Cursor(stream, what))
        except jute.Short:
            raise CodecError(what, len(stream), "the snapshot stream ends before its signature") from None

    def _load(self, cur: jute.Cursor) -> None:
        sessions = {}
        for _ in range(cur.length("session count", zksnap.MAX_SESSIONS, nullable=False) or 0):
            session, timeout = _SESSION.unpack(cur.take(_SESSION.size))
            sessions[session] = timeout
        acls: dict[int, tuple[str, ...]] = {}
        for _ in range(cur.length("ACL cache size", zksnap.MAX_ACL_LISTS, nullable=False) or 0):
            key = jute.LONG.unpack(cur.take(8))[0]
            entries = []
            for _ in range(cur.length("ACL list length", zksnap.MAX_ACLS, nullable=True) or 0):
                perms = jute.INT.unpack(cur.take(4))[0]
                entries.append(f"{cur.ustring('ACL scheme')}:{cur.ustring('ACL id')}:{perms}")
            acls[key] = tuple(entries)
        nodes: dict[str, ZNode] = {}
        ephemerals: dict[int, set[str]] = {}
        while True:
            at = cur.pos
            path = cur.ustring("node path")
            if path == "/" and nodes:
                break
            path = path or "/"
            if (path == "/") == bool(nodes) or (path != "/" and parent_of(path) not in nodes) or path in nodes:
                raise cur.fail(f"node path {path!r} is not a new child of a node already read", at)
            data = cur.buffer("node data")
            key = jute.LONG.unpack(cur.take(8))[0]
            if key != -1 and key not in acls:
                raise cur.fail(f"node {path!r} names ACL list {key}, which the snapshot's ACL cache lacks", at)
            czxid, mzxid, ctime, mtime, version, cversion, aversion, owner, pzxid = zksnap.STAT.unpack(
                cur.take(zksnap.STAT.size))
            nodes[path] = ZNode(data, OPEN_ACL if key == -1 else acls[key], czxid, mzxid, pzxid, ctime, mtime,
                                version, cversion, aversion, owner)
            if path != "/":
                nodes[parent_of(path)].children.add(path.rsplit("/", 1)[1])
            if owner > 0:  # a session's (a container's and a TTL node's owner are below 0)
                ephemerals.setdefault(owner, set()).add(path)
        signature = cur.ustring("signature")
        if signature != zksnap.SIGNATURE or cur.remaining:
            raise cur.fail(f"the snapshot ends with {signature!r} and {cur.remaining} bytes, not "
                           f"{zksnap.SIGNATURE!r} alone")
        self.nodes, self.sessions, self.ephemerals = nodes, sessions, ephemerals

    def snapshot(self) -> bytes:
        """The tree as the stream a ZooKeeper leader writes after SNAP (`zksnap.write_stream`): parents first."""
        lists: dict[tuple[str, ...], int] = {}
        order: list[tuple[str, ZNode]] = []
        stack = ["/"]
        while stack:
            path = stack.pop()
            node = self.nodes[path]
            order.append((path, node))
            stack.extend(sorted(((path.rstrip("/") + "/" + c) for c in node.children), reverse=True))
        entries = []
        for path, n in order:
            key = -1 if n.acl == OPEN_ACL else lists.setdefault(n.acl, len(lists) + 1)
            entries.append(("" if path == "/" else path, n.data, key, (n.czxid, n.mzxid, n.ctime, n.mtime, n.version,
                                                                       n.cversion, n.aversion, n.ephemeral_owner,
                                                                       n.pzxid)))
        acls = {key: [acl_parts(a) for a in acl] for acl, key in lists.items()}
        return zksnap.write_stream(sorted(self.sessions.items()), acls, entries)


def acl_parts(acl: str) -> tuple[int, str, str]:
    """``scheme:id:perms`` (an id may hold colons: digest's ``user:hash``) -> (perms, scheme, id)."""
    scheme, rest = acl.split(":", 1)
    ident, perms = rest.rsplit(":", 1)
    return int(perms), scheme, ident


class HistoryTree:
    """One `DataTree` kept equal to the tree of a history's transactions (module docstring)."""

    __slots__ = ("tree", "count", "last")

    def __init__(self) -> None:
        self.tree = DataTree()
        self.count = 0
        self.last = 0

    def follow(self, history: Sequence[Txn], count: int | None = None,
               watch: Callable[[zktxn.Create | dict[str, Any], int], None] | None = None) -> DataTree:
        """The tree of ``history[:count]`` (all of it by default), applying what was appended since the last call
        (from the start if the history was cut); ``watch(txn, err)`` sees each transaction applied now, right after
        it is applied, as `DataTree.apply_read` read it."""
        n = len(history) if count is None else count
        if self.count > n or (self.count and history[self.count - 1].zxid != self.last):
            self.tree, self.count = DataTree(), 0
        tree = self.tree
        for k in range(self.count, n):
            if watch is None:
                tree.apply_txn(history[k])
                continue
            read, err = tree.apply_read(history[k])
            watch(read, err)
        self.count = n
        self.last = history[n - 1].zxid if n else 0
        return tree

    def take(self, history: Sequence[Txn], changes: dict[str, ZNode | None]) -> bool:
        """Follow the history's last transaction, just appended, as the ``changes`` it was prepared with against
        this tree (`DataTree.take`; the tree followed all before it): False, taking nothing, when the tree was not
        at the transaction before it (the next `follow` applies it as any other)."""
        n = len(history)
        if not n or self.count != n - 1 or (self.count and history[self.count - 1].zxid != self.last):
            return False
        self.tree.take(history[n - 1].zxid, changes)
        self.count, self.last = n, history[n - 1].zxid
        return True
