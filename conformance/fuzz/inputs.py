"""What the live fuzzer throws: the kinds of input, each with the bytes it sends and the outcome it demands.

Theory of operation
-------------------
A `Kind` names a port, a weight (how often a run picks it), the roles of the servers it may target and ``make``,
which builds one `Input` from a seeded ``random.Random`` and a `Target` (what the fuzzer last saw of the server).
An `Input` carries its bytes and what the server must do with them (``expect``):

* `CLOSE`   -- close the connection itself within ``wait`` s (the fuzzer never closes its side first);
* `SILENCE` -- the bytes are an unfinished handshake, frame or line, then nothing: the server must close the
  connection within the kind's bound (handshake timeout, initLimit ticks, a frame or line timeout);
* `ANSWER`  -- answer every request with a JSON object (with ``error`` for a bad one: ``bad``) and keep the
  connection;
* `SEND`    -- nothing to check on that connection (valid but wild election votes); the fuzzer closes it.

Whenever an input needs valid first bytes (a quorum port's FOLLOWERINFO, `hello`; an election port's initial
message) it speaks as the *ghost* (``Target.ghost``, a server configured but never started), so it never replaces a
real connection; ``quorum-impersonate`` and the participants' election votes speak as a live server on purpose. An
input whose quorum-port FOLLOWERINFO names a configured sid is ``exclusive``: the harness lets one such input at a
time reach a server. `kind_table` builds the table for a cluster's timing; `KINDS` is it for the default timing.

A kind with a ``known_issue`` is input the servers do not handle yet: the harness skips it unless asked
(docs/fuzzing.md). None is open at present; the six found by the long runs are fixed and stay here as kinds.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable

from conformance.fuzz.frames import (
    ANSWER,
    CLOSE,
    I32,
    SEND,
    SILENCE,
    Input,
    Kind,
    Target,
    bad_data_length,
    bad_length,
    bad_sid,
    bad_initial,
    half,
    hello,
    initial_message,
    mutated_packet,
    not_hello,
    not_initial,
    out_of_phase_packet,
    packet_bytes,
    some_zxid,
    stranger_sid,
    wild_long,
)
from zabref.config import Limits
from zabref.core import payloads
from zabref.core.election import MAX_ROUND
from zabref.core.packets import PROTOCOL_VERSION, LearnerInfo, Notification, PacketType, ServerState
from zabref.net import clientport, peers, wire
from zabref.runtime import control
from zabref.runtime.server import QUORUM_TYPES

__all__ = ["KINDS", "Kind", "Input", "Target", "kind_table", "CLOSE", "SILENCE", "ANSWER", "SEND", "CLOSE_WAIT",
           "ROLES"]


# ------------------------------------------------------------------------------------------------------ bytes


# ------------------------------------------------------------------------------------------------------ kinds


def _q_random(rng: random.Random, t: Target) -> Input:
    return Input(not_hello(rng), CLOSE)


def _q_huge(rng: random.Random, t: Target) -> Input:
    if rng.random() < 0.5:  # a FOLLOWERINFO whose data cannot be a LearnerInfo: any length but 20 or 28
        head = struct.pack(">iqi", int(PacketType.FOLLOWERINFO), 0,
                           rng.choice([-1, 0, 8, 12, 19, 21, 27, 29, rng.randint(30, (1 << 31) - 1)]))
        return Input(head + rng.randbytes(rng.randint(0, 64)), CLOSE)
    ptype = int(rng.choice(sorted(QUORUM_TYPES)))
    return Input(hello(t.ghost) + bad_data_length(rng, ptype, peers.MAX_QUORUM_DATA) + rng.randbytes(64), CLOSE,
                 exclusive=True)


def _q_bad_sid(rng: random.Random, t: Target) -> Input:
    return Input(bad_sid(rng, t) + packet_bytes(PacketType.COMMIT, 1), CLOSE)


def _q_bad_body(rng: random.Random, t: Target) -> Input:
    """A packet of a known type whose authinfo cannot be read: a count out of bounds, a null or non-UTF-8 string."""
    head = struct.pack(">iqi", int(rng.choice(sorted(QUORUM_TYPES))), some_zxid(rng, t), -1)
    authinfo = rng.choice([I32.pack(rng.choice([-2, -(1 << 31), 1 << 20, (1 << 31) - 1])),
                           I32.pack(1) + I32.pack(-1) + I32.pack(-1),
                           I32.pack(1) + I32.pack(2) + b"\xff\xfe" + I32.pack(0)])
    return Input(hello(t.ghost) + head + authinfo, CLOSE, exclusive=True)


def _q_mutated(rng: random.Random, t: Target) -> Input:
    return Input(hello(t.ghost) + mutated_packet(rng, t), CLOSE, exclusive=True)


def _q_wrong_type(rng: random.Random, t: Target) -> Input:
    foreign = [p for p in PacketType if p not in QUORUM_TYPES]
    if rng.random() < 0.5:
        body = packet_bytes(rng.choice(foreign), some_zxid(rng, t), rng.choice([None, b"x"]))
    else:
        body = struct.pack(">iqii", rng.choice([0, 9, 19, 99, -1, 1 << 30]), 0, -1, -1)
    return Input(hello(t.ghost) + body, CLOSE, exclusive=True)


def _q_out_of_phase(rng: random.Random, t: Target) -> Input:
    return Input(hello(stranger_sid(rng, t)) + out_of_phase_packet(rng, t), CLOSE, exclusive=True)


def _q_ghost_observerinfo_then_junk(rng: random.Random, t: Target) -> Input:
    observer = packet_bytes(PacketType.OBSERVERINFO, (t.last_zxid >> 32) << 32,
                            payloads.encode_followerinfo_data(LearnerInfo(t.ghost, PROTOCOL_VERSION)))
    junk = rng.choice([out_of_phase_packet(rng, t), rng.randbytes(rng.randint(0, 40)),
                       packet_bytes(PacketType.OBSERVERINFO, 0, b"")])
    return Input(rng.choice([b"", hello(t.ghost)]) + observer + junk, CLOSE, exclusive=True)


def _q_impersonate(rng: random.Random, t: Target) -> Input:
    sid = rng.choice([s for s in t.participants if s != t.sid])
    return Input(hello(sid) + packet_bytes(PacketType.COMMIT, rng.randint(1, (1 << 62))), CLOSE, exclusive=True)


def _q_held(rng: random.Random, t: Target) -> Input:
    """At a server that does not lead, a FOLLOWERINFO waits for it to lead (`zabref.core.zab.ZabCore.held`), and so
    does every packet behind it: none reaches the core, and the connection stays until the fuzzer closes it."""
    return Input(hello(stranger_sid(rng, t)) + rng.choice([out_of_phase_packet(rng, t), mutated_packet(rng, t)]),
                 SEND, exclusive=True)


def _q_half_handshake(rng: random.Random, t: Target) -> Input:
    return Input(half(rng, hello(t.ghost)), SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 3)


def _q_half_frame(wait: float) -> Callable[[random.Random, Target], Input]:
    """A FOLLOWERINFO, then half a packet: closed once it has been incomplete for initLimit ticks."""
    def make(rng: random.Random, t: Target) -> Input:
        packet = rng.choice([packet_bytes(PacketType.ACK, 1 << 32),
                             struct.pack(">iqi", int(PacketType.ACK), 1 << 32, rng.randint(64, 1 << 16))
                             + rng.randbytes(32)])
        return Input(hello(t.ghost) + half(rng, packet), SILENCE, wait=wait, exclusive=True)
    return make


def _e_random(rng: random.Random, t: Target) -> Input:
    return Input(not_initial(rng), CLOSE)


def _e_bad_sid(rng: random.Random, t: Target) -> Input:
    return Input(bad_initial(rng, t), CLOSE)


def _e_huge(rng: random.Random, t: Target) -> Input:
    return Input(initial_message(t.ghost) + bad_length(rng, peers.MAX_ELECTION_FRAME) + rng.randbytes(16), CLOSE)


def _e_bad_notification(rng: random.Random, t: Target) -> Input:
    if rng.random() < 0.5:
        body = rng.randbytes(rng.choice([0, 1, 27, 29, 36, 39, 41]))  # no notification is that long
    else:
        body = struct.pack(">iqqqqi", rng.choice([4, 9, -1, 1 << 20]), *(rng.randint(0, 9) for _ in range(4)), 1)
    return Input(initial_message(t.ghost) + wire.frame(body), CLOSE)


def _votes(negative: bool) -> Callable[[random.Random, Target], Input]:
    """Valid notifications with wild fields; with ``negative``, one field of the first is negative: a vote that
    cannot exist, so the connection must be closed (a bad input), as for any other undecodable notification."""
    def make(rng: random.Random, t: Target) -> Input:
        fields = [[wild_long(rng) for _ in range(4)] for _ in range(rng.randint(1, 4))]
        # a round a server may adopt and still run its own elections below election.MAX_ROUND for ever (a round near
        # MAX_ROUND, adopted, would make the next rounds refused by every peer: the cluster could not elect again;
        # a lying configured peer is outside Zab's fault model, docs/fuzzing.md); a later one is _e_last_round's
        for f in fields:
            f[2] = min(f[2], MAX_ROUND // 2)
        if negative:
            fields[0][rng.randrange(4)] = rng.choice([-1, -(1 << 63), rng.randint(-(1 << 63), -1)])
        votes = b"".join(wire.frame(wire.encode_notification(Notification(rng.choice(list(ServerState)), *f)))
                         for f in fields)
        sender = rng.choice([t.ghost, *(s for s in t.participants if s != t.sid)])
        return Input(initial_message(sender) + votes, CLOSE if negative else SEND)
    return make


def _e_last_round(rng: random.Random, t: Target) -> Input:
    """A participant's vote in a round above `zabref.core.election.MAX_ROUND`, up to 2**63 - 1: whoever adopted round
    2**63 - 1 could never start another (its number does not fit the wire's int64), so it is refused as bad input."""
    sender = rng.choice([s for s in t.participants if s != t.sid])
    r = rng.choice([(1 << 63) - 1, MAX_ROUND + 1, rng.randint(MAX_ROUND + 1, (1 << 63) - 1)])
    vote = Notification(ServerState.LOOKING, sender, t.last_zxid, r, t.last_zxid >> 32)
    return Input(initial_message(sender) + wire.frame(wire.encode_notification(vote)), CLOSE)


def _e_half_handshake(rng: random.Random, t: Target) -> Input:
    return Input(half(rng, initial_message(t.ghost)), SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 3)


def _e_half_frame(rng: random.Random, t: Target) -> Input:
    n = wire.frame(wire.encode_notification(Notification(ServerState.LOOKING, 1, 0, 1, 0)))
    return Input(initial_message(t.ghost) + half(rng, n), SILENCE, wait=peers.ELECTION_FRAME_TIMEOUT + 3)


def _c_bad_length(rng: random.Random, t: Target) -> Input:
    return Input(bad_length(rng, Limits().client_frame_bytes) + rng.randbytes(rng.randint(0, 64)), CLOSE)


_PARSER_BOMBS = [lambda rng: b"[" * rng.randint(10_000, 200_000),
                 lambda rng: b'{"op": "read", "from_zxid": ' + b"7" * rng.randint(4301, 20_000) + b"}"]


def _read_request(rng: random.Random) -> tuple[bytes, bool]:
    """A read with one odd field; bad unless the value happens to be a valid one (JSON's true is the int 1)."""
    key = rng.choice(["from_zxid", "limit"])
    value = rng.choice(["x", 1.5, -1, 0, None, [], True, "1", 1 << 70])
    ok = isinstance(value, int) and (key == "from_zxid" or value >= 1)
    return json.dumps({"op": "read", key: value}).encode(), not ok


def _bad_request(rng: random.Random) -> tuple[bytes, bool]:
    """One client request body and whether it is bad. Never a valid submit (the fuzzer must not write)."""
    bodies: list[Callable[[], tuple[bytes, bool]]] = [
        lambda: (rng.randbytes(rng.randint(0, 64)), True),
        lambda: (b"\xff\xfe" + rng.randbytes(8), True),
        lambda: (rng.choice([b"[]", b"1", b'"x"', b"null", b"{", b"{}", b'{"op": null}']), True),
        lambda: (json.dumps({"op": rng.choice(["nope", "SUBMIT", "", "read "])}).encode(), True),
        lambda: (json.dumps({"op": "submit", "value": rng.choice([5, None, [], {"a": 1}, True])}).encode(), True),
        lambda: (b'{"op": "submit", "value": "\\ud800' + rng.choice([b"", b"x", b"\\udfff\\ud800"]) + b'"}', True),
        lambda: _read_request(rng),
        lambda: (json.dumps({"op": "read", "from_zxid": rng.randint(0, 1 << 80), "limit": rng.randint(1, 3)}).encode(),
                 False),
        lambda: (rng.choice(_PARSER_BOMBS)(rng), True),
    ]
    return rng.choice(bodies)()


def _c_bad_requests(rng: random.Random, t: Target) -> Input:
    reqs = [_bad_request(rng) for _ in range(rng.randint(1, 4))]
    return Input(b"".join(wire.frame(b) for b, _ in reqs), ANSWER, tuple(bad for _, bad in reqs))


def _c_half_frame(rng: random.Random, t: Target) -> Input:
    whole = wire.frame(json.dumps({"op": "read", "from_zxid": 0, "limit": 1}).encode())
    payload = rng.choice([half(rng, whole), I32.pack(rng.randint(64, Limits().client_frame_bytes)) + b"{"])
    return Input(payload, SILENCE, wait=clientport.FRAME_TIMEOUT + 3)


def _z_connect(last_zxid: int = 0, session: int = 0, passwd: bytes = bytes(16)) -> bytes:
    """A ZooKeeper client's ConnectRequest frame (`zabref.net.zkclientwire`)."""
    return wire.frame(struct.pack(">iqiq", 0, last_zxid, 10_000, session) + I32.pack(len(passwd)) + passwd + b"\x00")


def _z_bad_length(rng: random.Random, t: Target) -> Input:
    return Input(bad_length(rng, Limits().client_frame_bytes) + rng.randbytes(rng.randint(0, 64)), CLOSE)


def _z_bad_connect(rng: random.Random, t: Target) -> Input:
    """A ConnectRequest too short to be one; one from a client that has seen more than any server delivered; one
    naming a session nobody made (answered as expired); a good one and then a request too short for its header:
    the server closes each."""
    payload = rng.choice([
        lambda: wire.frame(rng.randbytes(rng.randint(0, 27))),
        lambda: _z_connect(last_zxid=(1 << 62) + rng.randint(0, 1 << 40)),
        lambda: _z_connect(session=rng.randint(1, (1 << 63) - 1), passwd=rng.randbytes(16)),
        lambda: _z_connect() + wire.frame(rng.randbytes(rng.randint(0, 7))),
    ])()
    return Input(payload, CLOSE)


def _z_bad_requests(rng: random.Random, t: Target) -> Input:
    """A good ConnectRequest, then a read whose record cannot be read (a path's length past the frame, a watch flag
    that is no boolean): the server closes the connection."""
    path = rng.choice([b"/", b"/zabref-1-1", b"/x"])
    record = rng.choice([
        I32.pack(rng.randint(len(path) + 1, 1 << 20)) + path,        # getData: the path runs past the frame
        I32.pack(len(path)) + path + bytes([rng.randint(2, 255)]),   # getData: a watch flag that is no boolean
    ])
    op = rng.choice([4, 3, 8, 12])  # getData, exists, getChildren, getChildren2
    return Input(_z_connect() + wire.frame(struct.pack(">ii", 1, op) + record), CLOSE)


def _z_half_frame(rng: random.Random, t: Target) -> Input:
    return Input(half(rng, _z_connect()), SILENCE, wait=clientport.FRAME_TIMEOUT + 3)


def _z_four_letter(rng: random.Random, t: Target) -> Input:
    """``srvr`` or ``ruok`` in place of a ConnectRequest: answered, then closed by the server."""
    return Input(rng.choice([b"srvr", b"ruok"]), CLOSE, reason=False)


def _k_bad_lines(rng: random.Random, t: Target) -> Input:
    lines: list[tuple[bytes, bool]] = []
    for _ in range(rng.randint(1, 4)):
        line, bad = rng.choice([
            lambda: (rng.randbytes(rng.randint(0, 64)).replace(b"\n", b" ") or b"x", True),
            lambda: (rng.choice([b"not json", b"[1, 2]", b"{}", b'{"op": 5}', b'{"op": "nope"}', b"\xff"]), True),
            lambda: (json.dumps({"op": rng.choice(["release", "release_vote", "tick", "elect", "client_request"]),
                                 "from": rng.choice([9, "x", None]), "conn": rng.choice([-1, "x"]),
                                 "count": rng.choice([0, "x", 10 ** 9]), "value": "v"}).encode(), True),
            lambda: (b'{"op": "ping"}', False),
        ])()
        if line.strip() == b"":
            line, bad = b"x", True
        lines.append((line, bad))
    return Input(b"".join(line + b"\n" for line, _ in lines), ANSWER, tuple(bad for _, bad in lines))


def _k_parser_bombs(rng: random.Random, t: Target) -> Input:
    return Input(rng.choice(_PARSER_BOMBS)(rng) + b"\n", ANSWER, (True,))


def _k_long_line(rng: random.Random, t: Target) -> Input:
    return Input(b"x" * (control.MAX_LINE + rng.randint(1, 4096)) + b"\n", CLOSE)


def _k_half_line(rng: random.Random, t: Target) -> Input:
    return Input(b'{"op": "pi', SILENCE, wait=control.LINE_TIMEOUT + 5)


def _k_no_auth(rng: random.Random, t: Target) -> Input:
    """A first line that is not the auth request: a real request, a bad line, an auth without or with a non-text
    token. Refused (an error answer) and closed; nothing after it is read."""
    first = rng.choice([b'{"op": "state"}', b'{"op": "partition", "peers": [2]}', b'{"op": "tick"}', b"not json",
                        b'{"op": "auth"}', b'{"op": "auth", "token": 5}', rng.randbytes(rng.randint(1, 64))])
    return Input(first.replace(b"\n", b" ") + b"\n" + b'{"op": "ping"}\n', CLOSE)


def _k_wrong_token(rng: random.Random, t: Target) -> Input:
    """An auth request with a token that is not the server's (random, empty, too long, a lone surrogate)."""
    token = rng.choice([rng.randbytes(32).hex(), "", "x" * (control.MAX_AUTH_LINE + 1), "0" * 63, "\ud800"])
    return Input(json.dumps({"op": "auth", "token": token}).encode() + b"\n" + b'{"op": "ping"}\n', CLOSE)


def _k_auth_silence(rng: random.Random, t: Target) -> Input:
    """Nothing, or half an auth line: closed once `AUTH_TIMEOUT` has passed."""
    return Input(rng.choice([b"", b'{"op": "auth", "tok']), CLOSE, wait=control.AUTH_TIMEOUT + 5)


# ------------------------------------------------------------------------------------------------------ the gates


def _tls_plain(rng: random.Random, t: Target) -> Input:
    """Plain bytes on a TLS port: a handshake (as the ghost) and a packet, or random bytes. Refused by TLS."""
    payload = rng.choice([hello(t.ghost) + packet_bytes(PacketType.COMMIT, 1), not_hello(rng)])
    return Input(payload, CLOSE, tls="none")


def _tls_client_plain(rng: random.Random, t: Target) -> Input:
    return Input(wire.frame(b'{"op": "read", "from_zxid": 0, "limit": 1}'), CLOSE, tls="none")


def _tls_stranger(rng: random.Random, t: Target) -> Input:
    """TLS with a certificate of another CA: the handshake fails before any byte is read as protocol."""
    return Input(hello(t.ghost) + packet_bytes(PacketType.COMMIT, 1), CLOSE, tls="stranger")


def _tls_half_hello(rng: random.Random, t: Target) -> Input:
    """The first bytes of a TLS ClientHello record, then nothing: closed when the TLS handshake times out."""
    record = b"\x16\x03\x01" + I32.pack(rng.randint(64, 512))[2:] + b"\x01" + rng.randbytes(rng.randint(0, 16))
    return Input(record, SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 5, tls="none")


def _auth_wrong_proof(hello: Callable[[int], bytes]) -> Callable[[random.Random, Target], Input]:
    """A handshake (``hello``: the port's, as the ghost), then a proof frame of the right size that is not the proof,
    then a packet."""
    def make(rng: random.Random, t: Target) -> Input:
        return Input(hello(t.ghost) + wire.frame(rng.randbytes(64)) + packet_bytes(PacketType.COMMIT, 1), CLOSE)
    return make


def _auth_bad_frame(rng: random.Random, t: Target) -> Input:
    """A handshake, then where the proof goes: a frame of another size, a huge or negative length, a packet."""
    body = rng.choice([wire.frame(rng.randbytes(rng.choice([0, 1, 32, 63, 65, 200]))), bad_length(rng, 64),
                       packet_bytes(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0))])
    return Input(hello(t.ghost) + body, CLOSE)


