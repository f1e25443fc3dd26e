"""Availability of a fault run, per kind of fault: how writes fared while each kind of episode was under way.

Theory of operation
-------------------
Inputs: the episodes over (`conformance.faults.nemesis.Nemesis.spans`: kind, began, ended) and the moments writes were
acknowledged, all on ``time.monotonic()``, and the window of the run. Outputs, per kind:

* ``episodes`` and ``seconds`` under that kind of fault;
* ``rate``: acknowledged writes per second while such an episode was under way, and ``ratio``: that rate over the
  rate while no episode was (1.0: the fault cost nothing; 0.0: nothing was acknowledged);
* ``longest_outage``: the longest stretch without an acknowledged write that overlaps such an episode (the window's
  ends count as acknowledgements, so an outage running into the end of the run is counted).

Episodes of other kinds at the same time (``--concurrency`` > 1) count for each kind; the figures describe the run,
they are not a verdict (the checker's counts are).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["KindAvailability", "availability"]


@dataclass(frozen=True)
class KindAvailability:
    kind: str
    episodes: int
    seconds: float
    rate: float
    ratio: float | None  # None: no fault-free time to compare with
    longest_outage: float

    def to_json(self) -> dict[str, object]:
        return {"episodes": self.episodes, "seconds": round(self.seconds, 3), "acks_per_s": round(self.rate, 1),
                "vs_no_fault": None if self.ratio is None else round(self.ratio, 3),
                "longest_outage_s": round(self.longest_outage, 3)}


def availability(spans: Iterable[tuple[str, float, float]], acks: Iterable[float],
                 window: tuple[float, float]) -> list[KindAvailability]:
    """Per kind of fault (in order of first appearance); see the module docstring. Time O((A + E) log A) for A
    acknowledgements and E episodes."""
    start, end = window
    if end < start:
        raise ValueError(f"window ends ({end}) before it starts ({start})")
    spans = [(k, max(a, start), min(b, end)) for k, a, b in spans if b >= start and a <= end]
    marks = [start, *sorted(t for t in acks if start <= t <= end), end]  # acknowledgements, and the window's ends
    union = _union([(a, b) for _, a, b in spans])
    fault_free_s = (end - start) - sum(b - a for a, b in union)
    fault_free_n = (len(marks) - 2) - sum(_count(marks, a, b) for a, b in union)
    base = fault_free_n / fault_free_s if fault_free_s > 0 else None
    out = []
    for kind in dict.fromkeys(k for k, _, _ in spans):
        mine = _union([(a, b) for k, a, b in spans if k == kind])
        seconds = sum(b - a for a, b in mine)
        rate = sum(_count(marks, a, b) for a, b in mine) / seconds if seconds > 0 else 0.0
        longest = 0.0
        for a, b in mine:  # the stretches between acknowledgements that overlap [a, b]
            lo = max(bisect.bisect_left(marks, a) - 1, 0)
            hi = min(bisect.bisect_right(marks, b), len(marks) - 1)
            longest = max([longest, *(marks[i + 1] - marks[i] for i in range(lo, hi))])
        episodes = sum(1 for k, _, _ in spans if k == kind)
        out.append(KindAvailability(kind, episodes, seconds, rate, None if not base else rate / base, longest))
    return out


def _union(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of closed intervals, as disjoint intervals in order."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _count(marks: list[float], a: float, b: float) -> int:
    """Acknowledgements in [a, b] (``marks`` without its first and last element, the window's ends)."""
    lo = max(bisect.bisect_left(marks, a), 1)
    hi = min(bisect.bisect_right(marks, b), len(marks) - 1)
    return max(hi - lo, 0)
