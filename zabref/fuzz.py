"""Live fuzzing: bad input on every port of a running cluster while a client keeps writing (``zabref fuzz``).

Theory of operation
-------------------
`fuzz_cluster` lays out three participants plus a fourth server configured as an observer that never runs: the
*ghost*. Whenever an input needs a valid handshake (a bad frame after it, an out-of-phase packet) the fuzzer speaks
as the ghost: every server accepts its handshake, and since no real connection carries the ghost's sid, nothing sent
as the ghost closes a real connection. One kind (``quorum-impersonate``) speaks as a live server instead -- a new
connection from a sid replaces that sid's old one, as in ZooKeeper -- so a run also shows the cluster recovering.

`Fuzzer.run` runs `WORKERS` asyncio tasks that take inputs one by one. Input i is built from
``random.Random(f"{seed}:{i}")``: a kind (weighted, `KINDS`), a server whose role fits the kind, then bytes. Each
kind says what the server must do with them:

* ``close``   -- close the connection itself within `CLOSE_WAIT` s (the fuzzer never closes its side first);
* ``silence`` -- the bytes are an unfinished handshake, frame or line, then nothing: the server must close the
  connection within the kind's bound (handshake timeout, initLimit ticks, the client port's frame timeout);
* ``answer``  -- answer every request with a JSON object (with ``error`` for a bad one) and keep the connection;
* ``send``    -- nothing to check on that connection (valid but wild election votes); the fuzzer closes it.

Inputs that carry a handshake on a quorum port take a per-server lock, so one ghost connection never replaces
another (which would close it for the wrong reason). Meanwhile a task polls every server's ``state`` (roles, for
the targets) and VmRSS (/proc/<pid>/status), and a thread submits values through `ZabClient`. An outcome that
contradicts its kind while the target's role changed around it is *inconclusive* (an election moved the leader
under the input), not a failure. After the last input `Report.problems` lists what went wrong: failed inputs, a
dead server, no commit after the run, a Python traceback in a server's stderr, or a server that closed more fuzz
connections than its log explains ("<port> connection from|with <who> closed: <reason>" lines).

Kinds with a ``known_issue`` are inputs the servers do not handle yet: skipped unless ``include_known``, so that a
run checks everything else; tests/test_fuzz_ports.py holds a strict-xfail test per known issue.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import struct
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import click

from zabref import clientport, control, peers, wire
from zabref.client import ClientError, ZabClient
from zabref.cluster import LocalCluster, cluster_config
from zabref.config import ClusterConfig, load_config, render_config, write_config
from zabref.packets import PROTOCOL_VERSION, LearnerInfo, Notification, PacketType, QuorumPacket, ServerState
from zabref.ports import find_free_base_port
from zabref.runtime import QUORUM_TYPES

__all__ = ["KINDS", "Kind", "Input", "Target", "Fuzzer", "Report", "fuzz_cluster", "rss_kib", "fuzz_command"]

CLOSE, SILENCE, ANSWER, SEND = "close", "silence", "answer", "send"
WORKERS = 8
CLOSE_WAIT = 10.0
MAX_SILENT = 64  # silence inputs waiting at once
POLL = 1.0
ROLES = frozenset({"LOOKING", "FOLLOWING", "LEADING"})
DEFAULT_INPUTS = 2000
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Target:
    """What the fuzzer knows of one server when it builds an input."""

    sid: int
    role: str
    leader: int
    last_zxid: int
    ghost: int
    participants: tuple[int, ...]


@dataclass(frozen=True)
class Input:
    payload: bytes
    expect: str
    bad: tuple[bool, ...] = ()  # answer: one entry per request, True when it must get an "error" answer
    wait: float = CLOSE_WAIT  # close, silence: seconds the server has to close the connection
    exclusive: bool = False  # holds the target's quorum lock (it carries a handshake of a configured sid)


@dataclass(frozen=True)
class Kind:
    name: str
    port: str
    weight: float
    make: Callable[[random.Random, Target], Input]
    roles: frozenset[str] = ROLES
    known_issue: str | None = None


# ------------------------------------------------------------------------------------------------------ bytes


def _hs(sid: int) -> bytes:
    return wire.frame(wire.encode_handshake(sid))


def _pkt(ptype: PacketType, zxid: int = 0, data: bytes | None = None) -> bytes:
    return wire.frame(wire.encode_quorum_packet(QuorumPacket(ptype, zxid, data)))


def _not_handshake(rng: random.Random) -> bytes:
    """Random bytes whose first four are not the handshake's length prefix (8): rejected as soon as they arrive."""
    data = rng.randbytes(rng.randint(4, 512))
    return data if data[:4] != _I32.pack(8) else b"\xff" + data[1:]


