"""The results: a text table with the zabref/ZooKeeper ratios, a JSON file, a PNG plot.

Theory of operation
-------------------
`build_report` gathers everything measured in one run into one JSON-able dict (shape below); `check_report` checks
that shape and raises `BenchError` naming the first bad field (the tests use it on a built report, and
`write_json` runs it before writing); `format_table` renders the rows side by side per (op, target, in flight);
`write_json` and `write_png` write atomically (temp file in the same folder, then rename), so a crashed run
never leaves half a file.

JSON (``format`` = ``zabref-bench-cluster/1``)::

    {"format", "command", "started", "finished",
     "machine": {"cpus", "loadavg_before": [1, 5, 15 min], "loadavg_after": [...], "python", "java"},
     "settings": {"writes", "in_flight": [...], "value_bytes", "zabref": {...}, "zookeeper": {...}},
     "rows": [Row...], "comparison": [{"op", "target", "in_flight", "throughput", "p50", "p99"}...],
     "failover": [{"system", "trial", "killed", "probe_server", "leader_s", "first_write_s", "new_leader"}...],
     "failover_errors": ["<system> trial <n>: <why>", ...]}
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zabref.bench import BenchError
from zabref.bench.stats import Row, compare
from zabref.storage.atomic import write_file

__all__ = ["FORMAT", "build_report", "check_report", "format_table", "format_failover", "write_json", "write_png"]

FORMAT = "zabref-bench-cluster/1"

_ROW_FIELDS = {"system": str, "op": str, "target": str, "in_flight": int, "count": int, "errors": int,
               "seconds": (int, float), "ops_per_s": (int, float), "p50_ms": (int, float, type(None)),
               "p99_ms": (int, float, type(None)), "max_ms": (int, float, type(None))}
_CMP_FIELDS = {"op": str, "target": str, "in_flight": int, "throughput": (int, float, type(None)),
               "p50": (int, float, type(None)), "p99": (int, float, type(None))}
_FAIL_FIELDS = {"system": str, "trial": int, "killed": int, "probe_server": int, "leader_s": (int, float),
                "first_write_s": (int, float), "new_leader": (int, type(None))}


def _nan_to_none(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else x


def build_report(rows: Sequence[Row], failover: Sequence[Any], *, command: str, started: str, finished: str,
                 machine: dict[str, Any], settings: dict[str, Any], failover_errors: Sequence[str] = ()
                 ) -> dict[str, Any]:
    return {
        "format": FORMAT, "command": command, "started": started, "finished": finished,
        "machine": machine, "settings": settings,
        "rows": [{k: _nan_to_none(v) for k, v in r.to_json().items()} for r in rows],
        "comparison": compare(rows),
        "failover": [f.to_json() for f in failover],
        "failover_errors": list(failover_errors),
    }


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
                                     "failover": list, "failover_errors": list})
    if report["format"] != FORMAT:
        raise BenchError(f"report.format: {report['format']!r}, expected {FORMAT!r}")
    _check_fields("report.machine", report["machine"], {"cpus": int, "loadavg_before": list, "loadavg_after": list})
    _check_fields("report.settings", report["settings"], {"writes": int, "in_flight": list, "value_bytes": int})
    for i, row in enumerate(report["rows"]):
        _check_fields(f"report.rows[{i}]", row, _ROW_FIELDS)
    for i, c in enumerate(report["comparison"]):
        _check_fields(f"report.comparison[{i}]", c, _CMP_FIELDS)
    for i, f in enumerate(report["failover"]):
        _check_fields(f"report.failover[{i}]", f, _FAIL_FIELDS)


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def format_table(rows: Sequence[Row]) -> str:
    """One line per (op, target, in flight): each system's ops/s, p50, p99 (ms) and zabref/ZooKeeper."""
    by = {(r.system, r.key): r for r in rows}
    keys = list(dict.fromkeys(r.key for r in rows))
    head = (f"{'op':<6}{'target':<9}{'in flight':>9} | {'zabref ops/s':>12}{'p50':>8}{'p99':>8} | "
            f"{'ZooKeeper ops/s':>15}{'p50':>8}{'p99':>8} | {'ratio ops/s':>11}{'ratio p99':>10}")
    lines = [head, "-" * len(head)]
    for key in keys:
        z, k = by.get(("zabref", key)), by.get(("zookeeper", key))
        ratio = _num(z.ops_per_s / k.ops_per_s, 2) if z and k and k.ops_per_s else "-"
        r99 = _num(z.p99_ms / k.p99_ms, 2) if z and k and k.p99_ms and not math.isnan(z.p99_ms) else "-"
        lines.append(f"{key[0]:<6}{key[1]:<9}{key[2]:>9} | "
                     f"{_num(z.ops_per_s if z else None):>12}{_num(z.p50_ms if z else None, 2):>8}"
                     f"{_num(z.p99_ms if z else None, 2):>8} | "
                     f"{_num(k.ops_per_s if k else None):>15}{_num(k.p50_ms if k else None, 2):>8}"
                     f"{_num(k.p99_ms if k else None, 2):>8} | {ratio:>11}{r99:>10}")
    lines.append("p50/p99 in ms; ratio = zabref / ZooKeeper (ops/s above 1: zabref faster; p99 above 1: zabref slower)")
    errors = sum(r.errors for r in rows)
    if errors:
        lines.append(f"{errors} requests failed (not counted): " +
                     ", ".join(f"{r.system} {r.op} {r.target} {r.in_flight}: {r.errors}" for r in rows if r.errors))
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
    """Throughput and p99 per row, both systems side by side (matplotlib, Agg backend)."""
    import matplotlib  # noqa: PLC0415 (optional dependency: the `bench` extra)

    matplotlib.use("Agg")
    import io  # noqa: PLC0415

    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = report["rows"]
    keys = list(dict.fromkeys((r["op"], r["target"], r["in_flight"]) for r in rows))
    labels = [f"{op}\n{target}\n{n}" for op, target, n in keys]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 0.9 * len(keys) + 2), 8), sharex=True)
    width = 0.4
    for j, (system, color) in enumerate((("zabref", "tab:blue"), ("zookeeper", "tab:orange"))):
        by = {(r["op"], r["target"], r["in_flight"]): r for r in rows if r["system"] == system}
        xs = [i + (j - 0.5) * width for i in range(len(keys))]
        axes[0].bar(xs, [by[k]["ops_per_s"] if k in by else 0 for k in keys], width, label=system, color=color)
        axes[1].bar(xs, [(by[k]["p99_ms"] or 0) if k in by else 0 for k in keys], width, label=system, color=color)
    axes[0].set_ylabel("ops/s")
    axes[0].set_title(f"zabref beside ZooKeeper 3.8: 3 servers on loopback, fsync on "
                      f"({report['settings']['writes']} writes of {report['settings']['value_bytes']} bytes)")
    axes[1].set_ylabel("p99 latency (ms)")
    axes[1].set_yscale("log")
    axes[1].set_xticks(range(len(keys)), labels, fontsize=8)
    axes[1].set_xlabel("op / target / requests in flight")
    for ax in axes:
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    write_file(path, buf.getvalue())
