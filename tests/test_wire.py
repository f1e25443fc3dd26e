"""The wire codec: exact bytes (checked both ways), round trips, framing under every chunking, and strict rejection.

Packet layouts are seed 000's QuorumPacket and LearnerInfo in jute's binary encoding; see docs/wire-and-disk.md.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zabref.core import payloads, zksnap, zktxn
from zabref.core.packets import AuthId, LearnerInfo, Notification, PacketType, QuorumPacket, ServerState
from zabref.errors import CodecError
from zabref.net import wire

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int32s = st.integers(-(1 << 31), (1 << 31) - 1)
int64s = st.integers(-(1 << 63), (1 << 63) - 1)
auth_ids = st.builds(AuthId, st.text(max_size=12), st.text(max_size=12))
#: Histories as a SNAP carries them: distinct zxids in order (a tree has one node per transaction), zabref's own
#: values (a value that begins with zktxn.FOREIGN is a ZooKeeper transaction: tests/test_zktree.py).
histories = st.dictionaries(int64s, st.binary(max_size=16).filter(lambda b: b[:1] not in zktxn.MARKERS),
                            max_size=8).map(lambda d: sorted(d.items()))
quorum_packets = st.one_of(
    st.builds(QuorumPacket, st.sampled_from([t for t in PacketType if t != PacketType.SNAP]), int64s,
              st.none() | st.binary(max_size=64), st.lists(auth_ids, max_size=3).map(tuple)),
    # a SNAP's data is its snapshot stream, written after the packet (zabref.core.zksnap)
    st.builds(lambda z, hist, a: QuorumPacket(PacketType.SNAP, z, payloads.encode_snap_data(hist), a), int64s,
              histories, st.lists(auth_ids, max_size=3).map(tuple)),
)
notifications = st.builds(Notification, st.sampled_from(ServerState), int64s, int64s, int64s, int64s)

# ------------------------------------------------------------------------------------------------- exact bytes


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


# (value, encoder, decoder, exact body bytes): each row is checked in both directions.
TABLE = [
    pytest.param(
        QuorumPacket(PacketType.ACK, 0x100000002),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("00000003 0000000100000002 ffffffff ffffffff"),
        id="ACK(zxid=0x100000002): null data, null authinfo",
    ),
    pytest.param(
        QuorumPacket(PacketType.NEWLEADER, 5 << 32),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("0000000a 0000000500000000 ffffffff ffffffff"),
        id="NEWLEADER(e=5): zxid e<<32",
    ),
    pytest.param(
        QuorumPacket(PacketType.FOLLOWERINFO, 3 << 32, payloads.encode_followerinfo_data(LearnerInfo(2, 0x10000))),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("0000000b 0000000300000000 00000014 0000000000000002 00010000 0000000000000000 ffffffff"),
        id="FOLLOWERINFO(acceptedEpoch=3) carrying LearnerInfo(sid 2, 0x10000, configVersion 0), as ZooKeeper's",
    ),
    pytest.param(
        wire.with_connection_id(QuorumPacket(PacketType.FOLLOWERINFO, 3 << 32,
                                             payloads.encode_followerinfo_data(LearnerInfo(2, 0x10000))), 0x0102),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("0000000b 0000000300000000 0000001c 0000000000000002 00010000 0000000000000000 0000000000000102 ffffffff"),
        id="a zabref learner's FOLLOWERINFO: the connection id after the LearnerInfo",
    ),
    pytest.param(
        QuorumPacket(PacketType.ACKEPOCH, 0x200000007, payloads.encode_ackepoch_data(-1)),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("00000012 0000000200000007 00000004 ffffffff ffffffff"),
        id="ACKEPOCH(lastZxid, -1): already acknowledged",
    ),
    pytest.param(
        QuorumPacket(PacketType.PROPOSAL, 0x100000001, b"v1", (AuthId("ip", "1.2"),)),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("00000002 0000000100000001 00000002 7631 00000001 00000002 6970 00000003 312e32"),
        id="PROPOSAL(zxid, value) with one authinfo Id",
    ),
    pytest.param(
        QuorumPacket(PacketType.UPTODATE, 0, b""),
        wire.encode_quorum_packet, wire.decode_quorum_packet,
        h("0000000c 0000000000000000 00000000 ffffffff"),
        id="UPTODATE with an empty (not null) buffer",
    ),
    pytest.param(
        LearnerInfo(3, 0x10000, 5), payloads.encode_learner_info, payloads.decode_learner_info,
        h("0000000000000003 00010000 0000000000000005"), id="LearnerInfo",
    ),
    pytest.param(
        Notification(ServerState.LOOKING, 3, 0x100000002, 7, 1),
        wire.encode_notification, wire.decode_notification,
        h("00000000 0000000000000003 0000000100000002 0000000000000007 0000000000000001 00000001"),
        id="Notification without a configuration: state, leader, zxid, electionEpoch, peerEpoch, version 1",
    ),
    pytest.param(
        Notification(ServerState.FOLLOWING, 2, 0x100000002, 7, 1),
        lambda n: wire.encode_notification(n, "server.1=h:1:2:participant\nversion=0"), wire.decode_notification,
        h("00000001 0000000000000002 0000000100000002 0000000000000007 0000000000000001 00000002 00000024")
        + b"server.1=h:1:2:participant\nversion=0",
        id="Notification as ZooKeeper 3.8 sends it: version 2 and the configuration's text",
    ),
    pytest.param(
        [(0x100000001, b"a"), (0x100000002, b"")], payloads.encode_snap_data, payloads.decode_snap_data,
        h("00000000 00000000")  # no sessions, an empty ACL cache
        # path, data, ACL key -1, StatPersisted {czxid, mzxid, ctime, mtime, version, cversion, aversion,
        # ephemeralOwner, pzxid}: the root (3 children), a node per transaction, ZooKeeper's own subtree
        + h("00000000 00000000 ffffffffffffffff 0000000000000000 0000000000000000 0000000000000000 0000000000000000"
            "00000000 00000003 00000000 0000000000000000 0000000100000002")
        + h("0000000b") + b"/zabref-1-1" + h("00000001 61 ffffffffffffffff 0000000100000001 0000000100000001"
                                             "0000000000000000 0000000000000000 00000000 00000000 00000000"
                                             "0000000000000000 0000000100000001")
        + h("0000000b") + b"/zabref-1-2" + h("00000000 ffffffffffffffff 0000000100000002 0000000100000002"
                                             "0000000000000000 0000000000000000 00000000 00000000 00000000"
                                             "0000000000000000 0000000100000002")
        + h("0000000a") + b"/zookeeper" + h("00000000 ffffffffffffffff") + bytes(8 * 4) + h("00000000 00000002")
        + bytes(4 + 8 + 8)
        + h("00000011") + b"/zookeeper/config" + h("00000000 ffffffffffffffff") + bytes(60)
        + h("00000010") + b"/zookeeper/quota" + h("00000000 ffffffffffffffff") + bytes(60)
        + h("00000001") + b"/" + h("0000000a") + b"BenWasHere",  # the end of the nodes, the signature
        id="SNAP history, as ZooKeeper's snapshot stream",
    ),
    pytest.param(0x10000, payloads.encode_leaderinfo_data, payloads.decode_leaderinfo_data, h("00010000"), id="LEADERINFO"),
]


@pytest.mark.parametrize(("value", "encode", "decode", "body"), TABLE)
def test_exact_bytes_both_ways(value, encode, decode, body):
    assert encode(value) == body
    assert decode(body) == value


def test_frame_prefixes_the_body_length():
    body = wire.encode_quorum_packet(QuorumPacket(PacketType.ACK, 0x100000002))
    assert wire.frame(body) == h("00000014") + body
    assert wire.FrameDecoder().feed(wire.frame(body)) == [body]


def test_zero_count_authinfo_decodes_like_null():
    zero = h("00000003 0000000000000001 ffffffff 00000000")
    assert wire.decode_quorum_packet(zero) == QuorumPacket(PacketType.ACK, 1)


# ------------------------------------------------------------------------------------------------- round trips


@given(quorum_packets)
def test_quorum_packet_round_trip(p):
    assert wire.decode_quorum_packet(wire.encode_quorum_packet(p)) == p


@given(notifications, st.one_of(st.none(), st.text(max_size=200)))
def test_notification_round_trip(n, config):
    assert wire.decode_notification(wire.encode_notification(n, config)) == n


def test_a_notification_of_28_bytes_takes_its_peer_epoch_from_its_zxid():
    """The form before 3.4 (no peerEpoch, no version): FastLeaderElection uses the zxid's epoch."""
    body = h("00000002 0000000000000001 0000000500000009 0000000000000003")
    assert wire.decode_notification(body) == Notification(ServerState.LEADING, 1, 0x500000009, 3, 5)


