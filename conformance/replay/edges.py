"""Theory of operation -- `zabref edges`: every edge of a model's TLC state graph taken on the sans-IO core.

An edge of the graph (`zabref traces` wrote it as Parquet: ``nodes`` id/state_json/initial, ``edges``
src/dst/label/action/params_json) says: from spec state src, action A with parameters P leads to spec state dst.
`check_edge` tests that one step of zabref's core does the same. It builds the world of src
(`conformance.replay.inverse`: one `ZabCore` per server, the channels as FIFO queues of QuorumPackets, each server's
disk), makes the server take A through the entry point a running server uses --

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

The whole graph (every edge, every state's heads, locally or on Spark) is `conformance.replay.edges_graph`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.errors import ConformanceError
from conformance.replay import mapping
from conformance.replay.inverse import InverseError, World
from conformance.replay.plan import PACKET_ALIAS, PROCESS, SIMPLE
from conformance.tla.values import canonical_json
from zabref.core.zab import SPEC_ACTIONS
from zabref.errors import ZabError

__all__ = ["EdgeError", "check_edge", "check_heads", "METHODS", "SHOW", "HEADS"]

#: Spec action -> the core's method of that name (zabref.core.zab.SPEC_ACTIONS, inverted).
METHODS = {action: method for method, action in SPEC_ACTIONS.items()}

#: Disagreements kept per action (the first by label, src, dst).
SHOW = 3

#: The pseudo-action under which `check_heads` counts the channel heads it checked.
HEADS = "ChannelHead"


class EdgeError(ConformanceError):
    """An edge that is not a step this checker can take (unknown action, bad parameters, a state the inverse mapping
    cannot hold); the message names the edge and, when known, the graph file."""


def _sid(params: dict[str, Any], name: str, n: int, action: str) -> int:
    v = params.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= n:
        raise EdgeError(f"{action}: parameter {name!r} must be a server in 1..{n}, not {v!r}")
    return v


def _take(world: World, action: str, params: dict[str, Any], src: dict[str, Any],
          dst: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Server i takes `action` on `world`; differences found before the state comparison (a refused packet)."""
    n = len(world.sids)
    m = PROCESS.match(action)
    if action not in METHODS and action != "Crash":
        raise EdgeError(f"unknown action {action!r}: this checker takes Crash and the spec actions of the core's "
                        f"methods ({', '.join(sorted(METHODS))})")
    expected = SIMPLE.get(action, ("i", "j"))
    if set(params) != set(expected):
        raise EdgeError(f"{action} takes parameters {', '.join(expected)}, the edge has "
                        f"{', '.join(sorted(params)) or 'none'}")
    i = _sid(params, "i", n, action)
    core = world.cores[i]
    if m:
        j = _sid(params, "j", n, action)
        name = PACKET_ALIAS.get(m["packet"], m["packet"])
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
    elif action == "LeaderTimeout":
        # Which silence is a fault is the core's `counted` (the runtime's timeout decision, zabref.core.node): the
        # spec counts the timeout as a fault exactly when the Counted learners (with i) make a quorum.
        heads = {f: (world.channels[(f, i)][0] if world.channels.get((f, i)) else None) for f in world.sids if f != i}
        quorum = core.is_quorum({i} | {f for f, head in heads.items() if core.counted(f, head)})
        fault = dst.get("faults") != src.get("faults")
        world.apply(i, core.leader_timeout())
        if quorum != fault:
            return {"faults (Counted)": (f"LeaderTimeout({i}) is {'' if fault else 'not '}a fault: the Counted "
                                         f"learners {'make' if fault else 'do not make'} a quorum",
                                         f"core.counted: they {'make' if quorum else 'do not make'} one")}
    else:
        method = {"BecomeLeader": core.become_leader, "FollowerTimeout": core.follower_timeout}[action]
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
        refused = _take(world, action, params, src, dst)
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


# ---- many edges --------------------------------------------------------------------------------------------------


