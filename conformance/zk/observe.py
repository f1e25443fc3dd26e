"""A ZooKeeper recording turned into what spec/Zab.tla can be held to: observations of sends.

Theory of operation
-------------------
The proxy sees every byte one server sends another, so the **sends** are observed: each quorum packet, attributed
to (sender, receiver) by the proxy's link (the learner dials, so c2s is learner -> leader), in the order the proxy
read them. Receives, persists, timeouts and election decisions are not observed: TLC finds them
(`conformance.validate.zkmodule`). `observe` maps a decoded recording (`conformance.zk.wire`) to an `Observation`:

* ``obs``: the kept sends in the proxy's order (global index ``g`` from 1), each as the spec's packet
  ``[type, zxid <<epoch, counter>>, data]`` plus which fields are compared (``cz``, ``cd``) and where it lies in the
  recording (connection, direction, byte offset, time). Per directed pair, ``channels[(a, b)]`` lists the obs of
  a -> b in order, over every connection between them: the spec's ``msgs[a][b]`` is one channel per pair.
* a **sync group** -- DIFF, TRUNC or SNAP, the PROPOSALs after it, NEWLEADER -- is ONE observation of type
  ``SYNCGROUP`` (kind, zxid, the proposals as the spec's txns, NEWLEADER's zxid): the spec's own sync is judged by
  what it leaves the follower with (`zkmodule`'s SyncAgree), since ZooKeeper chooses DIFF / SNAP / TRUNC by its
  in-memory committed log and the spec by its history.
* a client's **sync** at a follower is the follower's ``REQUEST`` of op sync (ZooKeeper's FollowerRequestProcessor
  forwards it) and the leader's answer ``SYNC`` (packet 7): both kept, as spec/ZabSync.tla's REQUEST and SYNC, their
  zxids compared (ZooKeeper sends -1 and 0: the spec's <<0, 0>>), their data not (the spec's is a checking-only
  ghost). A REQUEST of any other op (a write, a session's creation or close) is left out: a write enters the spec as
  ClientRequest at the leader.
* ``need``: for each observation, how many sends its receiver had made on each of its channels when the proxy read
  it. The receiver can take the packet only after the proxy forwarded it, so every send of the receiver the proxy read
  earlier was made before that receive (the only order across connections the recording proves).
* ``early``: for each observation, where the validation's search guide places its send (`_places`): with the same
  packet to another learner, or the PROPOSAL an ACK answers, when the proxy read it late (a cut held its link); a
  PROPOSAL a cut held on every link, where the cut began.
* ``roles``: each server's incarnations, in order: leading (``L``) or following j (``F``), and whether the role ended
  before the run did (its connections closed). The spec's BecomeLeader / BecomeFollower must take them in that order,
  and a server goes back to LOOKING (a timeout, a crash) only when its role ended.
* ``values``: each distinct transaction (by its decoded fields: header, record, digest) is one of the spec's values,
  numbered 1, 2, ... in the order of the places of the sends that carry them (`_number_by_place`: the proxy's order,
  but for a leader a fault cut off from every learner) -- the order the spec's ClientRequest numbers them. A
  transaction the observations name (an ACKEPOCH's last logged zxid, a sync's zxid) but no PROPOSAL or sync carries
  -- a cut-off leader logged it and sent it to no one -- has a value too (``unseen``), as has each counter of its
  epoch between it and the last one carried, numbered right after its leader's previous proposal
  (`_number_unseen`).
* ``ignored``: what was left out and why (`IGNORED`), counted. ``docs/zookeeper.md`` ("Validation of ZooKeeper runs")
  has the full table.

The run's end: the harness stops an ensemble by killing every server, which is no part of the behaviour. A
``harness.json`` beside the recording may give ``stop_ns``; otherwise the end is inferred as the first close of a
quorum connection after which the recording holds nothing but closes and PINGs. Everything the proxy read after the
end is left out.

``start`` is None: the spec's Init (every server from an empty data dir, what the harness runs). The windows of a
long run start from the states TLC reached (conformance/validate/zkcheck.py), which they keep themselves.
"""

from __future__ import annotations

import bisect
import heapq
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.zk import WireError
from conformance.zk.wire import Decoded, Message, decode_recording
from zabref.core import packets

