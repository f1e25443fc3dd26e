"""Bad input at the decoders, in process and fast: every input decodes or raises CodecError (wire) or gets an error
answer (client and control requests) -- never another exception.

tests/test_wire.py already feeds random bytes to each decoder and the frame decoder; this file adds what it does not
cover: the PROPOSAL payload, bodies built from valid ones with their length fields replaced by extreme values, whole
streams mixing valid and bad frames under any chunking at the quorum/election frame caps, and the request parsers
of the client and control ports (which crashed or leaked tracebacks before: a lone surrogate in a submitted value
stopped the server's event pump); election notifications that cannot exist (a negative field, a round past
`election.MAX_ROUND`), which stopped or wedged servers, and the election sender and frame timeout that go with them.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zabref.config import Limits
from zabref.core import election, payloads, zktxn
from zabref.core.effects import Timing
from zabref.core.node import Node
from zabref.core.packets import Notification, PacketType, QuorumPacket, ServerState
from zabref.core.zab import Persistent
from zabref.errors import CodecError, RemoteProtocolError, ZabError
from zabref.net import peers, votes, wire
from zabref.net.clientport import ClientPort
from zabref.net.listener import Accepted
from zabref.runtime import control

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EXTREME_INT32 = st.sampled_from([0, 1, 7, 8, 255, 1 << 16, (1 << 31) - 1, -1, -2, -(1 << 31)])

quorum_packets = st.one_of(
    st.builds(QuorumPacket, st.sampled_from([t for t in PacketType if t != PacketType.SNAP]),
              st.integers(0, (1 << 63) - 1), st.none() | st.binary(max_size=32)),
    st.builds(lambda z, v: QuorumPacket(PacketType.SNAP, z, payloads.encode_snap_data([(z, v)])),
              st.integers(0, (1 << 63) - 1), st.binary(max_size=8).filter(lambda b: b[:1] not in zktxn.MARKERS)),
)


def _decodes_or_codec_error(decode, data) -> None:
    try:
        decode(data)
    except CodecError:
        pass


def _read_stream(decoder, stream: bytes, data, check) -> None:
    """Feed ``stream`` to ``decoder`` in chunks drawn from ``data`` as a port's reader does, ``check`` each item:
    only CodecError may escape, at an offset inside the stream."""
    try:
        for chunk in _cut(stream, data):
            for item in decoder.feed(chunk):
                check(item)
        decoder.close()
    except CodecError as e:
        assert 0 <= e.offset <= len(stream)


@FUZZ
@given(st.integers(0, (1 << 63) - 1), st.none() | st.binary(max_size=96))
def test_proposal_data_decodes_or_raises_codec_error(zxid, data):
    _decodes_or_codec_error(lambda d: payloads.decode_proposal_data(zxid, d), data)


@FUZZ
@given(quorum_packets, st.data())
def test_length_fields_replaced_by_extreme_values_raise_codec_error(p, data):
    """The data length (offset 12) and authinfo count (after data) of a valid packet, set to extreme int32s."""
    body = bytearray(wire.encode_quorum_packet(p))
    data_len = 0 if p.data is None else len(p.data)
    offsets = [12, 16 + data_len]
    at = data.draw(st.sampled_from(offsets))
    value = data.draw(EXTREME_INT32)
    body[at:at + 4] = struct.pack(">i", value)
    _decodes_or_codec_error(wire.decode_quorum_packet, bytes(body))


@FUZZ
@given(st.lists(st.integers(0, (1 << 63) - 1), max_size=4), st.data())
def test_snap_history_counts_and_lengths_replaced_by_extreme_values(zxids, data):
    body = bytearray(payloads.encode_snap_data([(z, b"v") for z in zxids]))
    at = data.draw(st.sampled_from([0] + [4 + 13 * k + 8 for k in range(len(zxids))]))
    body[at:at + 4] = struct.pack(">i", data.draw(EXTREME_INT32))
    _decodes_or_codec_error(payloads.decode_snap_data, bytes(body))


_frame_kinds = st.one_of(
    st.builds(Notification, st.sampled_from(ServerState), *[st.integers(-(1 << 63), (1 << 63) - 1)] * 4).map(
        lambda n: wire.frame(wire.encode_notification(n))),
    st.binary(max_size=40).map(wire.frame),
    EXTREME_INT32.map(lambda n: struct.pack(">i", n)),
    st.binary(max_size=16),
)

_packet_kinds = st.one_of(
    quorum_packets.map(wire.encode_quorum_packet),
    st.builds(lambda t, n: struct.pack(">iqi", t, 1, n), st.sampled_from([1, 2, 3, 99]), EXTREME_INT32),
    EXTREME_INT32.map(lambda n: struct.pack(">i", n)),
    st.binary(max_size=24),
)


def _cut(stream: bytes, data) -> list[bytes]:
    """``stream`` in up to six chunks, cut where hypothesis draws."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]


