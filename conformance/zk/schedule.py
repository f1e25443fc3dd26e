"""Fault schedules for a real ZooKeeper ensemble: a list of steps, scripted (a file, Python data) or drawn from a seed.

Theory of operation
-------------------
A schedule is a list of `Step`s run one after the other by `conformance.zk.nemesis.ZkNemesis`. A step is a dict
with an ``op`` and the fields that op takes:

=================  ========================================  ====================================================
op                 fields                                    does
=================  ========================================  ====================================================
``kill``           server                                    SIGKILL (kill -9) the server's process group; in a
                                                             run with power loss, a power cut (conformance.zk.powercut)
``restart``        server, [timeout], [wait]                 kill if running, start on its data dir, wait until
                                                             it serves (``srvr``: leader or follower; not with
                                                             ``wait = false``)
``name``           server, as                                bind a name to a server, nothing else
``crash_in_sync``  server, [timeout]                         kill if running, start it, and SIGKILL it the moment
                                                             its ``currentEpoch`` file changes (a learner writes
                                                             the new epoch on NEWLEADER, in synchronization)
``pause``          server                                    SIGSTOP
``resume``         server                                    SIGCONT
``cut``            server, peer, [port]                      cut both directions between the two (the proxy)
``isolate``        server, [port]                            cut every link of the server
``heal``           [server], [peer], [port]                  heal the links between server and peer (every link
                                                             of the server without a peer; every link without
                                                             either)
``sleep``          seconds                                   wait
``writes``         count, [timeout]                          wait until ``count`` more writes were acknowledged
``load``           on                                        start (true) or hold (false) the client write load
``writer``         server, seconds                           one more writer, with a session to that server alone,
                                                             for that long (its writes enter the history as the
                                                             others'); the step returns at once
``settle``         [server], [timeout]                       wait until the server serves (every running server
                                                             without one)
=================  ========================================  ====================================================

``port`` is ``"quorum"`` or ``"election"``: the fault or the heal is of that port kind's connections alone (both
without it), so that a schedule can let an election through and hold the elected leader's sync (ZOOKEEPER-4837's
schedule). ``server`` and ``peer`` select a server when the step runs: a number (1..N), ``"leader"``, ``"follower"``
(any follower, drawn from the run's seed), ``"follower#k"`` (the follower with the k-th highest id: ``follower#1``
is the highest), ``"any"``, or ``"$name"``: the server an earlier step bound with ``"as": "name"`` (any step with a
server may bind it). A selector resolved while the servers change (a leader just killed) is resolved again until the
step's deadline.

`parse_schedule` checks every step before anything runs -- an unknown op, a missing or extra field, a value of the
wrong type, a server number outside the ensemble, a ``$name`` used before it is bound -- and a `ScheduleError`
names the source, the step's index and its op. `load_schedule` reads JSON (a list of steps, or ``{"steps": [...]}``)
or TOML (``[[step]]`` tables). `random_schedule` draws a schedule from a seed: episodes of kill, pause, cut and
isolate (each a begin step, sleeps, an end step), the target the leader half of the time, at most
``concurrency`` at once on disjoint servers -- so a random run is a scripted run whose script is in its report and
can be run again with ``--schedule``.
"""

from __future__ import annotations

import json
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.zk import ZkError
from conformance.zk.ports import KINDS

__all__ = ["OPS", "ScheduleError", "Step", "load_schedule", "parse_schedule", "random_schedule"]

#: op -> (required fields, optional fields); every op may also bind ``as`` when it has a ``server``
OPS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "kill": (("server",), ()),
    "restart": (("server",), ("timeout", "wait")),
    "name": (("server", "as"), ()),
    "crash_in_sync": (("server",), ("timeout",)),
    "pause": (("server",), ()),
    "resume": (("server",), ()),
    "cut": (("server", "peer"), ("port",)),
    "isolate": (("server",), ("port",)),
    "heal": ((), ("server", "peer", "port")),
    "sleep": (("seconds",), ()),
    "writes": (("count",), ("timeout",)),
    "load": (("on",), ()),
    "writer": (("server", "seconds"), ()),
    "settle": ((), ("server", "timeout")),
}
SELECTOR = re.compile(r"^(leader|follower|any|follower#[1-9]|\$[A-Za-z_][A-Za-z0-9_]*)$")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ScheduleError(ZkError):
    """A schedule that cannot run: the message names the source, the step (index and op) and what is wrong."""


@dataclass(frozen=True)
class Step:
    """One checked step: its index in the schedule, its op and its fields (``as`` included)."""

    index: int
    op: str
    args: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.args.get(key, default)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, **self.args}

    def __str__(self) -> str:
        rest = " ".join(f"{k}={v}" for k, v in self.args.items())
        return f"step {self.index} {self.op}" + (f" {rest}" if rest else "")


