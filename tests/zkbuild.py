"""Hand-built decoded recordings of ZooKeeper quorum connections, for the validation's tests (tests/test_zk_validate.py,
tests/test_zk_guide.py): messages one after another in time, as conformance/zk/wire.py decodes them."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.zk.recording import Kind, Record, Recording
from conformance.zk.wire import Decoded, Message

E1 = 1 << 32  # zxid <<1, 0>>
E2 = 2 << 32  # zxid <<2, 0>>


def recording(links: dict[int, tuple[int, int]], servers: int = 3, zabref: tuple[int, ...] = ()) -> Recording:
    meta = {"servers": servers, "version": "test", **({"zabref": list(zabref)} if zabref else {})}
    records = [Record(Kind.META, 0, 0, json.dumps(meta).encode(), 0)]
    for conn, (src, dst) in links.items():
        body = json.dumps({"src": src, "dst": dst, "kind": "quorum"}).encode()
        records.append(Record(Kind.OPEN, conn, conn, body, 0))
    return Recording(Path("hand-built.zkrec"), records, None)


class Builder:
    """Messages of quorum connections, one after another in time; ``conn`` maps to (learner, leader)."""

    def __init__(self, links: dict[int, tuple[int, int]]) -> None:
        self.links = links
        self.messages: list[Message] = []
        self.offsets: dict[tuple[int, str], int] = {}
        self.t = 1000

    def send(self, conn: int, sender: int, name: str, zxid: int = 0, txn: dict | None = None, **fields) -> Message:
        fields = {**(txn or {}), **fields}
        learner, leader = self.links[conn]
        direction = "c2s" if sender == learner else "s2c"
        receiver = leader if sender == learner else learner
        offset = self.offsets.get((conn, direction), 0)
        self.offsets[conn, direction] = offset + 16
        self.t += 10
        m = Message(self.t, conn, "quorum", sender, receiver, direction, offset, name, zxid, fields)
        self.messages.append(m)
        return m

    def event(self, conn: int, name: str) -> None:
        self.t += 10
        learner, leader = self.links[conn]
        self.messages.append(Message(self.t, conn, "event", learner, leader, "", 0, name, None, {}))

    def decoded(self, servers: int = 3, zabref: tuple[int, ...] = ()) -> Decoded:
        """The recording; ``zabref``: the seats its META says zabref servers took (a mixed ensemble)."""
        return Decoded(recording(self.links, servers, zabref), list(self.messages))


def txn(zxid: int, path: str) -> dict:
    return {"op": "create", "session": "0x1", "cxid": zxid & 0xFF, "zxid": zxid, "time": 1, "path": path}


def first_learner(b: Builder) -> None:
    """Server 2 establishes epoch 1 with learner 1 alone (connection 1), by an empty DIFF."""
    b.send(1, 1, "FOLLOWERINFO", 0, sid=1)
    b.send(1, 2, "LEADERINFO", E1)
    b.send(1, 1, "ACKEPOCH", 0, currentEpoch=0)
    b.send(1, 2, "DIFF", 0)
    b.send(1, 2, "NEWLEADER", E1)
    b.send(1, 1, "ACK", E1)
    b.send(1, 2, "UPTODATE", -1)


def epoch_one(b: Builder) -> None:
    """Server 2 establishes epoch 1 with learners 1 (connection 1) and 3 (connection 2), each by an empty DIFF."""
    for conn, f in ((1, 1), (2, 3)):
        b.send(conn, f, "FOLLOWERINFO", 0, sid=f)
        b.send(conn, 2, "LEADERINFO", E1)
        b.send(conn, f, "ACKEPOCH", 0, currentEpoch=0)
        b.send(conn, 2, "DIFF", 0)
        b.send(conn, 2, "NEWLEADER", E1)
        b.send(conn, f, "ACK", E1)
        b.send(conn, 2, "UPTODATE", -1)


def rejoin(b: Builder, conn: int, claims: int, diff: int, proposals: tuple[int, ...] = ()) -> None:
    """Learner 3 comes back to leader 2 (epoch 1, which it had accepted: ACKEPOCH -1) on ``conn``, naming ``claims``
    as its last logged zxid, and is synced by DIFF(``diff``) carrying the PROPOSALs of ``proposals`` (zxids)."""
    b.send(conn, 3, "FOLLOWERINFO", E1, sid=3)
    b.send(conn, 2, "LEADERINFO", E1)
    b.send(conn, 3, "ACKEPOCH", claims, currentEpoch=-1)
    b.send(conn, 2, "DIFF", diff)
    for z in proposals:
        b.send(conn, 2, "PROPOSAL", z, txn=txn(z, f"/t{z - E1}"))
    b.send(conn, 2, "NEWLEADER", E1)
    b.send(conn, 3, "ACK", E1)
    b.send(conn, 2, "UPTODATE", -1)