def _auth_silence(rng: random.Random, t: Target) -> Input:
    """An election connection's initial message, then nothing or half a proof: closed when the exchange times out."""
    return Input(initial_message(t.ghost) + rng.choice([b"", half(rng, wire.frame(rng.randbytes(64)))]), CLOSE,
                 wait=peers.HANDSHAKE_TIMEOUT + 5)


LEADING = frozenset({"LEADING"})


def kind_table(tick_s: float = 0.1, init_limit: int = 10, *, tls: bool = False, auth: bool = False,
               stranger: bool = False) -> dict[str, Kind]:
    """Every kind by name, with the waits of its silence inputs for a cluster of that timing. ``tls``, ``auth``:
    the cluster's quorum and client ports are TLS, its servers prove a quorum secret -- the gate kinds of each are
    added; ``stranger``: the harness holds a certificate of another CA (the kinds that use it are added)."""
    idle = (init_limit + 3) * tick_s + 3  # a quorum connection silent for initLimit ticks is closed, on any role
    table = [
        Kind("quorum-random-bytes", "quorum_port", 8, _q_random),
        Kind("quorum-huge-length", "quorum_port", 6, _q_huge),
        Kind("quorum-bad-sid", "quorum_port", 4, _q_bad_sid),
        Kind("quorum-bad-body", "quorum_port", 8, _q_bad_body),
        # after its FOLLOWERINFO, a learner's packets reach the core of a leader only (`_q_held`)
        Kind("quorum-mutated-packet", "quorum_port", 8, _q_mutated, LEADING),
        Kind("quorum-wrong-type", "quorum_port", 6, _q_wrong_type),
        Kind("quorum-out-of-phase", "quorum_port", 20, _q_out_of_phase, LEADING),
        Kind("quorum-held-at-a-non-leader", "quorum_port", 4, _q_held, frozenset({"FOLLOWING", "LOOKING"})),
        Kind("quorum-observerinfo-then-junk", "quorum_port", 4, _q_ghost_observerinfo_then_junk, LEADING),
        Kind("quorum-impersonate", "quorum_port", 0.3, _q_impersonate, LEADING),
        Kind("quorum-half-handshake", "quorum_port", 0.5, _q_half_handshake),
        Kind("quorum-half-frame-leader", "quorum_port", 0.3, _q_half_frame(idle), LEADING),
        Kind("quorum-half-frame-learner", "quorum_port", 0.3, _q_half_frame(idle), frozenset({"FOLLOWING", "LOOKING"})),
        Kind("election-random-bytes", "election_port", 6, _e_random),
        Kind("election-bad-sid", "election_port", 3, _e_bad_sid),
        Kind("election-huge-length", "election_port", 4, _e_huge),
        Kind("election-bad-notification", "election_port", 8, _e_bad_notification),
        Kind("election-wild-votes", "election_port", 6, _votes(negative=False)),
        Kind("election-negative-votes", "election_port", 1, _votes(negative=True)),
        Kind("election-last-round", "election_port", 0.3, _e_last_round),
        Kind("election-half-handshake", "election_port", 0.5, _e_half_handshake),
        Kind("election-half-frame", "election_port", 0.3, _e_half_frame),
        Kind("client-bad-length", "client_port", 6, _c_bad_length),
        Kind("client-bad-requests", "client_port", 20, _c_bad_requests),
        Kind("client-half-frame", "client_port", 0.5, _c_half_frame),
        Kind("zk-client-bad-length", "zk_client_port", 3, _z_bad_length),
        Kind("zk-client-bad-connect", "zk_client_port", 6, _z_bad_connect),
        Kind("zk-client-bad-requests", "zk_client_port", 6, _z_bad_requests),
        Kind("zk-client-half-frame", "zk_client_port", 0.3, _z_half_frame),
        Kind("zk-client-four-letter", "zk_client_port", 1, _z_four_letter),
        Kind("control-bad-lines", "control_port", 14, _k_bad_lines),
        Kind("control-long-line", "control_port", 0.2, _k_long_line),
        Kind("control-parser-bombs", "control_port", 2, _k_parser_bombs),
        Kind("control-half-line", "control_port", 0.3, _k_half_line),
        Kind("control-no-auth", "control_port", 3, _k_no_auth, authenticate=False),
        Kind("control-wrong-token", "control_port", 3, _k_wrong_token, authenticate=False),
        Kind("control-auth-silence", "control_port", 0.3, _k_auth_silence, authenticate=False),
    ]
    if tls:
        table += [
            Kind("tls-quorum-plain", "quorum_port", 3, _tls_plain, gate="tls"),
            Kind("tls-election-plain", "election_port", 3, _tls_plain, gate="tls"),
            Kind("tls-client-plain", "client_port", 3, _tls_client_plain, gate="tls"),
            Kind("tls-quorum-half-hello", "quorum_port", 0.5, _tls_half_hello, gate="tls"),
        ]
        if stranger:
            table += [Kind("tls-quorum-stranger", "quorum_port", 3, _tls_stranger, gate="tls"),
                      Kind("tls-client-stranger", "client_port", 2, _tls_stranger, gate="tls")]
    if auth:
        table += [
            Kind("auth-quorum-wrong-proof", "quorum_port", 3, _auth_wrong_proof(hello), gate="auth"),
            Kind("auth-election-wrong-proof", "election_port", 3, _auth_wrong_proof(initial_message), gate="auth"),
            Kind("auth-bad-frame", "quorum_port", 3, _auth_bad_frame, gate="auth"),
            Kind("auth-silence", "election_port", 0.5, _auth_silence, gate="auth"),
        ]
    return {k.name: k for k in table}


#: Every kind, for the default timing (tick 100 ms, initLimit 10); `conformance.fuzz.Fuzzer` rebuilds them for its
#: cluster's timing.
KINDS = kind_table()
