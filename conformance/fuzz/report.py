"""The live fuzzer's findings: counts per kind and outcome, close reasons, memory, problems; the summary tables.

Theory of operation
-------------------
`Report` is filled by `conformance.fuzz.harness.Fuzzer` as inputs finish and after the run; `summary` renders it as the
markdown tables docs/fuzzing.md records. The reasons table groups the servers' close lines (`CLOSE_LINE`: "<port>
connection from|with <who> closed: <reason>", the port ``quorum``, ``election``, ``client``, ``control`` or ``ZooKeeper
client``) by `reason_class`, the reason without its numbers and names.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Report", "CLOSE_LINE", "CLOSE_PORTS", "reason_class"]

CLOSE_LINE = re.compile(r"(quorum|election|ZooKeeper client|client|control) connection (?:from|with) (\(.*?\)|\S+) "
                        r"closed: (.*)$")
#: The port a close line's first group names.
CLOSE_PORTS = {"quorum": "quorum_port", "election": "election_port", "client": "client_port",
               "control": "control_port", "ZooKeeper client": "zk_client_port"}


def reason_class(reason: str) -> str:
    """A close reason without its numbers, addresses, packet names and the server's state, for the reasons table."""
    reason = re.sub(r"\s*\[[^\]]*\]$", "", reason)
    reason = re.sub(r"\b[A-Z]+\(zxid [^)]*\)", "<packet>", reason)
    reason = re.sub(r"QuorumPacket [A-Z]+", "QuorumPacket <type>", reason)
    reason = re.sub(r"\(.*?\)|0x[0-9a-f]+|-?\d+(?:\.\d+)?", "N", reason)
    return reason[:110]


@dataclass
class Report:
    inputs: int = 0
    seed: int = 0
    seconds: float = 0.0
    by_kind: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, outcome)
    failures: list[str] = field(default_factory=list)
    closed_by_server: Counter[tuple[int, str]] = field(default_factory=Counter)  # (sid, port) of counted kinds
    logged_closes: Counter[tuple[int, str]] = field(default_factory=Counter)  # (sid, port) of fuzz-origin lines
    reasons: Counter[tuple[str, str]] = field(default_factory=Counter)  # (port, reason class)
    rss_before: dict[int, int] = field(default_factory=dict)
    rss_peak: dict[int, int] = field(default_factory=dict)
    rss_after: dict[int, int] = field(default_factory=dict)
    writes_ok: int = 0
    writes_failed: int = 0
    role_changes: int = 0
    after_zxid: int | None = None
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"{self.inputs} inputs (seed {self.seed}) in {self.seconds:.1f} s; client writes {self.writes_ok} "
                 f"committed, {self.writes_failed} refused; role changes seen {self.role_changes}; commit after the "
                 f"run: {self.after_zxid and hex(self.after_zxid)}", "",
                 "| kind | inputs | outcomes |", "|---|---|---|"]
        for kind, n in sorted(self.by_kind.items()):
            outs = ", ".join(f"{o} {c}" for (k, o), c in sorted(self.outcomes.items()) if k == kind)
            lines.append(f"| {kind} | {n} | {outs} |")
        lines += ["", "| port | reason logged for closing a fuzz connection | count |", "|---|---|---|"]
        top = self.reasons.most_common(40)
        lines += [f"| {p} | {r} | {c} |" for (p, r), c in sorted(top)]
        if len(self.reasons) > len(top):
            lines.append(f"| (other) | {len(self.reasons) - len(top)} more reasons | "
                         f"{sum(self.reasons.values()) - sum(c for _, c in top)} |")
        lines += ["", "| server | port | fuzz connections it closed | log lines explaining them |", "|---|---|---|---|"]
        for key in sorted(set(self.closed_by_server) | set(self.logged_closes)):
            lines.append(f"| {key[0]} | {key[1]} | {self.closed_by_server[key]} | {self.logged_closes[key]} |")
        lines += ["", "| server | VmRSS before | peak | after |", "|---|---|---|---|"]
        for sid in sorted(self.rss_before):
            lines.append(f"| {sid} | {self.rss_before[sid] / 1024:.1f} MiB | {self.rss_peak.get(sid, 0) / 1024:.1f} "
                         f"MiB | {self.rss_after.get(sid, 0) / 1024:.1f} MiB |")
        if self.skipped:
            lines += ["", "skipped (known issues): " + ", ".join(self.skipped)]
        lines += ["", f"problems: {len(self.problems)}"] + [f"- {p}" for p in self.problems[:40]]
        return "\n".join(lines)

