"""`zabref bench cluster` (conformance/bench/): the pure parts -- percentiles, rows, ratios, the table, zoo.cfg, the
report's JSON shape and atomic writing, failover arithmetic, which systems the options select -- plus slow smoke runs
of the zabref side, of ZooKeeper and of zabref driven by ZooKeeper's Java client (``zabref-java``).

The benchmark's figures themselves are never asserted (speed is measured by the script, not by tests).
"""

from __future__ import annotations

import dataclasses
import json
import math

import helpers
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from conformance.bench import BenchError
from conformance.bench.failover import FailoverResult, first_commit_after
from conformance.bench.javaclient import parse_line
from conformance.bench.report import FORMAT, build_report, check_report, format_rounds, format_table, write_json
from conformance.bench.stats import by_round, compare, make_row, median_row, percentile, ratio
from conformance.bench.workload import VALUE_BYTES, value
from conformance.zk import ZkEnsembleError
from conformance.zk.ports import ZkServer
from conformance.zk.serverconfig import render_zoo_cfg
import zabref
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
    j1 = make_row("zookeeper-java", "write", "follower", 1, [0.004] * 5, 1.0)
    z16 = make_row("zabref", "write", "follower", 16, [0.004] * 30, 1.0)  # no ZooKeeper row: not compared
    cmp = compare([z1, z16, k1, j1])
    assert cmp == [  # the Java client's row first: the bar
        {"system": "zabref", "op": "write", "target": "follower", "in_flight": 1, "against": "zookeeper-java",
         "throughput": 2.0, "p50": 0.5, "p99": 0.5},
        {"system": "zabref", "op": "write", "target": "follower", "in_flight": 1, "against": "zookeeper",
         "throughput": 0.5, "p50": 2.0, "p99": 2.0}]
    assert ratio(1.0, 0.0) is None and ratio(math.nan, 1.0) is None and ratio(3.0, 2.0) == 1.5


def test_median_row_takes_each_figure_s_median_over_the_rounds():
    rounds = [dataclasses.replace(make_row("zabref-java", "write", "leader", 16, [x] * n, 1.0, errors=e,
                                           client_cpu_s=c), server_cpu_s=cpu)
              for x, n, e, c, cpu in ((0.003, 100, 0, 0.5, 1.0), (0.001, 300, 2, None, 3.0),
                                      (0.002, 200, 1, 0.7, None))]
    m = median_row(rounds)
    assert (m.system, m.key) == ("zabref-java", ("write", "leader", 16))
    assert (m.count, m.ops_per_s, m.p50_ms, m.p99_ms, m.max_ms) == (200, 200.0, 2.0, 2.0, 3.0)
    assert m.errors == 3  # every failed request of every round
    assert (m.client_cpu_s, m.server_cpu_s) == (0.6, 2.0)  # the median of the rounds that measured it
    assert median_row(rounds[:1]) == rounds[0]
    with pytest.raises(ValueError, match="no rounds"):
        median_row([])
    with pytest.raises(ValueError, match="rounds of different rows"):
        median_row([rounds[0], make_row("zabref-java", "write", "leader", 1, [0.001], 1.0)])


def test_by_round_gives_every_round_s_ratio_and_the_spread():
    def pair(zab: int, zk: int) -> list:
        return [make_row("zabref-java", "write", "leader", 1, [0.001] * zab, 1.0),
                make_row("zookeeper-java", "write", "leader", 1, [0.001] * zk, 1.0)]

    rounds = [pair(80, 100), pair(120, 100), pair(90, 100)[:1]]  # the third round lacks ZooKeeper's row
    (entry,) = by_round(rounds)
    assert entry == {"system": "zabref-java", "op": "write", "target": "leader", "in_flight": 1,
                     "against": "zookeeper-java", "rounds": [0.8, 1.2, None]}
    text = format_rounds([entry])
    assert "write leader      1  zabref-java/zookeeper-java  0.80 1.20 -  (lowest 0.80, highest 1.20)" in text
    report = _report(rows=[r.to_json() for r in pair(100, 100)])
    report = build_report([median_row([a, b]) for a, b in zip(*rounds[:2])], [], command="c", started="t0",
                          finished="t1", machine=report["machine"], settings=report["settings"], rounds=rounds)
    check_report(json.loads(json.dumps(report)))
    assert report["by_round"] == [entry] and [len(one) for one in report["rounds"]] == [2, 2, 1]
    assert report["comparison"][0]["throughput"] == 1.0  # the medians' ratio: 100 against 100