@given(st.integers(-(1 << 63), (1 << 63) - 1), int32s, st.integers(-(1 << 63), (1 << 63) - 1))
def test_learner_info_and_followerinfo_round_trip(sid, version, config_version):
    info = LearnerInfo(sid, version, config_version)
    assert payloads.decode_learner_info(payloads.encode_learner_info(info)) == info
    assert payloads.decode_followerinfo_data(payloads.encode_followerinfo_data(info)) == info


@given(st.integers(0, (1 << 63) - 1), st.integers(0, (1 << 63) - 1))
def test_a_connection_id_rides_after_the_learner_info_and_the_core_reads_past_it(sid, cid):
    plain = QuorumPacket(PacketType.FOLLOWERINFO, 0, payloads.encode_followerinfo_data(LearnerInfo(sid, 0x10000)))
    hello = wire.with_connection_id(plain, cid)
    assert wire.connection_id(hello) == cid
    assert wire.connection_id(plain) is None  # a ZooKeeper learner's
    assert payloads.decode_followerinfo_data(hello.data) == payloads.decode_followerinfo_data(plain.data)


@pytest.mark.parametrize(("data", "message"), [
    (h("0000000000000002 00010000"), "a LearnerInfo is 20 bytes, or 28 with a connection id, not 12"),
    (bytes(20) + h("8000000000000000"), "connection id is negative"),
])
def test_a_bad_learner_info_is_refused_naming_what_is_wrong(data, message):
    with pytest.raises(CodecError, match=message):
        packet = QuorumPacket(PacketType.FOLLOWERINFO, 0, data)
        payloads.decode_followerinfo_data(packet.data)
        wire.connection_id(packet)


