"""The fault runner (issue 6): the checker on hand-made histories, the runtime's fault layer, and the CI fault run.

The CI run is bounded: 30 s of faults on 3 servers with a fixed seed (ZABREF_FAULTS_SECONDS / ZABREF_FAULTS_SEED
override both; the long mode is `zabref faults --long`, docs/faults.md). Loopback only.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace

import helpers
import pytest
from click.testing import CliRunner

from conformance.faults.availability import availability
from conformance.faults.history import Read, Sample, Write, check
from conformance.validate.actionlogs import read_logs
from zabref.cli import main
from zabref.client import ZabClient
from zabref.config import ClusterConfig
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port
from zabref.runtime.control import ControlError, ControlPort
from zabref.runtime.drivers import NormalDriver

# ------------------------------------------------------------------------------------------ the checker


def ok(value: str, zxid: int, invoked: float, completed: float, client: int = 0) -> Write:
    return Write(value, client, invoked, completed, "ok", zxid)


def unknown(value: str, invoked: float, completed: float, client: int = 0) -> Write:
    return Write(value, client, invoked, completed, "unknown")


SEQ = [(0x100000001, "a"), (0x100000002, "b"), (0x100000003, "c")]
WRITES = [ok("a", 0x100000001, 0, 1), ok("b", 0x100000002, 1, 2), ok("c", 0x100000003, 2, 3)]


def test_a_clean_history_passes_and_a_server_catching_up_is_a_prefix() -> None:
    samples = [Sample(2, 0, tuple(SEQ[:1])), Sample(2, 0x100000001, tuple(SEQ[1:]))]
    v = check(WRITES, {1: SEQ, 2: SEQ, 3: SEQ}, samples)
    assert v.ok and (v.acked, v.lost, v.divergent, v.delivered) == (3, 0, 0, 3)
    # a server still catching up is a prefix: not divergent (but what it misses is lost)
    v = check(WRITES, {1: SEQ, 2: SEQ[:2]})
    assert (v.divergent, v.lost) == (0, 1)
    assert "'c' acknowledged as zxid 0x100000003, missing at servers [2]" in v.examples[0]


def test_a_lost_acknowledged_write_is_counted() -> None:
    v = check(WRITES, {1: SEQ[:2], 2: SEQ[:2], 3: SEQ[:2]})
    assert not v.ok and v.lost == 1 and v.divergent == 0


def test_a_divergence_is_counted_in_the_finals_and_in_a_sample() -> None:
    other = [SEQ[0], (0x100000002, "c"), (0x100000003, "b")]
    v = check(WRITES, {1: SEQ, 2: other})
    assert v.divergent == 1 and "server 2 diverges from server 1 at position 1" in v.examples[0]
    # a server delivered something mid-run that the final sequences do not have, then recovered
    v = check(WRITES, {1: SEQ, 2: SEQ}, [Sample(3, 0x100000001, ((0x100000002, "x"),))])
    assert v.divergent == 1 and not v.ok
    v = check(WRITES, {1: SEQ, 2: SEQ}, [Sample(3, 0x200000007, ((0x200000008, "c"),))])
    assert v.divergent == 1 and "never delivered" in v.examples[0]


def test_a_value_delivered_twice_is_a_duplicate() -> None:
    seq = [*SEQ, (0x100000004, "b")]
    v = check(WRITES, {1: seq, 2: seq})
    assert v.duplicates == 2 and not v.ok  # once per server that delivered it twice
    assert v.misplaced == 1  # and "b" was acknowledged as 0x100000002, not 0x100000004


def test_an_unacknowledged_value_before_an_earlier_acknowledged_write_is_out_of_order() -> None:
    # "x" was sent at t=5, after "c" was acknowledged at t=3, yet it is delivered before "c"
    writes = [*WRITES[:2], ok("c", 0x100000004, 2, 3), unknown("x", 5, 15)]
    seq = [*SEQ[:2], (0x100000003, "x"), (0x100000004, "c")]
    v = check(writes, {1: seq, 2: seq})
    assert v.out_of_order == 1 and v.unacked_delivered == 1 and not v.ok
    # ... but a value that sat in a paused server and shows up late, after its client's next value, is fine
    writes = [*WRITES, unknown("late", 3, 13, client=1), ok("next", 0x100000005, 13, 14, client=1)]
    seq = [*SEQ, (0x100000005, "next"), (0x100000006, "late")]
    assert check(writes, {1: seq, 2: seq}).ok


def test_a_value_nobody_submitted_or_that_was_refused_is_a_phantom() -> None:
    writes = [*WRITES, Write("r", 0, 4, 5, "fail")]
    v = check(writes, {1: [*SEQ, (0x100000004, "r"), (0x100000005, "zz")]})
    assert v.phantoms == 2 and not v.ok


def rd(end: int, invoked: float, completed: float, *, reader: int = 0, server: int = 1, session: int = 1,
       synced: bool = True) -> Read:
    return Read(reader, server, session, invoked, completed, synced, end)


def test_reads_that_fit_one_order_pass() -> None:
    """A synced read may see a write that was still in flight, or miss one acknowledged while it ran."""
    reads = [rd(0, -1, 0.5), rd(0x100000001, 0.5, 1.5), rd(0x100000001, 1.5, 2.5), rd(0x100000003, 2.5, 3.5),
             rd(0x100000002, 0.2, 9, synced=False, session=2)]
    v = check(WRITES, {1: SEQ}, reads=reads)
    assert v.ok and (v.reads, v.synced_reads, v.stale_reads, v.backward_reads) == (5, 4, 0, 0), v.examples


def test_a_synced_read_missing_a_write_acknowledged_before_it_is_stale() -> None:
    v = check(WRITES, {1: SEQ}, reads=[rd(0x100000001, 2.5, 3)])  # "b" was acknowledged at 2
    assert not v.ok and v.stale_reads == 1
    assert "sync+read at server 1 saw up to zxid 0x100000001, but 'b' (zxid 0x100000002) was acknowledged before" \
        in v.examples[0]
    assert v.missed == [(rd(0x100000001, 2.5, 3), 0x100000002)]  # for a caller that names the bug behind it
    # A plain read may be that stale: only sequential consistency is promised for it.
    assert check(WRITES, {1: SEQ}, reads=[rd(0x100000001, 2.5, 3, synced=False)]).ok


def test_reads_that_are_each_possible_but_not_together_are_stale() -> None:
    """Two writes in flight at once, "a" before "b"; one reader saw "b", a later reader saw neither. Each read alone
    fits an order; together they would need "b" to take effect before "a"."""
    writes = [unknown("a", 0, 10), unknown("b", 0, 10)]
    seq = [(0x100000001, "a"), (0x100000002, "b")]
    reads = [rd(0x100000002, 1, 2, reader=1), rd(0, 3, 4, reader=2)]
    assert check(writes, {1: seq}, reads=reads[:1]).ok and check(writes, {1: seq}, reads=reads[1:]).ok
    v = check(writes, {1: seq}, reads=reads)
    # the read that missed it named first, then the one that had seen it
    assert v.stale_reads == 1 and v.examples[0].endswith(
        "(reader 2 at server 1, began then and read up to 0x0; reader 1 at server 1, read by then up to "
        "0x100000002)"), v.examples
    assert v.missed == []  # no write acknowledged before either read began is missing: no read to put down to a bug


def test_a_read_going_backwards_on_one_connection_is_counted() -> None:
    reads = [rd(0x100000002, 2, 2.1, synced=False), rd(0x100000001, 3, 3.1, synced=False)]
    v = check(WRITES, {1: SEQ}, reads=reads)
    assert v.backward_reads == 1 and "delivered up to 0x100000002, then up to 0x100000001" in v.examples[0]
    # on a new connection (the server may have restarted, or be another one) it is not a violation
    assert check(WRITES, {1: SEQ}, reads=[reads[0], rd(0x100000001, 3, 3.1, synced=False, session=2)]).ok
    v = check(WRITES, {1: SEQ}, reads=[rd(0x200000001, 3, 3.1, synced=False)])
    assert v.divergent == 1 and "which the reference never delivered" in v.examples[0]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_leader_cut_off_confirms_no_sync(tmp_path: Path) -> None:
    """A leader cut off from both followers keeps leading for syncLimit ticks (3 s here) while they elect a new
    leader, which commits a write. A sync+read at the old leader must not miss it: the clean leader cannot get a
    quorum to confirm its leadership and refuses the sync (retry) when it steps down. With the seeded bug
    leader_sync_without_quorum it answers at once with its stale commit point, and the read checker calls the read
    stale."""
    import socket
    import time

    from conformance.replay.seeded import load_bug, patched_package
    from zabref.net.clientwire import call as request_once

    def run(code_root) -> tuple[dict, int]:
        base = find_free_base_port(3)
        try:
            path = cluster_config(tmp_path / ("bug" if code_root else "clean"), 3, base,
                                  ClusterConfig(tick_ms=100, init_limit=10, sync_limit=30))
            with LocalCluster(path, code_root=code_root) as cluster:
                cluster.start()
                old = helpers.wait_for("a leader", lambda: helpers.established_leader(cluster, (1, 2, 3)), 30)
                with ZabClient(cluster.client_addresses()) as c:
                    c.submit("before")
                followers = tuple(s for s in (1, 2, 3) if s != old)
                for a, b in [(old, f) for f in followers] + [(f, old) for f in followers]:
                    with cluster[a].control(timeout=5) as c:
                        c.request("partition", peers=[b])
                new = helpers.wait_for("a new leader", lambda: helpers.established_leader(cluster, followers), 20)
                with cluster[old].control(timeout=5) as c:
                    assert c.request("state")["variables"]["state"] == "LEADING"  # it does not know yet
                invoked_write = time.monotonic()
                me = cluster[new].me
                with ZabClient([(me.host, me.client_port)]) as c:
                    zxid = c.submit("after")
                write = Write("after", 0, invoked_write, time.monotonic(), "ok", zxid)
                me = cluster[old].me
                invoked = time.monotonic()
                with socket.create_connection((me.host, me.client_port), timeout=20) as sock:
                    answer = request_once(sock, {"op": "sync"})
                    if "error" in answer:
                        return answer, 0
                    end = request_once(sock, {"op": "read", "from_zxid": 0, "limit": 1})["zxid"]
                with ZabClient([(me.host, me.client_port) for me in (cluster[f].me for f in followers)]) as c:
                    final = c.read()
        finally:
            release_base_port(base)
        first = Write("before", 0, 0.0, invoked_write, "ok", final[0][0])
        v = check([first, write], {1: final}, reads=[Read(0, old, 1, invoked, time.monotonic(), True, end)])
        return answer, v.stale_reads

    answer, stale = run(None)
    assert stale == 0 and "stopped leading before a quorum confirmed the sync" in answer["error"], answer
    assert answer["retry"] is True
    with patched_package(load_bug("leader_sync_without_quorum"), tmp_path) as root:
        answer, stale = run(root)
    assert "error" not in answer and stale == 1, answer


def test_bad_histories_are_rejected() -> None:
    with pytest.raises(ValueError, match="submitted twice"):
        check([*WRITES, WRITES[0]], {1: SEQ})
    with pytest.raises(ValueError, match="zxid goes with outcome ok"):
        Write("a", 0, 0, 1, "unknown", 5)


# ------------------------------------------------------------------------------------------ the fault layer


def test_stepping_is_refused_in_normal_mode() -> None:
    """release, release_vote and tick step a server: in normal mode inputs and time are the clock's, not the
    driver's."""
    port = ControlPort(SimpleNamespace(driver=SimpleNamespace(name="normal")), b"t" * 32)
    for line in (b'{"op": "release", "from": 2}', b'{"op": "release_vote", "from": 2}', b'{"op": "tick"}'):
        assert "only in control mode" in asyncio.run(port.answer(line))["error"]