@FUZZ
@given(st.lists(_frame_kinds, max_size=6), st.data())
def test_election_streams_of_good_and_bad_frames_at_the_runtime_cap(frames, data):
    """What the election port's reader does with a stream: only CodecError escapes, from the frame decoder or the
    notification decoder; a frame is never longer than the cap; a bad prefix is reported where it starts."""
    def check(body: bytes) -> None:
        assert len(body) <= peers.MAX_ELECTION_FRAME
        _decodes_or_codec_error(wire.decode_notification, body)

    _read_stream(wire.FrameDecoder(peers.MAX_ELECTION_FRAME, "stream"), b"".join(frames), data, check)


@FUZZ
@given(st.lists(_packet_kinds, max_size=6), st.data())
def test_quorum_streams_of_good_and_bad_packets_at_the_runtime_cap(packets, data):
    """What the quorum port's reader does with a stream: only CodecError escapes; no packet's data is longer than the
    cap; an error is reported at an offset inside the stream."""
    def check(packet: QuorumPacket) -> None:
        assert packet.data is None or len(packet.data) <= peers.MAX_QUORUM_DATA

    _read_stream(wire.PacketDecoder(peers.MAX_QUORUM_DATA, "stream"), b"".join(packets), data, check)


# ------------------------------------------------------------------------------------------------ request parsers


class _StandIn(SimpleNamespace):
    """A server whose pump runs a client request's node entry point at once (a LOOKING node: no leader, so submit
    and sync are refused without any I/O)."""

    def submit(self, make):
        if self.refuse:
            pytest.fail("the value reached the node")
        (rid, answer), = make(1, 0.0).answers
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(answer)
        return fut


def _answer(body: bytes, refuse: bool = False) -> object:
    """The client port's answer to request ``body`` (its entry's reply made at its turn, decoded)."""
    port = ClientPort(_StandIn(node=Node(1, (1, 2, 3), Persistent(), Timing()), sid=1,
                               config=SimpleNamespace(limits=Limits()), refuse=refuse))

    async def run() -> object:
        (fut, make), last = port._request(body)
        assert not last
        (reply,) = wire.FrameDecoder(1 << 24, "answer").feed(make(None if fut is None else await fut))
        return json.loads(reply)

    return asyncio.run(run())


PARSER_BOMBS = [b"[" * 100_000, b'{"op": "read", "from_zxid": ' + b"7" * 5000 + b"}", b'{"op": "read", "limit": '
                + b"9" * 4400 + b"}"]
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                         max_size=3), max_leaves=8)
requests = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"op": st.sampled_from(["submit", "read", "sync", "nope"])},
                          optional={"value": json_values, "from_zxid": json_values, "limit": json_values}).map(
        lambda d: json.dumps(d).encode()),
    st.sampled_from(PARSER_BOMBS),
)


@FUZZ
@given(requests)
@example(b'{"op": "submit", "value": "\\ud800"}')
@example(PARSER_BOMBS[0])
@example(PARSER_BOMBS[1])
def test_client_requests_always_get_a_json_object_answer(body):
    answer = _answer(body)
    assert isinstance(answer, dict)
    json.dumps(answer)  # the answer itself can be sent