@given(int32s)
def test_leaderinfo_round_trip(version):
    assert payloads.decode_leaderinfo_data(payloads.encode_leaderinfo_data(version)) == version


@given(st.integers(-1, (1 << 31) - 1))
def test_ackepoch_round_trip(epoch):
    assert payloads.decode_ackepoch_data(payloads.encode_ackepoch_data(epoch)) == epoch


@given(st.integers(1, (1 << 63) - 1), st.binary(max_size=64).filter(lambda v: v[:1] not in zktxn.MARKERS))
def test_proposal_round_trip(zxid, value):
    assert payloads.decode_proposal_data(zxid, payloads.encode_proposal_data(zxid, value)) == value


@given(histories)
def test_snap_round_trip(history):
    assert payloads.decode_snap_data(payloads.encode_snap_data(history)) == history


# ------------------------------------------------------------------------------------------------- framing


def stream_of(packets):
    return b"".join(wire.encode_quorum_packet(p) for p in packets)


def decode_all(decoder, chunks):
    return [p for c in chunks for p in decoder.feed(c)]


@given(st.lists(quorum_packets, max_size=6))
def test_packets_whole_stream_in_one_chunk(packets):
    d = wire.PacketDecoder()
    assert decode_all(d, [stream_of(packets)]) == packets
    d.close()


@given(st.lists(quorum_packets, max_size=4))
def test_packets_one_byte_at_a_time(packets):
    data = stream_of(packets)
    d = wire.PacketDecoder()
    assert decode_all(d, [data[i : i + 1] for i in range(len(data))]) == packets
    assert d.buffered == 0
    d.close()