def test_a_clock_jump_is_refused_in_control_mode_and_out_of_range() -> None:
    """The control mode's clock is logical (`tick` moves it); a jump is a positive number of seconds, at most 600."""
    port = ControlPort(SimpleNamespace(driver=SimpleNamespace(name="control")), b"t" * 32)
    assert "logical" in asyncio.run(port.answer(b'{"op": "clock_jump", "seconds": 1}'))["error"]
    port = ControlPort(SimpleNamespace(driver=SimpleNamespace(name="normal")), b"t" * 32)
    for seconds in ("0", "-1", '"5"', "true", "601", "null"):
        answer = asyncio.run(port.answer(b'{"op": "clock_jump", "seconds": %s}' % seconds.encode()))
        assert '"seconds" must be a number' in answer["error"], (seconds, answer)


@pytest.mark.pure_build  # a stand-in server, whose tick answers a string
def test_a_clock_jump_moves_the_clock_in_its_own_event_after_what_was_queued_before_it() -> None:
    """A packet that arrived before the jump and still waits in the pump's queue is taken on the clock before it (a
    leader's follower PING taken on the jumped clock looked fresh, and the leader took no LeaderTimeout); the tick
    of the jump sees the clock moved."""
    driver = NormalDriver(0.1)
    driver._clock = lambda: 50.0
    queued: list = []
    ticks: list[float] = []
    host = SimpleNamespace(tick=lambda now: ticks.append(now) or "ticked")

    async def call(event):
        queued.append(event)
        await asyncio.sleep(0)
        return event()

    host.call = call

    async def scenario() -> tuple[float, str]:
        jumping = asyncio.ensure_future(driver.jump(host, 2.0))
        await asyncio.sleep(0)  # the jump's event is queued, behind (say) a PING that arrived before it
        before = driver.now()  # what the PING is taken at
        return before, await jumping

    before, answer = asyncio.run(scenario())
    assert (before, ticks, answer) == (50.0, [52.0], "ticked")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_clock_jump_makes_a_follower_and_then_the_leader_time_out(tmp_path: Path) -> None:
    """The fault runner's `clock` fault: a server whose clock moves forward sees its peers silent that long and takes
    the spec's timeout at once -- a follower its FollowerTimeout (and rejoins the same leader), a leader its
    LeaderTimeout (and the others elect a leader of a later epoch). Without the jump, the same tick takes nothing."""
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, ClusterConfig(tick_ms=100, init_limit=10, sync_limit=5))
        with LocalCluster(path).start() as cluster:
            sids = {1, 2, 3}
            old = helpers.wait_for("a leader", lambda: helpers.established_leader(cluster, sids), 30)
            epoch = _state(cluster, old)["current_epoch"]
            follower = min(sids - {old})
            with cluster[follower].control() as c:
                taken = [a["name"] for a in c.request("clock_jump", seconds=0.01)["actions"]]
                assert "FollowerTimeout" not in taken, taken
                taken = [a["name"] for a in c.request("clock_jump", seconds=2.0)["actions"]]
            assert "FollowerTimeout" in taken, taken
            assert helpers.wait_for("the follower to rejoin", lambda: helpers.established_leader(cluster, sids),
                                    30) == old
            with cluster[old].control() as c:
                taken = [a["name"] for a in c.request("clock_jump", seconds=2.0)["actions"]]
            assert "LeaderTimeout" in taken, taken
            new = helpers.wait_for("a leader again", lambda: helpers.established_leader(cluster, sids), 30)
            assert _state(cluster, new)["current_epoch"] > epoch
    finally:
        release_base_port(base)