def test_a_lone_surrogate_value_is_refused_before_it_reaches_the_core():
    """JSON's "\\ud800" is a str with no UTF-8 form; before the fix, encoding it inside the pump stopped the server."""
    answer = _answer(b'{"op": "submit", "value": "a\\ud800"}', refuse=True)
    assert answer == {"error": '"value" is not valid Unicode text: surrogates not allowed at index 1', "retry": False}


def _control_port() -> control.ControlPort:
    async def call(event):
        raise ZabError("no pump in this test")

    cut: set[int] = set()  # the fault layer's ops run for real on this stand-in: a cut of no peer is valid
    server = SimpleNamespace(sid=1, driver=SimpleNamespace(name="normal"), call=call, cut_peers=cut,
                             cut_links=cut.update, heal_links=cut.difference_update, incarnation=1, conns={},
                             votes={}, senders={})
    return control.ControlPort(server, b"t" * 32)


class _Writer:
    """The side of a StreamWriter that ControlPort.handle uses: what it wrote, and whether it closed."""

    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.lines += [json.loads(line) for line in data.splitlines()]

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> str:
        return "test"


def test_a_control_request_line_still_incomplete_after_line_timeout_closes_the_connection(monkeypatch):
    """A request line is bounded from its first byte (LINE_TIMEOUT; here 0.2 s): answered when whole, the
    connection closed when its newline does not come; the time between requests is not bounded."""
    monkeypatch.setattr(control, "LINE_TIMEOUT", 0.2)

    async def scenario(then: bytes, wait: float) -> tuple[list[dict], bool, bool]:
        reader, writer = asyncio.StreamReader(), _Writer()
        reader.feed_data(b'{"op": "auth", "token": "' + b"t" * 32 + b'"}\n{"op": "ping"}\n' + then)
        task = asyncio.ensure_future(_control_port().handle(Accepted("test", stream=(reader, writer))))
        done, _ = await asyncio.wait({task}, timeout=wait)
        task.cancel()
        return writer.lines, bool(done), writer.closed

    lines, done, closed = asyncio.run(scenario(b'{"op": "pi', 1.0))
    assert [line.get("ok") for line in lines] == [True, True] and lines[1]["sid"] == 1
    assert done and closed  # cut about 0.2 s after the partial line's first byte
    lines, done, _ = asyncio.run(scenario(b"", 0.5))
    assert len(lines) == 2 and not done  # idle between requests: still open


@FUZZ
@given(st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode())))
def test_control_lines_always_get_a_json_object_answer(line):
    answer = asyncio.run(_control_port().answer(line))
    assert isinstance(answer, dict) and ("error" in answer or answer.get("ok") is True)


@pytest.mark.parametrize("line", PARSER_BOMBS[:2], ids=["deep-nesting", "5000-digit-int"])
def test_control_parser_bombs_get_an_error_answer(line):
    """What json.loads itself refuses (RecursionError, ValueError) is a bad request like any other."""
    answer = asyncio.run(_control_port().answer(line))
    assert answer["error"].startswith("request is not JSON: ")


# ------------------------------------------------------------------------------------------------ election input


def _notification(**fields) -> Notification:
    base = {"state": ServerState.LOOKING, "leader": 2, "zxid": 5, "election_epoch": 1, "peer_epoch": 0}
    return Notification(**{**base, **fields})


BAD_NOTIFICATIONS = [
    (_notification(leader=-1), "notification leader is negative (-1)"),
    (_notification(zxid=-(1 << 63)), f"notification zxid is negative ({-(1 << 63)})"),
    (_notification(election_epoch=-5), "notification electionEpoch is negative (-5)"),
    (_notification(peer_epoch=-1), "notification peerEpoch is negative (-1)"),
    (_notification(election_epoch=election.MAX_ROUND + 1), f"electionEpoch {election.MAX_ROUND + 1} is above"),
    (_notification(election_epoch=(1 << 63) - 1), f"electionEpoch {(1 << 63) - 1} is above"),
]


