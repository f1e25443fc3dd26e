"""The control socket: inspect a server and, in control mode, step it: release inputs, let time pass.

Theory of operation
-------------------
A server has a control port only when it is started with a token (``zabref serve --control-token FILE``) and its
configuration names a ``control_port``; the port listens on loopback only (`zabref.config.ServerConfig.control_host`).
It speaks JSON Lines: one request object a line, one response object a line, in order, on any number of
connections. The first line of every connection must be ``{"op": "auth", "token": "..."}`` with the token of the
file; anything else -- a wrong token, another op, bytes that are not such a line, or no complete line within
`AUTH_TIMEOUT` seconds -- is answered with an error and the connection closed, before any other line is read: a
stranger on the port reads nothing and changes nothing. Tokens are compared in constant time (`hmac.compare_digest`);
`read_token` refuses a token file that other users may read. Every response has ``"ok": true`` or an ``"error"``
text; a failed request never stops the server. docs/runtime.md lists every request and response shape.

Read-only requests (``ping``, ``state``) work in both modes. The requests that step a server work only in control mode
(``zabref serve --control``, `zabref.runtime.drivers.ControlDriver`), where nothing reaches the node by itself:
``release`` gives the node the head packet waiting on the quorum connection with a peer, ``release_vote`` the head
notification of an election connection, and ``tick`` moves the logical clock one tick at a time, each followed by the
node's timers; ``log_late`` makes a late leader's held log writes durable (LeaderLogsLate), and with ``ack`` tells its
node so (LeaderOwnACK). Each runs through the server's one step path (`zabref.runtime.server`: the same pump, the same
node entry points as in normal mode) and is answered after the step's storage operations are durable and its packets
written to the sockets. There is no request that takes a protocol decision for the node: an election outcome comes
from notifications on the election port, a timeout from time passing, a client value through the client port.

Fault injection (``partition``, ``heal``) cuts or heals this server's links with the named peers
(`zabref.runtime.server.Server.cut_links`; docs/faults.md); ``clock_jump`` (normal mode only) moves the server's clock
forward, so that the node takes the timeouts then due (`zabref.runtime.drivers.NormalDriver.jump`).

``state`` maps the server onto the spec: every Zab variable the core holds (`zabref.core.zab.SPEC_VARIABLES`; zxids as
ints, transaction values as UTF-8 text, per-learner maps keyed by the sid as text), FastLeaderElection's variables,
the packets waiting per peer -- the spec's ``msgs[peer][sid]`` -- and the notifications waiting per election
connection, the connections with their counters, and the logical clock.

Bad input: a line that is not a JSON object with a known ``op`` (including what the JSON parser itself refuses --
nesting too deep, an integer of too many digits) gets an ``error`` answer and the connection stays open. A line
longer than `MAX_LINE` bytes is answered with an error and closes the connection; so does a line still unfinished
`LINE_TIMEOUT` seconds after its first byte. A connection idle BETWEEN requests is never timed out: the conformance
driver keeps one open per server for a whole replay.

`ControlPort` reaches its server only through `ControlPortHost`, which lists what it reads, calls and sets.

`ControlClient` is a small blocking client for tests and the conformance driver.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import zabref
from zabref.core.effects import Effects
from zabref.core.node import Node
from zabref.errors import ConfigError, ZabError
from zabref.net import listener, peers, streams
from zabref.net.votes import ElectionSender, VoteChannel
from zabref.runtime.actionlog import describe_packet
from zabref.runtime.tenure import TENURING
from zabref.storage import Storage

__all__ = ["ControlPort", "ControlPortHost", "ControlError", "MAX_LINE", "LINE_TIMEOUT", "MAX_TICKS", "read_token",
           "AUTH_TIMEOUT", "snapshot_variables"]

log = logging.getLogger("zabref")

#: Longest request line accepted (a longer one closes that control connection).
MAX_LINE = 1024 * 1024
#: Seconds a request line may take from its first byte to its newline (a longer one closes that connection).
LINE_TIMEOUT = 10.0
_STEP_OPS = ("release", "release_vote", "tick", "log_late", "fsync_pause", "reset")
_FAULT_OPS = ("partition", "heal", "clock_jump")
#: The longest clock jump one ``clock_jump`` may ask for, in seconds.
MAX_JUMP = 600.0
#: The longest a ``state`` request with ``until`` waits, in seconds.
MAX_WAIT = 1.0
#: Most ticks one ``tick`` request may ask for.
MAX_TICKS = 10_000
#: Seconds a new connection has to send its whole ``auth`` line; and the longest such line, in bytes.
AUTH_TIMEOUT = 5.0
MAX_AUTH_LINE = 4096
#: The shortest token a token file may hold (bytes, after stripping surrounding whitespace).
MIN_TOKEN = 16


def read_token(path: str | os.PathLike[str]) -> bytes:
    """The control token in ``path``; ConfigError naming the file if it cannot be read, is too short or too long,
    or may be read by other users than its owner (chmod 600 it)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
        token = p.read_bytes().strip()
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the control token: {e.strerror or e}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{p}: the control token file may be read by others (mode {stat.S_IMODE(mode):o}); "
                          "chmod 600 it")
    if not MIN_TOKEN <= len(token) <= MAX_AUTH_LINE // 2:
        raise ConfigError(f"{p}: a control token is {MIN_TOKEN} to {MAX_AUTH_LINE // 2} bytes, this one {len(token)}")
    if any(b < 0x21 or b > 0x7E for b in token):
        raise ConfigError(f"{p}: a control token is printable ASCII without spaces")
    return token