def test_compare_pairs_zabref_java_with_the_same_client_only():
    """zabref driven by the Java client is compared with ZooKeeper driven by it, never with kazoo's rows; zabref's
    own client keeps both of its comparisons."""
    zj = make_row("zabref-java", "write", "leader", 16, [0.002] * 30, 1.0)
    z = make_row("zabref", "write", "leader", 16, [0.001] * 10, 1.0)
    k = make_row("zookeeper", "write", "leader", 16, [0.001] * 20, 1.0)
    j = make_row("zookeeper-java", "write", "leader", 16, [0.004] * 60, 1.0)
    cmp = compare([z, zj, k, j])
    assert [(c["system"], c["against"], c["throughput"], c["p99"]) for c in cmp] == [
        ("zabref", "zookeeper-java", 0.167, 0.25), ("zabref", "zookeeper", 0.5, 1.0),
        ("zabref-java", "zookeeper-java", 0.5, 0.5)]
    assert [c["system"] for c in compare([zj, k])] == []  # no same-client row: nothing to compare


def test_row_costs_cpu_share_and_cpu_per_thousand_ops():
    row = dataclasses.replace(make_row("zookeeper-java", "write", "leader", 16, [0.001] * 2000, 2.0,
                                       client_cpu_s=1.5),
                              server_cpu_s=3.0, server_rss_mb=(100.0, 90.5, None))
    assert row.client_cpu_share == 0.75 and row.server_cpu_per_1k == 1.5
    j = row.to_json()
    assert j["server_rss_mb"] == [100.0, 90.5, None] and j["client_cpu_share"] == 0.75
    assert j["server_cpu_s_per_1k_ops"] == 1.5
    bare = make_row("zabref", "write", "leader", 1, [], 1.0, errors=1)
    assert bare.client_cpu_share is None and bare.server_cpu_per_1k is None


def _cells(table, system, op="write"):
    """The cells of ``system``'s line under the last (op, ...) heading line."""
    lines = table.splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.startswith(op))
    line = next(ln for ln in lines[start:] if f" {system} " in ln + " ")
    left, _, right = line.partition("|")
    return left.split()[left.split().index(system) + 1:], right.split()


def test_table_shows_every_system_costs_and_both_ratios():
    def row(system, n, client_cpu, op="write", errors=0):
        return dataclasses.replace(make_row(system, op, "leader", 1, [0.001] * n, 1.0, errors=errors,
                                            client_cpu_s=client_cpu), server_cpu_s=0.6, server_rss_mb=(50.0, 60.0))
    rows = [row("zabref", 300, 0.95), row("zookeeper", 200, 0.99), row("zookeeper-java", 600, 0.2),
            row("zabref", 10, 0.1, op="read", errors=2)]
    table = format_table(rows)
    left, right = _cells(table, "zabref")
    assert left == ["300.0", "1.00", "1.00", "2.000", "50", "60", "95%"] and right == []
    left, right = _cells(table, "zookeeper-java")
    assert left[0] == "600.0" and left[-1] == "20%" and right == ["0.50", "1.00"]  # zabref / the Java client's row
    left, right = _cells(table, "zookeeper")
    assert left[0] == "200.0" and right == ["1.50", "1.00"]  # zabref / kazoo's row
    lines = table.splitlines()
    assert [ln.split()[3] for ln in lines if ln.startswith(("write", "read"))] == ["zabref", "zabref"]
    assert "2 requests failed" in table
    check = table[table.index("bottleneck check"):]
    assert "kazoo (Python)" in check and "near one core in 1 of 1 rows (write leader 1)" in check
    java = next(ln for ln in check.splitlines() if "[zookeeper-java]" in ln)
    assert "20%" in java and "not the bottleneck" in java


