"""Conformance replay: drive real zabref servers through one spec trace, one step at a time.

Theory of operation
-------------------
A trace (conformance/graph/traces.py) is a path through TLC's state graph: step 0 is the initial state, each later step
names an action of spec/Zab.tla with its parameters and the whole spec state after it. `replay` starts N
``zabref serve --control`` processes (conformance/replay/harness.py) -- or takes those a passed trace left, reset to
empty data directories in the same processes (conformance/replay/pool.py) -- and, for every step, makes the server it
names take
the action through the same code a server in normal mode runs (`zabref.core.node` behind `zabref.runtime.server`'s one
step path) -- the driver only decides WHEN inputs reach a server and HOW MUCH time passes there:

==================================  ===============================================================================
spec action                         what the driver does
==================================  ===============================================================================
``BecomeLeader(i)``,                plays the other voters on i's election port until i's FastLeaderElection decides
``BecomeFollower(i, j)``            (conformance/replay/steer.py)
``<Role>Process<PACKET>(i, j)``     ``release {from: j}`` at i, once the head packet i holds from j is checked to be
                                    that PACKET (ACKNEWLEADER is an ACK, PROPOSALInSync a PROPOSAL)
``ClientRequest(i)``                a client submits the step's value on a client port: i's own, or one of i's
                                    followers' in BROADCAST (every other ClientRequest), which forwards it to i
``FollowerTimeout(i)``,             lets i's logical clock run (``tick``) until i's node gives up; a leader whose
``LeaderTimeout(i)``                learners are connected hears nothing meanwhile because they are paused (SIGSTOP)
``Crash(i)``                        SIGKILL server i, start it again from its data dir (a late leader's held log
                                    writes that the step keeps are made durable first: ``log_late`` without ack)
``LeaderOwnACK(i)``                 ``log_late`` at i up to the step's ackIndex[i][i]: its held log writes made
                                    durable, then its node told (models with LeaderLogsLate, whose servers run with
                                    ``[cluster] leader_logs_late``: conformance/replay/switches.py)
``ClientSync(i)``                   a client's sync on follower i's client port; i sends it to its leader as REQUEST
                                    (spec/ZabSync.tla; ``LeaderProcessREQUEST``, ``FollowerProcessPING``,
                                    ``LeaderProcessPING`` and ``FollowerProcessSYNC`` are releases as above)
``LeaderSendPING(i)``               one tick of i's clock: its PINGs are the round's when a waiting sync needs one
``LeaderSendSYNC(i)``               nothing: i takes it in the input of the step before, which the trace's model
                                    makes its step of i right before (ZabSync.tla's ``SyncAnsweredAtOnce``); the
                                    state between the two is not compared
==================================  ===============================================================================

and checks that the server took exactly that action (the control socket reports the actions each input caused), and
those that follow it in the same input.
A step that persists is watched at its fsync: the server stops there (``fsync_pause``), and no packet of the step
may have reached a peer yet (`_step_request`, `_persist_before_send`). A late leader's own log write is the one the
spec lets wait: the control driver holds it, and the disk must then hold the leader's history up to ackIndex[i][i]
exactly, not beyond (`ZabReplay.durable_differences`).
Then it waits, with a bound, until every packet sent has arrived in its receiver's queue
(`zabref.runtime.control_client.settle`), reads every server's state, maps it onto the spec's variables
(conformance/replay/mapping.py) and compares it with the step's state (`mapping.differences`). Clients are checked too:
a submit is answered only once the spec says the server it asked has delivered the value, and then it must be
(`_check_clients`); a client's sync only at its follower's FollowerProcessSYNC, with what it delivered then.

The first difference stops the replay: the result names the step, the action and its parameters, each differing
variable's expected and actual value with a unified diff of their pretty JSON, the tail of every server's logs, and
the command that replays just this trace. Every step is checked before any server starts (`plan`): an action the
driver does not know is a `TraceActionError` naming the trace file and step, not a failure halfway.

FastLeaderElection traces (spec/FastLeaderElection.tla) are replayed on real servers too, over the real election
port (conformance/replay/fle_driver.py). Seeded bugs (conformance/replay/seeded.py) run the servers from a patched copy
of the zabref package: ``bug_root`` is put first on the servers' import path; the driver itself is unchanged.
"""

