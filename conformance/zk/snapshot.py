"""The data tree and sessions a leader writes on the quorum stream right after a SNAP packet, as the recordings'
decoders and the played leader see it.

Theory of operation
-------------------
The stream's layout, and its one reader and writer, are zabref's (`zabref.core.zksnap`: zabref's SNAP is
ZooKeeper's). Here: `read_snapshot` gives the wire's tree as a dict of counts, the node paths and each node's
``czxid`` (what a recording's report shows), `read_snapshot_file` the same for a ``snapshot.<zxid>`` file, whose
header ``{int magic "ZKSN"; int version (2); long dbid}`` comes before the tree (``FileSnap``; a checksum, and from
3.6 a digest, follow it: not read), and `write_snapshot` is zksnap's, for a played leader's SNAP
(conformance/zk/conform.py).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from conformance.zk import WireError
from conformance.zk.stream import Cursor, Short
from zabref.core import zksnap
from zabref.core.zksnap import SIGNATURE, write_snapshot

__all__ = ["SIGNATURE", "read_snapshot", "read_snapshot_file", "write_snapshot"]

FILE_MAGIC = b"ZKSN"
FILE_HEADER = struct.Struct(">4sIq")


def read_snapshot(cur: Cursor) -> dict[str, Any]:
    """Read the sessions, the tree and the signature at ``cur``; a dict of counts, the node paths and each node's
    czxid (``czxids``). Raises `conformance.zk.stream.Short` when the stream ends first, `WireError` on bytes that
    cannot be a snapshot."""
    return _fields(zksnap.read_snapshot(cur))


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
    try:
        tree = zksnap.read_tree(Cursor(data, str(path), FILE_HEADER.size))
    except Short:
        raise WireError(str(path), len(data), "the snapshot ends inside its tree") from None
    return {**_fields(tree), "dbid": dbid}


def _fields(tree: zksnap.Tree) -> dict[str, Any]:
    return {"sessions": tree.sessions, "acl_lists": tree.acl_lists, "nodes": len(tree.nodes),
            "data_bytes": tree.data_bytes, "paths": [n.path for n in tree.nodes],
            "czxids": {n.path: n.czxid for n in tree.nodes}}