def test_table_has_a_zabref_java_column_filled_on_the_java_line_only():
    def row(system, n, client_cpu=0.5):
        return dataclasses.replace(make_row(system, "write", "follower", 16, [0.001] * n, 1.0,
                                            client_cpu_s=client_cpu),
                                   server_cpu_s=0.3, server_rss_mb=(40.0, 41.0, 42.0))
    table = format_table([row("zabref", 300), row("zabref-java", 900, 0.9), row("zookeeper", 200),
                          row("zookeeper-java", 600, 0.2)])
    head = table.splitlines()[0]
    assert "zabref/this ops/s" in head and "zabref-java/this ops/s" in head
    assert [ln.split()[3] if ln.startswith("write") else ln.split()[0]
            for ln in table.splitlines()[2:6]] == ["zabref", "zabref-java", "zookeeper-java", "zookeeper"]
    left, right = _cells(table, "zabref-java")
    assert left == ["900.0", "1.00", "1.00", "0.333", "40", "41", "42", "90%"] and right == []
    left, right = _cells(table, "zookeeper-java")
    assert right == ["0.50", "1.00", "1.50", "1.00"]  # zabref / it, then zabref-java / it: the same client
    line = next(ln for ln in table.splitlines() if " zookeeper " in ln)
    assert line.partition("|")[2] == f" {'1.50':>17}{'1.00':>7}"  # kazoo's row: zabref's column only
    assert "zabref-java/this: zabref driven by ZooKeeper's Java client" in table
    java = next(ln for ln in table.splitlines() if "[zabref-java]" in ln)
    assert java.split("[")[0].strip() == "ZkLoad (Java, async API)" and "near one core in 1 of 1 rows" in java
    assert "zabref-java/this" not in format_table([row("zabref", 300), row("zookeeper-java", 600)])


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
    with pytest.raises(ZkEnsembleError, match="32767"):
        ZkServer.layout(32750, 3)


# ------------------------------------------------------------------------------------------ the report


def _report(**changes):
    rows = [make_row("zabref", "write", "follower", 1, [0.002] * 10, 1.0),
            make_row("zookeeper", "write", "follower", 1, [0.001] * 20, 1.0),
            make_row("zookeeper-java", "write", "follower", 1, [0.001] * 40, 1.0, client_cpu_s=0.3)]
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
    assert [(c["against"], c["throughput"]) for c in report["comparison"]] == [("zookeeper-java", 0.25),
                                                                                ("zookeeper", 0.5)]


def test_report_with_a_zabref_java_row_compares_it_with_zookeeper_java():
    rows = [make_row("zabref-java", "write", "follower", 1, [0.002] * 30, 1.0, client_cpu_s=0.4),
            make_row("zookeeper-java", "write", "follower", 1, [0.001] * 40, 1.0, client_cpu_s=0.3)]
    report = json.loads(json.dumps(_report(rows=[r.to_json() for r in rows], comparison=compare(rows))))
    check_report(report)
    assert [r["system"] for r in report["rows"]] == ["zabref-java", "zookeeper-java"]
    assert report["comparison"] == [{"system": "zabref-java", "op": "write", "target": "follower", "in_flight": 1,
                                     "against": "zookeeper-java", "throughput": 0.75, "p50": 2.0, "p99": 2.0}]


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r.pop("rows"), "missing 'rows'"),
    (lambda r: r["rows"][1].pop("p99_ms"), r"report.rows\[1\]: missing 'p99_ms'"),
    (lambda r: r["rows"][0].update(count="10"), r"report.rows\[0\].count"),
    (lambda r: r["rows"][2].update(server_rss_mb=7), r"report.rows\[2\].server_rss_mb"),
    (lambda r: r["comparison"][0].pop("against"), r"report.comparison\[0\]: missing 'against'"),
    (lambda r: r["comparison"][1].pop("system"), r"report.comparison\[1\]: missing 'system'"),
    (lambda r: r["failover"][0].update(leader_s=None), r"report.failover\[0\].leader_s"),
    (lambda r: r.update(format="other/1"), "report.format"),
    (lambda r: r.pop("by_round"), "missing 'by_round'"),
    (lambda r: r["by_round"][0].pop("rounds"), r"report.by_round\[0\]: missing 'rounds'"),
    (lambda r: r.update(rounds=[r["rows"][:1], [{"system": "zabref"}]]), r"report.rounds\[1\]\[0\]: missing 'op'"),
    (lambda r: r.update(rounds=[r["rows"], 7]), r"report.rounds\[1\]: expected a list"),
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
    from conformance.bench.report import write_png

    write_png(_report(), tmp_path / "bench.png")
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ client port read


def test_client_read_pages_only_the_delivered_prefix():
    """`Node.client_read` bisects the history in place (no copy per read): same answers as slicing the delivered
    prefix -- nothing past lastCommitted, pages of `limit`, "more" exactly when delivered transactions remain."""
    from zabref.core.effects import Timing
    from zabref.core.node import Node
    from zabref.core.types import Persistent, Txn

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


