"""ZooKeeper's snapshot stream: the data tree a leader writes on the quorum stream right after SNAP. Sans-IO.

Theory of operation
-------------------
ZooKeeper's ``LearnerHandler`` sends ``QuorumPacket(SNAP, zxid, null)``, then ``ZKDatabase.serializeSnapshot``
(``SerializeUtils.serializeSnapshot``), then the string ``"BenWasHere"`` (the learner refuses the stream without
it), on the same jute output archive, with no length in front::

    int count; (long sessionId; int timeout) * count                               -- the sessions
    int n; (long key; vector<ACL {int perms; Id {ustring scheme; ustring id}}>) * n -- the ACL cache (DataTree)
    (ustring path; DataNode {buffer data; long acl; StatPersisted})*                -- the nodes, the root first
    ustring "/"                                                                     -- the end of the nodes
    ustring "BenWasHere"

``StatPersisted`` is {long czxid; long mzxid; long ctime; long mtime; int version; int cversion; int aversion; long
ephemeralOwner; long pzxid} (60 bytes). The root's path is "" and every other path starts with "/", so the path "/"
can only be the end mark (``DataTree.serializeNodes``). The same bytes, without the signature, follow the header
of a ``snapshot.<zxid>`` file (``FileSnap``).

zabref's SNAP is ZooKeeper's (`zabref.net.wire` reads the stream after the packet with `read_snapshot` and hands it
on as the packet's data; `zabref.core.payloads` maps it to a history and back): the tree `write_snapshot` writes
holds no sessions, an empty ACL cache (every node's ACL key -1, ``ReferenceCountedACLCache.OPEN_UNSAFE_ACL_ID``,
which needs no entry), the root, the given nodes under it (a transaction's node, `zabref.core.zktxn.node_of`), and
``/zookeeper`` with ``config`` and ``quota`` as a fresh server holds them (a ZooKeeper learner rewrites
``/zookeeper/config`` from its own configuration after reading a snapshot). ZooKeeper's ``DataTree.deserialize``
checks that every node's parent came before it; so does `read_tree`.

Readers take a `zabref.core.jute.Cursor`: a stream that stops early raises `Short` (wait for more bytes), bytes that
cannot be a snapshot raise what the cursor's ``fail`` makes, naming the offset. Counts are bounded before anything is
allocated (`MAX_SESSIONS`, `MAX_ACL_LISTS`, `MAX_ACLS`; a buffer by `JUTE_MAX`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from zabref.core import jute
from zabref.core.jute import Cursor, Short

__all__ = ["SIGNATURE", "STAT", "Node", "Tree", "Short", "read_tree", "read_snapshot", "write_snapshot",
           "SYSTEM_ROOT"]

SIGNATURE = "BenWasHere"
#: StatPersisted: czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, pzxid.
STAT = struct.Struct(">qqqqiiiqq")
#: ZooKeeper's own subtree, which every server holds (quotas, the configuration).
SYSTEM_ROOT = "/zookeeper"
#: Sanity bounds: far above anything a test ensemble holds, far below what garbage read as a count gives.
MAX_SESSIONS = 1 << 24
MAX_ACL_LISTS = 1 << 20
MAX_ACLS = 1 << 16


@dataclass(frozen=True, slots=True)
class Node:
    """A node of the tree: its path ("/" for the root), data (None when null), the zxid that created it and where
    its path starts in the stream (for errors about it)."""

    path: str
    data: bytes | None
    czxid: int
    at: int = 0


@dataclass(frozen=True, slots=True)
class Tree:
    sessions: int
    acl_lists: int
    nodes: tuple[Node, ...]

    @property
    def data_bytes(self) -> int:
        return sum(len(n.data or b"") for n in self.nodes)


def read_tree(cur: Cursor) -> Tree:
    """The sessions, the ACL cache and the nodes up to and including the end mark, at ``cur``."""
    sessions = cur.length("session count", MAX_SESSIONS, nullable=False) or 0
    for _ in range(sessions):
        cur.take(12)  # long sessionId, int timeout
    acl_lists = cur.length("ACL cache size", MAX_ACL_LISTS, nullable=False) or 0
    for _ in range(acl_lists):
        cur.take(8)  # the key
        for _ in range(cur.length("ACL list length", MAX_ACLS, nullable=True) or 0):
            cur.take(4)  # perms
            cur.ustring("ACL scheme")
            cur.ustring("ACL id")
    nodes: list[Node] = []
    seen: set[str] = set()
    while True:
        at = cur.pos
        path = cur.ustring("node path")
        if path is None:
            raise cur.fail("a node path is null", at)
        if path == "/" and nodes:
            return Tree(sessions, acl_lists, tuple(nodes))
        if not nodes and path != "":
            raise cur.fail(f"the first node is {path!r}, not the root ('')", at)
        if nodes:
            parent = path[: path.rfind("/")] or "/"
            if not path.startswith("/") or path.endswith("/") or parent not in seen or path in seen:
                raise cur.fail(f"node path {path!r} is not a new child of a node already read", at)
        data = cur.buffer("node data")
        cur.take(8)  # the node's ACL key
        czxid = STAT.unpack(cur.take(STAT.size))[0]
        nodes.append(Node(path or "/", data, czxid, at))
        seen.add(path or "/")


def read_snapshot(cur: Cursor) -> Tree:
    """`read_tree`, then the signature that ends the stream after a SNAP packet."""
    tree = read_tree(cur)
    at = cur.pos
    signature = cur.ustring("signature", 64)
    if signature != SIGNATURE:
        raise cur.fail(f"the snapshot ends with {signature!r}, not {SIGNATURE!r}", at)
    return tree


def write_snapshot(nodes: Iterable[tuple[str, bytes, int]]) -> bytes:
    """The bytes a leader writes after its SNAP packet for a tree holding ``nodes`` (path, data, czxid; each a child
    of the root, outside /zookeeper), with the signature."""
    given = list(nodes)
    top = max((z for _, _, z in given), default=0)
    tree = [("", b"", 0, top, len(given) + 1), *((p, d, z, z, 0) for p, d, z in given),
            (SYSTEM_ROOT, b"", 0, 0, 2), (SYSTEM_ROOT + "/config", b"", 0, 0, 0),
            (SYSTEM_ROOT + "/quota", b"", 0, 0, 0)]
    out = [jute.INT.pack(0), jute.INT.pack(0)]  # no sessions; an empty ACL cache
    for i, (path, data, czxid, pzxid, children) in enumerate(tree):
        if 0 < i <= len(given) and (not path.startswith("/") or path.count("/") != 1 or path == SYSTEM_ROOT):
            raise ValueError(f"{path!r}: a node of a written snapshot is a child of the root outside {SYSTEM_ROOT}")
        stat = STAT.pack(czxid, czxid, 0, 0, 0, children, 0, 0, pzxid)
        out.append(jute.ustring("path", path) + jute.buffer("data", data) + jute.LONG.pack(-1) + stat)
    out.append(jute.ustring("path", "/") + jute.ustring("signature", SIGNATURE))
    return b"".join(out)