__all__ = ["IGNORED", "SYNC_GROUP", "Obs", "Observation", "Role", "observe", "observe_dir", "observe_dir_decoded",
           "quorum_blocked", "zxid_pair"]

FORMAT = 1

#: ZooKeeper quorum packets the spec does not model, left out of the observation, with the reason.
IGNORED = {
    "PING": "liveness only: the spec's timeouts stand for missing pings (spec/README.md, departure 9)",
    "REQUEST": "a client's write or session request forwarded by a follower (a sync's REQUEST is kept): a write "
               "enters the spec as ClientRequest at the leader",
    "REVALIDATE": "session revalidation: client sessions are not modelled",
    "SNAPSHOT": "the serialized tree after SNAP: part of the SNAP observation",
    "TRUNCATED": "a packet cut short by the end of its stream (a server killed while writing): never received",
    "ACK-UPTODATE": "the learner's ACK(newEpoch << 32) after UPTODATE: Leader.processAck returns at once for a zxid "
                    "whose counter is 0",
    "ACK-SYNC": "a learner's ACK of a transaction its DIFF or TRUNC carried, which the leader had committed before "
                "(it sent a COMMIT of that zxid or later first), after its ACK of NEWLEADER: ZooKeeper's learner "
                "logs and ACKs each one, Leader.processAck returns at once for a zxid at or below its "
                "lastCommitted, and the spec's follower sends no such ACK (a zabref server's are kept: it sends the "
                "ACKs its spec step makes; one before the ACK of NEWLEADER is kept too: conformance.zk.earlyack)",
    "COMMIT-IN-SYNC": "a COMMIT between DIFF and NEWLEADER: part of its sync group, which is compared by the history "
                      "it leaves the follower with (the spec's sync COMMITs too, and its follower takes them without "
                      "a change: FollowerProcessCOMMITInSync)",
    "AFTER-CLOSE": "sent on a connection the other side had already closed: never received",
    "UNANSWERED": "a quorum connection that carried no FOLLOWERINFO (refused, or closed at once): no Zab step",
    "AFTER-END": "read after the run's end (the harness's stop)",
}
#: Packets the spec has no counterpart for; kept as observations no spec step can send, so they are reported.
UNMODELLED = {"INFORM", "OBSERVERINFO", "COMMITANDACTIVATE", "INFORMANDACTIVATE"}
SYNC_HEADS = ("DIFF", "TRUNC", "SNAP")
#: (compare zxid, compare data) by packet type; data compared only where the spec's data is an integer.
COMPARED = {"FOLLOWERINFO": (True, True), "LEADERINFO": (True, False), "ACKEPOCH": (True, True),
            "NEWLEADER": (True, False), "ACK": (True, False), "UPTODATE": (False, False),
            "PROPOSAL": (True, True), "COMMIT": (True, False), "REQUEST": (True, False), "SYNC": (True, False)}
#: The observation type of a sync group (DIFF, TRUNC or SNAP through NEWLEADER).
SYNC_GROUP = "SYNCGROUP"


def zxid_pair(zxid: int) -> list[int]:
    """A 64-bit zxid as the spec's <<epoch, counter>> (a negative one, ZooKeeper's "none", as <<0, 0>>)."""
    return [0, 0] if zxid < 0 else list(packets.zxid_pair(zxid))