from __future__ import annotations

import difflib
import json
import os
import shlex
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conformance.graph.traces import Step, Trace, read_trace
from conformance.replay import pool
from conformance.replay.commands import MAX_TIMEOUT_TICKS, Command, expect_only
from conformance.replay.fle_driver import FleReplay, is_fle_trace
from conformance.replay.harness import Cluster, wait_until
from conformance.replay.mapping import MAPPED, checked, differences, spec_state
from conformance.replay.plan import plan, servers_of, together
from conformance.replay.steer import SteerError, steer
from conformance.replay.switches import leader_logs_late
from zabref.errors import ZabError
from zabref.runtime.control import ControlError
from zabref.runtime.control_client import settle

__all__ = ["Failure", "ReplayResult", "replay", "replay_file", "replay_command"]

SETTLE_TIMEOUT = 10.0
#: The spec's persistent variables: what a server's disk must hold durably after every step.
PERSISTENT = ("history", "acceptedEpoch", "currentEpoch")
#: The modules whose actions a step of a spec/Zab.tla (or spec/ZabSync.tla) trace may take.
ZAB_MODULES = ("Zab", "ZabSync")
#: How long the driver waits for something a step must bring about (a forwarded value reaching the leader, ...).
STEP_TIMEOUT = 10.0


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
# The replay


def replay(trace: Trace, source: str, *, bug: str | None = None, bug_root: Path | None = None,
           settle_timeout: float = SETTLE_TIMEOUT, workdir: Path | None = None, forked: bool = True,
           reuse: bool = True) -> ReplayResult:
    """Replay one trace; never raises for a divergence (see `ReplayResult.failure`). ``forked``: the servers are
    forked from a zygote (conformance/replay/forkserver.py), else exec'd (`conformance.replay.harness.Cluster`).
    ``reuse``: take the servers a passed trace of the same shape left, reset to empty data directories
    (conformance/replay/pool.py), and leave them for the next one when this trace passes; else fresh servers.

    Raises TraceActionError (before any server starts) when a step names an action the driver cannot take.
    """
    started = time.monotonic()
    world = FleReplay(trace, source) if is_fle_trace(trace) else ZabReplay(trace, source)
    result = ReplayResult(str(source), trace.header.config, len(trace.steps) - 1, bug=bug)
    seed = world.seed()
    late = world.late
    key = (world.n, bug, str(bug_root), forked, str(workdir), late) if reuse and not seed else None
    cluster = pool.take(key) if key is not None else None
    try:
        if cluster is None:
            folder = Path(tempfile.mkdtemp(prefix="zabref-replay-", dir=workdir))
            try:
                cluster = Cluster(folder, world.n, bug_root, seed=seed, forked=forked, late=late)
            except (ZabError, OSError) as e:
                shutil.rmtree(folder, ignore_errors=True)
                result.error = f"{source}: {e}"
                return result
        result.startup = time.monotonic() - started
        _run(trace, source, world, cluster, result, bug, settle_timeout)
        return result
    finally:
        if cluster is not None:
            if key is not None and result.passed:
                pool.keep(key, cluster)
            else:
                pool.discard(cluster)
        result.wall = time.monotonic() - started


