"""The ZooKeeper harness (conformance/zk/, docs/zookeeper.md): its decoders on hand-built bytes, both ways -- bytes
built the way ZooKeeper's Java code writes them decode to the expected fields, and the fields encode back to the same
bytes -- with truncated tails and garbage; the recording and disk formats; version resolution without a network;
and, marked slow, a real 3-server ZooKeeper 3.8.0 ensemble run through the recording proxy.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from conformance.zk import WireError, ZkFetchError
from conformance.zk.disk import read_epochs, read_txn_log
from conformance.zk.ports import KINDS, ZkServer, links
from conformance.zk.recording import Kind, RecordingWriter, read_records
from conformance.zk.serverconfig import render_logback, render_zoo_cfg
from conformance.zk.wire import decode_election, decode_quorum, decode_recording
from zabref.core.jute import INT, LONG, buffer, ustring

# ------------------------------------------------------------------------ encoders, as ZooKeeper's Java code writes


def qp(ptype: int, zxid: int, data: bytes | None = None, auth: list[tuple[str, str]] | None = None) -> bytes:
    """QuorumPacket {int type; long zxid; buffer data; vector<Id> authinfo} (a null vector is count -1)."""
    ids = INT.pack(-1) if auth is None else INT.pack(len(auth)) + b"".join(ustring("s", s) + ustring("i", i)
                                                                            for s, i in auth)
    return INT.pack(ptype) + LONG.pack(zxid) + buffer("data", data) + ids


def txn(op: int, zxid: int, body: bytes, digest: tuple[int, int] | None = (2, 1234), session: int = 0x100) -> bytes:
    head = LONG.pack(session) + INT.pack(7) + LONG.pack(zxid) + LONG.pack(1_700_000_000_000) + INT.pack(op)
    return head + body + (INT.pack(digest[0]) + LONG.pack(digest[1]) if digest else b"")


ACL = INT.pack(1) + INT.pack(31) + ustring("scheme", "world") + ustring("id", "anyone")
CREATE = ustring("p", "/a") + buffer("d", b"hello") + ACL + b"\x00" + INT.pack(1)
SET_DATA = ustring("p", "/a") + buffer("d", b"v2") + INT.pack(3)
MULTI = INT.pack(2) + INT.pack(1) + buffer("t", CREATE) + INT.pack(2) + buffer("t", ustring("p", "/b"))
STAT = b"\x00" * 60  # StatPersisted: six longs, three ints


def snapshot() -> bytes:
    sessions = INT.pack(1) + LONG.pack(0x300) + INT.pack(4000)
    acls = INT.pack(1) + LONG.pack(1) + ACL
    nodes = b"".join(ustring("path", p) + buffer("data", d) + LONG.pack(-1) + STAT
                     for p, d in [("", b""), ("/zookeeper", b""), ("/a", b"hello")])
    return sessions + acls + nodes + ustring("end", "/") + ustring("sig", "BenWasHere")


LEARNER_INFO = LONG.pack(2) + INT.pack(0x10000) + LONG.pack(0)
CONFIG = b"server.1=127.0.0.1:2888:3888:participant\nversion=0"

#: (bytes of one packet from the learner or the leader, from_leader, name, zxid, fields)
QUORUM_TABLE = [
    (qp(11, 0x100000000, LEARNER_INFO), False, "FOLLOWERINFO", 0x100000000,
     {"sid": 2, "protocolVersion": "0x10000", "configVersion": 0}),
    # a zabref learner's (a mixed ensemble): the connection id it appends, which a ZooKeeper leader does not read
    (qp(11, 0x100000000, LEARNER_INFO + LONG.pack(7)), False, "FOLLOWERINFO", 0x100000000,
     {"sid": 2, "protocolVersion": "0x10000", "configVersion": 0, "zabrefConnection": 7}),
    (qp(17, 0x200000000, INT.pack(0x10000)), True, "LEADERINFO", 0x200000000, {"protocolVersion": "0x10000"}),
    (qp(18, 0x100000005, INT.pack(1)), False, "ACKEPOCH", 0x100000005, {"currentEpoch": 1}),
    (qp(18, 0, INT.pack(-1)), False, "ACKEPOCH", 0, {"currentEpoch": -1}),
    (qp(13, 0x100000005), True, "DIFF", 0x100000005, {}),
    (qp(14, 0x100000003), True, "TRUNC", 0x100000003, {}),
    (qp(10, 0x200000000, CONFIG), True, "NEWLEADER", 0x200000000, {"config": CONFIG.decode()}),
    (qp(12, -1), True, "UPTODATE", -1, {}),
    (qp(3, 0x200000001), False, "ACK", 0x200000001, {}),
    (qp(4, 0x200000001), True, "COMMIT", 0x200000001, {}),
    (qp(5, 0x200000001), True, "PING", 0x200000001, {}),
    (qp(5, 0x200000001, LONG.pack(0x300) + INT.pack(4000)), False, "PING", 0x200000001,
     {"sessions": [("0x300", 4000)]}),
    (qp(1, -1, LONG.pack(0x300) + INT.pack(9) + INT.pack(1) + b"xyz"), False, "REQUEST", -1,
     {"session": "0x300", "cxid": 9, "op": "create", "request_len": 3}),
    (qp(6, 0, LONG.pack(0x300) + INT.pack(4000)), False, "REVALIDATE", 0, {"session": "0x300", "timeout": 4000}),
    (qp(6, 0, LONG.pack(0x300) + b"\x01"), True, "REVALIDATE", 0, {"session": "0x300", "valid": True}),
    (qp(2, 0x200000001, txn(1, 0x200000001, CREATE)), True, "PROPOSAL", 0x200000001,
     {"op": "create", "session": "0x100", "cxid": 7, "zxid": 0x200000001, "time": 1_700_000_000_000, "path": "/a",
      "data_len": 5, "data": "hello", "acl": ["world:anyone:31"], "ephemeral": False, "parentCVersion": 1,
      "digest": {"version": 2, "treeDigest": 1234}}),
    (qp(2, 0x200000002, txn(5, 0x200000002, SET_DATA, digest=None)), True, "PROPOSAL", 0x200000002,
     {"op": "setData", "session": "0x100", "cxid": 7, "zxid": 0x200000002, "time": 1_700_000_000_000, "path": "/a",
      "data_len": 2, "data": "v2", "version": 3}),
    (qp(2, 0x200000003, txn(-11, 0x200000003, INT.pack(0))), True, "PROPOSAL", 0x200000003,
     {"op": "closeSession", "session": "0x100", "cxid": 7, "zxid": 0x200000003, "time": 1_700_000_000_000,
      "paths2Delete": [], "digest": {"version": 2, "treeDigest": 1234}}),
    (qp(2, 0x200000004, txn(14, 0x200000004, MULTI, digest=None)), True, "PROPOSAL", 0x200000004,
     {"op": "multi", "session": "0x100", "cxid": 7, "zxid": 0x200000004, "time": 1_700_000_000_000,
      "ops": [{"op": "create", "path": "/a", "data_len": 5, "data": "hello", "acl": ["world:anyone:31"],
               "ephemeral": False, "parentCVersion": 1}, {"op": "delete", "path": "/b"}]}),
    (qp(2, 0x200000005, txn(-10, 0x200000005, INT.pack(4000))), True, "PROPOSAL", 0x200000005,
     {"op": "createSession", "session": "0x100", "cxid": 7, "zxid": 0x200000005, "time": 1_700_000_000_000,
      "timeout": 4000, "digest": {"version": 2, "treeDigest": 1234}}),
    (qp(3, 5, auth=[("digest", "bob")]), False, "ACK", 5, {"authinfo": ["digest:bob"]}),
]


def encode_back(name: str, zxid: int, fields: dict) -> bytes:
    """The other way: the decoded fields of the simple packets written again as ZooKeeper writes them."""
    ptype = {"FOLLOWERINFO": 11, "LEADERINFO": 17, "ACKEPOCH": 18, "NEWLEADER": 10, "DIFF": 13, "TRUNC": 14,
             "UPTODATE": 12, "ACK": 3, "COMMIT": 4}[name]
    data = {"FOLLOWERINFO": lambda f: LONG.pack(f["sid"]) + INT.pack(int(f["protocolVersion"], 16))
            + LONG.pack(f["configVersion"]) + (LONG.pack(f["zabrefConnection"]) if "zabrefConnection" in f else b""),
            "LEADERINFO": lambda f: INT.pack(int(f["protocolVersion"], 16)),
            "ACKEPOCH": lambda f: INT.pack(f["currentEpoch"]),
            "NEWLEADER": lambda f: f["config"].encode()}.get(name, lambda f: None)(fields)
    return qp(ptype, zxid, data, [tuple(a.split(":", 1)) for a in fields.get("authinfo", [])] or None)


# ------------------------------------------------------------------------------------------------ quorum stream


@pytest.mark.parametrize("raw, from_leader, name, zxid, fields", QUORUM_TABLE)
def test_quorum_packets_decode(raw, from_leader, name, zxid, fields):
    [item] = decode_quorum(raw, "test", from_leader=from_leader)
    assert (item.name, item.zxid, item.fields) == (name, zxid, fields)
    assert (item.offset, item.end) == (0, len(raw))
    if name in ("FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "NEWLEADER", "DIFF", "TRUNC", "UPTODATE", "ACK", "COMMIT"):
        assert encode_back(name, zxid, fields) == raw


def _sync_stream() -> tuple[bytes, list[str]]:
    """A leader's side of a SNAP sync: SNAP, the tree, NEWLEADER, UPTODATE, a proposal and its commit."""
    parts = [qp(17, 0x200000000, INT.pack(0x10000)), qp(15, 0x100000002), snapshot(), qp(10, 0x200000000, CONFIG),
             qp(12, 0), qp(2, 0x200000001, txn(1, 0x200000001, CREATE)), qp(4, 0x200000001)]
    return b"".join(parts), ["LEADERINFO", "SNAP", "SNAPSHOT", "NEWLEADER", "UPTODATE", "PROPOSAL", "COMMIT"]