@dataclass
class Obs:
    """One observed send, as the spec's packet (or a sync group)."""

    g: int  # global index, 1-based, in the proxy's order
    ci: int  # index within its channel (sender, receiver), 1-based
    sender: int
    receiver: int
    type: str
    zxid: list[int]
    data: Any  # int (FOLLOWERINFO sid, ACKEPOCH currentEpoch, PROPOSAL value) or "n/a"
    cz: bool
    cd: bool
    conn: int
    direction: str
    offset: int
    t_ns: int
    name: str  # ZooKeeper's name of the (first) packet
    sync: dict[str, Any] | None = None  # SYNCGROUP: kind, zxid, txns, newleader (zxid), newleader_offset
    need: list[int] = field(default_factory=list)  # per k in 1..N: sends receiver -> k before this one was read
    # UPTODATE: the commit point its connection's sync named (its head and COMMITs), which a zabref follower takes
    # for ZooKeeper's UPTODATE(-1) (zabref.core.node, `sync_commit`)
    up: list[int] = field(default_factory=lambda: [0, 0])
    early: int = 0  # the search guide's place for it: `_places`

    def where(self, path: str = "") -> str:
        return (f"{path + ': ' if path else ''}connection {self.conn} {self.direction} ({self.sender} to "
                f"{self.receiver}), byte {self.offset}")

    def describe(self) -> str:
        if self.type == SYNC_GROUP and self.sync is not None:
            shown = [f"<<{t['zxid'][0]}, {t['zxid'][1]}>>" for t in self.sync["txns"]]
            if len(shown) > 8:  # a long sync: its ends and its length
                shown = [*shown[:3], f"... {len(shown) - 6} more ...", *shown[-3:]]
            txns = ", ".join(shown)
            return (f"{self.sync['kind']}<<{self.sync['zxid'][0]}, {self.sync['zxid'][1]}>> [{txns}] "
                    f"NEWLEADER<<{self.sync['newleader'][0]}, {self.sync['newleader'][1]}>>")
        data = f" data={self.data}" if self.cd else ""
        return f"{self.type}<<{self.zxid[0]}, {self.zxid[1]}>>{data}"


@dataclass
class Role:
    kind: str  # "L" (leads) or "F" (follows `leader`)
    leader: int
    t_ns: int
    ended: bool
    conns: list[int]


@dataclass
class Observation:
    recording: str
    servers: int
    version: str
    obs: list[Obs]
    channels: dict[tuple[int, int], list[int]]  # (a, b) -> global indexes
    roles: dict[int, list[Role]]
    values: dict[str, int]  # txn key -> value number
    ignored: dict[str, int]
    end_ns: int | None
    max_epoch: int
    start: Any = None  # None: the spec's Init
    unseen: list[int] = field(default_factory=list)  # values of transactions named but never carried (_number_unseen)
    zabref: list[int] = field(default_factory=list)  # the seats zabref servers took (a mixed ensemble's META)
    # ACKs a learner sent after its connection's sync head and before its ACK of NEWLEADER, of another zxid: no spec
    # step sends one (the spec's follower sends nothing between the two), ZOOKEEPER-4685's order (zk.earlyack)
    early_acks: list[int] = field(default_factory=list)

    @property
    def txns(self) -> int:
        return len(self.values)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "recording": self.recording, "servers": self.servers, "version": self.version,
                "end_ns": self.end_ns, "max_epoch": self.max_epoch, "txns": self.txns, "start": self.start,
                "ignored": self.ignored, "zabref": self.zabref,
                "roles": {s: [asdict(r) for r in rs] for s, rs in self.roles.items()},
                "obs": [asdict(o) for o in self.obs]}