def _run(trace: Trace, source: str, world: Any, cluster: Cluster, result: ReplayResult, bug: str | None,
         settle_timeout: float) -> None:
    def fail(step: Step, reason: str, diffs: dict[str, tuple[Any, Any]]) -> None:
        result.failure = Failure(step.index, step.action, step.params, step.label, reason,
                                 {k: [e, a] for k, (e, a) in sorted(diffs.items())}, pretty_diff(diffs),
                                 cluster.logs(), replay_command(source, bug))

    def observe(step: Step, timeout: float) -> tuple[dict | None, dict[str, tuple[Any, Any]], str]:
        try:
            states = settle(cluster.controls, timeout)
        except (ControlError, OSError) as e:
            return None, {}, f"not settled: {e}"
        world.observed(states)
        return states, differences(world.expected(step), world.spec_state(states), world.names), ""

    states, diffs, problem = observe(trace.steps[0], settle_timeout)
    if not (problem or diffs):
        diffs = world.durable_differences(trace.steps[0], cluster)
    if problem or diffs:
        return fail(trace.steps[0], problem or "the fresh servers' state differs from the initial state", diffs)
    commands = world.commands
    for k, (step, command) in enumerate(zip(trace.steps[1:], commands)):
        t0 = time.monotonic()
        try:
            world.take(step, command, cluster, states)
        except (ControlError, ZabError, SteerError, OSError) as e:
            # Show the state after the failed step too, compared with what the step should have produced.
            after, diffs, problem = observe(step, min(settle_timeout, 2.0))
            return fail(step, f"{step.action}: {e}" + (f"; {problem}" if problem else ""), diffs)
        if k + 1 < len(commands) and commands[k + 1].kind == "follows":
            # the server takes the next step in this same input: the state between the two is nobody's to see
            result.replayed += 1
            result.labels.append(step.label)
            continue
        states, diffs, problem = observe(step, settle_timeout)
        if not (problem or diffs):
            diffs = world.durable_differences(step, cluster)
            problem = "a server's disk holds durably other than the spec's persistent variables" if diffs else ""
        if not (problem or diffs):
            problem = world.check_clients(step, cluster)
        if problem or diffs:
            return fail(step, problem or "state differs", diffs)
        result.replayed += 1
        result.labels.append(step.label)
        elapsed = time.monotonic() - t0
        if command.kind == "crash":
            result.startup += elapsed
        else:
            result.step_time += elapsed