@given(st.lists(quorum_packets, max_size=6), st.data())
def test_packets_split_anywhere(packets, data):
    stream = stream_of(packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    assert decode_all(wire.PacketDecoder(), chunks) == packets


def test_a_bad_snap_on_the_quorum_stream_is_refused_where_it_goes_wrong():
    """ZooKeeper's SNAP has null data and its snapshot stream after it: data in the packet, a stream above the
    decoder's bound (refused once that many bytes are here, before the rest arrives) and bytes that are no snapshot
    are each a CodecError at their offset in the stream. The packet before it was handed on; the decoder stays
    broken."""
    ack = wire.encode_quorum_packet(QuorumPacket(PacketType.ACK, 0x100000001))
    stream = payloads.encode_snap_data([(0x100000001, b"v" * 200)])
    head = h("0000000f 0000000100000001")
    cases = [
        (wire.PacketDecoder(), head + h("00000003 616263 ffffffff") + stream, len(ack) + 23, "SNAP's data is 3 bytes"),
        (wire.PacketDecoder(max_data=100), head + h("ffffffff ffffffff") + stream[:101], len(ack) + 20,
         "longer than 100 bytes"),
        (wire.PacketDecoder(), head + h("ffffffff ffffffff") + stream[:8] + h("7fffffff") + stream[12:],
         len(ack) + 28, "node path length is 2147483647"),
    ]
    for decoder, snap, offset, fragment in cases:
        assert decoder.feed(ack) == [QuorumPacket(PacketType.ACK, 0x100000001)]
        with pytest.raises(CodecError) as e:
            decoder.feed(snap)
        assert e.value.offset == offset and fragment in str(e.value), e.value
        with pytest.raises(CodecError):
            decoder.feed(ack)


def test_a_snapshot_stream_has_a_bound_of_its_own_above_a_packets_data():
    """A SNAP's stream is the leader's whole tree: ``max_snapshot`` bounds it, not ``max_data`` (a packet's data):
    a stream far longer than the packet bound is read whole, one byte over its own bound is refused naming it."""
    stream = payloads.encode_snap_data([((1 << 32) | k, b"v" * 100) for k in range(1, 51)])
    packet = QuorumPacket(PacketType.SNAP, (1 << 32) | 50, stream)
    body = wire.encode_quorum_packet(packet)
    assert len(stream) > 5 * 1000
    assert wire.PacketDecoder(max_data=1000, max_snapshot=len(stream)).feed(body) == [packet]
    with pytest.raises(CodecError, match=f"the snapshot stream is longer than {len(stream) - 1} bytes"):
        wire.PacketDecoder(max_data=1000, max_snapshot=len(stream) - 1).feed(body)


def test_a_snapshot_stream_that_arrives_in_many_pieces_is_read_once():
    """A SNAP's stream is read on from the last whole element each time more of it arrives, not again from its start:
    a long history in 997-byte pieces costs about one reading of each element (plus one partial element a piece),
    where reading from the start at each piece would cost the pieces times the elements."""
    stream = payloads.encode_snap_data([((1 << 32) | k, b"v" * 50) for k in range(1, 2001)])
    reader, cur, pieces = zksnap.TreeReader(), None, 0
    for end in range(997, len(stream) + 997, 997):
        pieces += 1
        cur = zksnap.Cursor(stream[:end], "snap")
        if reader.read(cur) is not None:
            break
    assert cur is not None and cur.pos == len(stream) and pieces == -(-len(stream) // 997)
    elements = 2 + 2 + 2004 + 1  # the two counts and their ends, the nodes with the end mark, the signature
    assert elements <= reader.elements <= elements + pieces, (reader.elements, pieces)
    decoder = wire.PacketDecoder()
    packet = QuorumPacket(PacketType.SNAP, (1 << 32) | 2000, stream)
    body = wire.encode_quorum_packet(packet)
    assert [p for k in range(0, len(body), 997) for p in decoder.feed(body[k:k + 997])] == [packet]


@given(st.lists(quorum_packets, min_size=1, max_size=4), st.binary(min_size=1, max_size=3))
def test_trailing_partial_packet_is_reported_at_close(packets, garbage):
    d = wire.PacketDecoder()
    stream = stream_of(packets)
    assert decode_all(d, [stream + garbage]) == packets
    with pytest.raises(CodecError) as e:
        d.close()
    assert e.value.offset == len(stream)


@pytest.mark.parametrize(("head", "offset", "fragment"), [
    (h("00000063 0000000000000001"), 0, "unknown packet type 99"),
    (h("00000002 0000000000000001 fffffffe"), 12, "data length -2 is outside -1..67108864"),
    (h("00000002 0000000000000001 04000001"), 12, "data length 67108865 is outside"),
    (h("00000002 0000000000000001 7fffffff"), 12, "outside"),
])
def test_a_bad_packet_head_is_rejected_before_its_data(head, offset, fragment):
    d = wire.PacketDecoder()  # default maximum 64 MiB = 0x04000000
    ok = wire.encode_quorum_packet(QuorumPacket(PacketType.ACK, 1))
    assert d.feed(ok + head[:offset + 3]) == [QuorumPacket(PacketType.ACK, 1)]  # the bad field but its last byte
    with pytest.raises(CodecError) as e:
        d.feed(head[offset + 3:offset + 4])
    assert e.value.offset == len(ok) + offset and fragment in e.value.reason, str(e.value)
    with pytest.raises(CodecError):  # broken for good: the connection must be closed
        d.feed(ok)


@pytest.mark.parametrize(("authinfo", "offset", "fragment"), [
    (h("fffffffe"), 0, "authinfo count is -2"),
    (h("00000401"), 0, "authinfo count is 1025"),
    (h("00000001 ffffffff 00000000"), 4, "authinfo[0].scheme"),
    (h("00000001 00000001 ff 00000000"), 8, "not UTF-8"),
])
def test_bad_authinfo_in_a_stream_names_its_offset(authinfo, offset, fragment):
    head = wire.encode_quorum_packet(QuorumPacket(PacketType.ACK, 1))
    d = wire.PacketDecoder()
    with pytest.raises(CodecError) as e:
        d.feed(head + h("00000001 0000000000000002 ffffffff") + authinfo)
    assert e.value.offset == len(head) + 16 + offset and fragment in str(e.value), str(e.value)


def test_authinfo_arriving_a_byte_at_a_time_is_waited_for():
    p = QuorumPacket(PacketType.REQUEST, 7, b"r", (AuthId("digest", "u:p"), AuthId("ip", "1.2.3.4")))
    data = wire.encode_quorum_packet(p)
    d = wire.PacketDecoder()
    assert [x for i in range(len(data)) for x in d.feed(data[i:i + 1])] == [p]


def test_max_data_is_configurable_and_inclusive():
    d = wire.PacketDecoder(max_data=4)
    four = QuorumPacket(PacketType.PROPOSAL, 1, b"1234")
    assert d.feed(wire.encode_quorum_packet(four)) == [four]
    with pytest.raises(CodecError):
        d.feed(h("00000002 0000000000000001 00000005"))


def test_frame_prefixes_the_body_length_and_the_election_port_reads_frames():
    body = wire.encode_notification(Notification(ServerState.LOOKING, 3, 0x100000002, 7, 1))
    assert wire.frame(body) == h("00000028") + body
    assert wire.FrameDecoder().feed(wire.frame(body) + wire.frame(b"x")[:3]) == [body]


@pytest.mark.parametrize("prefix", [h("ffffffff"), h("80000000"), h("04000001"), h("7fffffff")])
def test_bad_length_prefix_is_rejected_from_its_four_bytes(prefix):
    d = wire.FrameDecoder()  # default maximum 64 MiB = 0x04000000
    ok = wire.frame(b"xy")
    assert d.feed(ok) == [b"xy"]
    with pytest.raises(CodecError) as e:
        d.feed(prefix)
    assert e.value.offset == len(ok) and "length prefix" in e.value.reason
    with pytest.raises(CodecError):  # broken for good: the connection must be closed
        d.feed(wire.frame(b"more"))


def test_max_frame_is_configurable_and_inclusive():
    d = wire.FrameDecoder(max_frame=4)
    assert d.feed(wire.frame(b"1234")) == [b"1234"]
    with pytest.raises(CodecError):
        d.feed(h("00000005"))


def test_a_frame_cut_short_is_reported_at_close():
    d = wire.FrameDecoder()
    d.feed(wire.frame(b"abc")[:5])
    with pytest.raises(CodecError, match="stream ended after 1 of 3 body bytes"):
        d.close()


# ------------------------------------------------------------------------------------------------- rejection


DECODERS = [
    wire.decode_quorum_packet, payloads.decode_learner_info, wire.decode_notification,
    payloads.decode_leaderinfo_data, payloads.decode_ackepoch_data, payloads.decode_followerinfo_data, payloads.decode_snap_data,
]


@FUZZ
@given(st.sampled_from(DECODERS), st.binary(max_size=80))
def test_decoders_raise_only_codec_error_on_random_bytes(decode, data):
    try:
        decode(data)
    except CodecError:
        pass


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=6))
def test_stream_decoders_raise_only_codec_error_on_random_bytes(chunks):
    for d in (wire.FrameDecoder(max_frame=32), wire.PacketDecoder(max_data=32)):
        try:
            for c in chunks:
                d.feed(c)
            d.close()
        except CodecError:
            pass


