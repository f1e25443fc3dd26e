"""The results: a text table with the zabref/ZooKeeper ratios and the client bottleneck check, a JSON file, a PNG.

Theory of operation
-------------------
`build_report` gathers everything measured in one run into one JSON-able dict (shape below); `check_report` checks
that shape and raises `BenchError` naming the first bad field (the tests use it on a built report, and
`write_json` runs it before writing); `format_table` renders the systems one under the other per (op, target, in
flight), each ZooKeeper line with zabref / that line (and, when ``zabref-java`` ran, the ``zookeeper-java`` line
with zabref-java / that line: the same Java client on both sides), and `format_clients` beneath it says per client
whether its CPU share came near one core (then the client, not the server, may be what was measured); `write_png`
draws throughput and p99 against requests in flight, one line per system; with several rounds the rows are each
the median of their rounds (`conformance.bench.stats.median_row`), ``rounds`` keeps every round's rows and
``by_round`` every round's throughput ratio, which `format_rounds` prints;
`write_json` and `write_png` write atomically (temp file in the same folder, then rename), so a crashed run
never leaves half a file.

JSON (``format`` = ``zabref-bench-cluster/4``)::

    {"format", "command", "started", "finished",
     "machine": {"cpus", "loadavg_before": [1, 5, 15 min], "loadavg_after": [...], "python", "java"},
     "settings": {"writes", "in_flight": [...], "value_bytes", "systems": [...], "rounds", "zabref": {...},
                  "zabref-java": {...}, "zookeeper": {...}, "zookeeper-java": {...}},
     "rows": [{"system", "op", "target", "in_flight", "count", "errors", "seconds", "ops_per_s", "p50_ms",
               "p99_ms", "max_ms", "client_cpu_s", "server_cpu_s", "server_rss_mb": [per server],
               "client_cpu_share", "server_cpu_s_per_1k_ops"}...],
     "comparison": [{"system", "op", "target", "in_flight", "against", "throughput", "p50", "p99"}...],
     "by_round": [{"system", "op", "target", "in_flight", "against", "rounds": [throughput ratio a round]}...],
     "rounds": [[the rows of round 1 (as "rows")], ...] (with more than one round; else absent),
     "failover": [{"system", "trial", "killed", "probe_server", "leader_s", "first_write_s", "new_leader"}...],
     "failover_errors": ["<system> trial <n>: <why>", ...]}
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conformance.bench import BenchError
from conformance.bench.stats import PAIRS, Row, by_round, compare, ratio
from zabref.storage.atomic import write_file

__all__ = ["FORMAT", "build_report", "check_report", "format_table", "format_clients", "format_failover",
           "format_rounds", "write_json", "write_png"]

FORMAT = "zabref-bench-cluster/4"
#: Order of the systems in the table and the plot; the client driving each.
SYSTEM_ORDER = ("zabref", "zabref-java", "zookeeper-java", "zookeeper")
CLIENTS = {"zabref": "zabclient (Python, asyncio)", "zabref-java": "ZkLoad (Java, async API)",
           "zookeeper-java": "ZkLoad (Java, async API)", "zookeeper": "kazoo (Python)"}
COLORS = {"zabref": "tab:blue", "zabref-java": "tab:green", "zookeeper-java": "tab:red", "zookeeper": "tab:orange"}
#: The zabref systems, each with a ratio column in the table (zabref / that ZooKeeper line).
ZABREF_SYSTEMS = ("zabref", "zabref-java")
#: A client using this share of one core or more is flagged as a possible bottleneck.
BOTTLENECK_SHARE = 0.8

_ROW_FIELDS = {"system": str, "op": str, "target": str, "in_flight": int, "count": int, "errors": int,
               "seconds": (int, float), "ops_per_s": (int, float), "p50_ms": (int, float, type(None)),
               "p99_ms": (int, float, type(None)), "max_ms": (int, float, type(None)),
               "client_cpu_s": (int, float, type(None)), "server_cpu_s": (int, float, type(None)),
               "server_rss_mb": (list, type(None)), "client_cpu_share": (int, float, type(None)),
               "server_cpu_s_per_1k_ops": (int, float, type(None))}
_CMP_FIELDS = {"system": str, "op": str, "target": str, "in_flight": int, "against": str,
               "throughput": (int, float, type(None)), "p50": (int, float, type(None)), "p99": (int, float, type(None))}
_ROUND_KEYS = ("system", "op", "target", "in_flight", "against")
_FAIL_FIELDS = {"system": str, "trial": int, "killed": int, "probe_server": int, "leader_s": (int, float),
                "first_write_s": (int, float), "new_leader": (int, type(None))}


def _nan_to_none(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else x


def _rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [{k: _nan_to_none(v) for k, v in r.to_json().items()} for r in rows]


def build_report(rows: Sequence[Row], failover: Sequence[Any], *, command: str, started: str, finished: str,
                 machine: dict[str, Any], settings: dict[str, Any], failover_errors: Sequence[str] = (),
                 rounds: Sequence[Sequence[Row]] | None = None) -> dict[str, Any]:
    """The report of ``rows`` (with several ``rounds``: the medians of those rounds' rows)."""
    report: dict[str, Any] = {
        "format": FORMAT, "command": command, "started": started, "finished": finished,
        "machine": machine, "settings": settings,
        "rows": _rows_json(rows),
        "comparison": compare(rows),
        "by_round": by_round(rounds if rounds is not None else [rows]),
        "failover": [f.to_json() for f in failover],
        "failover_errors": list(failover_errors),
    }
    if rounds is not None:
        report["rounds"] = [_rows_json(one) for one in rounds]
    return report


def _check_fields(where: str, obj: Any, fields: dict[str, Any]) -> None:
    if not isinstance(obj, dict):
        raise BenchError(f"{where}: expected an object, got {type(obj).__name__}")
    for key, kind in fields.items():
        if key not in obj:
            raise BenchError(f"{where}: missing {key!r}")
        if isinstance(obj[key], bool) or not isinstance(obj[key], kind):
            raise BenchError(f"{where}.{key}: {obj[key]!r} has the wrong type")


def check_report(report: Any) -> None:
    """BenchError naming the first field that does not have the documented shape."""
    _check_fields("report", report, {"format": str, "command": str, "started": str, "finished": str,
                                     "machine": dict, "settings": dict, "rows": list, "comparison": list,
                                     "by_round": list, "failover": list, "failover_errors": list})
    if report["format"] != FORMAT:
        raise BenchError(f"report.format: {report['format']!r}, expected {FORMAT!r}")
    _check_fields("report.machine", report["machine"], {"cpus": int, "loadavg_before": list, "loadavg_after": list})
    _check_fields("report.settings", report["settings"], {"writes": int, "in_flight": list, "value_bytes": int})
    for i, row in enumerate(report["rows"]):
        _check_fields(f"report.rows[{i}]", row, _ROW_FIELDS)
    for i, c in enumerate(report["comparison"]):
        _check_fields(f"report.comparison[{i}]", c, _CMP_FIELDS)
    for i, c in enumerate(report["by_round"]):
        _check_fields(f"report.by_round[{i}]", c, {**{k: _CMP_FIELDS[k] for k in _ROUND_KEYS}, "rounds": list})
    for i, one in enumerate(report.get("rounds", [])):
        if not isinstance(one, list):
            raise BenchError(f"report.rounds[{i}]: expected a list, got {type(one).__name__}")
        for j, row in enumerate(one):
            _check_fields(f"report.rounds[{i}][{j}]", row, _ROW_FIELDS)
    for i, f in enumerate(report["failover"]):
        _check_fields(f"report.failover[{i}]", f, _FAIL_FIELDS)


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def format_table(rows: Sequence[Row]) -> str:
    """One line per system under each (op, target, in flight): ops/s, p50, p99 (ms), the servers' CPU seconds per
    1,000 ops, each server's resident memory, the client's CPU share, and zabref / that system (one pair of columns
    per zabref system that ran, each filled on the ZooKeeper lines `PAIRS` pairs it with); then the client bottleneck
    check (`format_clients`)."""
    by = {(r.system, r.key): r for r in rows}
    keys = list(dict.fromkeys(r.key for r in rows))
    systems = [s for s in SYSTEM_ORDER if any(r.system == s for r in rows)]
    zabs = [s for s in ZABREF_SYSTEMS if s in systems] or ["zabref"]
    heads = [f"{s}/this ops/s" for s in zabs]
    head = (f"{'op':<6}{'target':<9}{'in flight':>9}  {'system':<15}{'ops/s':>10}{'p50':>8}{'p99':>8}"
            f"{'srv CPU s/1k':>13}{'RSS MB per server':>19}{'client CPU':>11} | "
            + "  ".join(f"{h}{'p99':>7}" for h in heads))
    lines = [head, "-" * len(head)]
    for key in keys:
        lead = f"{key[0]:<6}{key[1]:<9}{key[2]:>9}"
        for system in systems:
            r = by.get((system, key))
            if r is None:
                continue
            rss = " ".join(_num(x, 0) for x in r.server_rss_mb) if r.server_rss_mb else "-"
            cells = []
            for zab, h in zip(zabs, heads, strict=True):
                z = by.get((zab, key))
                cells.append(f"{_num(ratio(z.ops_per_s, r.ops_per_s) if z else None, 2):>{len(h)}}"
                             f"{_num(ratio(z.p99_ms, r.p99_ms) if z else None, 2):>7}"
                             if (zab, system) in PAIRS else " " * (len(h) + 7))
            cmp = "  ".join(cells) if system not in ZABREF_SYSTEMS else ""
            lines.append(f"{lead}  {system:<15}{_num(r.ops_per_s):>10}{_num(r.p50_ms, 2):>8}{_num(r.p99_ms, 2):>8}"
                         f"{_num(r.server_cpu_per_1k, 3):>13}{rss:>19}{_share(r.client_cpu_share):>11} | "
                         f"{cmp}".rstrip())
            lead = " " * len(lead)
    lines.append("p50/p99 in ms; srv CPU s/1k = the 3 servers' CPU seconds per 1,000 ops; RSS at the end of the row; "
                 "client CPU = the client's CPU seconds / the row's wall seconds (100 % = one core)")
    if "zabref" in zabs:
        lines.append("zabref/this: zabref / that ZooKeeper row (ops/s above 1: zabref faster; p99 above 1: zabref "
                     "slower); zookeeper = driven by kazoo, zookeeper-java = by ZooKeeper's Java client")
    if "zabref-java" in zabs:
        lines.append("zabref-java/this: zabref driven by ZooKeeper's Java client on its zk_client_port / the "
                     "zookeeper-java row, the same client on both sides (ops/s above 1: zabref faster; p99 above 1: "
                     "zabref slower)")
    errors = sum(r.errors for r in rows)
    if errors:
        lines.append(f"{errors} requests failed (not counted): " +
                     ", ".join(f"{r.system} {r.op} {r.target} {r.in_flight}: {r.errors}" for r in rows if r.errors))
    clients = format_clients(rows)
    return "\n".join(lines + ([""] + clients.splitlines() if clients else []))


def format_clients(rows: Sequence[Row]) -> str:
    """Per client: its highest CPU share of one core over its rows, and whether it may be what limits them (a
    client at `BOTTLENECK_SHARE` of a core or more; the Python clients cannot use more than one core)."""
    lines = []
    for system in SYSTEM_ORDER:
        mine = [r for r in rows if r.system == system and r.client_cpu_share is not None]
        if not mine:
            continue
        top = max(mine, key=lambda r: r.client_cpu_share or 0.0)
        busy = [r for r in mine if (r.client_cpu_share or 0.0) >= BOTTLENECK_SHARE]
        verdict = ("below one core in every row: not the bottleneck" if not busy else
                   f"near one core in {len(busy)} of {len(mine)} rows ("
                   + ", ".join(f"{r.op} {r.target} {r.in_flight}" for r in busy)
                   + "): there the client may limit what the servers show")
        lines.append(f"  {CLIENTS[system]:<28} [{system}]: client CPU up to {_share(top.client_cpu_share)} of a core "
                     f"({top.op} {top.target} {top.in_flight}); {verdict}")
    return "\n".join(["bottleneck check (client CPU share of one core while its rows ran):", *lines]) if lines else ""


def format_rounds(entries: Sequence[dict[str, Any]]) -> str:
    """Each compared row's throughput ratio in every round (`build_report`'s ``by_round``), with the lowest and the
    highest: how far one run's ratio may be from another's."""
    lines = ["throughput ratio by round (zabref / ZooKeeper; the table above holds the medians):"]
    for e in entries:
        known = [x for x in e["rounds"] if x is not None]
        spread = f"  (lowest {min(known):.2f}, highest {max(known):.2f})" if known else ""
        lines.append(f"  {e['op']:<6}{e['target']:<9}{e['in_flight']:>4}  {e['system']}/{e['against']:<15} "
                     + " ".join(_num(x, 2) for x in e["rounds"]) + spread)
    return "\n".join(lines)


def format_failover(results: Sequence[Any]) -> str:
    if not results:
        return ""
    lines = ["failover (kill -9 the leader under 16 writers on a follower; seconds after the kill)",
             f"{'system':<10}{'trial':>6}{'killed':>7}{'new leader serves':>19}{'first write after kill':>24}"]
    for f in results:
        lines.append(f"{f.system:<10}{f.trial:>6}{f.killed:>7}{f.leader_s:>19.3f}{f.first_write_s:>24.3f}")
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: Path) -> None:
    check_report(report)
    write_file(path, (json.dumps(report, indent=1) + "\n").encode())


