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
can only be the end mark (``DataTree.serializeNodes``). The same bytes, without the signature, follow the header of a
``snapshot.<zxid>`` file (where a digest may follow); this reader is for the wire.
"""

from __future__ import annotations

from typing import Any

from conformance.zk.stream import Cursor

__all__ = ["SIGNATURE", "read_snapshot"]

SIGNATURE = "BenWasHere"
STAT_PERSISTED = 60
#: Sanity bounds: far above anything a test ensemble holds, far below what garbage read as a count gives.
MAX_SESSIONS = 1 << 24
MAX_ACL_LISTS = 1 << 20
MAX_ACLS = 1 << 16


def read_snapshot(cur: Cursor) -> dict[str, Any]:
    """Read the sessions, the tree and the signature at ``cur``; a dict of counts and the node paths. Raises
    `conformance.zk.stream.Short` when the stream ends first, `WireError` on bytes that cannot be a snapshot."""
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
        cur.take(STAT_PERSISTED)
        paths.append(path or "/")
    at = cur.pos
    signature = cur.ustring("signature", 64)
    if signature != SIGNATURE:
        raise cur.fail(f"the snapshot ends with {signature!r}, not {SIGNATURE!r}", at)
    return {"sessions": sessions, "acl_lists": acl_lists, "nodes": len(paths), "data_bytes": data_bytes,
            "paths": paths}