@FUZZ
@given(quorum_packets, st.data())
def test_mutated_packets_decode_or_raise_codec_error(p, data):
    body = bytearray(wire.encode_quorum_packet(p))
    i = data.draw(st.integers(0, len(body) - 1))
    body[i] = data.draw(st.integers(0, 255))
    try:
        wire.decode_quorum_packet(bytes(body))
    except CodecError:
        pass


@given(quorum_packets, st.data())
def test_every_truncation_of_a_packet_is_rejected(p, data):
    body = wire.encode_quorum_packet(p)
    cut = data.draw(st.integers(0, len(body) - 1))
    with pytest.raises(CodecError):
        wire.decode_quorum_packet(body[:cut])


ACK = h("00000003 0000000100000002 ffffffff ffffffff")
SNAP_OF_ONE = payloads.encode_snap_data([(0x100000001, b"a")])


@pytest.mark.parametrize(
    ("decode", "data", "offset", "fragment"),
    [
        (wire.decode_quorum_packet, h("00000063") + ACK[4:], 0, "unknown packet type 99"),
        (wire.decode_quorum_packet, ACK + b"\0", 20, "1 trailing bytes"),
        (wire.decode_quorum_packet, ACK[:10], 4, "zxid needs 8 bytes"),
        (wire.decode_quorum_packet, h("00000002 0000000000000001 fffffffe ffffffff"), 12, "data length is -2"),
        (wire.decode_quorum_packet, h("00000002 0000000000000001 00000010 00"), 12, "data length is 16"),
        (wire.decode_quorum_packet, h("00000001 0000000000000001 ffffffff 7fffffff"), 16, "authinfo count"),
        (wire.decode_quorum_packet, h("00000001 0000000000000001 ffffffff 00000001 00000001 ff 00000000"), 24,
         "not valid UTF-8"),
        (wire.decode_notification, h("00000009") + bytes(36), 0, "unknown server state 9"),
        # 36 bytes: zabref's notifications before they took ZooKeeper's form; ZooKeeper drops them as malformed
        (wire.decode_notification, bytes(36), 0, "28, 40 or at least 44 bytes, not 36"),
        (wire.decode_notification, bytes(36) + h("00000002 00000001 ff"), 44, "config is not valid UTF-8"),
        (wire.decode_notification, bytes(36) + h("00000002 00000002 41"), 40, "config length is 2 but only 1 bytes remain"),
        (payloads.decode_ackepoch_data, h("fffffffe"), 0, "only -1 may be negative"),
        (payloads.decode_ackepoch_data, None, 0, "data is null"),
        (payloads.decode_snap_data, h("ffffffff"), 0, "session count is -1"),
        (payloads.decode_snap_data, h("00000000 00000000 00000001") + b"/", 8, "the first node is '/'"),
        (payloads.decode_snap_data, SNAP_OF_ONE[:-3], len(SNAP_OF_ONE) - 3, "ends before its signature"),
        (payloads.decode_snap_data, SNAP_OF_ONE + b"\0", len(SNAP_OF_ONE), "1 bytes after the signature"),
        (payloads.decode_snap_data, zksnap.write_snapshot([("/app", b"x", 0x100000001)]), 84,
         "node '/app' (czxid 0x100000001) is not a transaction's node ('/zabref-1-1'"),
        (payloads.decode_snap_data, zksnap.write_snapshot([("/zabref-1-2", b"x", 0x100000001)]), 84,
         "node '/zabref-1-2' (czxid 0x100000001)"),
        (payloads.decode_learner_info, h("0000000000000001 000100"), 8, "protocolVersion needs 4 bytes"),
    ],
)
def test_errors_name_what_and_where(decode, data, offset, fragment):
    with pytest.raises(CodecError) as e:
        decode(data)
    assert e.value.offset == offset, str(e.value)
    assert fragment in str(e.value)


