"""Fault runs on real ZooKeeper (docs/zookeeper.md, "Faults on real ZooKeeper"): schedules parsed and refused,
random schedules reproducible, and -- marked slow -- the history checker's inputs built from a real short run of
Debian's 3.8.0 (each check shown able to fail on them), ZOOKEEPER-4785 reproduced on 3.8.0 by its scripted
schedule, and a mixed ensemble (a zabref server among ZooKeeper's) under faults, with a seeded bug of zabref caught.
"""

from __future__ import annotations

import dataclasses
import json
import re

import click
import pytest
from click.testing import CliRunner

from conformance.faults.history import Read, check
from conformance.faults.zkcommand import MATRIX, builtin_schedule, faults
from conformance.zk import ZkError
from conformance.zk.command import zk
from conformance.faults.zkload import next_due, reads_at_writes
from conformance.zk.delivered import node_value
from conformance.zk.schedule import ScheduleError, load_schedule, parse_schedule, random_schedule

# ------------------------------------------------------------------------------------------------ schedules


def test_builtin_schedules_parse_for_their_ensembles():
    others = [("power-loss-all", 3), ("mixed-follower", 3), ("mixed-handover", 3)]
    for bug, servers in [(r.schedule or r.bug, r.servers) for r in MATRIX] + others:
        steps = load_schedule(builtin_schedule(bug), servers)
        assert steps and all(s.index == i for i, s in enumerate(steps))
    steps = load_schedule(builtin_schedule("zookeeper-4925"), 5)
    assert [s.op for s in steps[:2]] == ["writes", "kill"]
    assert steps[1].get("server") == "follower#2" and steps[1].get("as") == "f2"
    with pytest.raises(ZkError, match="no built-in schedule 'nope'; the built-in ones: mixed-follower, mixed-handover, "
                                      "power-loss-all, txnlog-hole, zookeeper-4394, zookeeper-4785, "
                                      "zookeeper-4837"):
        builtin_schedule("nope")


def test_a_json_schedule_and_python_data_parse_alike(tmp_path):
    data = [{"op": "writes", "count": 5}, {"op": "kill", "server": "leader", "as": "old"},
            {"op": "restart", "server": "$old", "wait": False}, {"op": "cut", "server": 1, "peer": 2},
            {"op": "heal", "server": 1, "peer": 2, "port": "election"}, {"op": "settle", "server": "$old"},
            {"op": "heal"}, {"op": "sleep", "seconds": 0.5}]
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"steps": data}))
    assert load_schedule(path, 3) == parse_schedule(data, 3)
    assert [s.to_json() for s in parse_schedule(data, 3)] == data


@pytest.mark.parametrize("steps, message", [
    ("kill", "a schedule is a list of steps, not str"),
    ([{"op": "writes", "count": 1}, {"op": "explode"}], "step 1 (explode): unknown op 'explode'"),
    ([{"op": "kill"}], "step 0 (kill): missing field 'server'"),
    ([{"op": "sleep", "seconds": 1, "server": 1}], "step 0 (sleep): unknown field 'server'"),
    ([{"op": "kill", "server": 4}], "step 0 (kill): server 4 is not a server of this ensemble (1..3)"),
    ([{"op": "kill", "server": "boss"}], "step 0 (kill): server 'boss' is not a selector"),
    ([{"op": "kill", "server": "follower#3"}], "step 0 (kill): server 'follower#3': an ensemble of 3 has 2 followers"),
    ([{"op": "restart", "server": "$f1"}], "step 0 (restart): server '$f1' names no server bound"),
    ([{"op": "cut", "server": 1, "peer": 1}], "step 0 (cut): server and peer are the same"),
    ([{"op": "sleep", "seconds": -1}], "step 0 (sleep): seconds must be a number of seconds >= 0"),
    ([{"op": "writes", "count": 0}], "step 0 (writes): count must be a whole number >= 1"),
    ([{"op": "load", "on": "yes"}], "step 0 (load): on must be true or false"),
    ([{"op": "writer", "server": 1}], "step 0 (writer): missing field 'seconds'"),
    ([{"op": "writer", "server": "leader", "seconds": "3"}], "step 0 (writer): seconds must be a number of seconds"),
    ([{"op": "kill", "server": 1, "as": "9x"}], "step 0 (kill): as must be a name"),
    ([{"op": "cut", "server": 1, "peer": 2, "port": "client"}], "step 0 (cut): port must be one of quorum, election"),
    ([{"op": "heal", "peer": 2}], "step 0 (heal): a peer needs a server"),
    ([{"op": "kill", "server": 1, "port": "quorum"}], "step 0 (kill): unknown field 'port'"),
    ([7], "step 0: a step is a table of fields"),
])
def test_bad_schedules_are_refused_naming_the_step(steps, message):
    with pytest.raises(ScheduleError) as e:
        parse_schedule(steps, 3, "my.toml")
    assert str(e.value).startswith("my.toml: " + message)