def test_a_snapshot_after_snap_is_parsed_past():
    stream, names = _sync_stream()
    items = decode_quorum(stream, "test", from_leader=True)
    assert [i.name for i in items] == names
    snap = items[2].fields
    assert (snap["sessions"], snap["acl_lists"], snap["nodes"], snap["paths"]) == (1, 1, 3, ["/", "/zookeeper", "/a"])


def test_every_prefix_is_the_complete_packets_then_a_truncated_tail():
    """A stream cut at any byte (a killed sender) decodes to the packets before the cut and a TRUNCATED tail that
    starts where the cut packet starts; never an error."""
    stream, names = _sync_stream()
    whole = decode_quorum(stream, "test", from_leader=True)
    starts = [i.offset for i in whole]
    for cut in range(len(stream)):
        items = decode_quorum(stream[:cut], "test", from_leader=True)
        done = [i for i in items if i.name != "TRUNCATED"]
        assert [i.name for i in done] == names[: len(done)]
        if cut in starts:
            assert len(items) == len(done)
        else:
            tail = items[-1]
            assert tail.name == "TRUNCATED" and tail.offset == max(s for s in starts if s < cut)
            assert tail.fields["bytes"] == cut - tail.offset


def test_trailing_bytes_of_a_next_packet_are_a_tail_not_a_loss():
    raw = qp(3, 1) + qp(3, 2)[:7]
    items = decode_quorum(raw, "test", from_leader=False)
    assert [i.name for i in items] == ["ACK", "TRUNCATED"] and items[1].offset == len(qp(3, 1))