class ZabReplay:
    """The driver's side of a spec/Zab.tla trace: its commands, how to take them, how to read the servers."""

    def __init__(self, trace: Trace, source: str) -> None:
        self.n = servers_of(trace, source)
        #: the model's leaders log late (LeaderLogsLate): the servers run with ``[cluster] leader_logs_late``
        self.late = leader_logs_late(trace.header.config)
        self.commands = plan(trace, source)
        self.together = together(trace, self.commands)
        # mapping.differences: every mapped variable of the trace's module (pendingSyncs: spec/ZabSync.tla's)
        self.names: Any = [name for name in MAPPED if name in trace.steps[0].state]
        self._requests = 0
        self._syncs: list[Any] = []  # the clients' syncs issued (ClientSync), oldest first

    def seed(self) -> dict[int, Any]:
        return {}

    def observed(self, states: dict[int, dict]) -> None:
        pass

    def expected(self, step: Step) -> dict[str, Any]:
        """The step's state as the servers can show it: a sync's ghost values aside (`mapping.checked`)."""
        return checked(step.state)

    def spec_state(self, states: dict[int, dict]) -> dict[str, Any]:
        return spec_state(list(states.values()))

    def durable_differences(self, step: Step, cluster: Cluster) -> dict[str, tuple[Any, Any]]:
        """history, acceptedEpoch and currentEpoch as each server's FILES hold them durably (a separate reader, not
        the server's memory) against the step's state: a write that was never fsynced shows here, crash or not."""
        snaps = []
        for sid in range(1, self.n + 1):
            try:
                p = cluster.durable(sid)
            except ZabError as e:  # e.g. a log a power cut would leave unreadable
                return {f"history (durable)": (step.state.get("history"), f"server {sid}: unreadable: {e}")}
            snaps.append({"sid": sid, "variables": {
                "history": [(t.zxid, t.value.decode("utf-8", "backslashreplace")) for t in p.history],
                "accepted_epoch": p.accepted_epoch, "current_epoch": p.current_epoch}})
        actual = {f"{name} (durable)": MAPPED[name](snaps) for name in PERSISTENT}
        expected = {f"{name} (durable)": self._durable_history(step) if name == "history" else step.state.get(name)
                    for name in PERSISTENT}
        return differences(expected, actual, list(actual))

    def _durable_history(self, step: Step) -> Any:
        """The histories the disks must hold after ``step``: the spec's -- but a late leader in BROADCAST has on its
        disk exactly what it logged, history[i][1..ackIndex[i][i]] (the control driver holds its log writes until
        the trace's LeaderOwnACK, or until its Crash keeps more)."""
        histories = step.state.get("history")
        if not self.late or not isinstance(histories, list):
            return histories
        st = step.state
        return [h[:st["ackIndex"][k][k]] if st["state"][k] == "LEADING" and st["zabState"][k] == "BROADCAST" else h
                for k, h in enumerate(histories)]

    def take(self, step: Step, command: Command, cluster: Cluster, states: dict[int, dict]) -> None:
        if command.kind == "crash":
            kept = len(step.state["history"][command.i - 1])
            if self.late and any(k <= kept for k in states[command.i]["late"]):
                # the step keeps history[i][1..kept], kept in Kept(i): the held writes up to it reach the disk first
                cluster.request(command.i, "log_late", upto=kept, ack=False)
            cluster.crash(command.i)
        elif command.kind == "own_ack":
            i = command.i
            answer = cluster.request(i, "log_late", upto=step.state["ackIndex"][i - 1][i - 1], ack=True)
            expect_only(answer["actions"], ZAB_MODULES, self.together[step.index], i)
        elif command.kind == "follows":
            pass  # taken, and checked, with the input of the step before
        elif command.kind in ("release", "timeout", "steer", "ping", "client_sync"):  # no fsync, or armed in each
            self._take(step, command, cluster, states)
        else:
            _persist_before_send(cluster, command.i, states, lambda: self._take(step, command, cluster, states))

    def _take(self, step: Step, command: Command, cluster: Cluster, states: dict[int, dict]) -> None:
        i, j = command.i, command.j
        if command.kind == "release":
            held = states[i]["held"].get(str(j), [])
            if not held:
                raise ControlError(f"server {i} holds no packet from server {j}; {step.action} takes a "
                                   f"{command.packet}")
            if held[0]["type"] != command.packet:
                raise ControlError(f"the head packet server {i} holds from server {j} is a {held[0]['type']}, "
                                   f"{step.action} takes a {command.packet}")
            answer = _step_request(cluster, i, states, "release", {"from": j})
            if answer.get("deferred"):
                raise ControlError(f"server {i} did not take the {command.packet} from {j}: its node deferred it")
            expect_only(answer["actions"], ZAB_MODULES, self.together[step.index], i)
        elif command.kind == "steer":
            taken = steer(cluster, i, j, self.n, states[i], lambda what, p: wait_until(what, p, STEP_TIMEOUT),
                          lambda op, fields: _step_request(cluster, i, states, op, fields))
            expect_only(taken, ZAB_MODULES, self.together[step.index], i)
        elif command.kind == "submit":
            self._submit(step, i, cluster, states)
        elif command.kind == "client_sync":
            self._client_sync(i, cluster, states)
        elif command.kind == "ping":
            answer = _step_request(cluster, i, states, "tick", {"count": 1})
            expect_only(answer["actions"], ZAB_MODULES, self.together[step.index], i)
        else:
            self._timeout(step, i, cluster, states)

    def _submit(self, step: Step, i: int, cluster: Cluster, states: dict[int, dict]) -> None:
        """ClientRequest(i): every other one (the first of a trace included) goes through a follower of i in BROADCAST,
        which forwards it."""
        value = str(step.state["history"][i - 1][-1]["value"])
        self._requests += 1
        followers = [s for s, st in sorted(states.items())
                     if st["variables"]["state"] == "FOLLOWING" and st["variables"]["leader"] == i
                     and st["variables"]["zab_state"] == "BROADCAST"]
        via = followers[self._requests % len(followers)] if followers and self._requests % 2 == 1 else i
        before = len(states[i]["variables"]["history"])
        cluster.submit(via, value)
        wait_until(f"server {i} to log the value {value!r} submitted at server {via}",
                   lambda: len(cluster.request(i, "state")["variables"]["history"]) > before, STEP_TIMEOUT)

    def _client_sync(self, i: int, cluster: Cluster, states: dict[int, dict]) -> None:
        """ClientSync(i): a client's sync on follower i's client port; i sends it to its leader as REQUEST."""
        leader = states[i]["variables"]["leader"]

        def requests() -> int:
            held = cluster.request(leader, "state")["held"].get(str(i), [])
            return sum(1 for p in held if p["type"] == "REQUEST")

        before = requests()
        self._syncs.append(cluster.client_sync(i))
        wait_until(f"server {leader} to hold the REQUEST of the sync submitted at server {i}",
                   lambda: requests() > before, STEP_TIMEOUT)

    def _timeout(self, step: Step, i: int, cluster: Cluster, states: dict[int, dict]) -> None:
        """Let time pass at i until its node gives up. A leader whose learners are connected stops hearing them
        only if they are paused meanwhile (they would answer its PINGs)."""
        paused: set[int] = set()
        if step.action == "LeaderTimeout":
            phases = states[i]["variables"]["learner_phase"]
            paused = {int(f) for f, p in phases.items() if p != "NONE" and int(f) != i}
        cluster.pause(paused)
        try:
            answer = _step_request(cluster, i, states, "tick", {"count": MAX_TIMEOUT_TICKS,
                                                                  "until_action": step.action})
        finally:
            cluster.resume(paused)
        expect_only(answer["actions"], ZAB_MODULES, self.together[step.index], i)

    def check_clients(self, step: Step, cluster: Cluster) -> str:
        """A client's submit is answered with its zxid only once the spec says the server it asked delivered the
        value -- and then within a bound. "" when every submit so far agrees, else what went wrong.

        An answer is judged once, against the state of the step after which the driver first sees it: a server that
        answered and later crashed (the spec's Crash forgets lastCommitted) answered rightly."""
        delivered = _delivered(step.state)
        for sub in cluster.submits:
            if sub.judged:
                continue
            if sub.error is None and sub.answer is None and sub.value in delivered[sub.sid]:
                sub.done.wait(2.0)
            got = sub.answer
            if got is not None and "zxid" in got and sub.value not in delivered[sub.sid]:
                return (f"server {sub.sid} answered the submit of {sub.value!r} with {got} although the spec says "
                        "it has not delivered that value")
            if sub.value in delivered[sub.sid] and got is None and sub.error is None:
                return f"server {sub.sid} delivered {sub.value!r} but did not answer the client that submitted it"
            sub.judged = got is not None
        return self._check_syncs(step)

    def _check_syncs(self, step: Step) -> str:
        """A client's sync is answered with a zxid when, and only when, its follower takes its leader's SYNC
        (FollowerProcessSYNC: the oldest waiting there), with the last zxid that follower has delivered then. A
        refusal is the answer of a follower that stopped following or crashed (the spec drops the sync then)."""
        answering = step.params.get("i") if step.action == "FollowerProcessSYNC" else None
        for sub in self._syncs:
            if sub.judged:
                continue
            if sub.sid == answering:
                answering = None  # the oldest of that follower's only
                sub.done.wait(2.0)
                h, c = step.state["history"][sub.sid - 1], step.state["lastCommitted"][sub.sid - 1]
                zxid = (h[c - 1]["zxid"][0] << 32 | h[c - 1]["zxid"][1]) if c else 0
                if sub.answer != {"zxid": zxid}:
                    return (f"server {sub.sid} answered a client's sync with {sub.answer or sub.error} at its "
                            f"FollowerProcessSYNC; the spec says it has delivered up to zxid {zxid:#x}")
                sub.judged = True
            elif sub.answer is not None and "zxid" in sub.answer:
                return (f"server {sub.sid} answered a client's sync with {sub.answer} before it took its leader's "
                        "SYNC")
            elif sub.answer is not None or sub.error is not None:
                sub.judged = True  # refused: the client asks again
        return ""


