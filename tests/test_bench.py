"""`zabref bench cluster` (zabref/bench/): the pure parts -- percentiles, rows, ratios, the table, zoo.cfg, the
report's JSON shape and atomic writing, failover arithmetic -- plus one slow smoke run of the zabref side.

The benchmark's figures themselves are never asserted (speed is measured by the script, not by tests).
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from zabref.bench import BenchError
from zabref.bench.failover import FailoverResult, first_commit_after
from zabref.bench.report import FORMAT, build_report, check_report, format_table, write_json
from zabref.bench.stats import compare, make_row, percentile, ratio
from zabref.bench.workload import VALUE_BYTES, value
from zabref.bench.zk import ZkServer, render_zoo_cfg
from zabref.cli import main

# ------------------------------------------------------------------------------------------ percentiles and rows


def test_percentile_nearest_rank():
    samples = list(range(100, 0, -1))  # 1..100, unsorted
    assert percentile(samples, 50) == 50
    assert percentile(samples, 99) == 99
    assert percentile(samples, 100) == 100
    assert percentile(samples, 0.5) == 1
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2, 3, 4], 50) == 2  # the smallest value with at least half of the samples at or below it


@pytest.mark.parametrize("samples, p", [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses(samples, p):
    with pytest.raises(ValueError):
        percentile(samples, p)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=200), st.floats(0.01, 100))
def test_percentile_is_the_smallest_sample_covering_p(samples, p):
    x = percentile(samples, p)
    assert x in samples
    n = len(samples)
    assert sum(s <= x for s in samples) >= p / 100 * n
    assert sum(s < x for s in samples) < p / 100 * n


def test_make_row_summarizes():
    row = make_row("zabref", "write", "leader", 16, [0.001, 0.002, 0.003, 0.010], seconds=0.5, errors=1)
    assert (row.count, row.errors, row.ops_per_s) == (4, 1, 8.0)
    assert (row.p50_ms, row.p99_ms, row.max_ms) == (2.0, 10.0, 10.0)
    assert row.key == ("write", "leader", 16)


def test_make_row_refuses_unknown_names_and_empty_time():
    with pytest.raises(ValueError):
        make_row("etcd", "write", "leader", 1, [0.001], 1.0)
    with pytest.raises(ValueError):
        make_row("zabref", "write", "leader", 1, [0.001], 0.0)


def test_make_row_with_every_request_failed_has_no_percentiles():
    row = make_row("zookeeper", "read", "follower", 1, [], 1.0, errors=5)
    assert row.count == 0 and math.isnan(row.p50_ms)


def test_ratio_and_compare_pair_rows_by_op_target_in_flight():
    z1 = make_row("zabref", "write", "follower", 1, [0.002] * 10, 1.0)
    k1 = make_row("zookeeper", "write", "follower", 1, [0.001] * 20, 1.0)
    z16 = make_row("zabref", "write", "follower", 16, [0.004] * 30, 1.0)  # no ZooKeeper row: not compared
    cmp = compare([z1, z16, k1])
    assert cmp == [{"op": "write", "target": "follower", "in_flight": 1, "throughput": 0.5, "p50": 2.0, "p99": 2.0}]
    assert ratio(1.0, 0.0) is None and ratio(math.nan, 1.0) is None and ratio(3.0, 2.0) == 1.5


def test_table_shows_both_systems_and_the_ratio():
    rows = [make_row("zabref", "write", "leader", 1, [0.001] * 300, 1.0),
            make_row("zookeeper", "write", "leader", 1, [0.001] * 200, 1.0),
            make_row("zabref", "read", "leader", 1, [0.001] * 10, 1.0, errors=2)]
    table = format_table(rows)
    line = next(ln for ln in table.splitlines() if ln.startswith("write"))
    assert "300.0" in line and "200.0" in line and line.split("|")[3].split()[0] == "1.50"
    read = next(ln for ln in table.splitlines() if ln.startswith("read"))
    assert read.split("|")[2].split()[0] == "-"  # no ZooKeeper read row
    assert "2 requests failed" in table


def test_values_are_100_bytes_and_distinct():
    vs = [value(i) for i in (0, 1, 99_999_999)]
    assert all(len(v.encode()) == VALUE_BYTES for v in vs)
    assert len(set(vs)) == 3


def test_first_commit_after_counts_only_successes_issued_after_the_kill():
    attempts = [(0.0, 10.5, True),   # issued before the kill: does not count, although it completes later
                (10.1, 10.2, False),  # failed
                (10.3, 11.0, True),
                (10.2, 11.5, True)]
    assert first_commit_after(attempts, 10.0) == pytest.approx(1.0)
    assert first_commit_after(attempts[:2], 10.0) is None


# ------------------------------------------------------------------------------------------ ZooKeeper config


def test_zoo_cfg_has_fsync_ports_and_every_server(tmp_path):
    members = ZkServer.layout(21000, 3)
    assert [(m.client_port, m.quorum_port, m.election_port) for m in members] == [
        (21000, 21001, 21002), (21010, 21011, 21012), (21020, 21021, 21022)]
    cfg = dict(line.split("=", 1) for line in render_zoo_cfg(members[1], members, tmp_path / "2").splitlines())
    assert cfg["forceSync"] == "yes" and cfg["tickTime"] == "2000"
    assert cfg["clientPort"] == "21010" and cfg["clientPortAddress"] == "127.0.0.1"
    assert cfg["dataDir"] == str(tmp_path / "2")
    assert cfg["admin.enableServer"] == "false" and "srvr" in cfg["4lw.commands.whitelist"]
    assert [cfg[f"server.{i}"] for i in (1, 2, 3)] == [
        "127.0.0.1:21001:21002", "127.0.0.1:21011:21012", "127.0.0.1:21021:21022"]


def test_zookeeper_ports_stay_below_the_ephemeral_range():
    with pytest.raises(BenchError, match="32767"):
        ZkServer.layout(32750, 3)


# ------------------------------------------------------------------------------------------ the report


def _report(**changes):
    rows = [make_row("zabref", "write", "follower", 1, [0.002] * 10, 1.0),
            make_row("zookeeper", "write", "follower", 1, [0.001] * 20, 1.0)]
    fails = [FailoverResult("zabref", 1, 3, 1, 0.25, 0.3, 2)]
    report = build_report(rows, fails, command="zabref bench cluster", started="t0", finished="t1",
                          machine={"cpus": 2, "loadavg_before": [1.0, 1.0, 1.0], "loadavg_after": [2.0, 2.0, 2.0]},
                          settings={"writes": 10, "in_flight": [1], "value_bytes": 100})
    report.update(changes)
    return report


def test_report_shape_survives_json():
    report = json.loads(json.dumps(_report()))
    check_report(report)
    assert report["format"] == FORMAT
    assert report["comparison"][0]["throughput"] == 0.5


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r.pop("rows"), "missing 'rows'"),
    (lambda r: r["rows"][1].pop("p99_ms"), r"report.rows\[1\]: missing 'p99_ms'"),
    (lambda r: r["rows"][0].update(count="10"), r"report.rows\[0\].count"),
    (lambda r: r["failover"][0].update(leader_s=None), r"report.failover\[0\].leader_s"),
    (lambda r: r.update(format="other/1"), "report.format"),
    (lambda r: r["machine"].pop("cpus"), "report.machine: missing 'cpus'"),
])
def test_report_check_names_the_bad_field(mutate, where):
    report = _report()
    mutate(report)
    with pytest.raises(BenchError, match=where):
        check_report(report)


def test_write_json_is_atomic_and_refuses_a_bad_report(tmp_path):
    path = tmp_path / "bench.json"
    write_json(_report(), path)
    check_report(json.loads(path.read_text()))
    before = path.read_text()
    with pytest.raises(BenchError):
        write_json(_report(rows="nope"), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]  # no temp file left


def test_write_png(tmp_path):
    pytest.importorskip("matplotlib")
    from zabref.bench.report import write_png

    write_png(_report(), tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ client port read


def test_client_read_pages_only_the_delivered_prefix():
    """`Node.client_read` bisects the history in place (no copy per read): same answers as slicing the delivered
    prefix -- nothing past lastCommitted, pages of `limit`, "more" exactly when delivered transactions remain."""
    from zabref.core_types import Persistent, Txn
    from zabref.node import Node, Timing

    history = [Txn((1 << 32) | c, f"a{c}".encode()) for c in range(1, 6)] + \
              [Txn((2 << 32) | c, f"b{c}".encode()) for c in range(1, 4)]
    node = Node(1, (1, 2, 3), Persistent(tuple(history), 2, 2), Timing())
    node.core.last_committed = 6
    delivered = [[t.zxid, t.value.decode()] for t in history[:6]]
    end = delivered[-1][0]  # "zxid": the last delivered, whatever the page
    assert node.client_read(0) == {"txns": delivered, "more": False, "zxid": end}
    assert node.client_read(0, 4) == {"txns": delivered[:4], "more": True, "zxid": end}
    assert node.client_read(delivered[3][0], 2) == {"txns": delivered[4:6], "more": False, "zxid": end}
    assert node.client_read(delivered[2][0] - 1, 1) == {"txns": [delivered[2]], "more": True, "zxid": end}
    assert node.client_read(history[-1].zxid) == {"txns": [], "more": False, "zxid": end}


# ------------------------------------------------------------------------------------------ the command


def test_cli_refuses_bad_options_before_starting_anything(tmp_path):
    r = CliRunner().invoke(main, ["bench", "cluster", "--in-flight", "1,x", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--in-flight" in r.output
    r = CliRunner().invoke(main, ["bench", "cluster", "--systems", "etcd", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "etcd" in r.output
    assert not (tmp_path / "bench.json").exists()


@pytest.mark.slow
def test_smoke_zabref_side(tmp_path):
    """The zabref side end to end with a tiny count: every row complete, reads return what was written, one failover
    trial, bench.json valid, bench.png written; with --log-actions the failover run's logs are a behaviour of the
    spec."""
    pytest.importorskip("matplotlib")
    from conformance.validate import validate
    from zabref.bench.runner import run_bench

    lines: list[str] = []
    report = run_bench(writes=30, in_flight=[1, 4], systems=["zabref"], out=tmp_path, failover_trials=1,
                       log_actions=True, echo=lines.append)
    check_report(json.loads((tmp_path / "bench.json").read_text()))
    assert (tmp_path / "bench.png").stat().st_size > 0
    rows = report["rows"]
    assert [(r["op"], r["target"], r["in_flight"]) for r in rows] == [
        (op, target, n) for op in ("write", "read") for target in ("follower", "leader") for n in (1, 4)]
    assert all(r["count"] == 30 and r["errors"] == 0 for r in rows), rows
    (fail,) = report["failover"]
    assert fail["killed"] != fail["new_leader"] and fail["first_write_s"] > 0
    assert report["comparison"] == []  # ZooKeeper not run
    assert not (tmp_path / "work").exists()
    assert any(line.startswith("op ") for line in lines)
    assert report["settings"]["zabref"]["action_log"] == str(tmp_path / "actions" / "throughput")
    assert sorted(p.name for p in (tmp_path / "actions" / "throughput").iterdir()) == [
        f"actions-{sid}.jsonl" for sid in (1, 2, 3)]
    result = validate(tmp_path / "actions" / "failover", work=tmp_path)
    assert result.failure is None and result.steps > 0 and result.matched == result.steps, result.failure