def test_a_bad_file_is_refused_naming_it(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[step]]\nop = \n")
    with pytest.raises(ScheduleError, match="bad.toml: not valid TOML"):
        load_schedule(bad, 3)
    with pytest.raises(ScheduleError, match="missing.json: cannot read the schedule"):
        load_schedule(tmp_path / "missing.json", 3)


def test_random_schedules_are_reproducible_and_episodes_end():
    a, b = random_schedule(7, 5, 30), random_schedule(7, 5, 30)
    assert a == b and a != random_schedule(8, 5, 30)
    begins = {s.get("as") for s in a if s.get("as")}
    ends = {s.get("server")[1:] for s in a if isinstance(s.get("server"), str) and s.get("server").startswith("$")}
    assert begins == ends and len(begins) >= 5  # every episode that begins ends
    assert sum(s.get("seconds", 0) for s in a if s.op == "sleep") == pytest.approx(30, abs=0.01)
    assert {s.op for s in a} >= {"kill", "restart", "pause", "resume", "sleep"}


def test_node_names_give_the_value():
    assert node_value("c0-17-0000000042") == "c0-17"
    assert node_value("c0-17") is None and node_value("other") is None


def test_a_reads_zxid_is_taken_as_the_last_write_delivered_at_or_below_it():
    """A reply header's zxid counts every transaction (a session's creation too); the checker's reference holds
    writes only."""
    finals = {1: [(0x100000003, "c0-0"), (0x100000007, "c0-1")], 2: [(0x100000003, "c0-0")]}
    raw = [Read(0, 1, 9, 1.0, 2.0, True, end) for end in (0x100000002, 0x100000003, 0x100000006, 0x200000000)]
    assert [r.end for r in reads_at_writes(raw, finals)] == [0, 0x100000003, 0x100000003, 0x100000007]


def test_a_paced_writer_keeps_its_period_and_does_not_catch_up_in_a_burst():
    due, dues = 0.0, []
    # when each write started: on time, late by less than a period (the grid kept), then after a hold (at once)
    for now in (0.0, 0.1, 0.2, 0.32, 3.0, 3.0):
        dues.append(due := next_due(due, now, rate=10))
    assert [round(x, 6) for x in dues] == [0.1, 0.2, 0.3, 0.4, 3.0, 3.1]


def test_the_zk_group_offers_the_fault_commands():
    ctx = click.Context(zk)
    assert {"faults", "matrix"} <= set(zk.list_commands(ctx))
    assert zk.get_command(ctx, "faults") is faults


def test_the_command_refuses_a_bad_schedule_before_starting_anything(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps([{"op": "kill", "server": 9}]))
    result = CliRunner().invoke(faults, ["--schedule", str(bad), "--dir", str(tmp_path / "run")])
    assert result.exit_code == 1
    assert "s.json: step 0 (kill): server 9 is not a server of this ensemble (1..3)" in result.output
    assert not (tmp_path / "run").exists()
    for ids, why in (("4", "[4]: each id must be one of the 3 servers'"), ("x", "'x': ids separated by commas")):
        result = CliRunner().invoke(faults, ["--zabref", ids, "--dir", str(tmp_path / "run")])
        assert result.exit_code == 2 and why in result.output, result.output
        assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ real ZooKeeper