def write_png(report: dict[str, Any], path: Path) -> None:
    """Throughput (top) and p99 (bottom) against requests in flight, one panel per (op, target), one line per system
    (matplotlib, Agg backend)."""
    import matplotlib  # noqa: PLC0415 (optional dependency: the `bench` extra)

    matplotlib.use("Agg")

    import matplotlib.pyplot as plt  # noqa: PLC0415 (optional dependency (the bench extra), loaded only to plot)

    rows = report["rows"]
    panels = list(dict.fromkeys((r["op"], r["target"]) for r in rows)) or [("write", "follower")]
    fig, axes = plt.subplots(2, len(panels), figsize=(4 * len(panels) + 1, 7), squeeze=False)
    for col, (op, target) in enumerate(panels):
        for system in SYSTEM_ORDER:
            mine = sorted((r for r in rows if r["system"] == system and (r["op"], r["target"]) == (op, target)),
                          key=lambda r: r["in_flight"])
            if not mine:
                continue
            xs = [r["in_flight"] for r in mine]
            label = f"{system} ({CLIENTS[system]})"
            axes[0][col].plot(xs, [r["ops_per_s"] for r in mine], "o-", color=COLORS[system], label=label)
            axes[1][col].plot(xs, [r["p99_ms"] for r in mine], "o-", color=COLORS[system], label=label)
        axes[0][col].set_title(f"{op}s via the {target}")
        axes[0][col].set_ylim(bottom=0)
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xscale("log")
            ax.minorticks_off()
            ax.set_xticks(report["settings"]["in_flight"], [str(n) for n in report["settings"]["in_flight"]])
            ax.grid(alpha=0.3)
        axes[1][col].set_yscale("log")
        axes[1][col].set_xlabel("requests in flight")
    axes[0][0].set_ylabel("ops/s")
    axes[1][0].set_ylabel("p99 latency (ms)")
    axes[0][0].legend(fontsize=8)
    rounds = report["settings"].get("rounds", 1)
    fig.suptitle(f"zabref beside ZooKeeper 3.8: 3 servers on loopback, fsync on "
                 f"({report['settings']['writes']} requests of {report['settings']['value_bytes']} bytes a point"
                 f"{f'; each the median of {rounds} rounds' if rounds > 1 else ''})")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_file(path, buf.getvalue())