class ControlError(ZabError):
    """A control request failed; the message is the server's ``error`` text."""


def snapshot_variables(raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("history", "staged_history"):
            out[key] = [[z, v.decode("utf-8", errors="backslashreplace")] for z, v in value]
        elif isinstance(value, dict):
            out[key] = {str(k): v for k, v in sorted(value.items())}
        else:
            out[key] = value
    return out


def _notification(n: Any) -> dict[str, Any]:
    return {"state": n.state.name, "leader": n.leader, "zxid": n.zxid, "electionEpoch": n.election_epoch,
            "peerEpoch": n.peer_epoch}


class ControlPortHost(Protocol):
    """All that a `ControlPort` asks of its server (`zabref.runtime.server.Server` is one). It sets
    ``reset_requested``; the rest it reads or calls."""

    reset_requested: str | None  # "now" or "pause" (``reset``): the server's next incarnation starts once it stops

    @property
    def sid(self) -> int: ...

    @property
    def incarnation(self) -> int: ...

    @property
    def driver(self) -> Any: ...  # `zabref.runtime.drivers`: ``name`` and ``now()``; ``advance`` or ``jump`` by mode

    @property
    def node(self) -> Node | None: ...  # None until the server starts; its control port listens only after

    @property
    def storage(self) -> Storage | None: ...  # as ``node``; its disk's ``pause_next_fsync`` (``fsync_pause``)

    @property
    def conns(self) -> dict[int, peers.Connection]: ...  # quorum connections by peer

    @property
    def votes(self) -> dict[int, VoteChannel]: ...  # inbound election connections by serial

    @property
    def senders(self) -> dict[int, ElectionSender]: ...  # election senders by peer

    @property
    def cut_peers(self) -> set[int]: ...

    @property
    def late(self) -> list[tuple[tuple[Any, ...], tuple[int, int]]]: ...  # late log writes waiting, in order

    async def write_late(self, upto: int | None = None) -> tuple[int, int] | None:
        """Make waiting late log writes durable, those up to history entry ``upto`` or all; where they bring the log
        (role serial, length), None when none waited."""

    async def call(self, event: Callable[[], Effects | None]) -> Effects:
        """Run ``event`` in the pump; its Effects once carried out."""

    def deliver(self, conn: peers.Connection) -> Effects | None:
        """The event of ``conn``'s head packet reaching the node."""

    def deliver_vote(self, channel: VoteChannel) -> Effects | None:
        """The event of ``channel``'s head notification reaching the node."""

    def stop(self, code: int = 0) -> None: ...

    def cut_links(self, sids: set[int]) -> None: ...

    def heal_links(self, sids: set[int]) -> None: ...


class ControlPort:
    """The server side: its `handle` serves each connection the server's listener accepts on the control port."""

    def __init__(self, server: ControlPortHost, token: bytes) -> None:
        self.server = server
        self._token = token

    @property
    def _node(self) -> Node:
        node = self.server.node
        assert node is not None, "a control port serves a started server"
        return node

    @property
    def _storage(self) -> Storage:
        storage = self.server.storage
        assert storage is not None, "a control port serves a started server"
        return storage

    async def _authenticated(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: Any) -> bool:
        """Read the connection's first line, at most `MAX_AUTH_LINE` bytes within `AUTH_TIMEOUT` s: is it the auth
        request with this server's token? If not, say why (without telling which part was wrong) and log it."""
        why = "the first line must be {\"op\": \"auth\", \"token\": ...} with this server's token"
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), AUTH_TIMEOUT)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as e:
            log.warning("control connection from %s closed: not authenticated: no auth line (%s)", address,
                        type(e).__name__)
            return False
        if len(line) > MAX_AUTH_LINE:
            request = None
        else:
            try:
                request = json.loads(line)
            except (ValueError, RecursionError):
                request = None
        token = request.get("token") if isinstance(request, dict) and request.get("op") == "auth" else None
        if isinstance(token, str) and hmac.compare_digest(token.encode("utf-8", "surrogatepass"), self._token):
            await self._write(writer, {"ok": True})
            return True
        await self._write(writer, {"error": f"not authenticated: {why}"})
        log.warning("control connection from %s closed: not authenticated: a wrong or missing token", address)
        return False

    @peers.quiet_cancel
    async def handle(self, accepted: listener.Accepted) -> None:
        address = accepted.address
        try:
            reader, writer = await accepted.open(AUTH_TIMEOUT)
            if not await self._authenticated(reader, writer, address):
                return
            while True:
                try:
                    first = await reader.readexactly(1)  # between requests: no timeout
                except asyncio.IncompleteReadError:
                    return
                try:
                    line = first
                    if first != b"\n":
                        async with asyncio.timeout(LINE_TIMEOUT):  # a timer, not a task a request (as wait_for)
                            line += await reader.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    await self._write(writer, {"error": f"request line longer than {MAX_LINE} bytes"})
                    log.warning("control connection from %s closed: request line too long", address)
                    return
                except TimeoutError:
                    log.warning("control connection from %s closed: bad input: a request line is still incomplete "
                                "%s s after its first byte", address, LINE_TIMEOUT)
                    return
                response = await self.answer(line)
                await self._write(writer, response)
        except (ConnectionError, OSError):
            return
        finally:
            accepted.close()

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
        streams.write(writer, json.dumps(obj, separators=(",", ":")).encode() + b"\n")
        await writer.drain()

    async def answer(self, line: bytes) -> dict[str, Any]:
        """One request line -> one response object (never raises)."""
        try:
            request = json.loads(line)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, too many digits, too deep
            return {"error": f"request is not JSON: {_short(e)}"}
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            return {"error": 'a request is an object with a text "op"'}
        op = request["op"]
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return {"error": f"unknown op {op!r} (ops: ping, state, {', '.join(_STEP_OPS + _FAULT_OPS)})"}
        if op in _STEP_OPS and self.server.driver.name != "control":
            return {"error": f"{op} steps the server: only in control mode (zabref serve --control)"}
        try:
            result = await handler(request)
        except (ZabError, ValueError, TypeError, KeyError) as e:
            return {"error": f"{op}: {e}"}
        return {"ok": True, **result}

    # ------------------------------------------------------------------------------------------ read-only

    async def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"sid": self.server.sid, "pid": os.getpid(), "mode": self.server.driver.name,
                "incarnation": self.server.incarnation, "build": zabref.build(), "gc": TENURING.report()}

    async def op_state(self, request: dict[str, Any]) -> dict[str, Any]:
        """The server's state. ``until`` (optional): ``{"received": {peer: n}, "votes": {peer: n}, "flushed":
        {peer: 0}}`` -- answer once the quorum connection with each peer has received at least n packets, an election
        connection from each peer at least n notifications, and the election sender to each "flushed" peer holds
        none, or after ``wait`` seconds (at most `MAX_WAIT`), whichever comes first: the conformance driver's
        `settle` waits there for what it knows is on its way instead of polling."""
        s = self.server
        until = _until(request)
        if until:
            wait = request.get("wait", MAX_WAIT)
            if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= MAX_WAIT:
                raise ValueError(f'"wait" must be a number of seconds in [0, {MAX_WAIT:g}]')
            deadline = asyncio.get_running_loop().time() + wait
            pause = 0.0002
            while not self._reached(until) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(pause)
                pause = min(2 * pause, 0.004)
        # Run every event queued before this request first: a connection that closed has left `conns` already, but
        # the node hears of it through a pump event; reading it before that event would show a mix.
        await s.call(lambda: None)
        node = self._node
        return {
            "sid": s.sid,
            "mode": s.driver.name,
            "clock": s.driver.now() if s.driver.name == "control" else None,
            "variables": snapshot_variables(node.core.variables()),
            "fle": node.fle_variables(),
            "held": {str(p): [describe_packet(m) for m in c.inbound] for p, c in sorted(s.conns.items())},
            "votes": [{**v.describe(), "held": [_notification(n) for n in v.inbound]}
                      for _, v in sorted(s.votes.items())],
            "connections": [c.describe() for _, c in sorted(s.conns.items())],
            "senders": [sender.describe() for _, sender in sorted(s.senders.items())],
            "late": [k for _, (_, k) in s.late],
            "committed_zxid": node.committed_zxid,
            "syncs": node.pending_sync_variables(),
            "decisions": node.decisions,
        }

    def _reached(self, until: dict[str, dict[int, int]]) -> bool:
        s = self.server
        for peer, n in until.get("received", {}).items():
            conn = s.conns.get(peer)
            if conn is None or conn.received < n:
                return False
        for peer, n in until.get("votes", {}).items():
            if not any(v.peer == peer and v.received >= n for v in s.votes.values()):
                return False
        for peer in until.get("flushed", {}):
            if any(sender.peer == peer and sender.describe()["queued"] for sender in s.senders.values()):
                return False
        return True

    # ------------------------------------------------------------------------------------------ steps

    async def _step(self, event: Any, request: dict[str, Any] | None = None) -> Any:
        """Run one step; with ``"fsync_pause": true`` in ``request``, the process stops at the step's first fsync
        as after ``fsync_pause {"on": true}``, and is disarmed again after the step when it did not fsync."""
        pause = (request or {}).get("fsync_pause", False)
        if not isinstance(pause, bool):
            raise ValueError('"fsync_pause" must be true or false')
        disk = self._storage.disk
        if pause:
            disk.pause_next_fsync = True
        try:
            effects = await self.server.call(event)
            for conn in list(self.server.conns.values()):
                await conn.drain(2.0)
        finally:
            if pause:
                disk.pause_next_fsync = False
        return effects

    async def op_release(self, request: dict[str, Any]) -> dict[str, Any]:
        """The head packet waiting on the quorum connection with ``from`` goes to the node."""
        j = _sid(request, "from")
        conn = self.server.conns.get(j)
        if conn is None or not conn.inbound:
            raise ValueError(f"no packet waits from server {j}")
        packet = conn.inbound[0]
        conn.blocked = False  # the driver offers it again, whatever the node said last time
        effects = await self._step(lambda: self.server.deliver(conn), request)
        return {"released": describe_packet(packet), "deferred": bool(effects is not None and effects.deferred),
                "actions": _actions(effects)}

    async def op_release_vote(self, request: dict[str, Any]) -> dict[str, Any]:
        """The head notification waiting on election connection ``conn`` (a serial from ``state``) goes to the
        node; with ``from`` instead, the oldest election connection from that server with one waiting."""
        votes = self.server.votes
        if "conn" in request:
            channel = votes.get(_sid(request, "conn"))
        else:
            j = _sid(request, "from")
            channel = next((v for _, v in sorted(votes.items()) if v.peer == j and v.inbound), None)
        if channel is None or not channel.inbound:
            raise ValueError(f"no notification waits on {request.get('conn', request.get('from'))!r}")
        n = channel.inbound[0]
        effects = await self._step(lambda: self.server.deliver_vote(channel), request)
        return {"released": _notification(n), "actions": _actions(effects)}

    async def op_tick(self, request: dict[str, Any]) -> dict[str, Any]:
        """Move the logical clock ``count`` ticks (default 1), running the node's timers after each; stop early, at
        the end of a tick, when ``until_action`` names an action the node took."""
        count = request.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_TICKS:
            raise ValueError(f'"count" must be an integer in 1..{MAX_TICKS}')
        until = request.get("until_action")
        taken: list[dict[str, Any]] = []
        ticks = 0
        for ticks in range(1, count + 1):
            effects = await self._step(lambda: self.server.driver.advance(self.server), request)
            taken += _actions(effects)
            if until is not None and any(a["name"] == until for a in taken):
                break
        return {"ticks": ticks, "clock": self.server.driver.now(), "actions": taken}

    async def op_log_late(self, request: dict[str, Any]) -> dict[str, Any]:
        """A late leader's held log writes (``state``'s ``late``: the history length each brings the log to) are
        made durable, those up to ``upto`` (default: all), with one sync; with ``"ack": true`` (the default) the
        node then hears it (``Node.logged``: LeaderOwnACK, when it still leads in that role). Answers the length
        the log reached (null: nothing waited) and the actions taken."""
        upto = request.get("upto")
        if upto is not None and (not isinstance(upto, int) or isinstance(upto, bool) or upto < 1):
            raise ValueError('"upto" must be a positive integer (a history length)')
        ack = request.get("ack", True)
        if not isinstance(ack, bool):
            raise ValueError('"ack" must be true or false')
        s = self.server
        written = await s.write_late(upto)
        actions: list[dict[str, Any]] = []
        if written is not None and ack:
            serial, k = written
            actions = _actions(await self._step(lambda: self._node.logged(serial, k, s.driver.now()), request))
        return {"logged": None if written is None else written[1], "actions": actions}

    async def op_fsync_pause(self, request: dict[str, Any]) -> dict[str, Any]:
        """``{"on": true}``: stop this process (SIGSTOP) at its next fsync, before it takes effect, until SIGCONT
        (`zabref.storage.disk`); ``{"on": false}`` disarms. Answers whether it was armed before."""
        on = request.get("on")
        if not isinstance(on, bool):
            raise ValueError('"on" must be true or false')
        disk = self._storage.disk
        was, disk.pause_next_fsync = disk.pause_next_fsync, on
        return {"was": was}

    async def op_reset(self, request: dict[str, Any]) -> dict[str, Any]:
        """Stop this server and start it again in the same process on an empty data directory, as a new server
        process would start (`zabref.runtime.server.run_server`): what a new conformance trace starts from. With
        ``"pause": true`` the process stops itself (SIGSTOP) between the two, until SIGCONT: a driver resetting a
        whole cluster lets the new servers start only once every old one is gone (a new server would otherwise
        open connections to old ones, which then close). Answers the next incarnation's number (``ping`` reports
        it once that incarnation listens)."""
        pause = request.get("pause", False)
        if not isinstance(pause, bool):
            raise ValueError('"pause" must be true or false')
        self.server.reset_requested = "pause" if pause else "now"
        asyncio.get_running_loop().call_soon(self.server.stop)  # after this answer is written
        return {"incarnation": self.server.incarnation + 1}

    # ------------------------------------------------------------------------------------------ fault injection

    async def op_partition(self, request: dict[str, Any]) -> dict[str, Any]:
        self.server.cut_links(_sids(request, "peers"))
        return {"cut": sorted(self.server.cut_peers)}

    async def op_heal(self, request: dict[str, Any]) -> dict[str, Any]:
        """Heal the links to ``peers`` (every cut link when ``peers`` is absent)."""
        sids = set(self.server.cut_peers) if request.get("peers") is None else _sids(request, "peers")
        self.server.heal_links(sids)
        return {"cut": sorted(self.server.cut_peers)}

    async def op_clock_jump(self, request: dict[str, Any]) -> dict[str, Any]:
        """Normal mode: move this server's clock ``seconds`` forward (0 < seconds <= `MAX_JUMP`) and tick its node
        at once: the timeouts then due are taken (`zabref.runtime.drivers.NormalDriver.jump`). Answers the actions
        taken."""
        seconds = request.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_JUMP:
            raise ValueError(f'"seconds" must be a number in (0, {MAX_JUMP:g}]')
        if self.server.driver.name != "normal":
            raise ValueError("the control mode's clock is logical: move it with tick")
        effects = await self.server.driver.jump(self.server, float(seconds))
        return {"clock": self.server.driver.now(), "actions": _actions(effects)}