def _state(cluster: LocalCluster, sid: int) -> dict:
    with cluster[sid].control(timeout=5.0) as c:
        return c.request("state")["variables"]


@pytest.mark.slow
def test_isolating_the_leader_cuts_quorum_and_election_traffic_until_healed(tmp_path: Path) -> None:
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, ClusterConfig(tick_ms=50, init_limit=10, sync_limit=5))
        with LocalCluster(path).start() as cluster:
            sids = {1, 2, 3}
            old = helpers.wait_for("a leader", lambda: helpers.established_leader(cluster, sids), 30)
            epoch = _state(cluster, old)["current_epoch"]
            others = sorted(sids - {old})
            with cluster[old].control() as c:
                with pytest.raises(ControlError, match="not other servers"):
                    c.request("partition", peers=[old])
                assert c.request("partition", peers=others)["cut"] == others
            for s in others:
                with cluster[s].control() as c:
                    c.request("partition", peers=[old])
            new = helpers.wait_for("a new leader", lambda: helpers.established_leader(cluster, others), 30)
            assert new != old and _state(cluster, new)["current_epoch"] > epoch
            # cut off from any quorum, the old leader gives up (LeaderTimeout) and cannot join the new one
            helpers.wait_for("the old leader to give up", lambda: _state(cluster, old)["state"] == "LOOKING", 30)
            assert _state(cluster, new)["learner_phase"].get(str(old), "NONE") == "NONE"
            for s in sids:
                with cluster[s].control() as c:
                    assert c.request("heal")["cut"] == []
            assert helpers.wait_for("the old leader to rejoin", lambda: helpers.established_leader(cluster, sids), 30) == new
    finally:
        release_base_port(base)