def _bad_length(rng: random.Random, cap: int) -> bytes:
    return _I32.pack(rng.choice([cap + 1, (1 << 31) - 1, -1, -(1 << 31), rng.randint(cap + 1, (1 << 31) - 1),
                                 rng.randint(-(1 << 31), -1)]))


def _zxid(rng: random.Random, t: Target) -> int:
    e, c = t.last_zxid >> 32, t.last_zxid & 0xFFFFFFFF
    return rng.choice([0, t.last_zxid, ((e + rng.randint(0, 3)) << 32) | (c + rng.randint(0, 5)),
                       rng.randint(0, (1 << 63) - 1)])


def _sender(rng: random.Random, t: Target) -> int:
    """A sid whose packets the target must refuse without any real connection being replaced."""
    others = [s for s in t.participants if s not in (t.sid, t.leader)] if t.role == "FOLLOWING" else []
    return rng.choice([t.ghost, *others])


def _out_of_phase_packet(rng: random.Random, t: Target) -> bytes:
    z = _zxid(rng, t)
    choices = [
        lambda: _pkt(PacketType.COMMIT, z),
        lambda: _pkt(PacketType.PROPOSAL, z, rng.randbytes(rng.randint(0, 64))),
        lambda: _pkt(PacketType.ACK, z),
        lambda: _pkt(PacketType.LEADERINFO, (z >> 32) << 32, wire.encode_leaderinfo_data(PROTOCOL_VERSION)),
        lambda: _pkt(PacketType.NEWLEADER, (z >> 32) << 32),
        lambda: _pkt(PacketType.UPTODATE, z),
        lambda: _pkt(PacketType.DIFF, z),
        lambda: _pkt(PacketType.TRUNC, z),
        lambda: _pkt(PacketType.SNAP, z, rng.choice([rng.randbytes(16), wire.encode_snap_data([(z, b"x")])])),
        lambda: _pkt(PacketType.ACKEPOCH, z, wire.encode_ackepoch_data(rng.randint(-1, 5))),
        lambda: _pkt(PacketType.INFORM, z, rng.randbytes(8)),
        lambda: _pkt(PacketType.COMMIT, z) + _pkt(PacketType.PROPOSAL, z, b"late"),
        # a negative zxid, written by hand (the encoder refuses nothing here, but QuorumPacket keeps it)
        lambda: wire.frame(struct.pack(">iqii", int(rng.choice([2, 3, 4])), -rng.randint(1, 1 << 62), -1, -1)),
    ]
    if t.role == "LEADING":  # FOLLOWERINFO from an observer; elsewhere a LOOKING server would park it
        choices.append(lambda: _pkt(PacketType.FOLLOWERINFO, 0,
                                    wire.encode_followerinfo_data(LearnerInfo(PROTOCOL_VERSION, t.ghost))))
    return rng.choice(choices)()


def _mutated_packet(rng: random.Random, t: Target) -> bytes:
    body = bytearray(wire.encode_quorum_packet(QuorumPacket(
        rng.choice([PacketType.COMMIT, PacketType.PROPOSAL, PacketType.ACK, PacketType.SNAP]), _zxid(rng, t),
        rng.choice([None, rng.randbytes(rng.randint(0, 24))]))))
    for _ in range(rng.randint(1, 3)):
        body[rng.randrange(len(body))] = rng.randrange(256)
    try:  # a mutation that made an accepted packet (PING, a hello) would not be refused: make it unknown instead
        if wire.decode_quorum_packet(bytes(body)).type in (PacketType.PING, PacketType.OBSERVERINFO,
                                                           PacketType.FOLLOWERINFO):
            body[:4] = _I32.pack(99)
    except wire.CodecError:
        pass
    return wire.frame(bytes(body))


# ------------------------------------------------------------------------------------------------------ kinds


def _q_random(rng: random.Random, t: Target) -> Input:
    return Input(_not_handshake(rng), CLOSE)


def _q_huge(rng: random.Random, t: Target) -> Input:
    if rng.random() < 0.5:
        return Input(_bad_length(rng, 8) + rng.randbytes(rng.randint(0, 64)), CLOSE)
    return Input(_hs(t.ghost) + _bad_length(rng, peers.MAX_QUORUM_FRAME) + rng.randbytes(64), CLOSE, exclusive=True)


def _bad_sid(rng: random.Random, t: Target) -> bytes:
    sid = rng.choice([t.sid, 0, rng.randint(t.ghost + 1, (1 << 63) - 1), -rng.randint(1, 1 << 63)])
    return wire.frame(struct.pack(">q", sid))