@pytest.mark.parametrize("raw, from_leader, offset, why", [
    (qp(3, 1) + INT.pack(99) + LONG.pack(0) + INT.pack(-1) * 2, False, 20, "unknown quorum packet type 99"),
    (INT.pack(3) + LONG.pack(0) + INT.pack(-5), False, 12, "data length is -5"),
    (INT.pack(2) + LONG.pack(0) + INT.pack(0x7FFFFFF0) + b"x" * 10, True, 12, "data length is 2147483632"),
    (qp(3, 1, b"xx"), False, 16, "ACK carries 2 bytes of data"),
    (qp(11, 0, b"\x00" * 9), False, 16, "LearnerInfo is 9 bytes"),
    (qp(2, 1, txn(1, 1, CREATE) + b"\x00"), True, 16 + 32 + len(CREATE), "13 trailing bytes"),  # TxnHeader: 32
    (qp(2, 1, txn(77, 1, b"")), True, 16 + 32, "unknown transaction type 77"),
    (qp(15, 1) + snapshot().replace(b"BenWasHere", b"BenWasGone"), True, None, "not 'BenWasHere'"),
    (qp(15, 1) + INT.pack(0) + INT.pack(0) + ustring("p", "/x"), True, 20 + 8, "the first node is '/x'"),
])
def test_garbage_is_an_error_naming_the_stream_and_offset(raw, from_leader, offset, why):
    with pytest.raises(WireError, match=why) as e:
        decode_quorum(raw, "connection 7 (quorum 2->1), c2s", from_leader=from_leader)
    assert e.value.where == "connection 7 (quorum 2->1), c2s"
    if offset is not None:
        assert e.value.offset == offset and f"byte {offset}" in str(e.value)


# ---------------------------------------------------------------------------------------------- election stream


def notification(state: int, leader: int, zxid: int, epoch: int, peer_epoch: int | None = None,
                 version: int | None = None, config: bytes | None = None) -> bytes:
    body = INT.pack(state) + LONG.pack(leader) + LONG.pack(zxid) + LONG.pack(epoch)
    if peer_epoch is not None:
        body += LONG.pack(peer_epoch)
    if version is not None:
        body += INT.pack(version) + (buffer("config", config) if config is not None else b"")
    return INT.pack(len(body)) + body


HELLO = LONG.pack(-65536) + LONG.pack(2) + ustring("addr", "0.0.0.0:3888")


