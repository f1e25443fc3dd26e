"""Theory of operation -- `zabref edges`: every edge of a model's TLC state graph taken on the sans-IO core.

An edge of the graph (`zabref traces` wrote it as Parquet: ``nodes`` id/state_json/initial, ``edges``
src/dst/label/action/params_json) says: from spec state src, action A with parameters P leads to spec state dst.
`check_edge` tests that one step of zabref's core does the same. It builds the world of src (`conformance.replay.inverse`:
one `ZabCore` per server, the channels as FIFO queues of QuorumPackets, each server's disk), makes the server take A
through the entry point a running server uses --

==================================  ==============================================================================
spec action                         core
==================================  ==============================================================================
``<Role>Process<PACKET>(i, j)``     the head packet of channel j -> i, checked to be that PACKET (ACKNEWLEADER is
                                    the ACK of NEWLEADER, PROPOSALInSync a PROPOSAL) and to be routed by
                                    ``handler_for`` to the handler of A, taken off the channel; ``receive(j, packet)``
``ClientRequest(i)``                ``client_request(value)``, the value the spec appends (dst's last transaction)
``BecomeLeader(i)``, ...            ``become_leader()``, ``become_follower(j)``, ``follower_timeout()``,
                                    ``leader_timeout()``
``Crash(i)``                        a new core from i's disk; every other server's connection to i closes
==================================  ==============================================================================

-- carries out the `Output` as the runtime does (`World.apply`), maps every core back with conformance/replay/mapping.py
and compares with dst on every variable but `mapping.NOT_MAPPED`, packets in flight and their data included. Three
more checks hold the Output to its contract (docs/core.md): ``deliver`` -- what each server delivered is
``history[lastCommitted .. lastCommitted']`` of the spec; ``role`` -- the role reported is the new ``state`` when it
changed (None otherwise; a crash reports none); ``<var> (durable)`` -- the disks after ``persist`` hold the
persistent variables (compared with dst when a disk departs from its core). A core that raises where the spec takes
the step is a difference too (``error``).

The edges say what the spec does; what it does NOT do matters as much. `check_heads` takes every state of the graph
and every packet at the head of a channel in it, and holds the core's decision on that packet -- take it now, or
hold it at the head for later (``ZabCore.held``: FOLLOWERINFO at a server that does not lead, ACKEPOCH(-1) at a
leader in DISCOVERY) -- to the spec's: an edge ``<Role>Process<PACKET>(i, j)`` leaves the state, or none does. A
core that takes or refuses a packet the spec leaves waiting (refusing closes the connection), or holds one the spec
takes, disagrees there; the edge check alone cannot see that, since it hands the core only the packets the spec
takes. These checks are counted under the pseudo-action `HEADS`.

`check_rows` checks a stream of edges (src and dst state JSON beside each) and sums the result: edges per action,
agreements, and the first few disagreements per action (by label, src, dst: the same whatever the partitioning);
`check_head_rows` does the same for states (each with the Receive edges leaving it).
`check_graph` runs it in this process (pyarrow) or as a Spark job (`conformance.graph.spark.session`: edges joined with
the nodes twice, one task per partition of edges). conformance/replay/edges_report.py writes the report and the command.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceError
from conformance.graph.spark import session
from conformance.replay import mapping
from conformance.replay.driver import _PACKET_ALIAS, _PROCESS, _SIMPLE, pretty_diff
from conformance.replay.inverse import InverseError, World
from conformance.tla.values import canonical_json
from zabref.core.zab import SPEC_ACTIONS
from zabref.errors import ZabError

__all__ = ["EdgeError", "require_graph", "check_edge", "check_rows", "check_heads", "check_head_rows", "check_graph",
           "Summary", "Disagreement", "METHODS", "SHOW", "HEADS"]

#: The columns of an edge as `check_rows` takes it.
COLUMNS = ("src", "dst", "label", "action", "params_json", "src_json", "dst_json")

#: Spec action -> the core's method of that name (zabref.core.zab.SPEC_ACTIONS, inverted).
METHODS = {action: method for method, action in SPEC_ACTIONS.items()}

#: Disagreements kept per action (the first by label, src, dst).
SHOW = 3

#: The pseudo-action under which `check_heads` counts the channel heads it checked.
HEADS = "ChannelHead"

#: `_PROCESS` (the actions that take a packet) as a Java regular expression, for Spark's rlike (no named groups).
_RECEIVE_JAVA = re.sub(r"\?P<\w+>", "", _PROCESS.pattern)


class EdgeError(ConformanceError):
    """An edge that is not a step this checker can take (unknown action, bad parameters, a state the inverse mapping
    cannot hold); the message names the edge and, when known, the graph file."""


def _sid(params: dict[str, Any], name: str, n: int, action: str) -> int:
    v = params.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= n:
        raise EdgeError(f"{action}: parameter {name!r} must be a server in 1..{n}, not {v!r}")
    return v


def _take(world: World, action: str, params: dict[str, Any], dst: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Server i takes `action` on `world`; differences found before the state comparison (a refused packet)."""
    n = len(world.sids)
    m = _PROCESS.match(action)
    if action not in METHODS and action != "Crash":
        raise EdgeError(f"unknown action {action!r}: this checker takes Crash and the spec actions of the core's "
                        f"methods ({', '.join(sorted(METHODS))})")
    expected = _SIMPLE.get(action, ("i", "j"))
    if set(params) != set(expected):
        raise EdgeError(f"{action} takes parameters {', '.join(expected)}, the edge has "
                        f"{', '.join(sorted(params)) or 'none'}")
    i = _sid(params, "i", n, action)
    core = world.cores[i]
    if m:
        j = _sid(params, "j", n, action)
        name = _PACKET_ALIAS.get(m["packet"], m["packet"])
        channel = world.channels[(j, i)]
        head = channel[0].type.name if channel else "nothing"
        if head != name:
            return {"error": (f"{action} takes a {name} at the head of msgs[{j}][{i}]", f"the head is {head}")}
        handler = core.handler_for(j, channel[0])
        if handler is not getattr(type(core), METHODS[action]):
            return {"error": (f"core.receive runs {METHODS[action]}", f"core.receive runs {handler.__name__}")}
        world.apply(i, core.receive(j, channel.popleft()))
    elif action == "Crash":
        world.crash(i)
    elif action == "ClientRequest":
        try:
            value = dst["history"][i - 1][-1]["value"]
        except (KeyError, IndexError, TypeError):
            raise EdgeError(f"ClientRequest({i}): history[{i}] of dst has no last transaction") from None
        world.apply(i, core.client_request(str(value).encode("utf-8")))
    elif action == "BecomeFollower":
        world.apply(i, core.become_follower(_sid(params, "j", n, action)))
    else:
        method = {"BecomeLeader": core.become_leader, "FollowerTimeout": core.follower_timeout,
                  "LeaderTimeout": core.leader_timeout}[action]
        world.apply(i, method())
    return {}