def _q_bad_sid(rng: random.Random, t: Target) -> Input:
    return Input(_bad_sid(rng, t) + _pkt(PacketType.COMMIT, 1), CLOSE)


def _q_bad_body(rng: random.Random, t: Target) -> Input:
    return Input(_hs(t.ghost) + wire.frame(rng.randbytes(rng.randint(0, 48))), CLOSE, exclusive=True)


def _q_mutated(rng: random.Random, t: Target) -> Input:
    return Input(_hs(t.ghost) + _mutated_packet(rng, t), CLOSE, exclusive=True)


def _q_wrong_type(rng: random.Random, t: Target) -> Input:
    foreign = [p for p in PacketType if p not in QUORUM_TYPES]
    if rng.random() < 0.5:
        body = _pkt(rng.choice(foreign), _zxid(rng, t), rng.choice([None, b"x"]))
    else:
        body = wire.frame(struct.pack(">iqii", rng.choice([0, 9, 19, 99, -1, 1 << 30]), 0, -1, -1))
    return Input(_hs(t.ghost) + body, CLOSE, exclusive=True)


def _q_out_of_phase(rng: random.Random, t: Target) -> Input:
    return Input(_hs(_sender(rng, t)) + _out_of_phase_packet(rng, t), CLOSE, exclusive=True)


def _q_observer_then_junk(rng: random.Random, t: Target) -> Input:
    hello = _pkt(PacketType.OBSERVERINFO, (t.last_zxid >> 32) << 32,
                 wire.encode_followerinfo_data(LearnerInfo(PROTOCOL_VERSION, t.ghost)))
    junk = rng.choice([_out_of_phase_packet(rng, t), wire.frame(rng.randbytes(rng.randint(0, 40))),
                       _pkt(PacketType.OBSERVERINFO, 0, b"")])
    return Input(_hs(t.ghost) + hello + junk, CLOSE, exclusive=True)


def _q_impersonate(rng: random.Random, t: Target) -> Input:
    sid = rng.choice([s for s in t.participants if s != t.sid])
    return Input(_hs(sid) + _pkt(PacketType.COMMIT, rng.randint(1, (1 << 62))), CLOSE, exclusive=True)


def _half(rng: random.Random, whole: bytes) -> bytes:
    return whole[: rng.randint(1, len(whole) - 1)]


def _q_half_handshake(rng: random.Random, t: Target) -> Input:
    return Input(_half(rng, _hs(t.ghost)), SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 3)


def _q_half_frame(wait: float) -> Callable[[random.Random, Target], Input]:
    def make(rng: random.Random, t: Target) -> Input:
        frame = rng.choice([_pkt(PacketType.ACK, 1 << 32), _I32.pack(rng.randint(64, 1 << 16)) + rng.randbytes(32)])
        return Input(_hs(t.ghost) + _half(rng, frame), SILENCE, wait=wait, exclusive=True)
    return make


def _e_random(rng: random.Random, t: Target) -> Input:
    return Input(_not_handshake(rng), CLOSE)


def _e_bad_sid(rng: random.Random, t: Target) -> Input:
    return Input(_bad_sid(rng, t), CLOSE)


def _e_huge(rng: random.Random, t: Target) -> Input:
    return Input(_hs(t.ghost) + _bad_length(rng, peers.MAX_ELECTION_FRAME) + rng.randbytes(16), CLOSE)


def _e_bad_notification(rng: random.Random, t: Target) -> Input:
    if rng.random() < 0.5:
        body = rng.randbytes(rng.choice([0, 1, 35, 37, 64]))
    else:
        body = struct.pack(">iqqqq", rng.choice([4, 9, -1, 1 << 20]), *(rng.randint(0, 9) for _ in range(4)))
    return Input(_hs(t.ghost) + wire.frame(body), CLOSE)


def _wild_long(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, 4, 99, (1 << 63) - 1, rng.randint(0, (1 << 63) - 1)])


def _votes(negative: bool) -> Callable[[random.Random, Target], Input]:
    """Valid notifications with wild fields; with ``negative``, one field of the first is negative: a vote that
    cannot exist, so the connection must be closed (a bad input), as for any other undecodable notification."""
    def make(rng: random.Random, t: Target) -> Input:
        fields = [[_wild_long(rng) for _ in range(4)] for _ in range(rng.randint(1, 4))]
        for f in fields:  # electionEpoch (the sender's round) below the last one, see _e_last_round
            f[2] = min(f[2], (1 << 62))
        if negative:
            fields[0][rng.randrange(4)] = rng.choice([-1, -(1 << 63), rng.randint(-(1 << 63), -1)])
        votes = b"".join(wire.frame(wire.encode_notification(Notification(rng.choice(list(ServerState)), *f)))
                         for f in fields)
        sender = rng.choice([t.ghost, *(s for s in t.participants if s != t.sid)])
        return Input(_hs(sender) + votes, CLOSE if negative else SEND)
    return make


