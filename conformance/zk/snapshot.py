"""The data tree and sessions a leader writes on the quorum stream right after a SNAP packet.

Theory of operation
-------------------
``LearnerHandler`` sends ``QuorumPacket(SNAP)``, then ``ZKDatabase.serializeSnapshot`` -- which is
``SerializeUtils.serializeSnapshot`` -- then the string ``"BenWasHere"`` (the learner refuses the stream without it),
all on the same jute output archive, with no length in front::

    int count; (long sessionId; int timeout) * count                               -- the sessions
    int n; (long key; vector<ACL {int perms; Id {ustring scheme; ustring id}}>) * n -- the ACL cache (DataTree)
    (ustring path; DataNode {buffer data; long acl; StatPersisted})*                -- the nodes, the root first
    ustring "/"                                                                     -- the end of the nodes
    ustring "BenWasHere"

``StatPersisted`` is {long czxid; long mzxid; long ctime; long mtime; int version; int cversion; int aversion; long
ephemeralOwner; long pzxid} (60 bytes). The root's path is "" and every other path starts with "/", so the path "/"
can only be the end mark (``DataTree.serializeNodes``). The same bytes, without the signature, follow the header
``{int magic "ZKSN"; int version (2); long dbid}`` of a ``snapshot.<zxid>`` file (``FileSnap``; a checksum, and
from 3.6 a digest, follow: not read). `read_snapshot` reads the wire's, `read_snapshot_file` a file's; both give each
node's ``czxid``.

`write_snapshot` writes the wire's form for a played leader's SNAP (conformance/zk/conform.py): no sessions, an empty
ACL cache (every node's ACL key -1, ``ReferenceCountedACLCache.OPEN_UNSAFE_ACL_ID``, which needs no entry), the root,
the given nodes under it, and ``/zookeeper`` with ``config`` and ``quota`` as a fresh server holds them (the learner
rewrites ``/zookeeper/config`` from its own configuration after reading a snapshot). Only what ZooKeeper's
``DataTree.deserialize`` reads is written; it checks that every node's parent came before it.
"""

from __future__ import annotations

from typing import Any

import struct
from pathlib import Path

from conformance.zk import WireError
from conformance.zk.stream import Cursor, Short
from zabref.core import jute

__all__ = ["SIGNATURE", "read_snapshot", "read_snapshot_file", "write_snapshot"]

FILE_MAGIC = b"ZKSN"
FILE_HEADER = struct.Struct(">4sIq")
_STAT = struct.Struct(">qqqqiiiqq")

SIGNATURE = "BenWasHere"
STAT_PERSISTED = 60
#: Sanity bounds: far above anything a test ensemble holds, far below what garbage read as a count gives.
MAX_SESSIONS = 1 << 24
MAX_ACL_LISTS = 1 << 20
MAX_ACLS = 1 << 16


def read_snapshot(cur: Cursor) -> dict[str, Any]:
    """Read the sessions, the tree and the signature at ``cur``; a dict of counts, the node paths and each node's
    czxid (``czxids``). Raises `conformance.zk.stream.Short` when the stream ends first, `WireError` on bytes that
    cannot be a snapshot."""
    out = _read_tree(cur)
    at = cur.pos
    signature = cur.ustring("signature", 64)
    if signature != SIGNATURE:
        raise cur.fail(f"the snapshot ends with {signature!r}, not {SIGNATURE!r}", at)
    return out


def read_snapshot_file(path: str | Path) -> dict[str, Any]:
    """The tree of a ``snapshot.<zxid>`` file, as `read_snapshot` gives it (and ``dbid``); a `WireError` naming the
    file and offset for anything else, a file cut short included (a snapshot still being written)."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < FILE_HEADER.size:
        raise WireError(str(path), 0, f"{len(data)} bytes: shorter than the {FILE_HEADER.size}-byte file header")
    magic, version, dbid = FILE_HEADER.unpack_from(data)
    if magic != FILE_MAGIC or version != 2:
        raise WireError(str(path), 0, f"not a version-2 snapshot file (magic {magic!r}, version {version})")
    cur = Cursor(data, str(path), FILE_HEADER.size)
    try:
        out = _read_tree(cur)
    except Short:
        raise WireError(str(path), len(data), "the snapshot ends inside its tree") from None
    return {**out, "dbid": dbid}


def write_snapshot(nodes: list[tuple[str, bytes, int]]) -> bytes:
    """The bytes a leader writes after its SNAP packet for a tree holding ``nodes`` (path, data, czxid; paths
    directly under the root, not under /zookeeper), with the signature."""
    top = max((z for _, _, z in nodes), default=0)
    tree = [("", b"", 0, top, len(nodes) + 1), *((p, d, z, z, 0) for p, d, z in nodes),
            ("/zookeeper", b"", 0, 0, 2), ("/zookeeper/config", b"", 0, 0, 0), ("/zookeeper/quota", b"", 0, 0, 0)]
    out = [struct.pack(">i", 0), struct.pack(">i", 0)]  # no sessions; an empty ACL cache
    for path, data, czxid, pzxid, children in tree:
        if path and (not path.startswith("/") or (path.count("/") > 1 and not path.startswith("/zookeeper/"))):
            raise ValueError(f"{path!r}: a node of a played snapshot is a child of the root")
        stat = _STAT.pack(czxid, czxid, 0, 0, 0, children, 0, 0, pzxid)
        out.append(jute.ustring("path", path) + jute.buffer("data", data) + struct.pack(">q", -1) + stat)
    out.append(jute.ustring("path", "/") + jute.ustring("signature", SIGNATURE))
    return b"".join(out)


def _read_tree(cur: Cursor) -> dict[str, Any]:
    sessions = cur.length("session count", MAX_SESSIONS, nullable=False) or 0
    for _ in range(sessions):
        cur.i64()
        cur.i32()
    acl_lists = cur.length("ACL cache size", MAX_ACL_LISTS, nullable=False) or 0
    for _ in range(acl_lists):
        cur.i64()
        for _ in range(cur.length("ACL list length", MAX_ACLS, nullable=True) or 0):
            cur.i32()
            cur.ustring("ACL scheme")
            cur.ustring("ACL id")
    paths: list[str] = []
    czxids: dict[str, int] = {}
    data_bytes = 0
    while True:
        at = cur.pos
        path = cur.ustring("node path")
        if path is None:
            raise cur.fail("a node path is null", at)
        if path == "/":
            break
        if paths and not path.startswith("/"):
            raise cur.fail(f"node path {path!r} does not start with '/'", at)
        if not paths and path != "":
            raise cur.fail(f"the first node is {path!r}, not the root ('')", at)
        data = cur.buffer("node data")
        data_bytes += len(data or b"")
        cur.i64()  # the node's ACL key
        czxids[path or "/"] = _STAT.unpack(cur.take(STAT_PERSISTED))[0]
        paths.append(path or "/")
    return {"sessions": sessions, "acl_lists": acl_lists, "nodes": len(paths), "data_bytes": data_bytes,
            "paths": paths, "czxids": czxids}