# ------------------------------------------------------------------------------------------ zabref's bench client


def _zab_calls(answer_after: int, answers, calls: int, *, later: bool = True, reading_ended: bool = False):
    """``calls`` submits at once on ONE `ZabConnection` to a loopback stand-in for zabref's client port, which reads
    ``answer_after`` requests before it answers any, then writes ``answers(requests)`` (frames; None closes); then,
    if ``later``, one more submit (with ``reading_ended``, once the connection's reading task has ended, at most 10 s
    on). (The requests the stand-in read, each call's result or error, the later one's.)"""
    import asyncio

    from conformance.bench.zabclient import ZabConnection
    from zabref.net import clientwire

    seen: list[dict] = []

    async def serve(reader, writer):
        while len(seen) < answer_after:
            n = int.from_bytes(await reader.readexactly(4), "big")
            seen.append(clientwire.decode_request(await reader.readexactly(n)))
        for frame in answers(seen):
            if frame is None:
                writer.close()
                return
            writer.write(frame)
        await writer.drain()
        await asyncio.sleep(5)

    async def run():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        async with server:
            c = await ZabConnection.open("127.0.0.1", server.sockets[0].getsockname()[1])
            try:
                got = await asyncio.wait_for(asyncio.gather(*(c.submit(f"v{i}") for i in range(calls)),
                                                            return_exceptions=True), 10)
                last = None
                if reading_ended:
                    await asyncio.wait({c._reading}, timeout=10)
                if later:
                    last = (await asyncio.wait_for(asyncio.gather(c.submit("later"), return_exceptions=True),
                                                   10))[0]
            finally:
                c.close()
            return seen, got, last

    return asyncio.run(run())


def _answer(obj) -> bytes:
    from zabref.net import clientwire

    return clientwire.encode(obj)


def test_zab_connection_keeps_requests_in_flight_on_one_connection_answered_in_order():
    """Eight calls at once on ONE connection: the server reads all eight before it answers any (a client that sent
    one and waited would hang here), answers in order, one of them an error: that call alone raises it."""
    from conformance.bench.zabclient import ZabAnswerError

    seen, got, _ = _zab_calls(8, lambda seen: [
        _answer({"error": "no quorum", "retry": True} if i == 3 else {"zxid": 100 + i}) for i in range(len(seen))],
        8, later=False)
    assert [r["value"] for r in seen] == [f"v{i}" for i in range(8)]
    assert [g for i, g in enumerate(got) if i != 3] == [100 + i for i in range(8) if i != 3]
    assert isinstance(got[3], ZabAnswerError) and got[3].retry


@pytest.mark.parametrize("answers, why", [
    (lambda seen: [_answer({"zxid": 1}), None], "closed the connection"),
    (lambda seen: [_answer({"zxid": 1}), b"\x00\x00\x00\x02[]"], "not an object"),
])
def test_zab_connection_that_breaks_fails_every_waiting_call_and_every_later_one(answers, why):
    _, got, later = _zab_calls(3, answers, 3)
    assert got[0] == 1 and all(isinstance(g, OSError) and why in str(g) for g in got[1:]), got
    assert isinstance(later, OSError) and why in str(later)


def test_zab_connection_refuses_an_answer_to_no_request():
    """An answer that arrives before any request breaks the connection (the one call is made after it did)."""
    _, got, later = _zab_calls(0, lambda seen: [_answer({"zxid": 1})], 0, reading_ended=True)
    assert got == [] and isinstance(later, OSError) and "sent an answer to no request" in str(later)


# ------------------------------------------------------------------------------------------ the Java client


def _result(**changes):
    r = {"count": 2, "errors": 1, "seconds": 0.5, "cpu_seconds": 0.25, "last_error": "NODEEXISTS (-110)",
         "latencies_ns": [1_000_000, 3_000_000]}
    r.update(changes)
    return "result " + json.dumps(r)


def test_java_client_output_parses():
    assert parse_line("progress 17\n") == ("progress", 17)
    kind, r = parse_line(_result())
    assert kind == "result" and r["count"] == 2 and r["latencies_ns"] == [1_000_000, 3_000_000]


