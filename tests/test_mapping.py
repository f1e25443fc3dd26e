"""The mapping from implementation state to spec variables (conformance/replay/mapping.py)."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.graph.dotparse import Node, parse_dot_file
from conformance.replay.mapping import MAPPED, NOT_MAPPED, differences, packet, spec_state, zxid_pair
from zabref.core.zab import ZabCore

SPEC = Path(__file__).resolve().parent.parent / "spec" / "Zab.tla"


def spec_variables() -> list[str]:
    text = SPEC.read_text()
    block = text[text.index("VARIABLES"): text.index("persistentVars ==")]
    sync = (SPEC.parent / "ZabSync.tla").read_text()
    sync_block = sync[sync.index("VARIABLE\n"): sync.index("syncVars ==")]
    return re.findall(r"^\s{4}([a-zA-Z]\w*),?\s*\\\*", block + sync_block, re.M)


def test_every_spec_variable_is_mapped_or_has_a_stated_reason():
    """Zab.tla's variables and the one ZabSync.tla adds (pendingSyncs)."""
    variables = spec_variables()
    assert len(variables) == 18, variables
    assert sorted(variables) == sorted([*MAPPED, *NOT_MAPPED])
    assert all(len(reason) > 20 for reason in NOT_MAPPED.values())


def snapshot(core: ZabCore, held=None) -> dict:
    return {"sid": core.sid, "variables": core.variables(), "held": held or {}}


def test_fresh_servers_map_to_the_spec_initial_state(tiny_dot):
    initial = next(s for s in parse_dot_file(str(tiny_dot)) if isinstance(s, Node) and s.initial)
    cores = [ZabCore(sid, [1, 2, 3]) for sid in (1, 2, 3)]
    actual = spec_state([snapshot(c) for c in cores])
    assert differences(initial.state, actual) == {}


def test_a_difference_is_reported_per_variable():
    cores = [ZabCore(sid, [1, 2, 3]) for sid in (1, 2, 3)]
    expected = spec_state([snapshot(c) for c in cores])
    held = {2: [{"type": "FOLLOWERINFO", "zxid": 0, "data": 2}]}
    actual = spec_state([snapshot(cores[0], held), snapshot(cores[1]), snapshot(cores[2])])
    diff = differences(expected, actual)
    assert list(diff) == ["msgs"]
    assert actual["msgs"][1][0] == [{"data": 2, "type": "FOLLOWERINFO", "zxid": [0, 0]}]


def test_packets_map_to_the_spec_packet_records():
    assert zxid_pair((2 << 32) | 5) == [2, 5]
    assert packet({"type": "PROPOSAL", "zxid": (1 << 32) | 1, "data": "7"}) == {
        "data": 7, "type": "PROPOSAL", "zxid": [1, 1]}
    assert packet({"type": "ACKEPOCH", "zxid": 0, "data": -1})["data"] == -1
    assert packet({"type": "LEADERINFO", "zxid": 1 << 32, "data": 65536})["data"] == "n/a"
    assert packet({"type": "SNAP", "zxid": 1 << 32 | 1, "data": [[1 << 32 | 1, "1"]]})["data"] == [
        {"value": 1, "zxid": [1, 1]}]


def test_a_syncs_packets_and_waiting_syncs_map_to_zabsync_with_the_ghost_aside():
    """REQUEST (zxid -1), a step PING (its zxid `payloads.PING_STEP`) and SYNC carry <<0, 0>> in the spec; a PING that
    is no step shows its zxid, so a keepalive held as a step is a difference. `checked` sets the spec's ghost aside."""
    from conformance.replay.mapping import checked, pendingSyncs
    from zabref.core import payloads

    assert packet({"type": "REQUEST", "zxid": -1, "data": None}) == {"data": "n/a", "type": "REQUEST", "zxid": [0, 0]}
    assert packet({"type": "PING", "zxid": payloads.PING_STEP}) == {"data": 0, "type": "PING", "zxid": [0, 0]}
    assert packet({"type": "PING", "zxid": 5})["zxid"] == [0, 5]
    assert packet({"type": "SYNC", "zxid": 0}) == {"data": "n/a", "type": "SYNC", "zxid": [0, 0]}
    snaps = [{"sid": s, "variables": {}, "syncs": [{"learner": 2, "point": 1, "awaits": {"2": 0, "3": 1}}] if s == 1
              else []} for s in (1, 2, 3)]
    assert pendingSyncs(snaps) == [[{"awaits": [-1, 0, 1], "learner": 2, "point": 1}], [], []]
    ghost = {"mark": 1, "seen": [1, 1]}
    state = {"pendingSyncs": [[{"awaits": [-1, 0, 1], "ghost": ghost, "learner": 2, "point": 1}], [], []],
             "msgs": [[[{"type": "SYNC", "zxid": [0, 0], "data": ghost}]]]}
    assert checked(state) == {"pendingSyncs": pendingSyncs(snaps),
                              "msgs": [[[{"type": "SYNC", "zxid": [0, 0], "data": "n/a"}]]]}
    assert checked({"msgs": [[[{"type": "SYNC", "data": ghost}]]]})["msgs"][0][0][0]["data"] == ghost  # Zab.tla's