# ------------------------------------------------------------------------------------------ the CI fault run


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ci_fault_run_loses_nothing_and_diverges_nowhere(tmp_path: Path) -> None:
    seconds = os.environ.get("ZABREF_FAULTS_SECONDS", "30")
    seed = os.environ.get("ZABREF_FAULTS_SEED", "7")
    summary = tmp_path / "faults.json"
    result = CliRunner().invoke(main, ["faults", "--servers", "3", "--duration", seconds, "--seed", seed,
                                       "--data-dir", str(tmp_path / "cluster"), "--json", str(summary)])
    assert result.exit_code == 0, result.output
    s = json.loads(summary.read_text())
    assert s["ok"] and s["lost"] == 0 and s["divergent"] == 0, s
    assert (s["duplicates"], s["out_of_order"], s["misplaced"], s["phantoms"]) == (0, 0, 0, 0)
    assert s["problems"] == []
    c = s["counts"]
    for kind in ("kill", "restart", "pause", "resume", "cut", "isolate", "link cut", "link heal"):
        assert c.get(kind, 0) > 0, f"no {kind} injected: {c}"
    assert c["kill"] + c.get("torn", 0) == c["restart"] and c["pause"] == c["resume"]
    assert c["link cut"] == c["link heal"]
    assert s["writes"]["acknowledged"] > 0
    assert "PASS: faults injected" in result.output


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_a_short_fault_run_is_validated_against_the_spec(tmp_path: Path) -> None:
    """`zabref faults --validate`: an unpaced run (about 55,000 logged steps) with a power cut, a partition and a new
    leader, whose servers' action logs `zabref validate` checks with TLC as a chain of windows (docs/validation.md;
    about 2 minutes on the 2-core machine: docs/performance.md)."""
    summary = tmp_path / "faults.json"
    result = CliRunner().invoke(main, ["faults", "--servers", "3", "--duration", "8", "--seed", "3", "--writers", "1",
                                       "--readers", "1", "--data-dir", str(tmp_path / "cluster"),
                                       "--json", str(summary), "--validate"])
    assert result.exit_code == 0, result.output
    s = json.loads(summary.read_text())
    assert s["ok"] and s["problems"] == [], s
    c = s["counts"]
    assert c.get("kill", 0) + c.get("torn", 0) > 0 and c.get("cut", 0) + c.get("isolate", 0) > 0, c
    logs = read_logs(tmp_path / "cluster" / "actions")
    leaders = {e.sid for events in logs.events.values() for e in events if e.fields.get("action") == "BecomeLeader"}
    assert len(leaders) >= 2, f"one leader only: {leaders}"
    assert s["validation"].endswith("result=ok") and " matched=" in s["validation"], s["validation"]