@pytest.mark.parametrize("line, why", [
    ("hello world", "unexpected output line 'hello world'"),
    ("progress many", "unexpected output line"),
    ("result {\"count\": 2", "malformed result"),
    ("result [1, 2]", "not an object"),
    (_result(latencies_ns=None), "'latencies_ns' = 'None' has the wrong type"),
    (_result(count=True), "'count' = 'True' has the wrong type"),
    (_result(count=3), "inconsistent: count 3, 2 latencies"),
    (_result(seconds=0), "inconsistent"),
    (_result(latencies_ns=[1, -5]), "non-negative integers"),
    ("result " + json.dumps({"count": 0}), "no 'errors'"),
    ("error java.io.IOException: no session with 127.0.0.1:1 within 30 s", "failed: java.io.IOException"),
])
def test_java_client_bad_output_is_a_bench_error_naming_it(line, why):
    with pytest.raises(BenchError, match="ZkLoad") as e:
        parse_line(line)
    assert why in str(e.value)


@dataclasses.dataclass
class _FakeJava:
    """Stands in for the compiled client: runs a shell line instead of the JVM."""

    script: str

    def command(self):
        return ["sh", "-c", self.script]


@pytest.mark.parametrize("script, why", [
    ("echo oops >&2; exit 3", r"ended \(exit 3\)[\s\S]*oops"),
    ("read line; echo 'progress 1'; echo 'result {bad'", "malformed result"),
    ("read line; echo 'Exception in thread main'; exit 1", "unexpected output line 'Exception in thread main"),
])
def test_java_adapter_turns_a_failing_client_into_a_bench_error(tmp_path, script, why):
    from conformance.bench.javaclient import JavaZooKeeperAdapter

    adapter = JavaZooKeeperAdapter({1: 2181}, _FakeJava(script), tmp_path / "zkload.stderr.log")
    try:
        with pytest.raises(BenchError, match=why):
            adapter.run_row("write", "leader", 1, 1, 10)
    finally:
        adapter.close()


def test_java_client_missing_javac_or_jars_is_a_clear_bench_error(tmp_path, monkeypatch):
    import conformance.bench.javaclient as jc
    import conformance.zk.versions as zk

    monkeypatch.setattr(jc.shutil, "which", lambda name: None)  # no javac, and no apt-get to install it
    monkeypatch.setattr(zk.shutil, "which", lambda name: None)
    with pytest.raises(BenchError, match=r"needs javac .* apt-get is not available.*--zk-clients kazoo"):
        jc.ensure_javac()
    (tmp_path / "zookeeper.jar").write_bytes(b"")
    monkeypatch.setattr(jc, "find_classpath", lambda: str(tmp_path / "zookeeper.jar"))
    with pytest.raises(BenchError, match=r"needs zookeeper-jute.jar, slf4j-api.jar in .*--zk-clients kazoo"):
        jc.build()
    monkeypatch.setattr(jc, "find_classpath", lambda: None)
    with pytest.raises(BenchError, match=r"zookeeper.jar not found"):
        jc.build()


def _java_or_skip():
    import shutil

    from conformance.zk.versions import find_classpath

    if find_classpath() is None or shutil.which("javac") is None:
        pytest.skip("needs Debian's zookeeper jars and javac (the benchmark would install them with apt)")