def test_error_names_the_packet_type_once_known():
    with pytest.raises(CodecError, match=r"QuorumPacket ACK at byte 20: 1 trailing bytes"):
        wire.decode_quorum_packet(ACK + b"\0")


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (payloads.encode_learner_info, LearnerInfo(1, 1 << 31)),
        (payloads.encode_learner_info, LearnerInfo(1 << 63, 1)),
        (wire.encode_notification, Notification(ServerState.LOOKING, 1 << 63, 0, 0, 0)),
        (payloads.encode_ackepoch_data, -2),
        (lambda cid: wire.with_connection_id(QuorumPacket(PacketType.FOLLOWERINFO, 0, bytes(20)), cid), -1),
        (lambda cid: wire.with_connection_id(QuorumPacket(PacketType.FOLLOWERINFO, 0, bytes(20)), cid), 1 << 63),
        (lambda cid: wire.with_connection_id(QuorumPacket(PacketType.ACK, 0, bytes(20)), cid), 1),
        (payloads.encode_snap_data, [(1 << 63, b"")]),
    ],
)
def test_encoding_values_that_do_not_fit_is_a_local_error(encode, value):
    with pytest.raises(ValueError):
        encode(value)


def _outcome(body) -> object:
    try:
        return wire.decode_quorum_packet(body)
    except CodecError as e:
        return f"CodecError: {e}"


