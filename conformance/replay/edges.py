"""Theory of operation -- `zabref edges`: every edge of a model's TLC state graph taken on the sans-IO node.

An edge of the graph (`zabref traces` wrote it as Parquet: ``nodes`` id/state_json/initial, ``edges``
src/dst/label/action/params_json) says: from spec state src, action A with parameters P leads to spec state dst.
`check_edge` tests that one input of zabref's `zabref.core.node.Node` -- the object every decision of a running
server is made by -- does the same. It builds the world of src (`conformance.replay.inverse`: one node per server,
the channels as FIFO queues of QuorumPackets, each server's disk), gives server i the input a running server gets
for A, all at time `World.NOW` unless A is a timeout --

==================================  ==============================================================================
spec action                         node input
==================================  ==============================================================================
``<Role>Process<PACKET>(i, j)``     the head packet of channel j -> i, checked to be that PACKET (ACKNEWLEADER is
                                    the ACK of NEWLEADER, PROPOSALInSync a PROPOSAL; a packet of the core's also
                                    routed by ``handler_for`` to the handler of A), taken off the channel;
                                    ``packet(j, packet)`` (REQUEST, PING and SYNC of spec/ZabSync.tla included)
``ClientRequest(i)``                ``client_submit(value)``, the value the spec appends (dst's last transaction)
``BecomeLeader(i)``, ...            ``elected(i)``, ``elected(j)`` for BecomeFollower(i, j)
``FollowerTimeout(i)``, ...         ``tick`` at `World.TIMEOUT`, when every peer has been silent past its limit
``ClientSync(i)``                   ``client_sync``
``LeaderSendPING(i)``               ``tick`` with no timer due: its PINGs are steps when a waiting sync needs them
``LeaderSendSYNC(i)``               ``leader_send_sync`` (in a running leader, the end of the input before)
``Crash(i)``                        a new node from i's disk; every other server's connection to i closes
==================================  ==============================================================================

-- carries out the `Effects` as the runtime does (`World.apply`), maps every node back with
conformance/replay/mapping.py and compares with dst on every variable but `mapping.NOT_MAPPED` (a sync's ghost set
aside: `mapping.checked`), packets in flight and their data included. More checks hold the Effects to their
contract (docs/core.md): ``actions`` -- the node reported exactly A; ``deliver`` -- what each server delivered is
``history[lastCommitted .. lastCommitted']`` of the spec; ``role`` -- the role reported is the new ``state`` when it
changed (None otherwise; a crash reports none); ``answers`` -- a client's sync is answered with a zxid only at
FollowerProcessSYNC, with the follower's last delivered zxid; ``<var> (durable)`` -- the disks after ``persist``
hold the persistent variables (compared with dst when a disk departs from its core). A node that raises where the
spec takes the step is a difference too (``error``). An edge into a state that a model's rule leaves by one step
only (`plan.FOLLOWS`: LeaderSendSYNC under SyncAnsweredAtOnce) is held to the state after that step, which the node
takes in the same input (``then``).

The edges say what the spec does; what it does NOT do matters as much. `check_heads` takes every state of the graph
and every packet at the head of a channel in it, and holds the node's decision on that packet -- take it now, or
hold it at the head for later (``ZabCore.held``: FOLLOWERINFO at a server that does not lead, ACKEPOCH(-1) at a
leader in DISCOVERY) -- to the spec's: an edge ``<Role>Process<PACKET>(i, j)`` leaves the state, or none does. A
node that takes or refuses a packet the spec leaves waiting (refusing closes the connection), or holds one the spec
takes, disagrees there; the edge check alone cannot see that, since it hands the node only the packets the spec
takes. These checks are counted under the pseudo-action `HEADS`.

The whole graph (every edge, every state's heads, locally or on Spark) is `conformance.replay.edges_graph`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conformance.errors import ConformanceError
from conformance.replay import mapping
from conformance.replay.inverse import InverseError, World, zxid
from conformance.replay.plan import PACKET_ALIAS, PROCESS, SIMPLE
from conformance.tla.values import canonical_json
from zabref.core.packets import QuorumPacket
from zabref.core.zab import SPEC_ACTIONS
from zabref.errors import ZabError
from zabref.runtime.actionlog import SYNC_PACKETS  # a sync's packets: the node's own, not the core's

__all__ = ["EdgeError", "check_edge", "check_heads", "take_head", "METHODS", "ACTIONS", "SHOW", "HEADS"]

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


#: spec/ZabSync.tla's actions that take a packet: the node's ``packet`` input (no core method of that name).
SYNC_RECEIVES = frozenset({"LeaderProcessREQUEST", "FollowerProcessPING", "LeaderProcessPING", "FollowerProcessSYNC"})

#: Every action this checker takes: the core's, Crash, and spec/ZabSync.tla's.
ACTIONS = frozenset(METHODS) | {"Crash"} | SYNC_RECEIVES | {a for a in SIMPLE if a not in METHODS}


def _take(world: World, action: str, params: dict[str, Any], src: dict[str, Any],
          dst: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Server i takes `action` on `world`, as the input a running server gets for it; differences found before the
    state comparison (a refused packet, a fault miscounted)."""
    n = len(world.sids)
    m = PROCESS.match(action)
    if action not in ACTIONS:
        raise EdgeError(f"unknown action {action!r}: this checker takes {', '.join(sorted(ACTIONS))}")
    expected = SIMPLE.get(action, ("i", "j"))
    if set(params) != set(expected):
        raise EdgeError(f"{action} takes parameters {', '.join(expected)}, the edge has "
                        f"{', '.join(sorted(params)) or 'none'}")
    i = _sid(params, "i", n, action)
    node, now = world.nodes[i], World.NOW
    if m:
        j = _sid(params, "j", n, action)
        name = PACKET_ALIAS.get(m["packet"], m["packet"])
        channel = world.channels[(j, i)]
        head = channel[0].type.name if channel else "nothing"
        if head != name:
            return {"error": (f"{action} takes a {name} at the head of msgs[{j}][{i}]", f"the head is {head}")}
        if action in METHODS:
            handler = node.core.handler_for(j, channel[0])
            if handler is not getattr(type(node.core), METHODS[action]):
                return {"error": (f"core.receive runs {METHODS[action]}", f"core.receive runs {handler.__name__}")}
        world.apply(i, node.packet(j, channel.popleft(), now))
    elif action == "Crash":
        world.crash(i)
    elif action == "ClientRequest":
        try:
            value = dst["history"][i - 1][-1]["value"]
        except (KeyError, IndexError, TypeError):
            raise EdgeError(f"ClientRequest({i}): history[{i}] of dst has no last transaction") from None
        world.apply(i, node.client_submit(0, str(value).encode("utf-8"), now))
    elif action in ("BecomeLeader", "BecomeFollower"):
        world.apply(i, node.elected(_sid(params, "j", n, action) if action == "BecomeFollower" else i, now))
    elif action == "LeaderTimeout":
        # Which silence is a fault is the core's `counted` (the runtime's timeout decision, zabref.core.node): the
        # spec counts the timeout as a fault exactly when the Counted learners (with i) make a quorum.
        core = node.core
        heads = {f: (world.channels[(f, i)][0] if world.channels.get((f, i)) else None) for f in world.sids if f != i}
        quorum = core.is_quorum({i} | {f for f, head in heads.items() if core.counted(f, head)})
        fault = dst.get("faults") != src.get("faults")
        world.apply(i, node.tick(World.TIMEOUT))
        if quorum != fault:
            return {"faults (Counted)": (f"LeaderTimeout({i}) is {'' if fault else 'not '}a fault: the Counted "
                                         f"learners {'make' if fault else 'do not make'} a quorum",
                                         f"core.counted: they {'make' if quorum else 'do not make'} one")}
    elif action == "FollowerTimeout":
        world.apply(i, node.tick(World.TIMEOUT))
    elif action == "ClientSync":
        world.apply(i, node.client_sync(0, now))
    elif action == "LeaderSendPING":
        world.apply(i, node.tick(now))  # a tick with no timer due: the PINGs it sends are steps when a sync needs them
    else:  # LeaderSendSYNC
        world.apply(i, node.leader_send_sync())
    return {}