def _effects(world: World, src: dict[str, Any], dst: dict[str, Any], crashed: int | None) -> dict[str, Any]:
    """The deliveries and roles the spec implies for this step (expected) and those the Outputs reported (actual)."""
    want_deliver, got_deliver, want_role, got_role = [], [], [], []
    for s in world.sids:
        a, b = src["lastCommitted"][s - 1], dst["lastCommitted"][s - 1]
        want_deliver.append(dst["history"][s - 1][a:b] if b > a and s != crashed else [])
        got_deliver.append([mapping.txn((t.zxid, t.value.decode("utf-8", "backslashreplace")))
                            for t in world.delivered[s]])
        changed = src["state"][s - 1] != dst["state"][s - 1]
        want_role.append(dst["state"][s - 1] if changed and s != crashed else None)
        got_role.append(None if world.roles[s] is None else world.roles[s].name)
    return {"deliver": (want_deliver, got_deliver), "role": (want_role, got_role)}


def check_edge(src: dict[str, Any], action: str, params: dict[str, Any],
               dst: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The differences (variable -> (expected, actual)) between dst and what the core makes of src under
    action(params); empty when they agree. EdgeError when the edge is not one this checker can take."""
    try:
        world = World.from_spec(src)
    except InverseError as e:
        raise EdgeError(f"src state: {e}") from None
    try:
        refused = _take(world, action, params, dst)
    except ZabError as e:  # RemoteProtocolError (a packet refused), LocalProtocolError (an entry point refused)
        return {"error": (f"{action} is a step of the spec here", f"{type(e).__name__}: {e}")}
    if refused:
        return refused
    names = [name for name in dst if name not in mapping.NOT_MAPPED]
    actual = world.to_spec()
    # one canonical text per side (mapping.differences makes one per variable, a quarter of the time): the same
    # verdict, since equal texts mean equal variables; only a difference is then named variable by variable
    same = canonical_json({k: dst[k] for k in names}) == canonical_json({k: actual.get(k) for k in names})
    diffs = {} if same else mapping.differences(dst, actual, names)
    crashed = params["i"] if action == "Crash" else None
    for key, (want, got) in _effects(world, src, dst, crashed).items():
        if want != got:
            diffs[key] = (want, got)
    if not all(world.disks[s].holds(world.cores[s]) for s in world.sids):
        durable = world.durable()
        diffs.update(mapping.differences({k: dst[k.split()[0]] for k in durable}, durable, list(durable)))
    return diffs


def check_heads(state: dict[str, Any], receives: Iterable[tuple[str, int, int]]) -> dict[tuple[int, int], dict]:
    """For every non-empty channel j -> i of spec `state`: does the core take its head packet now exactly when the
    spec does? ``receives``: the (action, i, j) of the edges of the graph that leave `state` taking a packet.
    Returns {(i, j): differences} for the heads where they disagree."""
    try:
        world = World.from_spec(state)
    except InverseError as e:
        raise EdgeError(f"state: {e}") from None
    spec = {(i, j): action for action, i, j in receives}
    found = {}
    for (j, i), channel in sorted(world.channels.items()):
        if not channel:
            continue
        packet, core = channel[0], world.cores[i]
        where = f"{packet.type.name} at the head of msgs[{j}][{i}]"
        held = core.held(j, packet)
        if held:
            got = "held: it waits at the head"
        else:
            try:
                got = f"taken now, by {core.handler_for(j, packet).__name__}"
            except ZabError as e:
                got = f"refused (the connection closes): {e}"
        if (i, j) in spec:
            if held:
                found[(i, j)] = {where: (f"taken now, by {METHODS.get(spec[(i, j)], spec[(i, j)])}", got)}
        elif not held:
            found[(i, j)] = {where: ("held: it waits at the head (no spec action takes it here)", got)}
    return found


def _heads_checked(state: dict[str, Any]) -> int:
    return sum(1 for row in state["msgs"] for channel in row if channel)


def check_head_rows(rows: Iterable[tuple[int, str, str | None]], show: int = SHOW, where: str = "the graph") -> Summary:
    """Check the channel heads of states given as (id, state_json, receives_json): receives_json a JSON list of
    [action, params_json] for the edges that leave the state taking a packet (None: none)."""
    summary = Summary(show)
    started = time.process_time()
    for node, state_json, receives_json in rows:
        try:
            state = json.loads(state_json)
            receives = []
            for action, params_json in json.loads(receives_json or "[]"):
                params = json.loads(params_json)
                receives.append((action, params["i"], params["j"]))
            found = check_heads(state, receives)
        except (EdgeError, ValueError, KeyError, TypeError) as e:
            raise EdgeError(f"{where}: state {node}: {e}") from None
        for _ in range(_heads_checked(state) - len(found)):
            summary.add(HEADS, None)
        for (i, j), diffs in sorted(found.items()):
            summary.add(HEADS, Disagreement(node, node, f"{HEADS}__{i}__{j}", HEADS, {"i": i, "j": j}, diffs))
    summary.cpu = time.process_time() - started
    return summary


# ---- many edges --------------------------------------------------------------------------------------------------

@dataclass
class Disagreement:
    src: int
    dst: int
    label: str
    action: str
    params: dict[str, Any]
    differences: dict[str, tuple[Any, Any]]

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.label, self.src, self.dst)

    @property
    def diff(self) -> str:
        return pretty_diff(self.differences)


@dataclass
class Summary:
    """Edges checked and agreed per action, and the first `show` disagreements per action."""

    show: int = SHOW
    checked: dict[str, int] = field(default_factory=dict)
    agreed: dict[str, int] = field(default_factory=dict)
    shown: dict[str, list[Disagreement]] = field(default_factory=dict)
    seconds: float = 0.0  # wall, from the start of check_graph to the merged result
    cpu: float = 0.0  # CPU seconds of the processes that checked the edges (Spark: the sum over tasks)

    @property
    def edges(self) -> int:
        """Edges checked (the channel heads, `HEADS`, are not edges)."""
        return sum(k for a, k in self.checked.items() if a != HEADS)

    @property
    def heads(self) -> int:
        return self.checked.get(HEADS, 0)

    @property
    def disagreed(self) -> int:
        """Edges and channel heads that disagree."""
        return sum(self.checked.values()) - sum(self.agreed.values())

    def add(self, action: str, found: Disagreement | None) -> None:
        self.checked[action] = self.checked.get(action, 0) + 1
        if found is None:
            self.agreed[action] = self.agreed.get(action, 0) + 1
        else:
            self._keep(action, [found])

    def _keep(self, action: str, found: list[Disagreement]) -> None:
        self.shown[action] = sorted(self.shown.get(action, []) + found, key=lambda d: d.key)[: self.show]

    def merge(self, other: Summary) -> None:
        self.cpu += other.cpu
        for action, k in other.checked.items():
            self.checked[action] = self.checked.get(action, 0) + k
            self.agreed[action] = self.agreed.get(action, 0) + other.agreed.get(action, 0)
            if other.shown.get(action):
                self._keep(action, other.shown[action])


def check_rows(rows: Iterable[tuple[int, int, str, str, str, str, str]], show: int = SHOW,
               where: str = "the graph") -> Summary:
    """Check edges given as (src, dst, label, action, params_json, src_json, dst_json); EdgeError names the edge."""
    summary = Summary(show)
    started = time.process_time()
    for src, dst, label, action, params_json, src_json, dst_json in rows:
        try:
            params = json.loads(params_json)
            diffs = check_edge(json.loads(src_json), action, params, json.loads(dst_json))
        except (EdgeError, ValueError) as e:  # json's errors are ValueErrors
            raise EdgeError(f"{where}: edge {src}:{dst} ({label}): {e}") from None
        summary.add(action, Disagreement(src, dst, label, action, params, diffs) if diffs else None)
    summary.cpu = time.process_time() - started
    return summary


def _partition(rows: Iterator[Any], show: int, where: str, heads: bool = False) -> Iterator[Summary | str]:
    try:  # Rows are tuples, in the order of COLUMNS (edges) or (id, state_json, receives_json) (heads)
        yield check_head_rows(rows, show, where) if heads else check_rows(rows, show, where)
    except EdgeError as e:  # returned, not raised: the driver reports it as bad input, not as a failed Spark job
        yield str(e)


def _receives_json(moves: list[tuple[str, str]]) -> str:
    return json.dumps(sorted(moves))


def require_graph(graph: Path) -> None:
    """EdgeError naming the folder unless it holds the pipeline's Parquet graph (nodes/ and edges/)."""
    missing = [part for part in ("nodes", "edges") if not (Path(graph) / part).is_dir()]
    if missing:
        raise EdgeError(f"{graph}: not a graph Parquet folder: no {' and no '.join(f'{m}/' for m in missing)} in it "
                        "(`zabref traces --parquet` writes one; `zabref edges --config NAME` finds a model's)")


def _read_local(graph: Path) -> tuple[dict[int, str], dict[str, list]]:
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow loads only when a Parquet graph is read)

    require_graph(graph)
    try:
        nodes = pq.read_table(graph / "nodes", columns=["id", "state_json"]).to_pydict()
        edges = pq.read_table(graph / "edges", columns=["src", "dst", "label", "action", "params_json"]).to_pydict()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise EdgeError(f"{graph}: not a readable graph Parquet folder: {e}") from None
    return dict(zip(nodes["id"], nodes["state_json"])), edges