_HEADS = st.tuples(st.sampled_from([int(t) for t in PacketType] + [0, 99, -1]),
                   st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-3, 40))


@given(head=_HEADS, tail=st.binary(max_size=48), cut=st.integers(0, 80))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_the_quick_path_of_a_packet_decodes_as_the_field_by_field_reader_does(head, tail, cut) -> None:
    """`decode_quorum_packet` reads a common packet (a known type, its data, no authinfo) in one call, everything
    else field by field; a bytearray takes the field-by-field path always. Both give the same packet or the same
    error for bodies near the common shape: a head, a tail of any bytes, cut anywhere."""
    body = (wire._PACKET_HEAD.pack(*head) + tail)[:16 + cut]
    assert _outcome(body) == _outcome(bytearray(body))
    well_formed = wire._PACKET_HEAD.pack(head[0], head[1], len(tail)) + tail + b"\xff\xff\xff\xff"
    assert _outcome(well_formed) == _outcome(bytearray(well_formed))


@pytest.mark.parametrize("length", [-3, -2, -1, 0, 1, 5])
@pytest.mark.parametrize("present", [-1, 0, 1])  # the data bytes present, against the length: short, exact, long
@pytest.mark.parametrize("count", [-2, -1, 0, 1])
def test_the_quick_path_and_the_reader_agree_at_every_edge_of_length_and_count(length, present, count) -> None:
    data = b"d" * max(0, max(length, 0) + present)
    body = wire._PACKET_HEAD.pack(int(PacketType.PROPOSAL), 9, length) + data + wire.jute.INT.pack(count)
    assert _outcome(body) == _outcome(bytearray(body))


def test_the_quick_path_keeps_null_and_empty_data_apart_and_reads_a_count_of_zero_as_none() -> None:
    for data in (None, b"", b"abc"):
        p = QuorumPacket(PacketType.PROPOSAL, 7, data)
        assert wire.decode_quorum_packet(wire.encode_quorum_packet(p)) == p
    zero = wire._PACKET_HEAD.pack(int(PacketType.ACK), 5, -1) + b"\x00\x00\x00\x00"
    assert wire.decode_quorum_packet(zero) == QuorumPacket(PacketType.ACK, 5)
