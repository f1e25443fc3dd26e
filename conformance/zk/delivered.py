"""What one ZooKeeper server delivered, seen from outside: through the client at that server alone, and on its disk.

Theory of operation
-------------------
The fault workload writes each unique value ``v`` as ONE sequential create ``<root>/<v>-`` (ZooKeeper appends a
10-digit counter), so a value and its transaction are one znode, and its ``czxid`` is the zxid the ensemble gave
it. A znode is never deleted or changed.

*Delivered* (Zab's word for applied to the state) is read through the client: a session to that server alone, and
``get_children(root)`` plus one pipelined ``exists`` per child for its ``czxid`` (`read_delivered`). A ZooKeeper
server applies a transaction to its data tree only when it is committed -- a follower on COMMIT (or, during
synchronization, as the leader's DIFF/SNAP says), the leader after a quorum of ACKs -- and a read without ``sync``
answers from that server's own tree, so what the session sees is exactly what that server delivered; sorted by
``czxid`` it is that server's delivered sequence of the workload's transactions (ZooKeeper's own session and
connection transactions are left out: no client wrote them, and the checker looks at the writes).

The transaction log is *not* that: a server appends a proposal to ``log.<zxid>`` (and fsyncs it) before it ACKs,
so the log holds proposals that may never commit, and a TRUNC from a new leader cuts them off later; a server
synchronized by SNAP holds a snapshot and only the log after it. `read_logged` reads the creates under ``root`` from
the transaction logs (`conformance.zk.disk`) -- what the server *logged* -- which the runner compares with what it
delivered after the run: a delivered write missing from the log of a server that has no snapshot newer than the
first log is a write that a restart would lose (the ZOOKEEPER-4785 family), reported beside the history check. A
zabref member of a mixed ensemble (`conformance.zk.zabrefmember`) is read the same way: through its ZooKeeper client
port, and on its disk from its own log (``zab.log``), which holds every transaction it logged and, after a
ZooKeeper leader's SNAP of its clients' nodes, that tree as its first transaction (`zktxn.SNAPSHOT`), read here as
the creates of its nodes.
"""

from __future__ import annotations

import logging
from pathlib import Path

from conformance.zk.disk import log_files, read_txn_log
from zabref.core import zktxn
from zabref.core.zktree import DataTree
from zabref.storage.records import scan_log
from zabref.storage.store import LOG_NAME

__all__ = ["node_value", "read_delivered", "read_logged", "snapshots"]

SEQ_DIGITS = 10


def node_value(name: str) -> str | None:
    """``c0-17-0000000042`` -> ``c0-17``; None for a name the workload did not write."""
    value, sep, seq = name.rpartition("-")
    return value if sep and len(seq) == SEQ_DIGITS and seq.isdigit() else None


def read_delivered(client_port: int, root: str, timeout: float = 15.0) -> list[tuple[int, str]]:
    """The workload's transactions delivered by the server at 127.0.0.1:``client_port``, in zxid order."""
    from kazoo.client import KazooClient  # noqa: PLC0415 (the dev / bench extras)

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    client = KazooClient(hosts=f"127.0.0.1:{client_port}", timeout=timeout, read_only=False)
    client.start(timeout=timeout)
    try:
        names = client.get_children(root) if client.exists(root) else []
        pending = [(name, client.exists_async(f"{root}/{name}")) for name in names]
        out = []
        for name, result in pending:
            stat = result.get(timeout=timeout)
            value = node_value(name)
            if stat is not None and value is not None:
                out.append((stat.czxid, value))
        return sorted(out)
    finally:
        client.stop()
        client.close()


def _logged_txns(data_dir: str | Path) -> list[dict]:
    """Every transaction a server's logs hold, as `zabref.core.zktxn.decode_txn` reads one: ZooKeeper's transaction
    logs (``version-2/log.*``), or a zabref member's log (``zab.log``, its ZooKeeper transactions; the synced
    records only: `zabref.storage.records.scan_log` leaves a torn tail out)."""
    zabref_log = Path(data_dir) / LOG_NAME
    if zabref_log.exists():
        scan = scan_log(zabref_log.read_bytes(), str(zabref_log))
        out = []
        for zxid, value in scan.history:
            if value[:1] == zktxn.FOREIGN:
                out.append(zktxn.decode_txn(value[1:], f"{zabref_log}: {zxid:#x}"))
            elif value[:1] == zktxn.SNAPSHOT:  # a ZooKeeper leader's tree, the base of the history: its nodes
                tree = DataTree()
                tree.load(value[1:], f"{zabref_log}: the snapshot at {zxid:#x}")
                out += [{"op": "create", "zxid": node.czxid, "path": path} for path, node in tree.nodes.items()]
        return out
    return [record.txn for path in log_files(data_dir) for record in read_txn_log(path).records]


def read_logged(data_dir: str | Path, root: str) -> list[tuple[int, str]]:
    """The creates under ``root`` in a server's transaction logs (zxid, value), in log order: what it logged."""
    out = []
    prefix = root.rstrip("/") + "/"
    for txn in _logged_txns(data_dir):
        for op in txn.get("ops", [txn]) if txn["op"] == "multi" else [txn]:
            p = op.get("path", "")
            if op.get("op") in ("create", "create2") and p.startswith(prefix):
                value = node_value(p[len(prefix):])
                if value is not None:
                    out.append((txn["zxid"], value))
    return out


def snapshots(data_dir: str | Path) -> list[int]:
    """The zxids of a server's ``snapshot.<zxid>`` files."""
    out = []
    for p in (Path(data_dir) / "version-2").glob("snapshot.*"):
        try:
            out.append(int(p.name.split(".", 1)[1], 16))
        except ValueError:
            continue
    return sorted(out)