def _e_last_round(rng: random.Random, t: Target) -> Input:
    """A participant's vote in round 2**63 - 1: whoever adopts that round can never start another (its number does
    not fit the wire's int64), so the vote must be refused as bad input."""
    sender = rng.choice([s for s in t.participants if s != t.sid])
    vote = Notification(ServerState.LOOKING, sender, t.last_zxid, (1 << 63) - 1, t.last_zxid >> 32)
    return Input(_hs(sender) + wire.frame(wire.encode_notification(vote)), CLOSE)


def _e_half_handshake(rng: random.Random, t: Target) -> Input:
    return Input(_half(rng, _hs(t.ghost)), SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 3)


def _e_half_frame(rng: random.Random, t: Target) -> Input:
    n = wire.frame(wire.encode_notification(Notification(ServerState.LOOKING, 1, 0, 1, 0)))
    return Input(_hs(t.ghost) + _half(rng, n), SILENCE, wait=peers.HANDSHAKE_TIMEOUT + 3)


def _c_bad_length(rng: random.Random, t: Target) -> Input:
    return Input(_bad_length(rng, clientport.MAX_CLIENT_FRAME) + rng.randbytes(rng.randint(0, 64)), CLOSE)


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
    payload = rng.choice([_half(rng, whole), _I32.pack(rng.randint(64, clientport.MAX_CLIENT_FRAME)) + b"{"])
    return Input(payload, SILENCE, wait=clientport.FRAME_TIMEOUT + 3)