def _txn_key(fields: dict[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True, default=str)


def _end_of_run(decoded: Decoded, quorum: set[int], stop_ns: int | None) -> int | None:
    """The time the harness's stop began (module docstring): closes from then on are not the protocol's."""
    if stop_ns is not None:
        return stop_ns
    end = None
    for m in reversed(decoded.messages):
        if m.conn not in quorum:
            continue
        if m.kind == "quorum" and m.name not in ("PING", "TRUNCATED"):
            break
        if m.kind == "event" and m.name == "OPEN":
            break
        if m.kind == "event" and m.name in ("EOF_C2S", "EOF_S2C", "CLOSE"):
            end = m.t_ns
    return end


def observe(decoded: Decoded, *, stop_ns: int | None = None) -> Observation:
    """The observation of a decoded recording (module docstring)."""
    rec = decoded.recording
    meta = rec.meta
    links = {r.conn: r.json() for r in rec.records if r.kind.name == "OPEN"}
    quorum = {c for c, link in links.items() if link.get("kind") == "quorum"}
    n = int(meta.get("servers") or max([max(link["src"], link["dst"]) for link in links.values()] or [1]))
    end = _end_of_run(decoded, quorum, stop_ns)
    seats = meta.get("zabref", [])
    if not isinstance(seats, list) or not all(isinstance(s, int) and 1 <= s <= n for s in seats):
        raise WireError(str(rec.path), 0, f"META's zabref seats must be a list of server ids 1..{n}, not {seats!r}")
    ignored: dict[str, int] = {}

    def skip(why: str) -> None:
        ignored[why] = ignored.get(why, 0) + 1

    # Per quorum connection: its messages, the first EOF of each side, FOLLOWERINFO seen.
    eof: dict[tuple[int, str], int] = {}
    for m in decoded.messages:
        if m.conn in quorum and m.kind == "event" and m.name in ("EOF_C2S", "EOF_S2C", "CLOSE"):
            for side in (("c2s",) if m.name == "EOF_C2S" else ("s2c",) if m.name == "EOF_S2C" else ("c2s", "s2c")):
                eof.setdefault((m.conn, side), m.t_ns)
    answered = {m.conn for m in decoded.messages if m.kind == "quorum" and m.name == "FOLLOWERINFO"
                and (end is None or m.t_ns < end)}

    kept: list[Message] = []
    for m in decoded.messages:
        if m.kind != "quorum":
            continue
        if m.conn not in answered:
            skip("UNANSWERED")
            continue
        if end is not None and m.t_ns >= end:
            skip("AFTER-END")
            continue
        other = "s2c" if m.direction == "c2s" else "c2s"
        if (m.conn, other) in eof and eof[m.conn, other] < m.t_ns:
            skip("AFTER-CLOSE")
            continue
        if m.name in IGNORED and not (m.name == "REQUEST" and m.fields.get("op") == "sync"):
            skip(m.name)
            continue
        kept.append(m)

    values: dict[str, int] = {}
    obs: list[Obs] = []
    sync_open: dict[int, Obs] = {}  # connection -> its open sync group
    acked0: set[int] = set()  # connections whose ACK of NEWLEADER was seen
    synced: dict[int, set[int]] = {}  # connection -> the zxids its sync group carried
    committed: dict[int, int] = {}  # leader -> the greatest zxid it had sent a COMMIT of (in a sync or not)
    # connection -> the commit point its last sync named, as a zabref follower takes it: the head's zxid (a
    # ZooKeeper leader's DIFF names its lastProcessedZxid, which the sync's COMMITs reach when the follower lacked
    # it; its TRUNC a zxid of its committed log; its SNAP its applied tree's), then each COMMIT in the sync
    sync_point: dict[int, int] = {}

    def value(m: Message) -> int:
        key = _txn_key(m.fields)
        if key not in values:
            values[key] = len(values) + 1
        return values[key]

    def txn(m: Message) -> dict[str, Any]:
        return {"value": value(m), "zxid": zxid_pair(m.zxid or 0)}

    read_at: list[int] = []  # per observation, where in `kept` the proxy read it (a sync group: its head)
    early_acks: list[int] = []  # `Observation.early_acks`: each one's g, its place in `obs` (1-based)
    whole_at: dict[int, int] = {}  # id of a sync group -> where in `kept` its NEWLEADER was read
    for seq, m in enumerate(kept):
        name, zxid = m.name, m.zxid or 0
        group = sync_open.get(m.conn) if m.direction == "s2c" else None
        if group is not None and group.sync is not None:
            if name == "PROPOSAL":
                group.sync["txns"].append(txn(m))
                synced.setdefault(m.conn, set()).add(zxid)
                continue
            if name == "COMMIT":
                committed[m.sender or 0] = max(committed.get(m.sender or 0, -1), zxid)
                sync_point[m.conn] = zxid
                skip("COMMIT-IN-SYNC")
                continue
            if name == "NEWLEADER":
                group.sync["newleader"] = zxid_pair(zxid)
                group.sync["newleader_offset"] = m.offset
                whole_at[id(group)] = seq
                del sync_open[m.conn]
                continue
            # anything else inside a sync group is kept as its own observation (the group then never matches)
        if name == "COMMIT" and m.direction == "s2c":
            committed[m.sender or 0] = max(committed.get(m.sender or 0, -1), zxid)
        early = (name == "ACK" and m.direction == "c2s" and zxid & 0xFFFFFFFF != 0 and m.conn in sync_point
                 and m.conn not in acked0)
        if (name == "ACK" and m.direction == "c2s" and zxid & 0xFFFFFFFF != 0 and zxid in synced.get(m.conn, ())
                and committed.get(m.receiver or 0, -1) >= zxid and m.sender not in seats and not early):
            skip("ACK-SYNC")
            continue
        if name == "ACK" and zxid & 0xFFFFFFFF == 0 and m.direction == "c2s":
            if m.conn in acked0:
                skip("ACK-UPTODATE")
                continue
            acked0.add(m.conn)
        cz, cd = COMPARED.get(name, (True, False))
        data: Any = "n/a"
        if name == "FOLLOWERINFO":
            data = int(m.fields.get("sid", -1))
        elif name == "ACKEPOCH":
            data = int(m.fields.get("currentEpoch", -2))
        elif name == "PROPOSAL":
            data = value(m)
        o = Obs(0, 0, m.sender or 0, m.receiver or 0, name, zxid_pair(zxid), data, cz, cd, m.conn, m.direction,
                m.offset, m.t_ns, name)
        if name == "UPTODATE":
            o.up = zxid_pair(sync_point.get(m.conn, 0))
        if name in SYNC_HEADS:
            sync_point[m.conn] = max(zxid, 0)
            o.type = SYNC_GROUP
            o.sync = {"kind": name, "zxid": zxid_pair(zxid), "txns": [], "newleader": None, "newleader_offset": None}
            sync_open[m.conn] = o
        if early:
            early_acks.append(len(obs) + 1)
        read_at.append(seq)
        obs.append(o)
    # A sync group whose NEWLEADER never came (the connection ended, or the run did): it cannot match a spec sync.
    for o in sync_open.values():
        o.sync["newleader"] = [-1, -1]  # type: ignore[index]

    channels: dict[tuple[int, int], list[int]] = {(a, b): [] for a in range(1, n + 1) for b in range(1, n + 1)}
    sent = {(a, b): 0 for a in range(1, n + 1) for b in range(1, n + 1)}
    # `need` counts a send once the proxy read it whole: a sync group once its NEWLEADER was read. ZooKeeper's leader
    # writes a sync over time (a SNAP's stream, then what it queued meanwhile: a COMMIT of an outstanding proposal
    # acknowledged while the stream went out) and the spec's sync is one step, which may come anywhere until then.
    made = {(a, b): 0 for a in range(1, n + 1) for b in range(1, n + 1)}
    whole: list[tuple[int, int, int]] = []  # a heap: (where the send was read whole, sender, receiver)
    for g, o in enumerate(obs, 1):
        o.g = g
        seq = read_at[g - 1]
        while whole and whole[0][0] < seq:
            _, a, b = heapq.heappop(whole)
            made[a, b] += 1
        o.need = [made[o.receiver, k] for k in range(1, n + 1)]
        heapq.heappush(whole, (whole_at.get(id(o), seq), o.sender, o.receiver))
        sent[o.sender, o.receiver] += 1
        o.ci = sent[o.sender, o.receiver]
        channels[o.sender, o.receiver].append(g)

    _places(obs, channels, _held(decoded, obs, end))
    _number_by_place(obs, values)
    unseen = _number_unseen(obs, values)
    roles = _roles(decoded, links, answered, eof, end, n)
    epochs = [o.zxid[0] for o in obs if o.type in ("LEADERINFO", "NEWLEADER")]
    unepoched = sum(1 for rs in roles.values() for r in rs if r.kind == "L"
                    and not any(o.type == "LEADERINFO" and o.conn in r.conns for o in obs))
    return Observation(str(rec.path), n, str(meta.get("version", "?")), obs, channels, roles, values, ignored,
                       end, max(epochs + [1]) + unepoched, unseen=unseen,
                       zabref=list(seats), early_acks=early_acks)


#: The proxy reads a held link's bytes at the heal in a burst of reads this close together (ns); a later read is of
#: bytes sent after the heal.
BURST_NS = 5_000_000


def quorum_blocked(entries: list[list[Any]]) -> set[tuple[int, int]]:
    """The pairs a FAULT record's blocked set blocks on the quorum port: ``[a, b]`` is both port kinds, ``[a, b,
    kind]`` that kind alone (`conformance.zk.proxy.folded`)."""
    return {(int(e[0]), int(e[1])) for e in entries if len(e) == 2 or e[2] == "quorum"}


def _held(decoded: Decoded, obs: list[Obs], end: int | None) -> dict[int, int]:
    """The observations whose bytes a fault held (`Proxy.cut`, ``isolate``: the proxy stops reading the pair, the
    sender's kernel keeps what it writes), mapped to the index of the first observation read after the fault began:
    the earliest they can have been sent. They are those of the pair the proxy read at the heal, in one burst (each
    read within `BURST_NS` of the one before, the first of the heal)."""
    blocked: set[tuple[int, int]] = set()
    since: dict[tuple[int, int], int] = {}  # pair -> time its block began
    spans: list[tuple[tuple[int, int], int, int]] = []  # (pair, block began, healed)
    for m in decoded.messages:
        if m.kind != "event" or m.name != "FAULT" or (end is not None and m.t_ns >= end):
            continue
        now = quorum_blocked(m.fields.get("blocked", []))
        for pair in now - blocked:
            since[pair] = m.t_ns
        for pair in blocked - now:
            spans.append((pair, since.pop(pair), m.t_ns))
        blocked = now
    held: dict[int, int] = {}
    times = [o.t_ns for o in obs]
    for pair, began, healed in spans:
        at = bisect.bisect_left(times, began) + 1
        last = healed
        for o in obs[bisect.bisect_left(times, healed):]:
            if (o.sender, o.receiver) != pair:
                continue
            if o.t_ns - last > BURST_NS:
                break
            held[o.g] = at
            last = o.t_ns
    return held


def _places(obs: list[Obs], channels: dict[tuple[int, int], list[int]], held: dict[int, int]) -> None:
    """Set each observation's ``early``: where the validation's search guide places it, an estimate of where in the
    proxy's order it was sent. The proxy reads a link's bytes late when a fault held them (`_held`) or when its loop
    was busy, so one leader step's sends may lie far apart in the recording, and a held follower's ACK far from the
    PROPOSAL it answers. So: a PROPOSAL or COMMIT is placed with the first read of the same packet from its sender
    (one step sends it to every learner), and a PROPOSAL a fault held on every link it went out on (a leader cut off
    from its learners goes on proposing: it answers nothing on the wire) where the fault began; a learner's ACK with
    the PROPOSAL it acknowledges when that was placed earlier, and its ACK of NEWLEADER with the sync before it only
    when a fault held it (a learner applies the sync before it answers: a 3.8.0 learner answered a DIFF of 843
    transactions 0.18 s, 77 observations, after it);
    a sync's REQUEST a fault held where the fault began (a client's sync answers nothing the learner received; a
    packet that answers one cannot be placed before the proxy read what it answers, so a held LEADERINFO is not
    moved); and every packet no later than the next one on its own channel (one FIFO connection). The guide reads
    it, and the values are numbered by it (`_number_by_place`): a behaviour found is one whatever the places."""
    def settle() -> None:  # no later than the next on its channel
        for gs in channels.values():
            for k in range(len(gs) - 2, -1, -1):
                o = obs[gs[k] - 1]
                o.early = min(o.early, obs[gs[k + 1] - 1].early)

    copies: dict[tuple[int, str, int, int], list[Obs]] = {}
    for o in obs:
        o.early = o.g
        if o.type in ("PROPOSAL", "COMMIT"):
            copies.setdefault((o.sender, o.type, o.zxid[0], o.zxid[1]), []).append(o)
    for same in copies.values():
        place = same[0].g
        if same[0].type == "PROPOSAL" and all(o.g in held for o in same):
            place = min(held[o.g] for o in same)  # every copy held: sent once the fault began, as early as that
        for o in same:
            o.early = place
    settle()
    cause: dict[tuple[int, int, int, int], Obs] = {}  # (leader, learner, zxid) -> the PROPOSAL or sync it ACKs
    for o in obs:
        if o.type == "PROPOSAL":
            cause.setdefault((o.sender, o.receiver, o.zxid[0], o.zxid[1]), o)
        elif o.type == SYNC_GROUP and o.sync is not None:
            cause[o.sender, o.receiver, o.sync["newleader"][0], 0] = o
        elif o.type == "ACK" and o.zxid[1] == 0 and o.g not in held:
            continue  # a learner answers NEWLEADER once it has applied the sync, which may take it long
        elif o.type == "ACK" and (o.receiver, o.sender, o.zxid[0], o.zxid[1]) in cause:
            o.early = min(o.early, cause[o.receiver, o.sender, o.zxid[0], o.zxid[1]].early)
        elif o.type == "REQUEST" and o.g in held:
            o.early = min(o.early, held[o.g])
    settle()


def _carried(o: Obs) -> list[tuple[int, tuple[int, int]]]:
    """The (value, zxid) of each transaction observation ``o`` carries: a PROPOSAL's, a sync's."""
    out = [(o.data, (o.zxid[0], o.zxid[1]))] if o.type == "PROPOSAL" and isinstance(o.data, int) else []
    return out + [(t["value"], (t["zxid"][0], t["zxid"][1])) for t in (o.sync["txns"] if o.sync is not None else [])]


def _renumber(obs: list[Obs], values: dict[str, int], new: dict[int, int]) -> None:
    for o in obs:
        if o.type == "PROPOSAL" and isinstance(o.data, int):
            o.data = new[o.data]
        for t in (o.sync["txns"] if o.sync is not None else []):
            t["value"] = new[t["value"]]
    for key, v in values.items():
        values[key] = new[v]


def _number_by_place(obs: list[Obs], values: dict[str, int]) -> None:
    """Number the values in the order of the places of the sends that carry them (`_places`), not of the proxy's
    reads. The spec's ClientRequest numbers a value by how many were proposed before it, across leaders; which of two
    leaders proposed first shows only where they are linked. A leader cut off from every learner goes on proposing
    (ZooKeeper's leader notices only after syncLimit) while the others elect a new one, and the proxy reads what it
    sent only at the heal: numbered by that read, its proposals came after the new leader's, which no behaviour can
    do (the spec's leader sends to the learners it has, and a learner that went LOOKING is no longer one of them),
    though nothing orders them so in the run. Placed where the cut began, they come first. A leader proposes the
    counters of its epoch in order, so no counter is placed after the next one; ties go to the older epoch, then the
    lower counter. A numbering is a choice of names: a behaviour found with it is one of the run whatever it is."""
    place: dict[int, int] = {}
    zxid: dict[int, tuple[int, int]] = {}
    for o in obs:
        for v, z in _carried(o):
            place[v] = min(place.get(v, o.early), o.early)
            zxid.setdefault(v, z)
    low: dict[int, int] = {}  # epoch -> the least place of its counters above the one at hand
    for v in sorted(place, key=lambda v: zxid[v], reverse=True):
        e = zxid[v][0]
        place[v] = min(place[v], low.get(e, place[v]))
        low[e] = place[v]
    order = sorted(place, key=lambda v: (place[v], zxid[v]))
    _renumber(obs, values, {v: k for k, v in enumerate(order, 1)})


def _number_unseen(obs: list[Obs], values: dict[str, int]) -> list[int]:
    """Give each transaction the observations name but never carry its own value, renumbering the others; returns
    the unseen values, in order.

    A leader cut off from every learner still takes its clients' writes: it logs each and sends it to no one (the
    spec's ClientRequest with no learner forwarding). Later its ACKEPOCH (or a sync it leads) names that zxid. The
    spec numbers values in the order of its ClientRequests, so that value is one of the run's and comes before every
    value proposed after it. It is placed right after the greatest transaction of its epoch that was carried (its
    leader's previous proposal; the leader proposes in zxid order), or, if none of its epoch was, just before the
    first observation that names it, and the values after it move up by one."""
    carried: dict[tuple[int, int], int] = {}  # zxid -> its value
    named: dict[tuple[int, int], int] = {}  # zxid of a transaction -> how many values preceded its first naming
    seen = 0
    for o in obs:
        for v, z0 in _carried(o):
            carried.setdefault(z0, v)
            seen = max(seen, v)
        for z in ([o.zxid] if o.type == "ACKEPOCH" else [o.sync["zxid"]] if o.sync is not None else []):
            if z[1] > 0:
                named.setdefault((z[0], z[1]), seen)
    # A named zxid never carried, and every one of its epoch between it and the greatest carried below it: a leader
    # proposes the counters of its epoch in order, and the naming shows only the last it logged.
    missing: dict[tuple[int, int], int] = {}  # zxid -> how many values preceded the first naming of it or later
    for (e, c), before in named.items():
        if (e, c) not in carried:
            low = max([k for (f, k) in carried if f == e and k < c], default=0)
            for k in range(low + 1, c + 1):
                missing[e, k] = min(missing.get((e, k), before), before)
    if not missing:
        return []
    # Each value sorts by its number; an unseen one just after the value it follows (p + 0.5), then by zxid.
    places: list[tuple[float, tuple[int, int], str]] = [(float(v), (0, 0), key) for key, v in values.items()]
    for z in sorted(missing):
        below = [v for (e, c), v in carried.items() if e == z[0] and c < z[1]]
        places.append(((max(below) if below else missing[z]) + 0.5, z, f"unseen <<{z[0]}, {z[1]}>>"))
    places.sort()
    renumber: dict[int, int] = {}
    unseen = []
    for k, (_, z, key) in enumerate(places, 1):
        if key in values:
            renumber[values[key]] = k
        else:
            unseen.append(k)
    _renumber(obs, values, renumber)
    for k, (_, z, key) in enumerate(places, 1):
        values.setdefault(key, k)
    return unseen


def _roles(decoded: Decoded, links: dict[int, dict[str, Any]], answered: set[int],
           eof: dict[tuple[int, str], int], end: int | None, n: int) -> dict[int, list[Role]]:
    """Each server's incarnations (module docstring): a follower role per answered connection it dialed; a leader
    role per run of connections it accepted with one epoch and no role of its own in between."""
    first: dict[int, int] = {}
    epoch: dict[int, int] = {}
    for m in decoded.messages:
        if m.conn in answered and m.kind == "quorum":
            first.setdefault(m.conn, m.t_ns)
            if m.name == "LEADERINFO":
                epoch.setdefault(m.conn, (m.zxid or 0) >> 32)

    def closed(conn: int) -> bool:
        times = [eof[conn, side] for side in ("c2s", "s2c") if (conn, side) in eof]
        return bool(times) and (end is None or min(times) < end)

    events: dict[int, list[tuple[int, str, int]]] = {s: [] for s in range(1, n + 1)}
    for conn in sorted(answered, key=lambda c: first[c]):
        link = links[conn]
        events[link["src"]].append((first[conn], "F", conn))
        events[link["dst"]].append((first[conn], "A", conn))
    roles: dict[int, list[Role]] = {}
    for s, evs in events.items():
        out: list[Role] = []
        cur: Role | None = None
        for t, kind, conn in sorted(evs):
            if kind == "F":
                cur = None
                out.append(Role("F", links[conn]["dst"], t, closed(conn), [conn]))
                continue
            e = epoch.get(conn)
            cur_epochs = {epoch[c] for c in cur.conns if c in epoch} if cur is not None else set()
            if cur is None or (e is not None and cur_epochs and e not in cur_epochs):
                cur = Role("L", s, t, False, [])
                out.append(cur)
            cur.conns.append(conn)
        for k, r in enumerate(out):
            if k + 1 < len(out):
                r.ended = True
            elif r.kind == "L":
                r.ended = all(closed(c) for c in r.conns)
        roles[s] = out
    return roles


def observe_dir(folder: str | Path) -> Observation:
    """``folder/recording.zkrec`` (and ``folder/harness.json``'s ``stop_ns``, when there) observed."""
    return observe_dir_decoded(folder)[1]


def observe_dir_decoded(folder: str | Path) -> tuple[Decoded, Observation]:
    """`observe_dir`, with the decoded recording it observed."""
    folder = Path(folder)
    path = folder / "recording.zkrec" if folder.is_dir() else folder
    if not path.is_file():
        raise WireError(str(path), 0, "no recording here (zabref zk run writes <dir>/recording.zkrec)")
    stop_ns = None
    side = path.parent / "harness.json"
    if side.is_file():
        try:
            stop_ns = json.loads(side.read_text()).get("stop_ns")
        except ValueError as e:
            raise WireError(str(side), 0, f"not JSON: {e}") from None
    decoded = decode_recording(path)
    return decoded, observe(decoded, stop_ns=stop_ns)