def _persist_before_send(cluster: Cluster, i: int, states: dict[int, dict], run: Any) -> None:
    """Take a step at server i with i armed to stop at its next fsync (`zabref.storage.disk`). If the step persists,
    i stops before its storage is durable: then no packet of the step may have reached a peer yet (seed 000, phase 3,
    step 2, "log and sync proposals to disk and send ACK"; and a power cut must lose only steps none of whose packets
    left). ControlError naming the packet when one did. For a client's submit (the step's input comes through the
    client port); the control socket's step requests arm the pause themselves (`_step_request`)."""
    before = _held_from(i, states)
    cluster.request(i, "fsync_pause", on=True)
    error: list[BaseException] = []

    def step() -> None:
        try:
            run()
        except BaseException as e:  # noqa: BLE001 -- handed to the driver's thread below
            error.append(e)

    worker = threading.Thread(target=step, name=f"step-at-{i}", daemon=True)
    worker.start()
    problem = ""
    deadline = time.monotonic() + STEP_TIMEOUT
    while worker.is_alive() and time.monotonic() < deadline:
        if cluster.stopped(i):
            problem = _sent_before_fsync(cluster, i, before)
            break
        worker.join(0.001)  # returns as soon as the step is done
    worker.join(STEP_TIMEOUT)
    if error:
        raise error[0]
    if worker.is_alive():
        raise ControlError(f"the step at server {i} did not finish within {STEP_TIMEOUT} s")
    cluster.request(i, "fsync_pause", on=False)
    if problem:
        raise ControlError(problem)