def _effects(world: World, src: dict[str, Any], dst: dict[str, Any], crashed: int | None,
             answered: int | None) -> dict[str, Any]:
    """The deliveries, roles and client answers the spec implies for this step (expected) and those the Effects
    reported (actual). A client's sync is answered (with a zxid: a refusal is always safe, and not judged) only by
    FollowerProcessSYNC at server ``answered``: its oldest waiting client (`inverse._syncs`: request id -1), with
    the zxid of the last transaction it has delivered."""
    want_deliver, got_deliver, want_role, got_role, want_answer, got_answer = [], [], [], [], [], []
    for s in world.sids:
        k = dst["lastCommitted"][s - 1]
        last = zxid(dst["history"][s - 1][k - 1]["zxid"]) if k else 0
        want_answer.append([[-1, {"zxid": last}]] if s == answered else [])
        got_answer.append([[rid, a] for rid, a in world.answers[s] if "zxid" in a])
        a, b = src["lastCommitted"][s - 1], dst["lastCommitted"][s - 1]
        want_deliver.append(dst["history"][s - 1][a:b] if b > a and s != crashed else [])
        got_deliver.append([mapping.txn((t.zxid, t.value.decode("utf-8", "backslashreplace")))
                            for t in world.delivered[s]])
        changed = src["state"][s - 1] != dst["state"][s - 1]
        want_role.append(dst["state"][s - 1] if changed and s != crashed else None)
        got_role.append(None if world.roles[s] is None else world.roles[s].name)
    return {"deliver": (want_deliver, got_deliver), "role": (want_role, got_role), "answers": (want_answer, got_answer)}


