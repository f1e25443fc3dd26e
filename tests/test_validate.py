"""`zabref validate`: the program users run (`zabref cluster`) checked against spec/Zab.tla from its own action logs.

A real run (three server processes in normal mode: their own election, timeouts, client port) through a partition,
a leader's crash and restart and a new leader validates; a run of a seeded bug does not, and the report names the
step; malformed logs are refused with the file and line. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import helpers
import pytest
from click.testing import CliRunner
from helpers import established_leader

from conformance.errors import InputError
from conformance.replay.seeded import load_bugs, patched_package
from conformance.validate.actionlogs import read_logs
from conformance.validate.command import validate
from conformance.validate.merge import merge
from zabref.cli import main
from zabref.client import ClientError, ZabClient
from zabref.config import ClusterConfig
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port

TIMING = ClusterConfig(tick_ms=50, init_limit=10, sync_limit=5)


def _write(cluster: LocalCluster, sids, *values: str) -> None:
    with ZabClient([cluster.client_addresses()[s - 1] for s in sorted(sids)], attempts=60) as c:
        for v in values:
            c.submit(v)


def _actions(logdir: Path) -> list[tuple[int, str]]:
    """(sid, action) of every step line, and (sid, "restart") of every start."""
    out = []
    for s, events in read_logs(logdir).events.items():
        out += [(s, e.fields.get("action", e.kind)) for e in events if e.kind in ("step", "restart")]
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_run_through_a_partition_a_crash_and_a_new_leader_is_a_behaviour_of_the_spec(tmp_path: Path) -> None:
    logs = tmp_path / "actions"
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, TIMING)
        with LocalCluster(path, action_log=logs).start() as cluster:
            sids = {1, 2, 3}
            first = helpers.wait_for("a leader", lambda: established_leader(cluster, sids), 30)
            _write(cluster, sids, "a", "b")
            # a follower cut off from both others (both ends cut: TCP closes, its leader forgets it), then healed
            cut = min(sids - {first})
            for s in sids:
                with cluster[s].control() as c:
                    c.request("partition", peers=sorted(sids - {s}) if s == cut else [cut])
            _write(cluster, sids - {cut}, "c")
            for s in sids:
                with cluster[s].control() as c:
                    c.request("heal")
            helpers.wait_for("the cut follower back", lambda: established_leader(cluster, sids) == first, 30)
            # the leader's process dies (SIGKILL); the others elect a new leader; the old one restarts and follows
            cluster[first].kill()
            second = helpers.wait_for("a new leader", lambda: established_leader(cluster, sids - {first}), 30)
            _write(cluster, sids - {first}, "d")
            cluster[first].start()
            cluster[first].wait_ready(30)
            helpers.wait_for("the old leader to follow", lambda: established_leader(cluster, sids) == second, 30)
            _write(cluster, sids, "e")
    finally:
        release_base_port(base)
    seen = _actions(logs)
    assert second != first
    assert {s for s, a in seen if a == "BecomeLeader"} >= {first, second}
    assert sum(1 for s, a in seen if (s, a) == (first, "restart")) == 2, "the killed leader started twice"
    assert {a for _, a in seen} >= {"ClientRequest", "LeaderProcessACK", "FollowerProcessCOMMIT",
                                    "FollowerProcessNEWLEADER", "LeaderProcessFOLLOWERINFO"}
    # the healed follower's sync stages its history: the DIFF's line says "the first k transactions", in O(1)
    syncs = [e.fields["vars"] for evs in read_logs(logs).events.values() for e in evs
             if e.fields.get("action") in ("FollowerProcessDIFF", "FollowerProcessTRUNC")]
    assert syncs and all("staged_history" not in v and v["staged"]["prefix"] for v in syncs), syncs
    assert max(v["staged"]["len"] for v in syncs) >= 2, syncs
    result = validate(logs)
    assert result.passed, result.failure
    assert result.matched == result.steps > 50 and result.servers == 3


VALIDATED_BUGS = [b for b in load_bugs() if b.validated]


def test_the_catalogue_names_bugs_that_validation_must_catch() -> None:
    assert len(VALIDATED_BUGS) >= 2, [b.name for b in VALIDATED_BUGS]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("bug", VALIDATED_BUGS, ids=lambda b: b.name)
def test_a_run_of_a_seeded_bug_fails_validation_at_its_action(tmp_path: Path, bug) -> None:
    logs = tmp_path / "actions"
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, TIMING)
        with patched_package(bug, tmp_path) as root, LocalCluster(path, action_log=logs, code_root=root) as cluster:
            cluster.start()
            helpers.wait_for("a leader", lambda: established_leader(cluster, {1, 2, 3}), 30)
            # a buggy cluster may never answer: submit without waiting for the answer, then wait for the bug's step
            with ZabClient(cluster.client_addresses(), timeout=2.0, attempts=1) as c:
                with contextlib.suppress(ClientError, OSError):
                    c.submit("a")
            helpers.wait_for(f"a {bug.action} step", lambda: any(a == bug.action for _, a in _actions(logs)), 30)
    finally:
        release_base_port(base)
    result = validate(logs)
    assert not result.passed
    assert result.matched < result.steps
    assert f"takes {bug.action}(" in result.failure, result.failure


def test_a_dial_that_the_leaders_next_incarnation_accepted_is_placed_after_its_restart() -> None:
    """Logs of simulation seed 144 (``zabref simulate --seed 144 --steps 100 --validate``): server 2 decides to follow
    3 and logs its FOLLOWERINFO (t=13); 3 loses power before the dial arrives (its last step t=14, its restart t=15),
    and 3's next incarnation accepts the connection and takes that FOLLOWERINFO (t=20). By the clock the dial comes
    before the restart, whose Crash would drop the packet; the merge places the dial after the restart, where the
    connection exists. (Before this rule: "no order of the logs is a behaviour of spec/Zab.tla".)"""
    folder = Path(__file__).parent / "fixtures" / "actionlogs" / "dial-across-restart"
    steps = merge(read_logs(folder)).steps
    crash = next(k for k, s in enumerate(steps) if s.action == "Crash" and s.sid == 3)
    dial = next(k for k, s in enumerate(steps) if s.action == "BecomeFollower" and s.sid == 2)
    taken = next(k for k, s in enumerate(steps) if s.action == "LeaderProcessFOLLOWERINFO" and s.params["j"] == 2)
    assert crash < dial < taken
    assert validate(folder).passed


# ------------------------------------------------------------------------------------------ bad input


def _line(sid: int, n: int, **fields) -> str:
    base = {"sid": sid, "n": n, "t": 1000 + n, "kind": "restart",
            "vars": {"history": [], "accepted_epoch": 0, "current_epoch": 0, "state": "LOOKING",
                     "zab_state": "ELECTION", "leader": 0, "last_committed": 0, "staged_history": [],
                     "new_epoch": 0, "learner_phase": {}, "learner_last_zxid": {}, "ack_index": {}}}
    base.update(fields)
    return json.dumps(base) + "\n"


def test_a_malformed_line_is_refused_with_its_file_and_line(tmp_path: Path) -> None:
    good = _line(1, 0)
    (tmp_path / "actions-1.jsonl").write_text(good + '{"sid": 1, "n": 1, "t": "soon", "kind": "step"}\n' + good)
    with pytest.raises(InputError, match=r"actions-1\.jsonl:2"):
        validate(tmp_path)
    out = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert out.exit_code == 3 and "actions-1.jsonl:2" in out.output


def test_a_gap_in_a_servers_line_numbers_is_refused(tmp_path: Path) -> None:
    (tmp_path / "actions-1.jsonl").write_text(_line(1, 0) + _line(1, 2))
    with pytest.raises(InputError, match=r"actions-1\.jsonl:2"):
        validate(tmp_path)


def test_a_torn_last_line_is_dropped_and_reported(tmp_path: Path) -> None:
    (tmp_path / "actions-1.jsonl").write_text(_line(1, 0) + _line(1, 1)[:25])
    logs = read_logs(tmp_path)
    assert len(logs.events[1]) == 1 and "actions-1.jsonl:2" in logs.notes[0]


@pytest.mark.parametrize("bad", [b'{"sid": 1, "n": 1, "t"\n', b'{"sid": 1, "n": NaN}\n',
                                 b'{"sid": 1, "kind": "\xff"}\n'], ids=["garbled", "nan", "not-utf8"])
def test_a_line_that_is_not_json_before_the_last_is_refused_with_its_file_and_line(tmp_path: Path, bad: bytes) -> None:
    """orjson reads the lines (bytes): its error, invalid UTF-8 included, is an input error of that line."""
    (tmp_path / "actions-1.jsonl").write_bytes(_line(1, 0).encode() + bad + _line(1, 0).encode())
    with pytest.raises(InputError, match=r"actions-1\.jsonl:2: not JSON"):
        read_logs(tmp_path)


def test_a_last_line_torn_inside_a_character_is_dropped_and_reported(tmp_path: Path) -> None:
    line = _line(1, 1).replace('"LOOKING"', '"LOOKING\u00e9"').encode()
    torn = line[: line.index("\u00e9".encode()) + 1]  # the first of the character's two bytes
    (tmp_path / "actions-1.jsonl").write_bytes(_line(1, 0).encode() + torn)
    logs = read_logs(tmp_path)
    assert len(logs.events[1]) == 1 and "actions-1.jsonl:2: torn last line" in logs.notes[0]


def test_a_server_that_starts_with_data_is_refused(tmp_path: Path) -> None:
    line = json.loads(_line(1, 0))
    line["vars"]["accepted_epoch"] = 3
    (tmp_path / "actions-1.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(InputError, match=r"actions-1\.jsonl:1.*empty data directory"):
        validate(tmp_path)


def test_a_check_tlc_did_not_finish_is_no_verdict_exit_4(tmp_path: Path, monkeypatch) -> None:
    """TLC dying (out of memory, killed) says nothing about the logs: exit 4 and INCONCLUSIVE, never 0, and not 1
    (which says the run departed from the spec) -- for the whole check and for a window of the chain."""
    from types import SimpleNamespace

    import conformance.tla.tools as tools
    import conformance.validate.command as v
    from conformance.tla.output import Outcome

    for sid in (1, 2, 3):
        (tmp_path / f"actions-{sid}.jsonl").write_text(_line(sid, 0))
    died = SimpleNamespace(outcome=Outcome.ERROR, depth=None, message="java.lang.OutOfMemoryError",
                           result_text=lambda: "error", trace=(), distinct_states=None)
    monkeypatch.setattr(v, "run_tlc", lambda *a, **k: died)
    result = validate(tmp_path, work=tmp_path, window=0)
    assert result.inconclusive and not result.passed and "OutOfMemoryError" in result.failure
    out = CliRunner().invoke(main, ["validate", str(tmp_path), "--window", "0"])
    assert out.exit_code == 4 and "result=INCONCLUSIVE" in out.output, out.output
    fixture = Path(__file__).parent / "fixtures" / "actionlogs" / "dial-across-restart"
    monkeypatch.setattr(tools, "run_tlc", lambda *a, **k: died)
    result = validate(fixture, work=tmp_path, window=20, workers=1)
    assert result.inconclusive and not result.passed and "OutOfMemoryError" in result.failure, result.failure
    out = CliRunner().invoke(main, ["validate", str(fixture), "--window", "20", "--workers", "1"])
    assert out.exit_code == 4 and "result=INCONCLUSIVE" in out.output, out.output