def _actions(effects: Any) -> list[dict[str, Any]]:
    if effects is None:
        return []
    return [{"module": a.module, "name": a.name, "params": dict(a.params)} for a in effects.actions]


def _until(request: dict[str, Any]) -> dict[str, dict[int, int]]:
    until = request.get("until")
    if until is None:
        return {}
    if not isinstance(until, dict) or not set(until) <= {"received", "votes", "flushed"}:
        raise ValueError('"until" must be an object with "received", "votes" and/or "flushed"')
    out: dict[str, dict[int, int]] = {}
    for key, counts in until.items():
        if not isinstance(counts, dict):
            raise ValueError(f'"until"."{key}" must map peer ids to counts')
        out[key] = {}
        for peer, n in counts.items():
            if not (isinstance(peer, str) and peer.isdigit()) or isinstance(n, bool) or not isinstance(n, int):
                raise ValueError(f'"until"."{key}" must map peer ids to counts, not {peer!r}: {n!r}')
            out[key][int(peer)] = n
    return out


def _short(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _sids(request: dict[str, Any], key: str) -> set[int]:
    value = request.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f'"{key}" must be a list of server ids')
    return set(value)


def _sid(request: dict[str, Any], key: str) -> int:
    value = request.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f'"{key}" must be a server id')
    return value