@pytest.mark.parametrize("raw, initiator, expected", [
    (HELLO + notification(0, 2, 0x100000003, 5, 1, 2, CONFIG), True,
     [("INITIAL", None, {"protocolVersion": -65536, "sid": 2, "address": "0.0.0.0:3888"}),
      ("NOTIFICATION", 0x100000003, {"state": "LOOKING", "leader": 2, "electionEpoch": 5, "peerEpoch": 1,
                                     "version": 2, "config": CONFIG.decode()})]),
    (LONG.pack(3) + notification(2, 3, 7, 1), True,  # the pre-3.5 hello: the sid alone; a 28-byte notification
     [("INITIAL", None, {"protocolVersion": None, "sid": 3}),
      ("NOTIFICATION", 7, {"state": "LEADING", "leader": 3, "electionEpoch": 1})]),
    (notification(1, 3, 7, 1, 1, 1) + notification(1, 3, 7, 1, 1, 2, b""), False,  # 40 bytes (version 1); 44
     [("NOTIFICATION", 7, {"state": "FOLLOWING", "leader": 3, "electionEpoch": 1, "peerEpoch": 1, "version": 1}),
      ("NOTIFICATION", 7, {"state": "FOLLOWING", "leader": 3, "electionEpoch": 1, "peerEpoch": 1, "version": 2,
                           "config": ""})]),
])
def test_election_messages_decode(raw, initiator, expected):
    items = decode_election(raw, "test", initiator=initiator)
    assert [(i.name, i.zxid, i.fields) for i in items] == expected
    for cut in range(len(raw)):  # every prefix: the messages before it, then a tail
        part = decode_election(raw[:cut], "test", initiator=initiator)
        assert all(i.name != "TRUNCATED" for i in part[:-1])


@pytest.mark.parametrize("raw, initiator, offset, why", [
    (LONG.pack(-7) + LONG.pack(2), True, 0, "unknown election protocol version -7"),
    (LONG.pack(-65536) + LONG.pack(2) + INT.pack(5000), True, 16, "address length is 5000"),
    (INT.pack(0), False, 0, "notification length is 0"),
    (INT.pack(36) + b"\x00" * 36, False, 4, "28, 40 or at least 44 bytes, not 36"),
    (notification(0, 1, 1, 1, 1, 2, CONFIG) + INT.pack(-3), False, 4 + 44 + len(CONFIG),
     "notification length is -3"),
])
def test_election_garbage_names_the_offset(raw, initiator, offset, why):
    with pytest.raises(WireError, match=why) as e:
        decode_election(raw, "connection 3 (election 1->2), s2c", initiator=initiator)
    assert e.value.offset == offset and "connection 3 (election 1->2), s2c: byte" in str(e.value)


# ------------------------------------------------------------------------------------------ recordings, disk


def test_a_recording_decodes_and_a_torn_file_tail_is_reported(tmp_path):
    path = tmp_path / "r.zkrec"
    w = RecordingWriter(path)
    w.write(Kind.META, 1, 0, {"started_ns": 0})
    w.write(Kind.OPEN, 2, 1, {"src": 2, "dst": 1, "kind": "quorum", "listen": 1, "target": 2})
    stream = qp(11, 0, LEARNER_INFO) + qp(18, 0, INT.pack(0))
    w.write(Kind.DATA_C2S, 3, 1, stream[:10])  # one packet split over two reads
    w.write(Kind.DATA_S2C, 4, 1, qp(17, 0x100000000, INT.pack(0x10000)))
    w.write(Kind.DATA_C2S, 5, 1, stream[10:])
    w.close()
    decoded = decode_recording(path)
    got = [(m.t_ns, m.name, m.sender, m.receiver) for m in decoded.messages]
    assert got == [(2, "OPEN", 2, 1), (4, "LEADERINFO", 1, 2), (5, "FOLLOWERINFO", 2, 1), (5, "ACKEPOCH", 2, 1)]
    with open(path, "ab") as f:
        f.write(b"\x03\x00\x00")  # a record head cut short: the writer killed
    assert read_records(path).torn_tail == (path.stat().st_size - 3, 3)
    assert decode_recording(path).messages[-1].name == "TRUNCATED"
    with open(path, "ab") as f:
        f.write(b"\x00" * 14 + b"\x09" + b"\x00" * 16)
    with pytest.raises(WireError, match="unknown record kind 9"):
        read_records(path)


def _log(records: list[bytes], tail: bytes = b"\x00" * 64) -> bytes:
    out = b"ZKLG" + INT.pack(2) + LONG.pack(0)
    for body in records:
        out += LONG.pack(zlib.adler32(body)) + INT.pack(len(body)) + body + b"B"
    return out + tail