def _step_request(cluster: Cluster, i: int, states: dict[int, dict], op: str, fields: dict[str, Any]) -> dict:
    """One request that steps server i (``release``, ``release_vote``, ``tick``) with ``fsync_pause``: i stops at the
    step's first fsync, and the driver, waiting for the answer, looks meanwhile whether a packet of the step has
    reached a peer (as `_persist_before_send`, without a thread or requests of its own to arm and disarm)."""
    before = _held_from(i, states)
    client = cluster.controls[i]
    client.send(op, fsync_pause=True, **fields)
    problem, watching = "", True
    deadline = time.monotonic() + STEP_TIMEOUT
    while not client.ready(0.0005):
        if watching and cluster.stopped(i):
            problem, watching = _sent_before_fsync(cluster, i, before), False
        if time.monotonic() > deadline:
            cluster.resume({i})
            client.close()  # its answer may still come: the next request must not read it as its own
            raise ControlError(f"the step at server {i} did not finish within {STEP_TIMEOUT} s")
    answer = client.receive()
    if problem:
        raise ControlError(problem)
    return answer


def _held_from(i: int, states: dict[int, dict]) -> dict[int, int]:
    """How many packets from i each peer holds (before a step at i)."""
    return {p: len(s["held"].get(str(i), [])) for p, s in states.items() if p != i}


def _sent_before_fsync(cluster: Cluster, i: int, before: dict[int, int]) -> str:
    """Server i is stopped at an fsync: what a peer already holds from i beyond ``before`` (a problem text, "" when
    nothing); i is resumed either way. A peer the driver paused (a LeaderTimeout's learners) is passed over: stopped,
    it reads nothing from its sockets, so nothing of the step can have reached its queue -- and it could not answer."""
    try:
        for p, count in before.items():
            if cluster.stopped(p):
                continue
            held = cluster.request(p, "state")["held"].get(str(i), [])
            if len(held) > count:
                return (f"server {i} sent {held[count]['type']}(zxid {held[count]['zxid']:#x}) to server {p} before "
                        "the storage of its step was durable (it is stopped at that fsync)")
        return ""
    finally:
        cluster.resume({i})


def _delivered(state: dict[str, Any]) -> dict[int, set[str]]:
    """The values each server has delivered in the spec state (history[1..lastCommitted])."""
    out = {}
    for k, (h, c) in enumerate(zip(state["history"], state["lastCommitted"]), 1):
        out[k] = {str(t["value"]) for t in h[:c]}
    return out


def replay_file(path: str | os.PathLike[str], **options: Any) -> ReplayResult:
    """Read a trace file and replay it (TraceFormatError / TraceActionError for bad input)."""
    return replay(read_trace(Path(path)), str(path), **options)