@pytest.mark.parametrize(("n", "message"), BAD_NOTIFICATIONS, ids=[m[:40] for _, m in BAD_NOTIFICATIONS])
def test_a_notification_that_cannot_exist_is_bad_input_and_leaves_the_election_untouched(n, message):
    """Found by the long fuzz runs: a negative field made Vote raise inside the pump (the server exited), a round of
    2**63 - 1 was adopted and the next round could not be sent (the cluster never elected again)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        election.check_notification(n)
    fle = election.FastLeaderElection(1, frozenset({1, 2, 3}))
    fle.start_election(0x100000003, 1)
    before = (fle.state, fle.logicalclock, fle.proposed_vote, dict(fle.recv_votes), fle.finalizing)
    with pytest.raises(RemoteProtocolError, match=re.escape(message)):
        fle.receive(2, n)
    assert (fle.state, fle.logicalclock, fle.proposed_vote, dict(fle.recv_votes), fle.finalizing) == before


def test_the_last_round_a_server_may_take_is_still_followed_by_encodable_rounds():
    fle = election.FastLeaderElection(1, frozenset({1, 2, 3}))
    fle.start_election(0, 0)
    step = fle.receive(2, _notification(election_epoch=election.MAX_ROUND))
    assert step.action == "HandleHigherRound" and fle.logicalclock == election.MAX_ROUND
    for send in step.sends:
        wire.encode_notification(send.notification)
    wire.encode_notification(_notification(election_epoch=fle.logicalclock + 1))


def test_an_election_sender_drops_a_notification_it_cannot_encode_and_keeps_sending():
    """ElectionSender._run used to die on the encoder's ValueError: the peer heard nothing more, ever."""

    async def scenario() -> list[Notification]:
        got: list[Notification] = []
        done = asyncio.Event()

        async def handle(reader, writer):
            assert (await peers.accept_initial(reader))[0].sid == 2  # the larger id dials and keeps the connection

            def on_body(body: bytes) -> None:
                got.append(wire.decode_notification(body))
                done.set()

            await peers.read_stream(reader, writer, wire.FrameDecoder(peers.MAX_ELECTION_FRAME, "test"), on_body)
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sender = votes.ElectionSender(2, 1, "127.0.0.1", port, address="127.0.0.1:1")
        try:
            sender.send(_notification(election_epoch=1 << 63))  # one round past what an int64 holds
            sender.send(_notification(election_epoch=7))
            await asyncio.wait_for(done.wait(), 10)
            assert not sender._task.done()
        finally:
            sender.close()
            server.close()
        return got

    assert asyncio.run(scenario()) == [_notification(election_epoch=7)]


def test_an_unfinished_frame_is_cut_after_the_frame_timeout_but_an_idle_stream_is_not():
    """read_stream's frame_timeout bounds a frame from its first byte; the time between frames is not bounded, nor
    after a frame that was completed in time."""

    async def scenario(payload: bytes, wait: float, rest: bytes = b"") -> str | None:
        bodies: list[bytes] = []
        read: asyncio.Future[asyncio.Task[str]] = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            task = asyncio.ensure_future(peers.read_stream(reader, writer, wire.FrameDecoder(64, "test"),
                                                           bodies.append, frame_timeout=0.2))
            read.set_result(task)
            try:
                await task
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            writer.write(payload)
            task = await asyncio.wait_for(read, 5)
            if rest:
                await asyncio.sleep(0.02)  # a chunk of its own, well within the 0.2 s even on a loaded machine
                writer.write(rest)
            done, _ = await asyncio.wait({task}, timeout=wait)
            if not done:
                task.cancel()
                return None
            return task.result()
        finally:
            writer.close()
            server.close()

    whole = wire.frame(b"abcdef")
    assert asyncio.run(scenario(whole + whole[:3], 5)).startswith(
        "bad input: a frame or packet is still incomplete 0.2 s after its first byte (3 bytes of it received)")
    assert asyncio.run(scenario(whole * 2, 1.0)) is None  # complete frames, then idle: still open
    assert asyncio.run(scenario(whole + whole[:3], 1.0, whole[3:])) is None  # completed in time, then idle