def test_transaction_logs_and_epochs(tmp_path):
    t1, t2 = txn(1, 0x100000001, CREATE), txn(5, 0x100000002, SET_DATA)
    (tmp_path / "version-2").mkdir()
    log = tmp_path / "version-2" / "log.100000001"
    log.write_bytes(_log([t1, t2]))
    got = read_txn_log(log)
    assert (got.zxids, got.end, [r.txn["op"] for r in got.records]) == ([0x100000001, 0x100000002], "zeros",
                                                                      ["create", "setData"])
    whole = _log([t1, t2], tail=b"")
    second = 16 + 12 + len(t1) + 1
    for cut in range(second, len(whole)):  # a crash inside the second record, the preallocated zeros after it
        log.write_bytes(whole[:cut] + b"\x00" * 50)
        got = read_txn_log(log)
        written = any(whole[second:cut])  # the checksum's high bytes are zeros: until then nothing shows
        assert (got.zxids, got.end, got.end_offset) == ([0x100000001], "truncated" if written else "zeros", second)
    bad = bytearray(_log([t1, t2]))
    bad[16 + 12 + 3] ^= 0xFF  # damage the first record: data follows it, so it is corruption, not a torn tail
    log.write_bytes(bytes(bad))
    with pytest.raises(WireError, match="Adler32") as e:
        read_txn_log(log)
    assert e.value.offset == 16 and str(log) in str(e.value)
    assert read_epochs(tmp_path) == {"acceptedEpoch": None, "currentEpoch": None}
    (tmp_path / "version-2" / "acceptedEpoch").write_text("2")
    (tmp_path / "version-2" / "currentEpoch").write_text("x1")
    with pytest.raises(WireError, match="currentEpoch.*not a decimal epoch"):
        read_epochs(tmp_path)


