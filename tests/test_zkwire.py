"""zabref.net.zkwire: ZooKeeper's quorum and election bytes, written and read back; cut streams; impossible bytes.

The decoding of recorded ZooKeeper bytes through it (hand-built 3.8 packets, real recordings) is tests/test_zk_harness.py.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zabref.core.packets import AuthId
from zabref.errors import CodecError
from zabref.net import zkwire
from zabref.net.zkwire import Cursor, Initial, RawPacket, Short, ZkNotification

I32, I64 = struct.Struct(">i"), struct.Struct(">q")
longs = st.integers(-(1 << 63), (1 << 63) - 1)
ints = st.integers(-(1 << 31), (1 << 31) - 1)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)

packets = st.builds(RawPacket, st.sampled_from(sorted(zkwire.PACKET_TYPES)), longs,
                    st.none() | st.binary(max_size=200),
                    st.lists(st.builds(AuthId, text, text), max_size=3).map(tuple))
notifications = st.one_of(
    st.builds(ZkNotification, ints, longs, longs, longs),  # 28 bytes
    st.builds(ZkNotification, ints, longs, longs, longs, longs, ints),  # 40 bytes: peerEpoch, version
    st.builds(ZkNotification, ints, longs, longs, longs, longs, st.integers(2, 1 << 20), text))  # with a config


def _read_all(read, data: bytes) -> list:
    cur, out = Cursor(data, "test"), []
    while cur.remaining:
        out.append(read(cur))
    return out


def _without_place(p: RawPacket) -> RawPacket:
    return RawPacket(p.type, p.zxid, p.data, p.authinfo)


@given(st.lists(packets, min_size=1, max_size=5))
def test_quorum_packets_read_back_as_written_and_a_cut_stream_is_short(ps) -> None:
    stream = b"".join(map(zkwire.encode_quorum_packet, ps))
    assert [_without_place(p) for p in _read_all(zkwire.read_quorum_packet, stream)] == ps
    ends = []
    for p in ps:
        ends.append((ends[-1] if ends else 0) + len(zkwire.encode_quorum_packet(p)))
    for cut in range(len(stream)):  # what a connection has received so far: the whole packets, then Short
        cur, got = Cursor(stream[:cut], "test"), []
        with pytest.raises(Short):
            while True:
                start = cur.pos
                got.append(_without_place(zkwire.read_quorum_packet(cur)))
        assert got == ps[: len(got)] and start == (ends[len(got) - 1] if got else 0)


def test_a_packet_is_written_as_zookeeper_writes_it() -> None:
    # an ACK with null data and null authinfo, as Learner writes it: type 3, zxid, -1, -1
    assert zkwire.encode_quorum_packet(RawPacket(3, 0x100000002, None)) == I32.pack(3) + I64.pack(0x100000002) + \
        I32.pack(-1) + I32.pack(-1)
    ping = zkwire.encode_quorum_packet(RawPacket(5, 7, b"", (AuthId("digest", "x"),)))
    assert ping == I32.pack(5) + I64.pack(7) + I32.pack(0) + I32.pack(1) + I32.pack(6) + b"digest" + I32.pack(1) + b"x"
    [p] = _read_all(zkwire.read_quorum_packet, ping)
    assert p.data_at == 16 and p.authinfo == (AuthId("digest", "x"),)


@given(notifications)
def test_notifications_read_back_as_written(n) -> None:
    data = zkwire.encode_notification(n)
    assert _read_all(zkwire.read_notification, data) == [n]
    assert len(data) - 4 == (28 if n.peer_epoch is None else 40 if n.config is None else 44 + len(n.config.encode()))


@given(longs.filter(lambda v: v >= 0) | longs, st.lists(text.filter(lambda t: t and "|" not in t), min_size=1,
                                                         max_size=3))
def test_initial_messages_read_back_as_written(sid, addresses) -> None:
    for m in (Initial(sid, zkwire.PROTOCOL_V1, tuple(addresses[:1])), Initial(sid, zkwire.PROTOCOL_V2,
                                                                               tuple(addresses))):
        assert _read_all(zkwire.read_initial, zkwire.encode_initial(m)) == [m]
    if sid >= 0:  # the pre-3.5 form: the sid alone, where the version would be
        assert _read_all(zkwire.read_initial, zkwire.encode_initial(Initial(sid, None))) == [Initial(sid, None)]


@pytest.mark.parametrize("raw, read, offset, why", [
    (I32.pack(99) + I64.pack(0), zkwire.read_quorum_packet, 0, "unknown quorum packet type 99"),
    (I32.pack(3) + I64.pack(0) + I32.pack(-5), zkwire.read_quorum_packet, 12, "data length is -5"),
    (I32.pack(2) + I64.pack(0) + I32.pack(zkwire.JUTE_MAX + 1), zkwire.read_quorum_packet, 12,
     f"data length is {zkwire.JUTE_MAX + 1}"),
    (I32.pack(3) + I64.pack(0) + I32.pack(-1) + I32.pack(5000), zkwire.read_quorum_packet, 16,
     "authinfo count is 5000"),
    (I32.pack(3) + I64.pack(0) + I32.pack(-1) + I32.pack(1) + I32.pack(2) + b"\xff\xfe", zkwire.read_quorum_packet,
     24, "authinfo scheme is not UTF-8"),
    (I64.pack(-7) + I64.pack(2), zkwire.read_initial, 0, "unknown election protocol version -7"),
    (I64.pack(-65536) + I64.pack(2) + I32.pack(0), zkwire.read_initial, 16, "address length is 0"),
    (I64.pack(-65536) + I64.pack(2) + I32.pack(4096), zkwire.read_initial, 16, "address length is 4096"),
    (I32.pack(0), zkwire.read_notification, 0, "notification length is 0"),
    (I32.pack(zkwire.NOTIFICATION_MAX + 1), zkwire.read_notification, 0, "notification length is"),
    (I32.pack(36) + b"\x00" * 36, zkwire.read_notification, 4, "28, 40 or at least 44 bytes, not 36"),
    (I32.pack(45) + b"\x00" * 36 + I32.pack(1) + b"\x00" * 5, zkwire.read_notification, 44, "5 trailing bytes"),
])
def test_impossible_bytes_are_an_error_naming_the_offset(raw, read, offset, why) -> None:
    with pytest.raises(CodecError, match=why) as e:
        read(Cursor(raw, "election stream from 3"))
    assert e.value.offset == offset and e.value.what == "election stream from 3"


def test_values_no_form_holds_are_refused_when_written() -> None:
    with pytest.raises(ValueError, match="not a ZooKeeper quorum packet type"):
        zkwire.encode_quorum_packet(RawPacket(42, 0, None))
    with pytest.raises(ValueError, match="both peerEpoch and version"):
        zkwire.encode_notification(ZkNotification(0, 1, 0, 1, peer_epoch=1))
    with pytest.raises(ValueError, match="only a version above 1 carries a config"):
        zkwire.encode_notification(ZkNotification(0, 1, 0, 1, 1, 1, "server.1=x"))
    with pytest.raises(ValueError, match="address text is 0 bytes"):
        zkwire.encode_initial(Initial(1, zkwire.PROTOCOL_V1, ()))


@given(st.binary(max_size=300), st.sampled_from(["quorum", "initial", "notification"]))
def test_any_bytes_give_a_value_short_or_a_codec_error_and_nothing_else(data, kind) -> None:
    """What a stranger or a garbled stream sends: every reader ends in a value, `Short` (more bytes needed) or a
    CodecError naming an offset inside the bytes it was given; a value read back is re-encoded to the same bytes."""
    read = {"quorum": zkwire.read_quorum_packet, "initial": zkwire.read_initial,
            "notification": zkwire.read_notification}[kind]
    cur = Cursor(data, "fuzz")
    try:
        value = read(cur)
    except Short:
        return
    except CodecError as e:
        assert 0 <= e.offset <= len(data) and e.what == "fuzz"
        return
    encode = {"quorum": lambda v: zkwire.encode_quorum_packet(v), "initial": zkwire.encode_initial,
              "notification": zkwire.encode_notification}[kind]
    if kind == "quorum" and not value.authinfo and data[cur.pos - 4: cur.pos] == I32.pack(0):
        return  # an empty authinfo vector is written null (-1): the one form with two spellings
    assert encode(value) == data[: cur.pos]