def _check_server(value: Any, servers: int, bound: set[str], fail: Any, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        fail(f"{field} must be a server number or a selector, not {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= servers:
            fail(f"{field} {value} is not a server of this ensemble (1..{servers})")
        return
    if not SELECTOR.match(value):
        fail(f"{field} {value!r} is not a selector (a number, leader, follower, follower#k, any, $name)")
    if value.startswith("follower#") and int(value[9:]) > servers - 1:
        fail(f"{field} {value!r}: an ensemble of {servers} has {servers - 1} followers")
    if value.startswith("$") and value[1:] not in bound:
        fail(f"{field} {value!r} names no server bound by an earlier step (\"as\": \"{value[1:]}\")")


def parse_schedule(data: Any, servers: int, source: str = "schedule") -> list[Step]:
    """Check a schedule (a list of step dicts) for an ensemble of ``servers``; the steps, or a ScheduleError."""
    if isinstance(data, dict) and set(data) in ({"steps"}, {"step"}):
        data = data.get("steps", data.get("step"))
    if not isinstance(data, list):
        raise ScheduleError(f"{source}: a schedule is a list of steps, not {type(data).__name__}")
    steps: list[Step] = []
    bound: set[str] = set()
    for i, raw in enumerate(data):
        op = raw.get("op") if isinstance(raw, dict) else None

        def fail(why: str, i: int = i, op: Any = op) -> None:
            raise ScheduleError(f"{source}: step {i}" + (f" ({op})" if isinstance(op, str) else "") + f": {why}")

        if not isinstance(raw, dict):
            fail(f"a step is a table of fields, not {raw!r}")
        if op not in OPS:
            fail(f"unknown op {op!r}; the ops: {', '.join(OPS)}")
        required, optional = OPS[op]
        fields = {k: v for k, v in raw.items() if k != "op"}
        allowed = set(required) | set(optional) | ({"as"} if "server" in required + optional else set())
        for k in required:
            if k not in fields:
                fail(f"missing field {k!r}")
        for k in fields:
            if k not in allowed:
                fail(f"unknown field {k!r} (this op takes {', '.join(sorted(allowed)) or 'no field'})")
        for k in ("server", "peer"):
            if k in fields:
                _check_server(fields[k], servers, bound, fail, k)
        if "peer" in fields and fields["peer"] == fields.get("server") and fields["peer"] not in ("any", "follower"):
            fail("server and peer are the same")
        if "peer" in fields and "server" not in fields:
            fail("a peer needs a server (the link between the two)")
        if "port" in fields and fields["port"] not in KINDS:
            fail(f"port must be one of {', '.join(KINDS)}, not {fields['port']!r}")
        for k in ("seconds", "timeout"):
            if k in fields and (isinstance(fields[k], bool) or not isinstance(fields[k], (int, float))
                                or fields[k] < 0):
                fail(f"{k} must be a number of seconds >= 0, not {fields[k]!r}")
        if "count" in fields and (isinstance(fields["count"], bool) or not isinstance(fields["count"], int)
                                  or fields["count"] < 1):
            fail(f"count must be a whole number >= 1, not {fields['count']!r}")
        for k in ("on", "wait"):
            if k in fields and not isinstance(fields[k], bool):
                fail(f"{k} must be true or false, not {fields[k]!r}")
        if "as" in fields:
            if not isinstance(fields["as"], str) or not NAME.match(fields["as"]):
                fail(f"as must be a name (letters, digits, _), not {fields['as']!r}")
            bound.add(fields["as"])
        steps.append(Step(i, op, fields))
    return steps


def load_schedule(path: str | Path, servers: int) -> list[Step]:
    """Read and check a schedule file: ``.toml`` (``[[step]]`` tables) or JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScheduleError(f"{path}: cannot read the schedule: {e.strerror or e}") from None
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise ScheduleError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'JSON'}: {e}") from None
    return parse_schedule(data, servers, str(path))


#: (begin op, end op) of each kind of random episode
EPISODES = {"kill": ("kill", "restart"), "pause": ("pause", "resume"), "cut": ("cut", "heal"),
            "isolate": ("isolate", "heal")}


def random_schedule(seed: int, servers: int, duration: float, *, concurrency: int | None = None,
                    episode: tuple[float, float] = (1.0, 4.0), gap: tuple[float, float] = (0.5, 2.0),
                    kinds: tuple[str, ...] = tuple(EPISODES)) -> list[Step]:
    """A schedule of ``duration`` seconds drawn from ``seed``: episodes of ``kinds`` in shuffled rounds, each
    ``episode`` seconds long, the next one ``gap`` later, at most ``concurrency`` at once (default (N-1)//2, so a
    quorum can make progress) on disjoint servers; half the targets are ``leader``. Every episode ends by
    ``duration``. Deterministic: the same arguments give the same steps."""
    rng = random.Random(f"zk-schedule:{seed}")
    concurrency = max(1, (servers - 1) // 2) if concurrency is None else concurrency
    events: list[tuple[float, int, dict[str, Any]]] = []  # (time, order, step)
    active: list[tuple[float, str]] = []  # (end time, name)
    t, n, round_ = 0.0, 0, []
    while True:
        t += rng.uniform(*gap)
        active = [(end, name) for end, name in active if end > t]
        if len(active) >= concurrency:
            t = min(end for end, _ in active)
            continue
        length = rng.uniform(*episode)
        if t + length > duration:
            break
        if not round_:
            round_ = list(kinds)
            rng.shuffle(round_)
        kind = round_.pop()
        name = f"e{n}"
        n += 1
        target: Any = "leader" if rng.random() < 0.5 else "any"
        begin, end = EPISODES[kind]
        step: dict[str, Any] = {"op": begin, "server": target, "as": name}
        if kind == "cut":
            step["peer"] = "any"
        events.append((t, len(events), step))
        events.append((t + length, len(events), {"op": end, "server": f"${name}"}))
        active.append((t + length, name))
    steps: list[dict[str, Any]] = []
    now = 0.0
    for when, _, step in sorted(events):
        if when > now:
            steps.append({"op": "sleep", "seconds": round(when - now, 3)})
            now = when
        steps.append(step)
    if duration > now:
        steps.append({"op": "sleep", "seconds": round(duration - now, 3)})
    return parse_schedule(steps, servers, f"random schedule (seed {seed})")