def _local_head_rows(text: dict[int, str], edges: dict[str, list], only: int | None) -> Iterator[tuple]:
    moves: dict[int, list[tuple[str, str]]] = {}
    for src, action, params_json in zip(edges["src"], edges["action"], edges["params_json"]):
        if _PROCESS.match(action):
            moves.setdefault(src, []).append((action, params_json))
    for node in sorted(text) if only is None else [only] if only in text else []:
        yield node, text[node], _receives_json(moves.get(node, []))


def _local_rows(text: dict[int, str], edges: dict[str, list], graph: Path, only: tuple[int, int] | None,
                limit: int | None) -> Iterator[tuple]:
    rows = zip(edges["src"], edges["dst"], edges["label"], edges["action"], edges["params_json"])
    if only is not None:
        rows = (r for r in rows if (r[0], r[1]) == only)
    for k, (src, dst, label, action, params_json) in enumerate(rows):
        if limit is not None and k >= limit:
            return
        if src not in text or dst not in text:
            raise EdgeError(f"{graph}: edge {src}:{dst} ({label}) names a node that nodes/ does not hold")
        yield src, dst, label, action, params_json, text[src], text[dst]


def _collect(ss: Any, rows: Any, task: Any, partitions: int | None) -> list[Any]:
    """Run `task` on every partition of the joined rows; the join's shuffle makes `partitions` of them (default 4
    per core of the session), hashed by edge, and adaptive execution may not merge them (it would merge a small
    graph's into one task, one core)."""
    n = partitions or 4 * ss.sparkContext.defaultParallelism
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.coalescePartitions.enabled")
    old = {k: ss.conf.get(k, None) for k in keys}
    ss.conf.set(keys[0], str(n))
    ss.conf.set(keys[1], "false")
    try:
        return rows.rdd.mapPartitions(task).collect()
    finally:
        for k, v in old.items():
            ss.conf.unset(k) if v is None else ss.conf.set(k, v)