def test_a_validation_that_runs_out_of_time_is_a_problem_and_leaves_no_process(tmp_path, monkeypatch):
    """The runner's `zabref validate` runs in a process group of its own: when its time is up, the command and what
    it started (TLC) are killed together, and the run records the missing verdict as a problem. The command here is
    a stand-in that starts a long-lived child and waits, as `zabref validate` waits for TLC."""
    import subprocess

    from conformance.faults import run as fault_run

    stand_in = tmp_path / "validate-stand-in"
    stand_in.write_text("#!/bin/sh\nsleep 60 &\nwait\n")
    stand_in.chmod(0o755)
    started: list[int] = []
    real_popen = subprocess.Popen

    def popen(args, **kwargs):
        assert args[1:4] == ["-m", "zabref.cli", "validate"]
        proc = real_popen([str(stand_in)], **kwargs)
        started.append(proc.pid)
        return proc

    monkeypatch.setattr(fault_run.subprocess, "Popen", popen)
    monkeypatch.setattr(fault_run, "VALIDATE_TIMEOUT", 1.0)
    result = SimpleNamespace(validation="", problems=[])
    fault_run._validate(tmp_path, result, lambda line: None)
    assert len(started) == 1
    assert result.problems and "no verdict within 1 s" in result.problems[0], result.problems

    def group_gone() -> bool:  # nobody is left in the command's process group (a killed process takes a moment)
        try:
            os.killpg(started[0], 0)
        except ProcessLookupError:
            return True
        return False

    helpers.wait_for("the validation's process group to be gone", group_gone, 10)