def _k_bad_lines(rng: random.Random, t: Target) -> Input:
    lines: list[tuple[bytes, bool]] = []
    for _ in range(rng.randint(1, 4)):
        line, bad = rng.choice([
            lambda: (rng.randbytes(rng.randint(0, 64)).replace(b"\n", b" ") or b"x", True),
            lambda: (rng.choice([b"not json", b"[1, 2]", b"{}", b'{"op": 5}', b'{"op": "nope"}', b"\xff"]), True),
            lambda: (json.dumps({"op": rng.choice(["release", "elect", "join", "timeout", "client_request"]),
                                 "from": rng.choice([1, "x", None]), "value": "v", "leader": 1, "quorum": [1],
                                 "kind": "leader"}).encode(), True),
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
    return Input(b'{"op": "pi', SILENCE, wait=15.0)


NO_LEARNER_IDLE = ("a server that does not lead never times out an inbound quorum connection (normal.py's "
                   "_on_tick checks only the leader's connection on a follower and nothing while LOOKING)")
NO_ELECTION_IDLE = "an election connection after its handshake has no idle or frame timeout (normal.py _accept)"
CONTROL_PARSER = ("control.py answer() catches only JSONDecodeError/UnicodeDecodeError: RecursionError (deep "
                  "nesting) and ValueError (an int of > 4300 digits) escape the handler, asyncio logs a traceback")
NEGATIVE_VOTES = ("a notification with a negative leader, zxid or peerEpoch reaching a LOOKING server in the same "
                  "round makes election.Vote raise ValueError inside the pump: the server exits (code 3)")
LAST_ROUND = ("a vote in election round 2**63-1 is taken: the next round, 2**63, cannot be encoded, the "
              "ElectionSender task dies on the ValueError and the cluster can never elect a leader again")
NO_CONTROL_IDLE = "a control connection has no idle timeout: half a line then silence stays open (control.py)"


def _kinds(tick_s: float = 0.1, init_limit: int = 10) -> dict[str, Kind]:
    leader_idle = (init_limit + 3) * tick_s + 3
    table = [
        Kind("quorum-random-bytes", "quorum_port", 8, _q_random),
        Kind("quorum-huge-length", "quorum_port", 6, _q_huge),
        Kind("quorum-bad-sid", "quorum_port", 4, _q_bad_sid),
        Kind("quorum-bad-body", "quorum_port", 8, _q_bad_body),
        Kind("quorum-mutated-packet", "quorum_port", 8, _q_mutated),
        Kind("quorum-wrong-type", "quorum_port", 6, _q_wrong_type),
        Kind("quorum-out-of-phase", "quorum_port", 20, _q_out_of_phase),
        Kind("quorum-observer-then-junk", "quorum_port", 4, _q_observer_then_junk, frozenset({"LEADING"})),
        Kind("quorum-impersonate", "quorum_port", 0.3, _q_impersonate),
        Kind("quorum-half-handshake", "quorum_port", 0.5, _q_half_handshake),
        Kind("quorum-half-frame-leader", "quorum_port", 0.3, _q_half_frame(leader_idle), frozenset({"LEADING"})),
        Kind("quorum-half-frame-learner", "quorum_port", 0.3, _q_half_frame(15.0),
             frozenset({"FOLLOWING", "LOOKING"}), NO_LEARNER_IDLE),
        Kind("election-random-bytes", "election_port", 6, _e_random),
        Kind("election-bad-sid", "election_port", 3, _e_bad_sid),
        Kind("election-huge-length", "election_port", 4, _e_huge),
        Kind("election-bad-notification", "election_port", 8, _e_bad_notification),
        Kind("election-wild-votes", "election_port", 6, _votes(negative=False)),
        Kind("election-negative-votes", "election_port", 1, _votes(negative=True), known_issue=NEGATIVE_VOTES),
        Kind("election-last-round", "election_port", 0.3, _e_last_round, known_issue=LAST_ROUND),
        Kind("election-half-handshake", "election_port", 0.5, _e_half_handshake),
        Kind("election-half-frame", "election_port", 0.3, _e_half_frame, known_issue=NO_ELECTION_IDLE),
        Kind("client-bad-length", "client_port", 6, _c_bad_length),
        Kind("client-bad-requests", "client_port", 20, _c_bad_requests),
        Kind("client-half-frame", "client_port", 0.5, _c_half_frame),
        Kind("control-bad-lines", "control_port", 14, _k_bad_lines),
        Kind("control-long-line", "control_port", 0.2, _k_long_line),
        Kind("control-parser-bombs", "control_port", 2, _k_parser_bombs, known_issue=CONTROL_PARSER),
        Kind("control-half-line", "control_port", 0.3, _k_half_line, known_issue=NO_CONTROL_IDLE),
    ]
    return {k.name: k for k in table}


#: Every kind, for the default timing (tick 100 ms, initLimit 10); `Fuzzer` rebuilds them for its cluster's timing.
KINDS = _kinds()


# ------------------------------------------------------------------------------------------------------ the run


def fuzz_cluster(folder: str | os.PathLike[str], timing: ClusterConfig = ClusterConfig()) -> Path:
    """Write ``folder/cluster.toml``: participants 1-3 and the ghost, observer 4 (never started). Returns its path."""
    path = cluster_config(folder, 4, find_free_base_port(4), timing)
    config = load_config(path)
    servers = [replace(s, role="observer") if s.id == 4 else s for s in config.servers]
    return write_config(path, render_config(config.cluster, servers))


def rss_kib(pid: int) -> int:
    """A process's resident set size (VmRSS in /proc/<pid>/status), in KiB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


_CLOSE_LINE = re.compile(r"(quorum|election|client|control) connection (?:from|with) (\(.*?\)|\S+) closed: (.*)$")


def _reason_class(reason: str) -> str:
    """A close reason without its numbers, addresses, packet names and the server's state, for the reasons table."""
    reason = re.sub(r"\s*\[[^\]]*\]$", "", reason)
    reason = re.sub(r"\b[A-Z]+\(zxid [^)]*\)", "<packet>", reason)
    reason = re.sub(r"QuorumPacket [A-Z]+", "QuorumPacket <type>", reason)
    reason = re.sub(r"\(.*?\)|0x[0-9a-f]+|-?\d+(?:\.\d+)?", "N", reason)
    return reason[:110]


@dataclass
class Report:
    inputs: int = 0
    seed: int = 0
    seconds: float = 0.0
    by_kind: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    failures: list[str] = field(default_factory=list)
    closed_by_server: Counter[tuple[int, str]] = field(default_factory=Counter)  # (sid, port) of counted kinds
    logged_closes: Counter[tuple[int, str]] = field(default_factory=Counter)  # (sid, port) of fuzz-origin lines
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)  # (port, reason class)
    rss_before: dict[int, int] = field(default_factory=dict)
    rss_peak: dict[int, int] = field(default_factory=dict)
    rss_after: dict[int, int] = field(default_factory=dict)
    writes_ok: int = 0
    writes_failed: int = 0
    role_changes: int = 0
    after_zxid: int | None = None
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.inputs} inputs (seed {self.seed}) in {self.seconds:.1f} s; client writes {self.writes_ok} "
                 f"committed, {self.writes_failed} refused; role changes seen {self.role_changes}; commit after the "
                 f"run: {self.after_zxid and hex(self.after_zxid)}", "", "| kind | inputs | outcomes |", "|---|---|---|"]
        for kind, n in sorted(self.by_kind.items()):
            outs = ", ".join(f"{o} {c}" for (k, o), c in sorted(self.outcomes.items()) if k == kind)
            lines.append(f"| {kind} | {n} | {outs} |")
        lines += ["", "| port | reason logged for closing a fuzz connection | count |", "|---|---|---|"]
        top = self.reasons.most_common(40)
        lines += [f"| {p} | {r} | {c} |" for (p, r), c in sorted(top)]
        if len(self.reasons) > len(top):
            lines.append(f"| (other) | {len(self.reasons) - len(top)} more reasons | "
                         f"{sum(self.reasons.values()) - sum(c for _, c in top)} |")
        lines += ["", "| server | port | fuzz connections it closed | log lines explaining them |", "|---|---|---|---|"]
        for key in sorted(set(self.closed_by_server) | set(self.logged_closes)):
            lines.append(f"| {key[0]} | {key[1]} | {self.closed_by_server[key]} | {self.logged_closes[key]} |")
        lines += ["", "| server | VmRSS before | peak | after |", "|---|---|---|---|"]
        for sid in sorted(self.rss_before):
            lines.append(f"| {sid} | {self.rss_before[sid] / 1024:.1f} MiB | {self.rss_peak.get(sid, 0) / 1024:.1f} "
                         f"MiB | {self.rss_after.get(sid, 0) / 1024:.1f} MiB |")
        if self.skipped:
            lines += ["", "skipped (known issues): " + ", ".join(self.skipped)]
        lines += ["", f"problems: {len(self.problems)}"] + [f"- {p}" for p in self.problems[:40]]
        return "\n".join(lines)