@pytest.mark.slow
def test_history_from_a_real_short_run(tmp_path):
    """Debian's 3.8.0, 3 servers: kill the leader, restart it, cut a link; the delivered sequences read through the
    client at each server agree, every acknowledged write is there -- and the same inputs, damaged, fail each
    check."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    steps = parse_schedule([{"op": "writes", "count": 10}, {"op": "kill", "server": "leader", "as": "old"},
                            {"op": "writes", "count": 10}, {"op": "restart", "server": "$old"},
                            {"op": "cut", "server": "leader", "peer": "follower"}, {"op": "writes", "count": 10},
                            {"op": "heal"}], 3)
    r = run_zk_faults(tmp_path / "run", "3.8.0", 3, 1, schedule=steps, calm=0.5, echo=lambda _: None)
    assert r.ok, r.summary() + "\n" + "\n".join(r.problems + r.verdict.examples)
    assert r.verdict.acked >= 30 and r.counts["kill"] == 1 and r.counts["restart"] == 1
    seqs = list(r.delivered.values())
    assert all(s == seqs[0] for s in seqs) and len(seqs[0]) >= r.verdict.acked
    assert [z for z, _ in seqs[0]] == sorted(z for z, _ in seqs[0])
    acked = {w.value: w.zxid for w in r.writes if w.outcome == "ok"}
    assert all(acked[v] == z for z, v in seqs[0] if v in acked)  # each at the zxid its client was told
    assert r.samples  # the sampler saw the servers deliver during the run
    assert all(not x for x in r.not_durable.values())

    # each check can fail on these inputs
    first_acked = next(i for i, (_, v) in enumerate(seqs[0]) if v in acked)
    hole = {**r.delivered, 2: seqs[0][:first_acked] + seqs[0][first_acked + 1:]}
    v = check(r.writes, hole, r.samples)
    assert v.lost == 1 and v.divergent >= 1
    z, val = seqs[0][first_acked]
    moved = {**r.delivered, 1: [(zz + 1 if vv == val else zz, vv) for zz, vv in seqs[0]]}
    assert check(r.writes, moved).misplaced == 1
    doubled = {**r.delivered, 3: seqs[0] + [(seqs[0][-1][0] + 1, val)]}
    assert check(r.writes, doubled).duplicates == 1
    phantom = {**r.delivered, 3: seqs[0] + [(seqs[0][-1][0] + 1, "nobody")]}
    assert check(r.writes, phantom).phantoms == 1
    end = max(w.completed for w in r.writes)  # the first write, as if sent after every other was acknowledged
    late = [dataclasses.replace(w, invoked=end + 1, completed=end + 2) if w.value == val else w for w in r.writes]
    assert check(late, r.delivered).out_of_order == 1
    # the readers' syncs and reads (one reader at each server): many (how many follows the machine's load: 27 in one
    # CI run of 2026-11-30 where 30 were expected), each at a write every server delivered ...
    assert r.verdict.synced_reads == r.verdict.reads >= 10 and {x.server for x in r.reads} == {1, 2, 3}
    assert all(x.end == 0 or x.end in {zz for zz, _ in seqs[0]} for x in r.reads)
    # ... and a read after a sync that misses a write acknowledged before the sync began is stale
    after, w = next((x, w) for x in r.reads for w in r.writes
                    if w.outcome == "ok" and x.invoked > w.completed and x.end >= w.zxid)
    zxids = [zz for zz, _ in seqs[0]]
    below = zxids[zxids.index(w.zxid) - 1] if zxids.index(w.zxid) else 0
    stale = [dataclasses.replace(x, end=below) if x is after else x for x in r.reads]
    assert check(r.writes, r.delivered, r.samples, stale).stale_reads >= 1


@pytest.mark.slow
def test_a_zabref_follower_in_a_zookeeper_ensemble_under_faults_loses_nothing(tmp_path):
    """Debian's 3.8.0 as servers 2 and 3, zabref as server 1, the workload (kazoo writers, readers and the sampler)
    at every server, zabref's ZooKeeper client port included: zabref is killed, restarted (its log read back, a
    DIFF from the ZooKeeper leader), isolated, paused; a ZooKeeper follower is killed, so that writes commit with
    zabref's ACK. Every acknowledged write is delivered everywhere, in one order, reads after a sync are not stale,
    and what zabref delivered is in its log."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("mixed-follower"), 3)  # zabref (1) follows throughout
    r = run_zk_faults(tmp_path / "run", "3.8.0", 3, 1, schedule=steps, calm=0.5, zabref=frozenset({1}),
                      echo=lambda _: None)
    assert r.ok, r.summary() + "\n" + "\n".join(r.problems + r.verdict.examples)
    assert r.verdict.acked >= 100 and r.counts["kill"] == 2 and r.zabref == [1]
    seqs = list(r.delivered.values())
    assert len(seqs) == 3 and all(s == seqs[0] for s in seqs)
    assert {x.server for x in r.reads} == {1, 2, 3} and r.verdict.synced_reads == r.verdict.reads
    assert "state -> FOLLOWING" in (tmp_path / "run" / "1" / "server.log").read_text()  # zabref's own log
    # zabref's log is read for the disk check: a delivered write it lacks would be reported
    from conformance.zk.delivered import read_logged  # noqa: PLC0415
    logged = {v for _, v in read_logged(tmp_path / "run" / "1", "/zabref-faults")}
    assert {v for _, v in seqs[0]} <= logged


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_mixed_ensemble_hands_its_writes_over_to_a_zabref_leader_and_its_recording_is_a_behaviour_of_the_spec(
        tmp_path):
    """mixed-handover: writes commit on the ZooKeeper leader's and zabref's ACKs alone, then that leader is killed,
    and zabref, the one log that holds them among the servers that come back, leads both ZooKeeper servers (one of
    them with a log that may end in proposals no quorum took). Nothing acknowledged is lost; and the run (paced, as
    `zabref zk faults --rate 5 --validate` runs it) is a behaviour of the spec: every quorum packet of the two
    ZooKeeper servers and the zabref server (docs/zookeeper.md, "Validation of a mixed recording"), and every
    election notification is one of spec/FastLeaderElection.tla, found by the guided search or, in a window the guide
    misses, by the search without it (before `RestartShown`, 2026-12-02, 2 runs in 8 needed that search, which ran
    past this test's bound: tests/test_zk_election_restart.py; after it, one fresh-clone CI run of 2026-12-04 needed
    it and it matched within the bound -- the guide's own reach is tests/test_zk_guide.py's). ZooKeeper 3.9.5, whose
    follower ACKs NEWLEADER before any proposal of its sync: on 3.8.0 one run in nine (2026-12-03) had a follower ACK
    a DIFF's proposal first, ZOOKEEPER-4685's order, which zabref's leader refuses by closing the connection, and its
    validation spent its budgets at that ACK (conformance/zk/earlyack.py names it; tests/test_zk_validate.py shows
    the check fail there)."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415
    from conformance.validate.flecheck import validate_elections_dir  # noqa: PLC0415
    from conformance.validate.zkcheck import validate_recording  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("mixed-handover"), 3)
    r = run_zk_faults(tmp_path / "run", "3.9.5", 3, 1, schedule=steps, rate=5.0, calm=0.5, zabref=frozenset({1}),
                      echo=lambda _: None)
    assert r.ok, r.summary() + "\n" + "\n".join(r.problems + r.verdict.examples)
    assert r.verdict.acked >= 50 and r.counts["kill"] == 2
    assert "state -> LEADING" in (tmp_path / "run" / "1" / "server.log").read_text()
    zab = validate_recording(tmp_path / "run", work=tmp_path)
    assert zab.matched, zab.failure
    assert zab.txns >= r.verdict.acked and zab.windows >= 2
    fle = validate_elections_dir(tmp_path / "run", work=tmp_path)
    assert fle.matched, f"{fle.line()}\n{fle.failure}\n{_notifications(tmp_path / 'run')}"


def _notifications(folder) -> str:
    """The recording's first notifications, each with its time, connection and byte, for the report of a run whose
    elections do not validate (CI keeps no recording; one such run, 2026-12-04, under the suite's load: notification
    8 of 29, a ZooKeeper server's round-1 vote to the zabref server on a connection that had carried earlier ones)."""
    from conformance.zk.elections import elections_dir  # noqa: PLC0415

    el = elections_dir(folder)
    t0 = el.notices[0].t_ns if el.notices else 0
    lines = [f"{n.g}: +{(n.t_ns - t0) / 1e6:.1f} ms {n.where()}: {n.describe()}" for n in el.notices[:40]]
    return "\n".join(lines + [f"(left out: {el.unread} unread, {el.after_end} after the run's end)"])


@pytest.mark.slow
@pytest.mark.deep  # about 70 s: the run waits out the stalled step's bound
def test_a_mixed_fault_run_catches_a_zabref_follower_that_acks_without_logging(tmp_path, monkeypatch):
    """The same run with the seeded bug ack_without_logging in the zabref server (its process imports the patched
    package first): zabref ACKs a proposal it never took into its history, so the ZooKeeper leader's COMMIT of it
    reaches a follower without it, which refuses it (a protocol error), closes the connection and synchronizes again
    -- at every commit. Once ZooKeeper server 2 is down every commit needs zabref's ACK, and the writes stall: the
    run fails on the step that waits for them. (Before a zabref follower took a ZooKeeper leader's SNAP of client
    data, the same bug was reported as lost writes, because zabref never served again after its restart.) The
    recording, which the run without the bug validates (above), is no behaviour of the spec, proven from Init, at
    the ACKEPOCH zabref sends when it joins again: it names an empty log, where the follower that sent those ACKs
    holds what it acknowledged. (On the way the leader's COMMIT written after zabref closed the connection is lost,
    `Lost` in conformance/validate/zkmodule.py; without that rule the check stopped there, a departure of its own.)"""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415
    from conformance.replay.seeded import load_bug, patched_package  # noqa: PLC0415
    from conformance.validate.zkcheck import validate_recording  # noqa: PLC0415

    with patched_package(load_bug("ack_without_logging"), tmp_path) as root:
        monkeypatch.setenv("PYTHONPATH", str(root))
        steps = load_schedule(builtin_schedule("mixed-handover"), 3)
        r = run_zk_faults(tmp_path / "run", "3.9.5", 3, 1, schedule=steps, rate=5.0, calm=0.5,
                          zabref=frozenset({1}), echo=lambda _: None)
    assert not r.ok, r.summary()
    assert any(p.startswith("the schedule stopped: step 2 writes") and "not acknowledged" in p for p in r.problems), \
        r.problems
    assert "is not in this follower's history" in (tmp_path / "run" / "1" / "server.log").read_text()
    zab = validate_recording(tmp_path / "run", work=tmp_path)
    assert not zab.matched and not zab.inconclusive and zab.exact, zab.line()
    assert re.search(r"observation \d+ of \d+ is the first the spec cannot take: ACKEPOCH<<0, 0>> data=-1 from 1 ",
                     zab.failure or ""), zab.failure


@pytest.mark.slow
def test_zookeeper_4785_is_caught_on_debian_3_8_0(tmp_path):
    """The scripted schedule of ZOOKEEPER-4785 (a learner SIGKILLed the moment it wrote its new currentEpoch in a
    DIFF synchronization): on 3.8.0 acknowledged writes are lost at every server (the fixed versions 3.8.5 and 3.9.2
    pass it: `zabref zk matrix`, docs/zookeeper.md)."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("zookeeper-4785"), 3)
    attempts = next(r.attempts for r in MATRIX if r.bug == "zookeeper-4785")
    for attempt in range(1, attempts + 1):  # as `zabref zk matrix` tries it: a loaded machine missed it once in CI
        r = run_zk_faults(tmp_path / f"run-{attempt}", "3.8.0", 3, 1, schedule=steps, calm=0.5, sample=False,
                          echo=lambda _: None)
        assert not r.problems, r.problems
        if "lost" in r.caught_by:
            break
    assert any("crash_in_sync" in text and "-> 2" in text for _, text in r.events)
    assert "lost" in r.caught_by and r.verdict.lost >= 10
    assert "missing at servers [1, 2, 3]" in r.verdict.examples[0]


@pytest.mark.slow
def test_the_txnlog_hole_loses_writes_on_debian_3_8_0(tmp_path):
    """The data loss the random nemesis found on 3.9.4 (docs/zookeeper.md, "The txnlog hole"), scripted: x, the first
    leader, logs a proposal alone; a SNAP brings it back with a hole in its txnlog; x leads, and y, whose last zxid
    is inside the hole, is sent a TRUNC to x's orphan proposal and a DIFF from after the hole: acknowledged writes
    missing at y. ZooKeeper's own log names the TRUNC; no version has a fix (MATRIX). Tried up to the matrix's
    attempts, as `zabref zk matrix` does: 1 of 9 runs missed the scenario on a loaded machine (docs/zookeeper.md)."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("txnlog-hole"), 5)
    attempts = next(r.attempts for r in MATRIX if r.bug == "txnlog-hole")
    for attempt in range(1, attempts + 1):  # an election the load causes can turn the TRUNC into a safe SNAP
        folder = tmp_path / f"run-{attempt}"
        r = run_zk_faults(folder, "3.8.0", 5, 1, schedule=steps, calm=0.5, sample=False, echo=lambda _: None)
        assert not r.problems, r.problems
        if not r.ok:
            break
    y = int(next(text.split()[1] for _, text in r.events if text.endswith("(as y)")))
    assert "lost" in r.caught_by and r.verdict.lost >= 10
    assert all(f"missing at servers [{y}]" in line for line in r.verdict.examples if "missing" in line)
    logs = "".join(p.read_text(errors="replace") for p in folder.glob("*/server.log"))
    assert re.search(rf"Sending TRUNC zxid=0x1[0-9a-f]{{8}} +for peer sid: {y}\b", logs)  # to the orphan, epoch 1


def _stale_read_of_the_divergence(line: str, delivered: dict[int, list[tuple[int, str]]], x: int) -> bool:
    """Whether a stale read of the history check's ``line`` follows from x's divergence: the reader that missed the
    write (named first, "began then"; a line of another kind names one reader) is at a server on x's side (its
    delivered sequence a prefix of x's, or x's of it), or the write it missed is one x delivered at that zxid and the
    reader's server did not (x's divergent write, read at x first: the others' later reads cannot have it). Any other
    stale read is a finding of its own."""
    at = re.search(r"\bat server (\d+), began then", line) or re.search(r"\bat server (\d+)", line)
    if at is None:
        return False
    reader, mine = int(at.group(1)), delivered[x]
    if reader in {s for s, seq in delivered.items() if seq[:len(mine)] == mine[:len(seq)]}:
        return True
    z = re.search(r"\(zxid (0x[0-9a-f]+)\)", line)
    if z is None:
        return False
    zxid = int(z.group(1), 16)
    ours = dict(mine).get(zxid)
    return ours is not None and dict(delivered.get(reader, [])).get(zxid) != ours


def test_a_stale_read_is_put_down_to_the_divergence_only_on_xs_side_or_of_xs_own_write():
    """x (3) delivered a write at 0x1000000b3 that 1 never did; 2 took x's history. A stale read at 2 follows from
    the divergence, and so does one at 1 of x's own write; a stale read at 1 of a write 1 delivered too does not, nor
    a line that names no reader."""
    delivered = {1: [(0x1000000b1, "c1-1"), (0x1000000b2, "c1-2"), (0x200000001, "c3-1")],
                 2: [(0x1000000b1, "c1-1"), (0x1000000b2, "c1-2")],
                 3: [(0x1000000b1, "c1-1"), (0x1000000b2, "c1-2"), (0x1000000b3, "c2-60")]}
    line = ("no linearization: {w} (zxid {z}) must take effect after 19641.303 and by 19641.210 (reader 0 at server "
            "{r}, began then and read up to 0x1000000b1; reader 1 at server 3, read by then up to {z})")
    assert _stale_read_of_the_divergence(line.format(w="'c1-2'", z="0x1000000b2", r=2), delivered, 3)
    assert _stale_read_of_the_divergence(line.format(w="'c2-60'", z="0x1000000b3", r=1), delivered, 3)
    assert not _stale_read_of_the_divergence(line.format(w="'c1-2'", z="0x1000000b2", r=1), delivered, 3)
    assert not _stale_read_of_the_divergence("no linearization: 'c1-2' (zxid 0x1000000b2) somewhere", delivered, 3)


@pytest.mark.slow
def test_zookeeper_4837_leaves_a_truncated_proposal_in_the_tree_on_debian_3_8_0(tmp_path):
    """ZOOKEEPER-4837 scripted: x, the first leader, logs a proposal alone; elected again through the election port
    alone it snapshots its tree and never establishes; y leads with nothing committed in its epoch and sends x a
    TRUNC, and x reloads the snapshot that holds the proposal: x delivers a write no other server has (divergent),
    and its own log has the bug's mark. No version has a fix (MATRIX). The checks may also count a stale read
    (fresh-clone CI of 8054b10; its example was cut off in the report): taken when it is at a server on x's side, x
    or one whose delivered sequence agrees with x's (fresh-clone CI of 2026-12-04: a stale read at server 2, which
    diverged with x), or of x's own divergent write at a server that never delivered it (a run here, 2026-12-06: a
    read at server 1 missed 0x1000000b3, which the other reader had read at server 2; the run was not kept) -- any
    other stale read would be a finding of its own and fails here (`_stale_read_of_the_divergence`). The server
    judged is the one whose read missed the write (fresh-clone CI of e009c9e: the checker's line named only the
    read that had seen it, at server 3, and the test judged that one; which read missed it was not kept)."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("zookeeper-4837"), 3)
    attempts = next(r.attempts for r in MATRIX if r.bug == "zookeeper-4837")
    for attempt in range(1, attempts + 1):
        folder = tmp_path / f"run-{attempt}"
        r = run_zk_faults(folder, "3.8.0", 3, 1, schedule=steps, calm=0.5, sample=False, echo=lambda _: None)
        assert not r.problems, r.problems
        if not r.ok:
            break
    x = int(next(text.split()[1] for _, text in r.events if text.endswith(" x") and text.startswith("name ")))
    assert r.caught_by[0] == "divergent" and set(r.caught_by) <= {"divergent", "stale_reads"}, \
        (r.caught_by, r.verdict.examples, r.events, r.known)
    assert r.verdict.lost == 0
    assert r.verdict.examples and any(re.search(rf"server {x}\b", line) for line in r.verdict.examples), r.verdict
    for line in r.verdict.examples:  # a stale read only where x's history went (a finding of its own elsewhere)
        if " diverges from server " not in line:
            assert _stale_read_of_the_divergence(line, r.delivered, x), (line, r.delivered, r.verdict.examples)
    assert [(k.jira, k.sid) for k in r.known] == [("ZOOKEEPER-4837", x)]
    assert re.search(r"election port", " ".join(text for _, text in r.events))
    log = (folder / str(x) / "server.log").read_text(errors="replace")
    assert "Timeout while waiting for epoch from quorum" in log  # led without a quorum: the snapshot's term


@pytest.mark.slow
@pytest.mark.long
def test_validation_catches_zookeeper_4785_at_the_truncating_sync(tmp_path):
    """ZOOKEEPER-4785's scripted run on Debian's 3.8.0, held against spec/Zab.tla in windows: the check departs at
    the sync by which the new leader (the learner killed in its sync, its currentEpoch new and its log old) truncates
    the others (docs/zookeeper.md, "Fault runs, in windows": observation 414 of the recorded run, proven from Init in
    about 70 s of TLC before the leader's own ACK; 2026-12-03: observations 385 and 406 of two new runs, not proven,
    the search without the guide at its budget)."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415
    from conformance.validate.zkcheck import validate_observation  # noqa: PLC0415
    from conformance.zk import earlyack  # noqa: PLC0415
    from conformance.zk.observe import observe_dir  # noqa: PLC0415

    steps = load_schedule(builtin_schedule("zookeeper-4785"), 3)
    attempts = next(r.attempts for r in MATRIX if r.bug == "zookeeper-4785")
    for attempt in range(1, attempts + 1):
        folder = tmp_path / f"run-{attempt}"
        r = run_zk_faults(folder, "3.8.0", 3, 1, schedule=steps, calm=0.5, sample=False, echo=lambda _: None)
        if "lost" not in r.caught_by:
            continue
        o = observe_dir(folder)
        work = tmp_path / f"validate-{attempt}"
        work.mkdir()
        v = validate_observation(o, work=work)
        # 3.8.0's other race, ZOOKEEPER-4685 (a learner's ACK of a sync's proposal before its ACK of NEWLEADER),
        # stops the check where it happens, named, when it comes before the truncating sync: that run shows the
        # other bug; the next may show this one
        if earlyack.JIRA not in v.named:
            break
    assert "lost" in r.caught_by
    # proven from Init (exact) until 2026-12-02; since the leader's own ACK (Zab.tla's LeaderOwnACK, a hidden step
    # the search without the guide may take at any point) that search may end at its budget first: the departure is
    # then the guided search's, at the same sync, INCONCLUSIVE (docs/zookeeper.md, "Fault runs, in windows")
    assert not v.matched, "the run validated"
    x = o.obs[v.frontier - 1]
    assert x.type == "SYNCGROUP" and x.sync["kind"] == "TRUNC", v.failure


@pytest.mark.slow
@pytest.mark.long
def test_the_version_matrix_catches_each_bug_on_its_versions_and_passes_the_fixed_ones(tmp_path):
    """`zabref zk matrix`: every known bug's scripted schedule on every version of MATRIX (fetched from Maven Central
    once and cached outside the repository); it exits 1 when any version does other than expected."""
    result = CliRunner().invoke(zk, ["matrix", "--dir", str(tmp_path / "matrix")])
    rows = json.loads((tmp_path / "matrix" / "matrix.json").read_text())
    assert result.exit_code == 0, result.output
    assert sorted((r["bug"], r["version"], r["got"]) for r in rows) == sorted(
        (r.bug, version, want) for r in MATRIX for version, want in r.expect.items())