@pytest.mark.slow
def test_java_client_builds_once_per_source(tmp_path, monkeypatch):
    _java_or_skip()
    from conformance.bench.javaclient import build

    monkeypatch.setenv("ZABREF_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    first = build(said.append)
    assert (first.classes / "ZkLoad.class").is_file() and first.classes.is_relative_to(tmp_path / "cache")
    assert build(said.append) == first and len(said) == 1  # the second build is the cached one
    assert [p.name for p in (tmp_path / "cache" / "zkload").iterdir()] == [first.classes.name]  # no temp left


def _tiny_java_run(tmp_path, monkeypatch, system: str, **options) -> tuple[dict, list[str]]:
    """`run_bench` with ZkLoad, 200 requests a row at 16 in flight and one failover trial: its report (checked, and
    every row of ``system`` complete with no error) and the lines it printed."""
    _java_or_skip()
    pytest.importorskip("matplotlib")
    from conformance.bench.runner import run_bench

    monkeypatch.setenv("ZABREF_CACHE", str(tmp_path / "cache"))
    lines: list[str] = []
    report = run_bench(writes=200, in_flight=[16], out=tmp_path / "out", failover_trials=1, echo=lines.append,
                       **options)
    check_report(json.loads((tmp_path / "out" / "bench.json").read_text()))
    rows = report["rows"]
    assert [(r["system"], r["op"], r["target"], r["in_flight"]) for r in rows] == [
        (system, op, target, 16) for op in ("write", "read") for target in ("follower", "leader")]
    assert all(r["count"] == 200 and r["errors"] == 0 and r["p99_ms"] > 0 for r in rows), rows
    return report, lines


@pytest.mark.slow
def test_smoke_zookeeper_with_the_java_client(tmp_path, monkeypatch):
    """ZooKeeper driven by ZkLoad end to end with a tiny count: compiled, run on a real 3-server ensemble, every row
    complete, with the client's CPU and the servers' CPU and memory, in bench.json and the table."""
    report, lines = _tiny_java_run(tmp_path, monkeypatch, "zookeeper-java", systems=["zookeeper"],
                                   zk_clients=["java"])
    rows = report["rows"]
    usage = [(r["op"], r["target"], r["client_cpu_s"], r["server_cpu_s"], r["server_rss_mb"]) for r in rows]
    # CPU in 10 ms ticks: a row of 200 reads may take less than one in the client (as in the next test)
    assert all(c is not None and c >= 0 and s is not None and len(m) == 3 for _, _, c, s, m in usage), usage
    assert sum(c for _, _, c, _, _ in usage) > 0, usage
    assert report["failover"] == [] and report["settings"]["systems"] == ["zookeeper-java"]  # failover: kazoo only
    assert "ZkLoad (Java, async API)     [zookeeper-java]" in "\n".join(lines)
    assert (tmp_path / "out" / "bench.png").stat().st_size > 0


@pytest.mark.slow
def test_java_client_drives_zabref_on_its_zk_client_port(tmp_path, monkeypatch):
    """ZkLoad pointed at a zabref leader's zk_client_port: 200 creates with 16 in flight, none failed, and kazoo at a
    follower's zk_client_port then reads the znodes it made, with their values -- the writes went through zabref."""
    _java_or_skip()
    from kazoo.client import KazooClient

    from conformance.bench.javaclient import JavaZooKeeperAdapter, build
    from conformance.bench.systems import ZabrefHarness
    from conformance.bench.workload import ROOT

    monkeypatch.setenv("ZABREF_CACHE", str(tmp_path / "cache"))
    with ZabrefHarness(tmp_path / "zabref", java_client=build(lambda _: None)) as h:
        assert isinstance(h.adapter, JavaZooKeeperAdapter) and h.system == "zabref-java"
        ports = {sid: h.cluster[sid].me.zk_client_port for sid in h.sids}
        assert h.adapter.ports == ports and None not in ports.values()
        assert set(ports.values()).isdisjoint(port for _, port in h.addresses.values())
        leader = h.leader()
        row = h.adapter.run_row("write", "leader", leader, 16, 200)
        assert (row.system, row.count, row.errors) == ("zabref-java", 200, 0), h.adapter.last_error
        follower = next(s for s in h.sids if s != leader)
        zk = KazooClient(hosts=f"127.0.0.1:{ports[follower]}", timeout=10.0)
        zk.start(timeout=30)
        try:
            zk.sync(f"{ROOT}/r1")
            assert len(zk.get_children(f"{ROOT}/r1")) == 200
            assert zk.get(f"{ROOT}/r1/00000123")[0] == value(123).encode()
        finally:
            zk.stop()
            zk.close()


@pytest.mark.slow
def test_smoke_zabref_with_the_java_client(tmp_path, monkeypatch):
    """``--systems zabref --zabref-clients java`` end to end with a tiny count: every row complete with 0 errors on
    zabref's zk_client_port, the servers' CPU and memory measured as for the other systems, no failover (the Java
    client has no failover load), bench.json valid."""
    report, lines = _tiny_java_run(tmp_path, monkeypatch, "zabref-java", systems=["zabref"], zabref_clients=["java"])
    rows = report["rows"]
    usage = [(r["client_cpu_s"], r["server_cpu_s"], r["server_rss_mb"]) for r in rows]
    # /proc counts CPU in 10 ms ticks (the JVM's getProcessCpuTime too): 200 reads at 16 in flight can take less than
    # one over the three servers, and in the client (0.0 in a fresh clone's CI, 2026-12-03); measured on every row
    assert all(c is not None and c >= 0 and s is not None and s >= 0 and len(m) == 3 and None not in m
               for c, s, m in usage), usage
    assert sum(c for c, _, _ in usage) > 0, usage
    assert all(r["server_cpu_s"] > 0 for r in rows if r["op"] == "write"), usage
    assert report["settings"]["systems"] == ["zabref-java"] and report["failover"] == []
    assert "zk_client_port" in report["settings"]["zabref-java"]["client"]
    assert report["comparison"] == []  # ZooKeeper not run
    assert "ZkLoad (Java, async API)     [zabref-java]" in "\n".join(lines)
    assert not (tmp_path / "out" / "work").exists()


# ------------------------------------------------------------------------------------------ the command


def test_cli_refuses_bad_options_before_starting_anything(tmp_path):
    r = CliRunner().invoke(main, ["bench", "cluster", "--in-flight", "1,x", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--in-flight" in r.output
    r = CliRunner().invoke(main, ["bench", "cluster", "--systems", "etcd", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "etcd" in r.output
    r = CliRunner().invoke(main, ["bench", "cluster", "--zk-clients", "kazoo,curl", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "--zk-clients" in r.output and "curl" in r.output
    r = CliRunner().invoke(main, ["bench", "cluster", "--zabref-clients", "java,curl", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "--zabref-clients" in r.output and "curl" in r.output and "zabclient" in r.output
    r = CliRunner().invoke(main, ["bench", "cluster", "--zabref-clients", "", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "--zabref-clients" in r.output
    assert not (tmp_path / "bench.json").exists()


def test_systems_and_clients_select_the_runs_in_order():
    from conformance.bench.runner import runs_of

    assert runs_of(["zabref", "zookeeper"], ["zabclient"], ["kazoo", "java"]) == [
        "zabref", "zookeeper", "zookeeper-java"]  # the defaults: no zabref-java
    assert runs_of(["zabref", "zookeeper"], ["zabclient", "java"], ["java"]) == [
        "zabref", "zabref-java", "zookeeper-java"]
    assert runs_of(["zabref"], ["java", "java"], []) == ["zabref-java"]  # --zk-clients matters only with zookeeper
    assert runs_of(["zookeeper"], [], ["java"]) == ["zookeeper-java"]  # and --zabref-clients only with zabref
    with pytest.raises(BenchError, match=r"--zabref-clients: unknown \['kazoo'\] \(choose from zabclient, java\)"):
        runs_of(["zabref"], ["kazoo"], ["kazoo"])


def test_cli_passes_the_clients_to_the_runner(monkeypatch, tmp_path):
    import conformance.bench.command as command

    seen: list[dict] = []
    monkeypatch.setattr(command, "run_bench", lambda **kw: seen.append(kw))
    for extra in ([], ["--systems", "zabref", "--zabref-clients", "zabclient, java", "--quick", "--rounds", "3"]):
        r = CliRunner().invoke(main, ["bench", "cluster", "--out", str(tmp_path), *extra])
        assert r.exit_code == 0, r.output
    default, java = seen
    assert (default["systems"], default["zabref_clients"], default["zk_clients"]) == (
        ["zabref", "zookeeper"], ["zabclient"], ["kazoo", "java"])
    assert (java["systems"], java["zabref_clients"], java["writes"], java["in_flight"], java["rounds"]) == (
        ["zabref"], ["zabclient", "java"], 200, [1, 16], 3)
    assert default["rounds"] == 1


def test_rounds_alternate_the_systems_order_and_report_the_medians(monkeypatch, tmp_path):
    """`run_bench --rounds 3` with the harness and the rows faked: each round starts every system afresh, the order
    turned round in the second; the table's rows are the medians, every round's ratio is printed."""
    pytest.importorskip("matplotlib")
    import contextlib

    import conformance.bench.runner as runner

    started: list[str] = []
    rates = {"zabref": [300, 100, 200], "zabref-java": [100, 100, 100]}

    @contextlib.contextmanager
    def harness(system, folder, *args, **kwargs):
        started.append(system)
        yield type("H", (), {"system": system, "settings": {}})()

    def rows(h, writes, in_flight, echo):
        rate = rates[h.system][started.count(h.system) - 1]
        return [make_row(h.system, "write", "leader", n, [0.001] * rate, 1.0) for n in in_flight]

    monkeypatch.setattr(runner, "start_harness", harness)
    monkeypatch.setattr(runner, "_rows", rows)
    monkeypatch.setattr(runner, "build", lambda echo: None)
    lines: list[str] = []
    report = runner.run_bench(writes=10, in_flight=[1], systems=["zabref"], zabref_clients=["zabclient", "java"],
                              out=tmp_path, failover_trials=0, echo=lines.append, rounds=3)
    assert started == ["zabref", "zabref-java", "zabref-java", "zabref", "zabref", "zabref-java"]
    assert [(r["system"], r["ops_per_s"]) for r in report["rows"]] == [("zabref", 200.0), ("zabref-java", 100.0)]
    assert report["settings"]["rounds"] == 3 and len(report["rounds"]) == 3
    assert "round 2 of 3" in lines and any(line.startswith("throughput ratio by round") for line in lines)
    with pytest.raises(BenchError, match="--rounds"):
        runner.run_bench(writes=10, in_flight=[1], systems=["zabref"], out=tmp_path, failover_trials=0, rounds=0)


@pytest.mark.slow
def test_smoke_zabref_side(tmp_path):
    """The zabref side end to end with a tiny count: every row complete, reads return what was written, one failover
    trial, bench.json valid, bench.png written; with --log-actions the failover run's logs are a behaviour of the
    spec."""
    pytest.importorskip("matplotlib")
    from conformance.bench.runner import run_bench
    from conformance.validate.command import validate

    lines: list[str] = []
    report = run_bench(writes=30, in_flight=[1, 4], systems=["zabref"], out=tmp_path, failover_trials=1,
                       log_actions=True, failover_warmup=0.2, echo=lines.append)
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
    # the servers name their build, as this process runs it (their import path is this process's)
    assert report["settings"]["zabref"]["build"] == zabref.build()
    assert f"zabref: the servers run zabref's {zabref.build()} build" in lines
    assert sorted(p.name for p in (tmp_path / "actions" / "throughput").iterdir()) == [
        f"actions-{sid}.jsonl" for sid in (1, 2, 3)]
    result = validate(tmp_path / "actions" / "failover", work=tmp_path)
    assert result.failure is None and result.steps > 0 and result.matched == result.steps, result.failure


# ------------------------------------------------------------------------------------ scripts/bench_ab.py


def _bench_ab():
    return helpers.load_script("bench_ab")


def test_bench_ab_takes_the_median_of_each_version_and_divides_b_by_a() -> None:
    ab = _bench_ab()

    def run(ops, cpu, system="zabref"):
        return [{"system": system, "op": "write", "target": "leader", "in_flight": 16, "ops_per_s": ops,
                 "server_cpu_s_per_1k_ops": cpu},
                {"system": system, "op": "read", "target": "leader", "in_flight": 16, "ops_per_s": 10.0,
                 "server_cpu_s_per_1k_ops": None}]

    java = run(1000.0, 9.0, "zabref-java")  # another client's row of the same op: kept apart, not in the medians
    lines = ab.table([run(100.0, 1.0) + java, run(300.0, 3.0), run(200.0, 2.0)], [run(300.0, 1.0), run(500.0, 1.0)])
    write = next(line for line in lines if line.split()[:2] == ["zabref", "write"])
    # A's medians 200 ops/s and 2.0 CPU s; B's 400 and 1.0: ops 2.00x, CPU 0.50x
    assert write.split() == ["zabref", "write", "leader", "16", "200.0", "400.0", "2.00", "2.000", "1.000", "0.50"]
    read = next(line for line in lines if line.split()[:2] == ["zabref", "read"])
    assert read.split()[-1] == "-" and read.split()[6] == "1.00"  # no CPU figure: no ratio, not a division by zero
    other = next(line for line in lines if line.split()[:2] == ["zabref-java", "write"])
    assert other.split()[4:7] == ["1,000.0", "0.0", "-"]  # B ran no such row: no ratio


def test_bench_ab_exports_a_revisions_package_and_names_a_bad_revision(monkeypatch, tmp_path) -> None:
    import subprocess

    ab = _bench_ab()
    monkeypatch.setattr(ab, "CACHE", tmp_path)
    label, folder = ab.export("HEAD")
    head = subprocess.run(["git", "show", "HEAD:zabref/cli.py"], cwd=ab.ROOT, capture_output=True, check=True).stdout
    assert (folder / "zabref" / "cli.py").read_bytes() == head and label.startswith("HEAD (")
    with pytest.raises(SystemExit, match="'no-such-rev' is not a revision of this repository"):
        ab.export("no-such-rev")