def check_graph(graph: Path, *, master: str | None = None, spark: bool = False, only: tuple[int, int] | None = None,
                limit: int | None = None, show: int = SHOW, partitions: int | None = None,
                heads: bool = True) -> Summary:
    """Check the edges of the Parquet graph folder `graph` (all, the edges `only` src -> dst, or the first `limit`)
    and, with `heads`, the channel heads of every state (of state src alone with `only`; none with `limit`): in
    this process, or on Spark (`partitions` tasks) when `spark` or a `master` is given."""
    started = time.monotonic()
    where = str(graph)
    heads = heads and limit is None
    if not spark and master is None:
        text, edges = _read_local(graph)
        summary = check_rows(_local_rows(text, edges, graph, only, limit), show, where)
        if heads:
            head = check_head_rows(_local_head_rows(text, edges, only[0] if only else None), show, where)
            summary.merge(head)
    else:
        from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)


        ss = session(master)
        edges = ss.read.parquet(str(graph / "edges")).select("src", "dst", "label", "action", "params_json")
        if only is not None:
            edges = edges.where((F.col("src") == only[0]) & (F.col("dst") == only[1]))
        if limit is not None:
            edges = edges.limit(limit)
        nodes = ss.read.parquet(str(graph / "nodes")).select("id", "state_json")
        rows = (edges.join(nodes.withColumnRenamed("id", "src").withColumnRenamed("state_json", "src_json"), "src")
                .join(nodes.withColumnRenamed("id", "dst").withColumnRenamed("state_json", "dst_json"), "dst")
                .select(*COLUMNS))
        parts = _collect(ss, rows, lambda part: _partition(part, show, where), partitions)
        if heads:
            moves = (ss.read.parquet(str(graph / "edges")).where(F.col("action").rlike(_RECEIVE_JAVA))
                     .groupBy("src").agg(F.collect_list(F.array("action", "params_json")).alias("moves"))
                     .withColumnRenamed("src", "id"))
            states = nodes if only is None else nodes.where(F.col("id") == only[0])
            head_rows = (states.join(moves, "id", "left")
                         .select("id", "state_json", F.to_json("moves").alias("receives_json")))
            parts += _collect(ss, head_rows, lambda part: _partition(part, show, where, heads=True), partitions)
        errors = [p for p in parts if isinstance(p, str)]
        if errors:
            raise EdgeError(sorted(errors)[0])
        summary = Summary(show)
        for part in parts:
            summary.merge(part)
    summary.seconds = time.monotonic() - started
    return summary
