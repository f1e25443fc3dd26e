"""The action log: every spec action a server takes, one JSON line each, for `zabref validate` (docs/validation.md).

Theory of operation
-------------------
With ``zabref serve --action-log DIR`` (``zabref cluster --log-actions``, ``zabref faults --validate``) a server
appends to ``DIR/actions-<sid>.jsonl`` one line per step of spec/Zab.tla it takes, written by the pump right after
the node took the step (`zabref.runtime.server`), so lines are in the server's own order. (The steps of a client's
sync, spec/ZabSync.tla's, which the node reports as module ZabSync and conformance drives, are not written yet:
`zabref validate` judges a run's Zab steps; spec/README.md, "Reads".)

``{"sid": 2, "n": 17, "t": 123456789, "kind": "step", "action": "FollowerProcessPROPOSAL", "params": {"i": 2, "j": 1},
"recv": PACKET, "sends": [[1, PACKET]], "persist": [OP, ...], "vars": {...}}``

* ``n`` counts the lines of this process (it restarts at 0 with the process), ``t`` is ``time.monotonic_ns()``
  (one clock for every process on a machine: the validator orders lines of different servers by it where nothing
  else does; the simulator, whose servers share one process, numbers every server's lines in the order it ran them);
* ``recv`` is the packet the step took (receive actions only), ``sends`` the quorum packets it sent (a sync's PING,
  REQUEST and SYNC left out: spec/Zab.tla has none), as ``{"type", "zxid", "data", "conn"}`` with data decoded as
  the spec models it and ``conn`` the id of the connection it came on or goes to (the handshake's, known at both
  ends; null: no connection, the packet is dropped);
* ``persist`` the storage operations of the step (``["append", [[zxid, value], ...]]``, ``["truncate", zxid]``,
  ``["replace", [...]]``, ``["acceptedEpoch", e]``, ``["currentEpoch", e]``; a late leader's own log write too,
  durable only at its LeaderOwnACK line): the history is logged as its changes,
  so a line costs O(what the step changed), not O(history);
* ``vars`` every other spec variable of this server after the step (`zabref.core.zab.SPEC_VARIABLES` but ``history``);
  the staged history, which a sync builds one PROPOSAL at a time, is logged as its length and last transaction
  (``"staged": {"len", "last"}``), so a sync of n transactions costs O(n) lines of O(1), not O(n^2); whole
  (``staged_history``) only by SNAP, whose staged history comes from its packet. DIFF and TRUNC stage a prefix of the
  server's own history (spec/Zab.tla: DIFF all of it, TRUNC the part up to the packet's zxid), which the reader
  already has: when the staged history IS the first k transactions of the history this log has described (the last
  ``restart`` line's history with every logged ``persist`` applied, which is what the reader rebuilds; in a correct
  server the history in memory), the line says so in O(1), ``"staged": {"len": k, "last": [zxid, value], "prefix":
  true}`` -- a DIFF at 40,000 transactions logged 1.8 MB before. When it is not (a buggy server), the line logs it
  whole, so the validator sees the real value either way: an encoding, not a check.

Two more kinds: ``restart`` (the process started: ``vars`` holds every variable, ``history`` included, as read from
disk -- the spec's Crash when it is not the first start; ``"leader_logs_late": true`` when the server runs with
``[cluster] leader_logs_late``, so that `zabref validate` checks the run with the spec's LeaderLogsLate) and
``closed`` (a quorum connection with ``peer`` ended here, ``conn`` its id: a leader forgets that learner, a follower
notes its leader gone; the validator uses it to place the spec's GoLooking of the other side, which closes both ends
at once). Lines are written whole with one ``write``; a process killed in the middle leaves at most a torn last line,
which the reader reports and ignores.

The pump flushes the log to the operating system after running a batch's inputs and BEFORE their storage is made
durable and their packets leave (`zabref.runtime.server`): a step whose effects anybody could see is in the log,
whatever kills the process afterwards. A SIGKILL keeps what was flushed (the page cache survives it); the log is a
record, not state, and is never fsynced, so a real power cut may lose its tail. The cost is one ``orjson.dumps`` per
step (the standard library's encoder took 20 us a line, orjson 1.2 us) and one ``write`` per pump batch
(docs/performance.md has the measured cost).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from zabref.core import payloads
from zabref.core.packets import PacketType, QuorumPacket
from zabref.core.zab import AppendTxns, ReplaceHistory, SetAcceptedEpoch, SetCurrentEpoch, TruncateHistory, Txn
from zabref.errors import CodecError

__all__ = ["ActionLog", "describe_packet", "log_path", "SYNC_PACKETS"]


def log_path(folder: str | os.PathLike[str], sid: int) -> Path:
    return Path(folder) / f"actions-{sid}.jsonl"


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


#: How the data of each packet type is decoded as spec/Zab.tla models it (seed 000's table), from the packet's zxid and
#: data; other types carry none.
_DATA: dict[PacketType, Callable[[int, bytes | None], Any]] = {
    PacketType.ACKEPOCH: lambda z, d: payloads.decode_ackepoch_data(d),
    PacketType.FOLLOWERINFO: lambda z, d: payloads.decode_followerinfo_data(d).serverid,
    PacketType.PROPOSAL: lambda z, d: _text(payloads.decode_proposal_data(z, d)),
    PacketType.SNAP: lambda z, d: [[x, _text(v)] for x, v in payloads.decode_snap_data(d, z)],
    PacketType.LEADERINFO: lambda z, d: payloads.decode_leaderinfo_data(d),
}
#: The packets of a client's sync (spec/ZabSync.tla), which no line logs yet: a leader's COMMITs and the SYNC they
#: make due leave in one input, whose line is LeaderProcessACK's (spec/Zab.tla has no SYNC).
SYNC_PACKETS = frozenset({PacketType.PING, PacketType.REQUEST, PacketType.SYNC})
_NAME = {t: t.name for t in PacketType}  # (an enum's .name is a descriptor call: this is on every line's path)


def describe_packet(p: QuorumPacket) -> dict[str, Any]:
    """A QuorumPacket as ``{type, zxid, data}`` with ``data`` decoded as spec/Zab.tla models it (seed 000's table)."""
    decode = _DATA.get(p.type)
    try:
        data = None if decode is None else decode(p.zxid, p.data)
    except CodecError as e:
        return {"type": _NAME[p.type], "zxid": p.zxid, "data": None, "data_error": str(e)}
    return {"type": _NAME[p.type], "zxid": p.zxid, "data": data}


def _txns(txns: Iterable[Txn]) -> list[list[Any]]:
    return [[t.zxid, _text(t.value)] for t in txns]


def _op(op: Any, history: list[Txn]) -> list[Any]:
    """A storage operation as a line logs it, applied to ``history`` (the history the log has described) as the
    reader applies it (conformance/validate/specview.py: a truncation keeps the transactions at or below its zxid)."""
    match op:
        case AppendTxns(txns):
            history.extend(txns)
            return ["append", _txns(txns)]
        case TruncateHistory(zxid):
            history[:] = [t for t in history if t.zxid <= zxid]
            return ["truncate", zxid]
        case ReplaceHistory(txns):
            history[:] = txns
            return ["replace", _txns(txns)]
        case SetAcceptedEpoch(epoch):
            return ["acceptedEpoch", epoch]
        case SetCurrentEpoch(epoch):
            return ["currentEpoch", epoch]
    raise TypeError(f"not a storage operation: {op!r}")


def _is_prefix(staged: list[Txn], history: list[Txn]) -> bool:
    """Is ``staged`` the first len(staged) transactions of ``history``? Compared in C, identity first (a DIFF or TRUNC
    stages the history's own Txn objects); a shorter one (TRUNC) against a slice: a copy of pointers, still three
    times faster at 40,000 transactions than a comparison without one (``all(map(operator.is_, ...))``)."""
    k = len(staged)
    if k > len(history):
        return False
    return staged == (history if k == len(history) else history[:k])


#: How a step's line logs the staged history: SNAP sets it whole from its packet; DIFF and TRUNC set it to a prefix
#: of the server's history (logged as that prefix's length when it is one: module docstring); a restart logs it
#: whole; every other step logs its length and last transaction ("ends").
STAGES = {"FollowerProcessSNAP": "whole", "FollowerProcessDIFF": "prefix", "FollowerProcessTRUNC": "prefix"}


def _vars(node: Any, *, history: bool, staged: str, logged: list[Txn]) -> dict[str, Any]:
    """The server's spec variables for a line: the history only when ``history``; the staged history as ``staged``
    says (`STAGES`), "prefix" against ``logged``, the history the log has described. A line costs O(what the step
    changed)."""
    core = node.core
    out = core.variables(histories=False)  # a fresh dict; per-server maps keep their int keys (OPT_NON_STR_KEYS)
    if history:
        out["history"] = _txns(core.history)
    st = core.staged_history
    prefix = staged == "prefix" and _is_prefix(st, logged)
    if staged == "ends" or prefix:
        out["staged"] = {"len": len(st), "last": [st[-1].zxid, _text(st[-1].value)] if st else None}
        if prefix:
            out["staged"]["prefix"] = True
    else:
        out["staged_history"] = _txns(st)
    return out


class ActionLog:
    """One server's action log file (module docstring)."""

    def __init__(self, file: BinaryIO, sid: int, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._file = file  # buffered: `flush` once per pump batch
        self.sid = sid
        self.n = 0
        self._clock = clock  # a line's ``t`` (the simulator passes its own: one counter for every server's lines)
        self._history: list[Txn] = []  # the history the log has described: the restart's, each logged persist applied

    @classmethod
    def open(cls, folder: str | os.PathLike[str], sid: int) -> ActionLog:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return cls(open(log_path(folder, sid), "ab", buffering=1 << 20), sid)

    def _write(self, kind: str, **fields: Any) -> None:
        line = {"sid": self.sid, "n": self.n, "t": self._clock(), "kind": kind, **fields}
        self._file.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS))
        self.n += 1

    def restart(self, sid: int, node: Any) -> None:
        """The process started with the persistent state on its disk (a fresh server, or after a crash)."""
        self._history = list(node.core.history)
        late = {"leader_logs_late": True} if node.core.logs_late else {}
        self._write("restart", vars=_vars(node, history=True, staged="whole", logged=self._history), **late)
        self._file.flush()

    def step(self, node: Any, effects: Any, cid_of: Callable[[int], int | None]) -> None:
        """The Zab actions of one node input (at most one: the node takes one spec action per input).
        ``cid_of(peer)``: the id of the connection a packet to ``peer`` goes to now (None: dropped)."""
        for action in effects.actions:
            if action.module != "Zab":
                continue
            params = dict(action.params)
            if action.name == "ConnectionClosed":
                self._write("closed", peer=params["j"], conn=action.tag,
                            vars=_vars(node, history=False, staged="ends", logged=self._history))
                continue
            fields: dict[str, Any] = {"action": action.name, "params": params}
            if action.packet is not None:
                fields["recv"] = {**describe_packet(action.packet), "conn": action.tag}
            fields["sends"] = [[peer, {**describe_packet(p), "conn": cid_of(peer)}]
                               for peer, p in effects.send if p.type not in SYNC_PACKETS]
            fields["persist"] = [_op(op, self._history) for op in (*effects.persist, *effects.late)]
            fields["vars"] = _vars(node, history=False, staged=STAGES.get(action.name, "ends"), logged=self._history)
            self._write("step", **fields)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        self._file.close()
