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
cannot be a snapshot raise what the cursor's ``fail`` makes, naming the offset. `TreeReader` reads a stream that
is still arriving piece by piece, going on each time from the last whole element, so that a large SNAP read in many
pieces costs one reading of its bytes, not one per piece. Counts are bounded before anything is
allocated (`MAX_SESSIONS`, `MAX_ACL_LISTS`, `MAX_ACLS`; a buffer by `JUTE_MAX`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from zabref.core import jute
from zabref.core.jute import Cursor, Short

__all__ = ["SIGNATURE", "STAT", "Node", "Tree", "TreeReader", "Short", "read_tree", "read_snapshot",
           "write_snapshot", "write_stream", "SYSTEM_ROOT"]

SIGNATURE = "BenWasHere"
#: StatPersisted: czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, pzxid.
STAT = struct.Struct(">qqqqiiiqq")
#: ZooKeeper's own subtree, which every server holds (quotas, the configuration).
SYSTEM_ROOT = "/zookeeper"
#: Sanity bounds: far above anything a test ensemble holds, far below what garbage read as a count gives.
MAX_SESSIONS = 1 << 24
MAX_ACL_LISTS = 1 << 20
MAX_ACLS = 1 << 16


@dataclass(frozen=True, slots=True, init=False)
class Node:
    """A node of the tree: its path ("/" for the root), data (None when null), the zxid that created it and where
    its path starts, counted from the stream's start (for errors about it)."""

    path: str
    data: bytes | None
    czxid: int
    at: int

    def __init__(self, path: str, data: bytes | None, czxid: int, at: int = 0) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "czxid", czxid)
        object.__setattr__(self, "at", at)


@dataclass(frozen=True, slots=True, init=False)
class Tree:
    sessions: int
    acl_lists: int
    nodes: tuple[Node, ...]

    def __init__(self, sessions: int, acl_lists: int, nodes: tuple[Node, ...]) -> None:
        object.__setattr__(self, "sessions", sessions)
        object.__setattr__(self, "acl_lists", acl_lists)
        object.__setattr__(self, "nodes", nodes)

    @property
    def data_bytes(self) -> int:
        return sum(len(n.data or b"") for n in self.nodes)


class TreeReader:
    """Reads one snapshot stream as its bytes arrive: each call of `read` goes on from the last whole element it read
    (a session, an ACL list, a node), so a stream that comes in many pieces is read once, not once per piece
    (``elements`` counts the elements read, a partial one again at each try). ``signature``: whether the stream ends
    with `SIGNATURE` (after a SNAP packet; a snapshot file's tree does not)."""

    __slots__ = ("signature", "pos", "need", "elements", "_phase", "_left", "_sessions", "_acl_lists", "_nodes",
                 "_seen")

    def __init__(self, signature: bool = True) -> None:
        self.signature = signature
        self.pos = 0  # bytes of the stream read as whole elements
        self.need = 0  # after a try that stopped short: how many bytes of the stream that element needs at least
        self.elements = 0
        self._phase = 0  # 0 session count, 1 sessions, 2 ACL cache size, 3 ACL lists, 4 nodes, 5 signature
        self._left = 0
        self._sessions = self._acl_lists = 0
        self._nodes: list[Node] = []
        self._seen: set[str] = set()

    def read(self, cur: Cursor) -> Tree | None:
        """Go on reading the stream that starts at ``cur``'s position: the tree once the stream is whole (``cur``
        then after it), else None (``cur`` unmoved; ``need`` says how long the stream must be for the next try).
        Bytes that cannot be a snapshot raise what ``cur.fail`` makes."""
        start = cur.pos
        cur.pos = start + self.pos
        try:
            while self._phase < 6:
                self._element(cur, start)
                self.pos = cur.pos - start
        except Short as short:
            self.need = short.need - start
            cur.pos = start
            return None
        return Tree(self._sessions, self._acl_lists, tuple(self._nodes))

    def _element(self, cur: Cursor, start: int) -> None:
        self.elements += 1
        phase = self._phase
        if phase == 0:
            self._sessions = self._left = cur.length("session count", MAX_SESSIONS, nullable=False) or 0
            self._phase = 1
        elif phase == 1:
            if self._left:
                cur.take(12)  # long sessionId, int timeout
                self._left -= 1
            else:
                self._phase = 2
        elif phase == 2:
            self._acl_lists = self._left = cur.length("ACL cache size", MAX_ACL_LISTS, nullable=False) or 0
            self._phase = 3
        elif phase == 3:
            if self._left:
                cur.take(8)  # the key
                for _ in range(cur.length("ACL list length", MAX_ACLS, nullable=True) or 0):
                    cur.take(4)  # perms
                    cur.ustring("ACL scheme")
                    cur.ustring("ACL id")
                self._left -= 1
            else:
                self._phase = 4
        elif phase == 4:
            self._node(cur, start)
        else:
            at = cur.pos
            signature = cur.ustring("signature", 64)
            if signature != SIGNATURE:
                raise cur.fail(f"the snapshot ends with {signature!r}, not {SIGNATURE!r}", at)
            self._phase = 6

    def _node(self, cur: Cursor, start: int) -> None:
        nodes, seen = self._nodes, self._seen
        at = cur.pos
        path = cur.ustring("node path")
        if path is None:
            raise cur.fail("a node path is null", at)
        if path == "/" and nodes:
            self._phase = 5 if self.signature else 6
            return
        if not nodes and path != "":
            raise cur.fail(f"the first node is {path!r}, not the root ('')", at)
        if nodes:
            parent = path[: path.rfind("/")] or "/"
            if not path.startswith("/") or path.endswith("/") or parent not in seen or path in seen:
                raise cur.fail(f"node path {path!r} is not a new child of a node already read", at)
        data = cur.buffer("node data")
        cur.take(8)  # the node's ACL key
        czxid = STAT.unpack(cur.take(STAT.size))[0]
        nodes.append(Node(path or "/", data, czxid, at - start))
        seen.add(path or "/")