def test_snapshots_written_for_the_wire_and_read_from_files_and_the_history_the_files_hold(tmp_path):
    from conformance.zk.disk import history_zxids
    from conformance.zk.snapshot import SIGNATURE, read_snapshot, read_snapshot_file, write_snapshot
    from conformance.zk.stream import Cursor, Short

    wire = write_snapshot([("/zabref-1-1", b"1", 0x100000001), ("/zabref-1-2", b"2", 0x100000002)])
    tree = read_snapshot(Cursor(wire, "snap"))
    assert tree["paths"] == ["/", "/zabref-1-1", "/zabref-1-2", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"]
    assert tree["czxids"]["/zabref-1-2"] == 0x100000002 and tree["czxids"]["/zookeeper"] == 0
    with pytest.raises(Short):  # a stream read before its signature arrived: more to read, not an error
        read_snapshot(Cursor(wire[:-3], "snap"))
    with pytest.raises(ValueError, match="a child of the root"):
        write_snapshot([("/a/b", b"", 1)])
    # a file: the header, the same tree without the signature, then a checksum (not read)
    folder = tmp_path / "version-2"
    folder.mkdir()
    body = wire[:-(4 + len(SIGNATURE))]
    (folder / "snapshot.100000002").write_bytes(b"ZKSN" + INT.pack(2) + LONG.pack(-1) + body + LONG.pack(7))
    (folder / "snapshot.0").write_bytes(b"ZKSN" + INT.pack(2) + LONG.pack(-1) + write_snapshot([])[:-14])
    assert read_snapshot_file(folder / "snapshot.100000002")["dbid"] == -1
    # the newest snapshot's transactions, then the logged ones after its zxid
    (folder / "log.100000001").write_bytes(_log([txn(1, 0x100000001, CREATE), txn(1, 0x100000002, CREATE),
                                                 txn(1, 0x100000003, CREATE)]))
    assert history_zxids(tmp_path) == [0x100000001, 0x100000002, 0x100000003]
    (folder / "snapshot.100000002").write_bytes(b"ZKSN" + INT.pack(2) + LONG.pack(-1) + body[:40])
    with pytest.raises(WireError, match="snapshot.100000002.*ends inside its tree"):
        history_zxids(tmp_path)  # a snapshot still being written: an error naming it (a waiting caller reads again)
    (folder / "snapshot.100000002").write_bytes(b"ZKLG" + INT.pack(2) + LONG.pack(-1) + body)
    with pytest.raises(WireError, match="not a version-2 snapshot file"):
        read_snapshot_file(folder / "snapshot.100000002")


# ------------------------------------------------------------------------------------ config, ports, versions


def test_a_proxied_config_lists_itself_at_the_wildcard_and_the_others_at_proxy_ports(tmp_path):
    members = ZkServer.layout(20000, 3)
    ls = links(20000, members)
    assert len({link.listen for link in ls}) == len(ls) == 12 and max(link.listen for link in ls) < 20060
    peers = {j: (next(x.listen for x in ls if (x.src, x.dst, x.kind) == (2, j, "quorum")),
                 next(x.listen for x in ls if (x.src, x.dst, x.kind) == (2, j, "election"))) for j in (1, 3)}
    cfg = dict(line.split("=", 1) for line in render_zoo_cfg(members[1], members, tmp_path, 200,
                                                             peers=peers).splitlines())
    assert cfg["server.2"] == "0.0.0.0:20011:20012" and cfg["reconfigEnabled"] == "false"
    assert cfg["server.1"] == f"127.0.0.1:{peers[1][0]}:{peers[1][1]}" and cfg["tickTime"] == "200"
    assert "<file>/x/server.log</file>" in render_logback(Path("/x/server.log"))


def test_the_proxy_presents_its_own_port_in_an_election_connections_initial_message():
    """ZooKeeper dials a smaller id back at the address its initial message advertises (QuorumCnxManager
    .handleConnection); the proxy puts there the proxy port at which the target reaches the connector, so the
    dial-back is proxied and recorded too. Partial messages wait; an old server's bare sid and bytes of no such
    message pass as they came."""
    from conformance.zk.proxy import advertised

    text = b"0.0.0.0:20012"
    initial = LONG.pack(-65536) + LONG.pack(2) + INT.pack(len(text)) + text
    after = LONG.pack(-65536) + LONG.pack(2) + INT.pack(15) + b"127.0.0.1:20047"
    assert advertised(initial + b"vote", 20047) == after + b"vote"
    assert all(advertised(initial[:k], 20047) is None for k in range(len(initial)))
    assert advertised(LONG.pack(2) + b"rest", 20047) == LONG.pack(2) + b"rest"
    huge = LONG.pack(-65536) + LONG.pack(2) + INT.pack(1 << 20)
    assert advertised(huge, 20047) == huge


def test_a_cut_of_one_port_kind_holds_that_kinds_connections_alone(tmp_path):
    """The proxy's faults are per port kind: a cut of the quorum port between 1 and 2 holds a quorum connection's
    bytes and lets an election connection's through; its heal lets what was held flow on. The FAULT records fold a
    pair blocked on both kinds to ``[a, b]`` and name the kind of one blocked on one (what `observe` reads, a quorum
    cut among them, an election cut not)."""
    import socket
    import threading

    from conformance.zk import ZkEnsembleError
    from conformance.zk.observe import quorum_blocked
    from conformance.zk.ports import Link
    from conformance.zk.proxy import Proxy, folded
    from zabref.net.ports import find_free_base_port, release_base_port

    def echo(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            while data := conn.recv(100):
                conn.sendall(data)

    base = find_free_base_port(1)
    targets = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    try:
        for t in targets:
            threading.Thread(target=echo, args=(t,), daemon=True).start()
        ls = [Link(1, 2, kind, base + k, t.getsockname()[1]) for k, (kind, t) in enumerate(zip(KINDS, targets))]
        with Proxy(ls, tmp_path / "rec").start() as proxy:
            socks = {link.kind: socket.create_connection(("127.0.0.1", link.listen), timeout=5) for link in ls}
            for s in socks.values():
                s.sendall(b"a")
                assert s.recv(1) == b"a"
            proxy.cut(1, 2, kinds=("quorum",))
            for s in socks.values():
                s.sendall(b"b")
            assert socks["election"].recv(1) == b"b"
            socks["quorum"].settimeout(0.3)
            with pytest.raises(TimeoutError):
                socks["quorum"].recv(1)
            proxy.cut(1, 2)
            proxy.heal(1, 2, kinds=("election",))
            socks["quorum"].settimeout(5)
            proxy.heal(1, 2, kinds=("quorum",))
            assert socks["quorum"].recv(1) == b"b"
            with pytest.raises(ZkEnsembleError, match="port kinds \\['client'\\]"):
                proxy.cut(1, 2, kinds=("client",))
            for s in socks.values():
                s.close()
    finally:
        for t in targets:
            t.close()
        release_base_port(base)
    faults = [r.json()["blocked"] for r in read_records(tmp_path / "rec").records if r.kind == Kind.FAULT]
    assert faults == [[[1, 2, "quorum"], [2, 1, "quorum"]], [[1, 2], [2, 1]],
                      [[1, 2, "quorum"], [2, 1, "quorum"]], []]
    assert folded({(1, 2, "election"), (1, 2, "quorum"), (3, 1, "election")}) == [[1, 2], [3, 1, "election"]]
    assert [quorum_blocked(f) for f in faults] == [{(1, 2), (2, 1)}] * 3 + [set()]
    assert quorum_blocked([[1, 2, "election"], [3, 1]]) == {(3, 1)}


def _closed(s) -> bool:  # noqa: ANN001 -- a socket
    """Did the other side close it (an EOF, or a reset: it had not read what was sent)?"""
    try:
        return s.recv(10) == b""
    except ConnectionResetError:
        return True


def test_a_quorum_dial_waits_for_a_target_that_is_not_listening_yet_and_an_election_dial_does_not(tmp_path):
    """The proxy accepts a dial before it connects on. A quorum connection whose target refuses is tried again for
    `REFUSED_WAIT` (a learner dialing a leader that does not listen yet would otherwise read an EOF and go back to
    election, where a refused connect is retried); an election connection is closed at once, and so is a quorum
    connection whose target never listens."""
    import socket
    import threading
    import time

    from conformance.zk.ports import Link
    from conformance.zk.proxy import REFUSED_WAIT, Proxy
    from zabref.net.ports import find_free_base_port, release_base_port

    def free_port() -> int:
        with socket.create_server(("127.0.0.1", 0)) as s:
            return s.getsockname()[1]

    def listen_later(port: int, got: list[bytes]) -> socket.socket:
        listener = socket.create_server(("127.0.0.1", port))
        listener.settimeout(REFUSED_WAIT * 2)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                got.append(conn.recv(10))
                conn.sendall(b"back")
        threading.Thread(target=serve, daemon=True).start()
        return listener

    base = find_free_base_port(1)
    late, never, election = free_port(), free_port(), free_port()
    ls = [Link(1, 2, "quorum", base, late), Link(1, 3, "quorum", base + 1, never),
          Link(1, 2, "election", base + 2, election)]
    got: list[bytes] = []
    try:
        with Proxy(ls, tmp_path / "rec").start():
            socks = [socket.create_connection(("127.0.0.1", link.listen), timeout=5) for link in ls]
            for s in socks:
                s.sendall(b"hello")
            assert _closed(socks[2])  # the election dial: closed at once
            time.sleep(REFUSED_WAIT / 5)
            listeners = [listen_later(late, got), listen_later(election, [])]
            assert socks[0].recv(10) == b"back" and got == [b"hello"]  # reached once the target listened
            assert _closed(socks[1])  # never listening: closed after the wait
            with pytest.raises(TimeoutError):
                listeners[1].accept()  # the election dial never reached the target that listened later
            for s in socks + listeners:
                s.close()
    finally:
        release_base_port(base)
    closes = [r.json()["reason"] for r in read_records(tmp_path / "rec").records if r.kind == Kind.CLOSE]
    assert sum("the target refused" in x for x in closes) == 2


def test_versions_unknown_cached_and_failing_mvn(tmp_path, monkeypatch):
    from conformance.zk import versions

    monkeypatch.setenv("ZABREF_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ZkFetchError, match="'3.9.6' is not supported; supported: 3.8.0, 3.8.3"):
        versions.resolve("3.9.6")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mvn").write_text("#!/bin/sh\necho '[ERROR] Could not find artifact org.apache.zookeeper' >&2\nexit 1\n")
    (fake / "mvn").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ZkFetchError, match=r"mvn could not fetch ZooKeeper 3.9.1 \(exit 1[\s\S]*Could not find"):
        versions.fetch("3.9.1", echo=lambda s: None)
    assert list((tmp_path / "cache" / "zookeeper").iterdir()) == []  # the half-finished fetch is gone
    done = tmp_path / "cache" / "zookeeper" / "3.9.2"  # a finished fetch: no mvn is run again
    (done / "jars").mkdir(parents=True)
    for name in ("zookeeper-3.9.2.jar", "logback-classic-1.2.13.jar"):
        (done / "jars" / name).write_bytes(b"")
    (done / "fetched.json").write_text('{"recipe": %d, "jars": ["zookeeper-3.9.2.jar", "logback-classic-1.2.13.jar"]}'
                                      % versions.RECIPE)
    dist = versions.fetch("3.9.2")
    assert dist.logging == "logback" and dist.jars[0].name == "zookeeper-3.9.2.jar"


# ------------------------------------------------------------------------------------- a real ZooKeeper ensemble


def _java_processes_under(folder: Path) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if b"java" in cmd and str(folder).encode() in cmd:
                out.append(int(proc.name))
    return out


@pytest.mark.slow
def test_a_real_ensemble_through_the_proxy_is_recorded_decoded_and_cut(tmp_path, zk380):
    from conformance.zk.harness import ProxiedEnsemble

    z = ProxiedEnsemble(tmp_path / "run", 3, "3.8.0", echo=lambda s: None)
    with z.start():
        assert len(z.client_writes(3)) == 3
        leader = z.ensemble.leader()
        follower = next(m.id for m in z.members if m.id != leader)
        z.faults.cut(follower, leader)
        z.wait(lambda: z.ensemble.modes()[follower] != "follower", 30, f"server {follower} leaves its leader")

        def looking_notice() -> bool:  # its vote of the election crossed the proxy (load can make it late)
            z.faults.flush()
            messages = decode_recording(z.recording).messages
            cut_at = next(m.t_ns for m in messages if m.name == "FAULT")
            return any(m.name == "NOTIFICATION" and m.sender == follower and m.t_ns > cut_at for m in messages)

        z.wait(looking_notice, 30, f"server {follower}'s election notification")
        z.faults.heal()
        z.wait(lambda: z.ensemble.modes()[follower] == "follower", 30, f"server {follower} follows again")
        z.client_writes(1)
    assert z.ensemble.leftovers() == {} and _java_processes_under(tmp_path) == []

    decoded = decode_recording(z.recording)
    quorum = decoded.names("quorum")
    assert {"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "NEWLEADER", "UPTODATE", "PROPOSAL", "ACK", "COMMIT"} <= quorum
    assert quorum & {"DIFF", "SNAP", "TRUNC"}
    assert {"INITIAL", "NOTIFICATION"} <= decoded.names("election")
    faults = [m for m in decoded.messages if m.name == "FAULT"]
    cut, heal = faults[0].t_ns, faults[-1].t_ns
    assert faults[0].fields["action"] == "cut" and faults[-1].fields["blocked"] == []
    pair = {follower, leader}
    between = [m for m in decoded.messages if m.kind != "event" and {m.sender, m.receiver} == pair]
    assert not [m for m in between if cut < m.t_ns < heal], "bytes crossed a cut link"
    assert any(m.name == "FOLLOWERINFO" and m.sender == follower and m.t_ns > heal for m in between)
    assert any(m.name == "NOTIFICATION" and m.sender == follower and cut < m.t_ns < heal for m in decoded.messages)
    epochs = read_epochs(z.ensemble.data_dir(follower))
    assert epochs["currentEpoch"] is not None and epochs["currentEpoch"] >= 1


@pytest.mark.slow
def test_kill_pause_restart_and_nothing_left_when_the_body_raises(tmp_path, zk380):
    from conformance.zk.ensemble import process_state
    from conformance.zk.harness import ProxiedEnsemble

    z = ProxiedEnsemble(tmp_path / "run", 3, "3.8.0", echo=lambda s: None)
    with pytest.raises(RuntimeError, match="the test body failed"):
        with z.start():
            victim = next(m.id for m in z.members if m.id != z.ensemble.leader())
            pid = z.ensemble.pid(victim)
            z.ensemble.pause(victim)
            assert process_state(pid) == "T"
            z.ensemble.resume(victim)
            assert process_state(pid) != "T"
            z.ensemble.kill(victim)
            assert process_state(pid) is None  # killed and reaped: not even a zombie
            z.ensemble.restart(victim, timeout=60)
            assert z.ensemble.modes()[victim] == "follower"
            raise RuntimeError("the test body failed")
    assert z.ensemble.leftovers() == {} and _java_processes_under(tmp_path) == []
    assert len(z.ensemble.started_pids) == 4 and all(process_state(p) is None for p in z.ensemble.started_pids)


def test_a_zk_command_run_in_process_leaves_the_callers_sigterm_handler() -> None:
    """The `zk` group turns SIGTERM into exit 143 while its command runs, and puts the handler before back when it
    ends: a test's CliRunner runs the command in the pytest worker, which must not keep the command's handler."""
    import signal

    from click.testing import CliRunner

    from conformance.zk.command import _exit_on_sigterm, zk

    seen = []

    @zk.command("probe-signal")
    def probe() -> None:
        seen.append(signal.getsignal(signal.SIGTERM))

    def mine(signum, frame):  # pragma: no cover - never sent
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        result = CliRunner().invoke(zk, ["probe-signal"])
        seen.append(signal.getsignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGTERM, before)
        zk.commands.pop("probe-signal")
    assert result.exit_code == 0, result.output
    assert seen == [_exit_on_sigterm, mine]


@pytest.mark.slow
def test_a_terminated_zk_command_stops_the_servers_it_started(tmp_path, zk380):
    """SIGTERM (what `timeout` and a CI's cancel send) to `zabref zk run` while its ensemble serves: the command
    exits 143 and leaves no JVM of its folder (with Python's default handling, before 2026-12-03, all three outlived
    it)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "zabref.cli", "zk", "run", "--dir", str(out), "--writes", "0",
                             "--seconds", "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the command's own line once every server serves
            if line.startswith("serving after"):
                break
        assert len(_java_processes_under(out)) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _java_processes_under(out) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _java_processes_under(out) == []
    finally:
        proc.kill()
        proc.wait()
        for pid in _java_processes_under(out):
            os.kill(pid, signal.SIGKILL)