def check_edge(src: dict[str, Any], action: str, params: dict[str, Any], dst: dict[str, Any],
               then: tuple[str, dict[str, Any], dict[str, Any]] | None = None) -> dict[str, tuple[Any, Any]]:
    """The differences (variable -> (expected, actual)) between dst and what the node makes of src under
    action(params); empty when they agree. EdgeError when the edge is not one this checker can take.

    ``then``: (action, params, state) of the step the spec takes from dst whenever dst is reached (`FOLLOWS`: a
    leader's LeaderSendSYNC, under the model rule SyncAnsweredAtOnce). A node takes it in the same input, so the
    node is held to that state instead, having reported both actions; when the step is another server's, no input
    of that server came, and the disagreement says so."""
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
    i = params["i"]
    want = [action] if action != "Crash" else []
    diffs: dict[str, tuple[Any, Any]] = {}
    final = dst
    if then is not None:
        then_action, then_params, final = then
        if then_params.get("i") == i:
            want.append(then_action)
        else:
            diffs["follows"] = (f"{then_action}({then_params.get('i')}) in the same step (the model's rule: it "
                                "follows every step that enables it)", f"an input of server {i} only")
    taken = [name for name, _ in world.steps[i]]
    if taken != want:
        diffs["actions"] = (want, taken)
    expected = mapping.checked(final)
    names = [name for name in expected if name not in mapping.NOT_MAPPED]
    actual = world.to_spec()
    # one canonical text per side (mapping.differences makes one per variable, a quarter of the time): the same
    # verdict, since equal texts mean equal variables; only a difference is then named variable by variable
    same = canonical_json({k: expected[k] for k in names}) == canonical_json({k: actual.get(k) for k in names})
    if not same:
        diffs.update(mapping.differences(expected, actual, names))
    crashed = i if action == "Crash" else None
    answered = i if action == "FollowerProcessSYNC" else None
    for key, (want_, got) in _effects(world, src, final, crashed, answered).items():
        if want_ != got:
            diffs[key] = (want_, got)
    if not all(world.disks[s].holds(world.nodes[s].core) for s in world.sids):
        durable = world.durable()
        diffs.update(mapping.differences({k: final[k.split()[0]] for k in durable}, durable, list(durable)))
    return diffs


def _decision(world: World, i: int, j: int, packet: QuorumPacket) -> tuple[bool, str]:
    """(held, what node i does with ``packet`` at the head of msgs[j][i] now). A sync's packet (REQUEST, PING,
    SYNC) goes to the node's own handlers, never held: it is given to a copy of the world, and refused or taken."""
    node = world.nodes[i]
    if packet.type in SYNC_PACKETS:
        try:
            node.packet(j, packet, World.NOW)
        except ZabError as e:
            return False, f"refused (the connection closes): {e}"
        return False, "taken now, by the node's packet input"
    if node.core.held(j, packet):
        return True, "held: it waits at the head"
    try:
        return False, f"taken now, by {node.core.handler_for(j, packet).__name__}"
    except ZabError as e:
        return False, f"refused (the connection closes): {e}"


def take_head(state: dict[str, Any], i: int, j: int) -> tuple[list[tuple[str, tuple[tuple[str, int], ...]]],
                                                                 dict[str, Any]]:
    """Node i takes the packet at the head of msgs[j][i] of spec ``state`` (in a world of its own): the actions it
    reported, with their parameters, and the spec state it made (mapped back)."""
    world = World.from_spec(state)
    world.apply(i, world.nodes[i].packet(j, world.channels[(j, i)].popleft(), World.NOW))
    return list(world.steps[i]), world.to_spec()


def check_heads(state: dict[str, Any], receives: Iterable[tuple[str, int, int]]) -> dict[tuple[int, int], dict]:
    """For every non-empty channel j -> i of spec `state`: does the node take its head packet now exactly when the
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
        packet = channel[0]
        where = f"{packet.type.name} at the head of msgs[{j}][{i}]"
        held, got = _decision(World.from_spec(state) if packet.type in SYNC_PACKETS else world, i, j, packet)
        if (i, j) in spec:
            if held:
                found[(i, j)] = {where: (f"taken now, by {METHODS.get(spec[(i, j)], spec[(i, j)])}", got)}
        elif not held:
            found[(i, j)] = {where: ("held: it waits at the head (no spec action takes it here)", got)}
    return found


# ---- many edges --------------------------------------------------------------------------------------------------