def read_tree(cur: Cursor) -> Tree:
    """The sessions, the ACL cache and the nodes up to and including the end mark, at ``cur``; `Short` if the bytes
    end first."""
    return _whole(TreeReader(signature=False), cur)


def read_snapshot(cur: Cursor) -> Tree:
    """`read_tree`, then the signature that ends the stream after a SNAP packet."""
    return _whole(TreeReader(), cur)


def _whole(reader: TreeReader, cur: Cursor) -> Tree:
    start = cur.pos
    tree = reader.read(cur)
    if tree is None:
        raise Short(start + reader.need)
    return tree


def write_snapshot(nodes: Iterable[tuple[str, bytes, int]]) -> bytes:
    """The bytes a leader writes after its SNAP packet for a tree holding ``nodes`` (path, data, czxid; each a child
    of the root, outside /zookeeper), with the signature."""
    given = list(nodes)
    top = max((z for _, _, z in given), default=0)
    tree = [("", b"", 0, top, len(given) + 1), *((p, d, z, z, 0) for p, d, z in given),
            (SYSTEM_ROOT, b"", 0, 0, 2), (SYSTEM_ROOT + "/config", b"", 0, 0, 0),
            (SYSTEM_ROOT + "/quota", b"", 0, 0, 0)]
    entries = []
    for i, (path, data, czxid, pzxid, children) in enumerate(tree):
        if 0 < i <= len(given) and (not path.startswith("/") or path.count("/") != 1 or path == SYSTEM_ROOT):
            raise ValueError(f"{path!r}: a node of a written snapshot is a child of the root outside {SYSTEM_ROOT}")
        entries.append((path, data, -1, (czxid, czxid, 0, 0, 0, children, 0, 0, pzxid)))
    return write_stream((), {}, entries)


def write_stream(sessions: Iterable[tuple[int, int]], acls: dict[int, list[tuple[int, str, str]]],
                 nodes: Iterable[tuple[str, bytes | None, int, tuple[int, ...]]]) -> bytes:
    """The stream after a SNAP packet, with the signature: ``sessions`` (id, timeout), the ACL cache (key -> its
    ACLs, each perms, scheme, id), then ``nodes`` (path, "" for the root; data; ACL key, -1 for world:anyone with
    every permission; the nine StatPersisted fields), each after its parent."""
    given = list(sessions)
    out = [jute.INT.pack(len(given)), *(jute.LONG.pack(s) + jute.INT.pack(t) for s, t in given),
           jute.INT.pack(len(acls))]
    for key, acl in acls.items():
        out.append(jute.LONG.pack(key) + jute.INT.pack(len(acl)))
        out += (jute.INT.pack(perms) + jute.ustring("ACL scheme", scheme) + jute.ustring("ACL id", ident)
                for perms, scheme, ident in acl)
    for path, data, key, stat in nodes:
        out.append(jute.ustring("path", path) + jute.buffer("data", data) + jute.LONG.pack(key) + STAT.pack(*stat))
    out.append(jute.ustring("path", "/") + jute.ustring("signature", SIGNATURE))
    return b"".join(out)
