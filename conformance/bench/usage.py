"""What a server process costs: its CPU time and resident memory, read from ``/proc`` (Linux).

Theory of operation
-------------------
The runner reads each server's CPU time (user + system, ``/proc/<pid>/stat`` fields 14 and 15, in clock ticks)
before and after a row, and its resident set (``VmRSS`` of ``/proc/<pid>/status``) after it. Every server of both
systems is a direct child process (``python -m zabref.cli serve`` / ``java ... QuorumPeerMain``), so its pid is the
process doing the work. A process that is gone (or a system without ``/proc``) reads as None, shown as "-".
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["cpu_seconds", "rss_mb", "Usage"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (all its threads), None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()  # the command name may hold spaces; it ends at the last ')'
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15 of proc(5)


def rss_mb(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB, None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class Usage:
    """``u = Usage(pids)`` before a row; ``u.cpu_s()`` (summed over the servers) and ``u.rss()`` after it."""

    def __init__(self, pids: Mapping[int, int]) -> None:
        self.pids = dict(sorted(pids.items()))
        self.before = {sid: cpu_seconds(pid) for sid, pid in self.pids.items()}

    def cpu_s(self) -> float | None:
        total = 0.0
        for sid, pid in self.pids.items():
            now, then = cpu_seconds(pid), self.before[sid]
            if now is None or then is None:
                return None
            total += now - then
        return round(total, 3)

    def rss(self) -> tuple[float | None, ...]:
        return tuple(rss_mb(pid) for pid in self.pids.values())