class Fuzzer:
    """Throws ``inputs`` inputs at every port of every running server of ``cluster`` (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, *, inputs: int, seed: int = 0, kinds: list[str] | None = None,
                 include_known: bool = False, progress: Callable[[int], None] | None = None) -> None:
        self.cluster = cluster
        self.live = {sid: s for sid, s in cluster.servers.items() if s.running}
        timing = cluster.config.cluster
        table = _kinds(timing.tick_ms / 1000, timing.init_limit)
        names = kinds if kinds is not None else list(table)
        self.kinds = [table[n] for n in names if include_known or kinds is not None or not table[n].known_issue]
        self.report = Report(inputs=inputs, seed=seed)
        self.report.skipped = [n for n in names if table[n] not in self.kinds]
        self.round_robin = kinds is not None
        self.inputs, self.seed, self.progress = inputs, seed, progress
        self.ghost = max(cluster.config.observers)
        self.participants = tuple(sorted(cluster.config.participants))
        self.targets: dict[int, Target] = {}
        self.last_change: dict[int, float] = {sid: 0.0 for sid in self.live}
        self._stop = threading.Event()
        self._done = 0

    # ---------------------------------------------------------------------------------------------- observing

    def _poll_once(self) -> None:
        for sid, s in self.live.items():
            r = self.report
            kib = rss_kib(s.proc.pid)
            r.rss_peak[sid] = max(r.rss_peak.get(sid, 0), kib)
            try:
                with s.control(timeout=10) as c:
                    v = c.request("state")["variables"]
            except (OSError, control.ControlError):
                continue
            t = Target(sid, v["state"], v["leader"] if v["leader"] is not None else -1,
                       max([z for z, _ in v["history"]], default=0), self.ghost, self.participants)
            old = self.targets.get(sid)
            if old is not None and (old.role, old.leader) != (t.role, t.leader):
                self.last_change[sid] = time.monotonic()
                r.role_changes += 1
            self.targets[sid] = t

    async def _poller(self) -> None:
        while True:
            await asyncio.to_thread(self._poll_once)
            await asyncio.sleep(POLL)

    def _writer(self) -> None:
        with ZabClient(self.cluster.client_addresses(), timeout=15, attempts=10, max_backoff=0.5) as c:
            k = 0
            while not self._stop.is_set():
                try:
                    c.submit(f"fuzz-write-{k}")
                    self.report.writes_ok += 1
                except ClientError:
                    self.report.writes_failed += 1
                    self._stop.wait(0.2)
                k += 1
                self._stop.wait(0.02)

    # ---------------------------------------------------------------------------------------------- inputs

    async def _closed(self, reader: asyncio.StreamReader, wait: float) -> bool:
        """Whether the server closes the connection within ``wait`` seconds (what it sends meanwhile is dropped)."""
        deadline = time.monotonic() + wait
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not await asyncio.wait_for(reader.read(65536), left):
                    return left > 0
        except (TimeoutError, asyncio.TimeoutError):
            return False
        except (ConnectionError, OSError):
            return True

    async def _answers(self, reader: asyncio.StreamReader, kind: Kind, inp: Input) -> str | None:
        """None if every request got a JSON object (with "error" when bad), else what was wrong."""
        for i, bad in enumerate(inp.bad):
            try:
                if kind.port == "client_port":
                    n = _I32.unpack(await asyncio.wait_for(reader.readexactly(4), CLOSE_WAIT))[0]
                    raw = await asyncio.wait_for(reader.readexactly(n), CLOSE_WAIT)
                else:
                    raw = await asyncio.wait_for(reader.readline(), CLOSE_WAIT)
                answer = json.loads(raw)
            except (TimeoutError, asyncio.TimeoutError):
                return f"no answer to request {i} within {CLOSE_WAIT} s"
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return f"connection closed before the answer to request {i}"
            except ValueError as e:
                return f"answer {i} is not JSON: {e}"
            if not isinstance(answer, dict) or (bad and "error" not in answer):
                return f"answer {i} to a bad request is {str(answer)[:120]}"
        return None

    async def _one(self, i: int, kind: Kind, t: Target, inp: Input) -> None:
        s = self.live[t.sid]
        start = time.monotonic()
        lock = self._locks[t.sid] if inp.exclusive else None
        if lock is not None:
            await lock.acquire()
        writer = None
        try:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(s.me.host, getattr(s.me, kind.port), limit=4 << 20), CLOSE_WAIT)
            except (OSError, TimeoutError, asyncio.TimeoutError) as e:
                return self._outcome(i, kind, t, start, f"cannot connect: {e}")
            wrote = True
            try:
                writer.write(inp.payload)
                await asyncio.wait_for(writer.drain(), CLOSE_WAIT)
            except (ConnectionError, OSError, TimeoutError, asyncio.TimeoutError):
                wrote = False
            if inp.expect in (CLOSE, SILENCE):
                closed = not wrote or await self._closed(reader, inp.wait)
                if closed:
                    self.report.closed_by_server[(t.sid, self._log_key(kind.port, inp.payload, t.sid))] += 1
                problem = None if closed else f"{inp.expect}: still open after {inp.wait} s"
                return self._outcome(i, kind, t, start, problem, "closed")
            if inp.expect == ANSWER:
                problem = await self._answers(reader, kind, inp) if wrote else "connection closed while writing"
                return self._outcome(i, kind, t, start, problem, "answered")
            return self._outcome(i, kind, t, start, None, "sent")
        finally:
            if writer is not None:
                writer.transport.abort()
            if lock is not None:
                lock.release()

    def _log_key(self, port: str, payload: bytes, target: int) -> str:
        """``port``, or ``port`` "as a live server" when the input's handshake names a participant: its close is
        logged under that sid, among the closes of real connections."""
        if payload[:4] == _I32.pack(8) and len(payload) >= 12:
            sid = int.from_bytes(payload[4:12], "big")
            if sid in self.participants and sid != target:  # its own sid is refused at the handshake, by address
                return f"{port} as a live server"
        return port

    def _outcome(self, i: int, kind: Kind, t: Target, start: float, problem: str | None, ok: str = "") -> None:
        self._done += 1
        if self.progress is not None:
            self.progress(1)
        if problem is None:
            self.report.outcomes[(kind.name, ok)] += 1
            return
        if self.last_change[t.sid] >= start - 2 * POLL:  # an election moved roles around the input
            self.report.outcomes[(kind.name, "inconclusive")] += 1
            return
        self.report.outcomes[(kind.name, "FAILED")] += 1
        self.report.failures.append(f"input {i} ({kind.name} -> server {t.sid} {t.role} {kind.port}): {problem}")

    async def _worker(self, indexes: list[int], silent: asyncio.Semaphore, pending: set[asyncio.Task[None]]) -> None:
        while indexes:
            i = indexes.pop()
            rng = random.Random(f"{self.seed}:{i}")
            if self.round_robin:  # kinds named by the caller: each gets its share, whatever its weight
                kind = self.kinds[i % len(self.kinds)]
            else:
                kind = rng.choices(self.kinds, [k.weight for k in self.kinds])[0]
            targets = [t for sid, t in sorted(self.targets.items()) if t.role in kind.roles]
            if not targets:
                kind = next(k for k in self.kinds if k.roles == ROLES)
                targets = sorted(self.targets.values(), key=lambda t: t.sid)
            t = rng.choice(targets)
            inp = kind.make(rng, t)
            self.report.by_kind[kind.name] += 1
            if inp.expect == SILENCE:
                await silent.acquire()
                task = asyncio.get_running_loop().create_task(self._one(i, kind, t, inp))
                pending.add(task)
                task.add_done_callback(lambda tk: (pending.discard(tk), silent.release()))
            else:
                await self._one(i, kind, t, inp)

    async def _run_inputs(self) -> None:
        self._locks = {sid: asyncio.Lock() for sid in self.live}
        await asyncio.to_thread(self._poll_once)
        poller = asyncio.get_running_loop().create_task(self._poller())
        indexes = list(range(self.inputs - 1, -1, -1))
        silent, pending = asyncio.Semaphore(MAX_SILENT), set()
        try:
            await asyncio.gather(*(self._worker(indexes, silent, pending) for _ in range(WORKERS)))
            while pending:
                await asyncio.gather(*list(pending))
        finally:
            poller.cancel()

    # ---------------------------------------------------------------------------------------------- checks

    def run(self) -> Report:
        r = self.report
        log_offsets = {sid: _size(s.me.data_dir / "server.log") for sid, s in self.live.items()}
        err_offsets = {sid: _size(s.stderr_path) for sid, s in self.live.items()}
        r.rss_before = {sid: rss_kib(s.proc.pid) for sid, s in self.live.items()}
        writer = threading.Thread(target=self._writer, name="fuzz-writer", daemon=True)
        start = time.monotonic()
        writer.start()
        try:
            asyncio.run(self._run_inputs())
        finally:
            self._stop.set()
            writer.join(60)
        r.seconds = time.monotonic() - start
        r.problems += r.failures
        for sid, s in self.live.items():
            if not s.running:
                r.problems.append(f"server {sid} exited with code {s.proc.returncode}: {s.tail(5)}")
        try:
            with ZabClient(self.cluster.client_addresses(), timeout=15, attempts=60) as c:
                r.after_zxid = c.submit("after-fuzz")
        except ClientError as e:
            r.problems.append(f"no commit after the run: {e}")
        for sid, s in self.live.items():
            r.rss_after[sid] = rss_kib(s.proc.pid)
            r.rss_peak[sid] = max(r.rss_peak.get(sid, 0), r.rss_after[sid])
            if "Traceback" in _tail_from(s.stderr_path, err_offsets[sid]):
                r.problems.append(f"server {sid} wrote a Python traceback to {s.stderr_path}")
            self._count_log(sid, _tail_from(s.me.data_dir / "server.log", log_offsets[sid]))
        for key, n in sorted(r.closed_by_server.items()):
            if r.logged_closes[key] < n:
                r.problems.append(f"server {key[0]} {key[1]}: closed {n} fuzz connections but logged only "
                                  f"{r.logged_closes[key]} reasons")
        return r

    def _count_log(self, sid: int, text: str) -> None:
        live_sids = {str(p) for p in self.participants}
        for line in text.splitlines():
            m = _CLOSE_LINE.search(line)
            if m is None:
                continue
            port = f"{m.group(1)}_port"
            if m.group(2) in live_sids:  # real connections, and fuzz inputs that spoke as a live server
                port = f"{port} as a live server"
            self.report.logged_closes[(sid, port)] += 1
            self.report.reasons[(port, _reason_class(m.group(3)))] += 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------------------ CLI


@click.command("fuzz")
@click.option("--inputs", type=click.IntRange(1), default=lambda: int(os.environ.get("ZABREF_FUZZ_INPUTS",
                                                                                      DEFAULT_INPUTS)),
              show_default=f"$ZABREF_FUZZ_INPUTS or {DEFAULT_INPUTS}", help="How many inputs to throw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Input i is built from random.Random('SEED:i').")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Where the cluster lives (default: a new temporary folder, kept for its logs).")
@click.option("--include-known", is_flag=True, help="Also throw the kinds of input with a known open issue.")
def fuzz_command(inputs: int, seed: int, data_dir: str | None, include_known: bool) -> None:
    """Start a 3-server cluster and throw bad input at every port of every server (docs/fuzzing.md)."""
    from tqdm import tqdm  # noqa: PLC0415

    folder = Path(data_dir or tempfile.mkdtemp(prefix="zabref-fuzz-"))
    path = fuzz_cluster(folder)
    cluster = LocalCluster(path)
    try:
        for sid in cluster.config.participants:
            cluster[sid].start()
        for sid in cluster.config.participants:
            cluster[sid].wait_ready()
        with ZabClient(cluster.client_addresses(), attempts=60) as c:
            c.submit("before-fuzz")
        with tqdm(total=inputs, unit="input", mininterval=2, disable=None) as bar:
            report = Fuzzer(cluster, inputs=inputs, seed=seed, include_known=include_known,
                            progress=bar.update).run()
    finally:
        cluster.stop()
    click.echo(report.summary())
    click.echo(f"cluster folder (logs): {folder}")
    click.echo(f"fuzz: {inputs} inputs, {len(report.problems)} problems")
    raise SystemExit(1 if report.problems else 0)


if __name__ == "__main__":
    fuzz_command()
