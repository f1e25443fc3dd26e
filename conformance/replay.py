"""Conformance replay: drive real zabref servers through one spec trace, one step at a time.

Theory of operation
-------------------
A trace (conformance/traces.py) is a path through TLC's state graph: step 0 is the initial state, each later step
names an action of spec/Zab.tla with its parameters and the whole spec state after it. `replay` starts N fresh
`zabref serve --control` processes (N from the trace header's constants) on free loopback ports, each with its own
data dir, and then, for every step:

1. takes the action at the server it names, through the control socket (zabref/control.py):

   ====================================  ==================================================================
   spec action                           control request
   ====================================  ==================================================================
   ``ElectLeader(i, Q)``                 ``elect {leader: i, quorum: Q}`` at every server of Q (i first)
   ``JoinLeader(i, j)``                  ``join {leader: j}`` at i
   ``LeaderProcessX(i, j)``,             ``release {from: j}`` at i, once the head packet i holds from j is
   ``FollowerProcessX(i, j)``            checked to be an X (ACKNEWLEADER is an ACK, PROPOSALInSync a PROPOSAL)
   ``ClientRequest(i)``                  ``client_request {value}`` at i, the value being that of the last
                                         transaction of history[i] in the step's state (the spec numbers them)
   ``FollowerTimeout(i)``,               ``timeout {kind: follower | leader}`` at i
   ``LeaderTimeout(i)``
   ``Crash(i)``                          SIGKILL server i, start it again from its data dir (control mode)
   ====================================  ==================================================================

2. waits, with a bound, until every packet sent has arrived in its receiver's hold queue and every closed
   connection was noticed at both ends (`zabref.control.settle`); a wait that does not complete is a failure;
3. reads every server's state, maps it onto the spec's variables (conformance/mapping.py, the one place the
   mapping lives) and compares it with the step's state (`mapping.differences`).

The first difference stops the replay: the result names the step, the action and its parameters, each differing
variable's expected and actual value with a unified diff of their pretty JSON, the tail of every server's logs, and
the command that replays just this trace. Every step is checked before any server starts (`plan`): an action the
driver does not know is a `TraceActionError` naming the trace file and step, not a failure halfway.

Speed: one control connection per server, kept for the whole trace (reopened only after a crash); `settle` polls
every 5 ms. Server start-up (a Python process each) dominates short traces; `ReplayResult` reports both.

Seeded bugs (conformance/seeded.py) run the servers from a patched copy of the zabref package: ``bug_root`` is put
first on the servers' import path (their working directory and PYTHONPATH); the driver itself is unchanged.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import TraceActionError
from conformance.mapping import differences, spec_state
from conformance.traces import Step, Trace, read_trace
from zabref.cluster import ServerProcess, cluster_config, find_free_base_port, release_base_port
from zabref.config import load_config
from zabref.control import ControlError, settle
from zabref.errors import ZabError

__all__ = ["Command", "plan", "Failure", "ReplayResult", "replay", "replay_file", "replay_command"]

#: Packet types of seed 000's table that a Process action can name.
PACKET_TYPES = frozenset({"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "DIFF", "TRUNC", "SNAP", "NEWLEADER", "ACK",
                          "UPTODATE", "PROPOSAL", "COMMIT"})
_PROCESS = re.compile(r"^(?P<role>Leader|Follower)Process(?P<packet>[A-Z]+?)(?P<insync>InSync)?$")
_PACKET_ALIAS = {"ACKNEWLEADER": "ACK"}  # LeaderProcessACKNEWLEADER takes the ACK of NEWLEADER
_SIMPLE = {"ClientRequest": ("i",), "FollowerTimeout": ("i",), "LeaderTimeout": ("i",), "Crash": ("i",),
           "JoinLeader": ("i", "j"), "ElectLeader": ("i", "Q")}
SETTLE_TIMEOUT = 10.0
LOG_LINES = 40


@dataclass(frozen=True)
class Command:
    """What the driver does for one step: ``requests`` are (server, op, fields) sent in order; ``crash`` names a
    server to SIGKILL and restart; ``expect_head`` is (at, from, packet type) to check before releasing."""

    requests: tuple[tuple[int, str, dict[str, Any]], ...] = ()
    crash: int | None = None
    expect_head: tuple[int, int, str] | None = None


def _sid(step: Step, name: str, n: int, source: str) -> int:
    value = step.params.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= n:
        raise TraceActionError(source, step.index, f"{step.action}: parameter {name!r} must be a server in 1..{n}, "
                                                   f"not {value!r}")
    return value


def _command(step: Step, n: int, source: str) -> Command:
    action, params = step.action, step.params
    m = _PROCESS.match(action)
    expected = _SIMPLE.get(action, ("i", "j") if m else None)
    if expected is None:
        raise TraceActionError(source, step.index, f"unknown action {action!r}: the replay driver takes "
                                                    f"{', '.join(sorted(_SIMPLE))} and <Role>Process<PACKET>")
    if set(params) != set(expected):
        raise TraceActionError(source, step.index, f"{action} takes parameters {', '.join(expected)}, the step "
                                                    f"has {', '.join(sorted(params)) or 'none'}")
    i = _sid(step, "i", n, source)
    if m:
        packet = _PACKET_ALIAS.get(m["packet"], m["packet"])
        if packet not in PACKET_TYPES:
            raise TraceActionError(source, step.index, f"unknown action {action!r}: no packet type {packet!r}")
        j = _sid(step, "j", n, source)
        return Command(((i, "release", {"from": j}),), expect_head=(i, j, packet))
    if action == "ElectLeader":
        q = params["Q"]
        members = q.get("$set") if isinstance(q, dict) else None
        if not isinstance(members, list) or i not in members or not all(
                isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= n for s in members):
            raise TraceActionError(source, step.index, f"ElectLeader: Q must be a set of servers holding i, not {q!r}")
        order = [i, *sorted(s for s in members if s != i)]
        return Command(tuple((s, "elect", {"leader": i, "quorum": sorted(members)}) for s in order))
    if action == "JoinLeader":
        return Command(((i, "join", {"leader": _sid(step, "j", n, source)}),))
    if action == "ClientRequest":
        try:
            value = step.state["history"][i - 1][-1]["value"]
        except (KeyError, IndexError, TypeError):
            raise TraceActionError(source, step.index, f"ClientRequest({i}): history[{i}] in the step's state has "
                                                        "no last transaction to take the value from") from None
        return Command(((i, "client_request", {"value": str(value)}),))
    if action in ("FollowerTimeout", "LeaderTimeout"):
        return Command(((i, "timeout", {"kind": "follower" if action == "FollowerTimeout" else "leader"}),))
    return Command(crash=i)  # Crash


def servers_of(trace: Trace, source: str) -> int:
    n = trace.header.constants.get("N")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TraceActionError(source, -1, f"the header's constants must set N (servers), not {n!r}")
    return n


def plan(trace: Trace, source: str) -> list[Command]:
    """The command of every step after the initial state; TraceActionError on the first step it cannot take."""
    n = servers_of(trace, source)
    return [_command(step, n, source) for step in trace.steps[1:]]


# --------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class Failure:
    """The first step where the implementation departed from the trace."""

    step: int
    action: str
    params: dict[str, Any]
    label: str | None
    reason: str
    differences: dict[str, list[Any]]  # variable -> [expected, actual]
    diff: str
    logs: dict[str, str]
    command: str

    @property
    def signature(self) -> tuple[str, tuple[str, ...]]:
        """What "fails the same way" means to the minimizer: the action and the set of differing variables."""
        return self.action, tuple(sorted(self.differences))


@dataclass
class ReplayResult:
    trace: str
    config: str
    steps: int                      # steps after the initial state
    replayed: int = 0               # steps whose state matched
    labels: list[str] = field(default_factory=list)  # the labels of those steps
    startup: float = 0.0            # seconds to start the servers (and restart them after crashes)
    step_time: float = 0.0          # seconds spent in steps (command, settle, compare), start-ups excluded
    wall: float = 0.0
    failure: Failure | None = None
    error: str | None = None        # the trace could not be replayed at all (bad input, servers would not start)
    bug: str | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and self.error is None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> ReplayResult:
        obj = {k: v for k, v in obj.items() if k != "passed"}
        failure = obj.pop("failure")
        return ReplayResult(**obj, failure=Failure(**failure) if failure else None)


def replay_command(source: str, bug: str | None = None) -> str:
    """The one-line command that replays just this trace."""
    return "zabref conform " + shlex.quote(str(source)) + (f" --bug {shlex.quote(bug)}" if bug else "")


def pretty_json(value: Any, indent: str = "") -> str:
    """JSON with one line per server (the top level), then one line per element of a container too long for one
    line (a zxid or a packet stays whole): the diff points at the server and the entry that differ."""
    flat = json.dumps(value, sort_keys=True)
    if (indent and len(flat) + len(indent) <= 100) or not isinstance(value, (list, dict)) or not value:
        return flat
    inner = indent + " "
    if isinstance(value, list):
        items = [inner + pretty_json(v, inner) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + indent + "]"
    items = [f"{inner}{json.dumps(k)}: {pretty_json(value[k], inner)}" for k in sorted(value)]
    return "{\n" + ",\n".join(items) + "\n" + indent + "}"


def pretty_diff(diffs: dict[str, tuple[Any, Any]]) -> str:
    """A unified diff of the pretty JSON of each differing variable: spec (expected) against zabref (actual)."""
    out: list[str] = []
    for name in sorted(diffs):
        expected, actual = diffs[name]
        a = pretty_json(expected).splitlines()
        b = pretty_json(actual).splitlines()
        out.extend(difflib.unified_diff(a, b, f"spec: {name}", f"zabref: {name}", lineterm=""))
    return "\n".join(out)


# --------------------------------------------------------------------------------------------------------------
# Servers


def _tail(path: Path, lines: int = LOG_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class _Cluster:
    """N control-mode servers for one trace, with one kept control connection each."""

    def __init__(self, folder: Path, n: int, root: Path | None, attempts: int = 3) -> None:
        last: Exception | None = None
        self.base: int | None = None
        for attempt in range(attempts):
            where = folder / f"try{attempt}"
            self.base = find_free_base_port(n)  # leased until stop(): no parallel replay can take these ports
            path = cluster_config(where, n, self.base).resolve()
            config = load_config(path)
            self.servers = {sid: ServerProcess(path, config, sid, code_root=root) for sid in config.sids}
            try:
                for s in self.servers.values():
                    s.start(control=True)
                for s in self.servers.values():
                    s.wait_ready(30.0)
                self.controls = {sid: s.control(timeout=30.0) for sid, s in self.servers.items()}
                return
            except ZabError as e:
                last = e
                self.stop()
        raise ZabError(f"servers would not start after {attempts} attempts: {last}")

    def crash(self, sid: int) -> None:
        """Crash(i): SIGKILL (only what was fsynced survives), then start again from the same data dir."""
        self.controls[sid].close()
        server = self.servers[sid]
        server.kill()
        server.start(control=True).wait_ready(30.0)
        self.controls[sid] = server.control(timeout=30.0)

    def logs(self) -> dict[str, str]:
        out = {}
        for sid, s in sorted(self.servers.items()):
            for name in ("server.log", "stderr.log"):
                text = _tail(s.me.data_dir / name)
                if text:
                    out[f"server {sid} {name}"] = text
        return out

    def stop(self) -> None:
        for c in getattr(self, "controls", {}).values():
            c.close()
        for s in self.servers.values():
            s.kill()
        if self.base is not None:
            release_base_port(self.base)
            self.base = None


# --------------------------------------------------------------------------------------------------------------
# The replay


def replay(trace: Trace, source: str, *, bug: str | None = None, bug_root: Path | None = None,
           settle_timeout: float = SETTLE_TIMEOUT, workdir: Path | None = None) -> ReplayResult:
    """Replay one trace on fresh servers; never raises for a divergence (see `ReplayResult.failure`).

    Raises TraceActionError (before any server starts) when a step names an action the driver cannot take.
    """
    from conformance.fle_replay import is_fle_trace, replay_fle

    if is_fle_trace(trace):  # spec/FastLeaderElection.tla: replayed through the election core (fle_replay.py)
        return replay_fle(trace, source, bug=bug, bug_root=bug_root)
    started = time.monotonic()
    commands = plan(trace, source)
    result = ReplayResult(str(source), trace.header.config, len(commands), bug=bug)
    folder = Path(tempfile.mkdtemp(prefix="zabref-replay-", dir=workdir))
    cluster: _Cluster | None = None
    try:
        try:
            cluster = _Cluster(folder, servers_of(trace, source), bug_root)
        except (ZabError, OSError) as e:
            result.error = f"{source}: {e}"
            return result
        result.startup = time.monotonic() - started
        _run(trace, source, commands, cluster, result, bug, settle_timeout)
        return result
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(folder, ignore_errors=True)
        result.wall = time.monotonic() - started


def _run(trace: Trace, source: str, commands: list[Command], cluster: _Cluster, result: ReplayResult,
         bug: str | None, settle_timeout: float) -> None:
    def fail(step: Step, reason: str, diffs: dict[str, tuple[Any, Any]]) -> None:
        result.failure = Failure(step.index, step.action, step.params, step.label, reason,
                                 {k: [e, a] for k, (e, a) in sorted(diffs.items())}, pretty_diff(diffs),
                                 cluster.logs(), replay_command(source, bug))

    def observe(step: Step, timeout: float) -> tuple[dict | None, dict[str, tuple[Any, Any]], str]:
        try:
            states = settle(cluster.controls, timeout)
        except (ControlError, OSError) as e:
            return None, {}, f"not settled: {e}"
        return states, differences(step.state, spec_state(list(states.values()))), ""

    states, diffs, problem = observe(trace.steps[0], settle_timeout)
    if problem or diffs:
        return fail(trace.steps[0], problem or "the fresh servers' state differs from the initial state", diffs)
    for step, command in zip(trace.steps[1:], commands):
        t0 = time.monotonic()
        reason = _take(step, command, cluster, states)
        if reason:
            # Show the state after the failed request too, compared with what the step should have produced.
            after, diffs, problem = observe(step, min(settle_timeout, 2.0))
            return fail(step, reason + (f"; {problem}" if problem else ""), diffs)
        states, diffs, problem = observe(step, settle_timeout)
        if problem or diffs:
            return fail(step, problem or "state differs", diffs)
        result.replayed += 1
        result.labels.append(step.label)
        elapsed = time.monotonic() - t0
        if command.crash is not None:
            result.startup += elapsed
        else:
            result.step_time += elapsed


def _take(step: Step, command: Command, cluster: _Cluster, states: dict[int, dict]) -> str:
    """Take one step; "" when every request succeeded, else why not."""
    if command.expect_head is not None:
        at, frm, kind = command.expect_head
        held = states[at]["held"].get(str(frm), [])
        if not held:
            return f"server {at} holds no packet from server {frm}; {step.action} takes a {kind}"
        if held[0]["type"] != kind:
            return f"the head packet server {at} holds from server {frm} is a {held[0]['type']}, " \
                   f"{step.action} takes a {kind}"
    try:
        if command.crash is not None:
            cluster.crash(command.crash)
        for sid, op, fields in command.requests:
            cluster.controls[sid].request(op, **fields)
    except (ControlError, ZabError, OSError) as e:
        return f"{step.action}: the control request failed: {e}"
    return ""


def replay_file(path: str | os.PathLike[str], **options: Any) -> ReplayResult:
    """Read a trace file and replay it (TraceFormatError / TraceActionError for bad input)."""
    return replay(read_trace(Path(path)), str(path), **options)