# ------------------------------------------------------------------------------------------ availability


def test_availability_counts_each_kind_against_fault_free_time() -> None:
    """Window 0..10 s, one ack a second (at 0.5, 1.5, ...), except none during the kill (2..5): the kill's rate is 0
    and its longest outage spans from the last ack before it to the first after; the pause (7..8) cost nothing."""
    acks = [0.5, 1.5, 5.5, 6.5, 7.5, 8.5, 9.5]
    rows = {a.kind: a for a in availability([("kill", 2.0, 5.0), ("pause", 7.0, 8.0)], acks, (0.0, 10.0))}
    assert list(rows) == ["kill", "pause"]
    kill, pause = rows["kill"], rows["pause"]
    assert (kill.episodes, kill.seconds, kill.rate, kill.ratio) == (1, 3.0, 0.0, 0.0)
    assert kill.longest_outage == pytest.approx(4.0)  # 1.5 .. 5.5
    assert pause.rate == pytest.approx(1.0) and pause.ratio == pytest.approx(1.0 / (6 / 6))
    assert pause.longest_outage == pytest.approx(1.0)


def test_availability_counts_an_outage_that_runs_to_the_end_and_overlapping_episodes_once() -> None:
    rows = availability([("cut", 1.0, 3.0), ("cut", 2.0, 4.0)], [0.5], (0.0, 6.0))
    (cut,) = rows
    assert cut.episodes == 2 and cut.seconds == pytest.approx(3.0) and cut.longest_outage == pytest.approx(5.5)
    assert cut.ratio == 0.0
    with pytest.raises(ValueError, match="before it starts"):
        availability([], [], (2.0, 1.0))
