"""The checker: what clients saw and what servers delivered, against Zab's guarantees.

Theory of operation
-------------------
Input, all plain data (so hand-made histories test the checker itself, ``tests/test_faults.py``):

* `Write`: one submit by one client -- the value (unique in a run), when it was invoked and when the client stopped
  waiting (``time.monotonic``), and its outcome: ``ok`` (acknowledged with a zxid), ``fail`` (the server said it did
  not take the value: ``retry: true``, or the connection was refused before anything was sent) or ``unknown``
  (timeout, a dropped connection, ``retry: false``: the value may or may not be committed, now or later);
* `Sample`: what one server's ``read`` returned during the run: the delivered transactions after zxid ``after``;
* ``finals``: every server's whole delivered sequence at the end, after faults stopped and the cluster settled.

The *reference* is the longest final sequence. The checks, each a count in the `Verdict`:

``lost``
    acknowledged writes missing from some final sequence (a committed transaction is never lost: seed 004, Fig. 3);
``divergent``
    final sequences that are not a prefix of the reference, samples that are not the reference's transactions
    after their ``after`` zxid, and sequences whose zxids do not strictly increase (agreement and total order: one
    server's sequence is a prefix of another's, while it catches up);
``misplaced``
    acknowledged writes delivered under another zxid than the one the client was given;
``duplicates``
    values delivered twice by one server (integrity);
``out_of_order``
    delivered values placed before a write that was acknowledged before they were even invoked: if write w was
    acknowledged before value v was sent, w must precede v (the real-time order a client can observe). This is
    how "nothing unacknowledged appears out of order" is read: a value whose outcome is unknown may appear late
    -- a request that sat in a paused server's socket can be forwarded seconds after the client gave up, after
    the same client's next value -- but never before a write acknowledged before it was sent;
``phantoms``
    delivered values that no client submitted, or whose submit the server said it refused.

``ok`` is true when every count above is 0. ``unacked_delivered`` (unknown outcomes that were committed) is
information, not an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Write", "Sample", "Verdict", "check"]

Txn = tuple[int, str]
Outcome = Literal["ok", "fail", "unknown"]
MAX_EXAMPLES = 10


@dataclass(frozen=True)
class Write:
    """One submit: ``value`` by ``client``, invoked at ``invoked``, ended at ``completed`` with ``outcome``."""

    value: str
    client: int
    invoked: float
    completed: float
    outcome: Outcome
    zxid: int | None = None

    def __post_init__(self) -> None:
        if self.outcome not in ("ok", "fail", "unknown"):
            raise ValueError(f"write {self.value!r}: outcome {self.outcome!r} is not ok, fail or unknown")
        if (self.outcome == "ok") != (self.zxid is not None):
            raise ValueError(f"write {self.value!r}: a zxid goes with outcome ok, and only with it")
        if self.completed < self.invoked:
            raise ValueError(f"write {self.value!r}: completed before it was invoked")


@dataclass(frozen=True)
class Sample:
    """Server ``server``'s delivered transactions after zxid ``after`` (0: from the start), as read mid-run."""

    server: int
    after: int
    txns: tuple[Txn, ...]


@dataclass
class Verdict:
    """The counts of one check, and up to `MAX_EXAMPLES` lines that show the first problems."""

    acked: int = 0
    failed: int = 0
    unknown: int = 0
    unacked_delivered: int = 0
    delivered: int = 0
    lost: int = 0
    divergent: int = 0
    misplaced: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    phantoms: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.divergent or self.misplaced or self.duplicates or self.out_of_order
                    or self.phantoms)

    def note(self, text: str) -> None:
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)

    def summary(self) -> str:
        return (f"writes acknowledged {self.acked}, lost {self.lost}, divergent {self.divergent}, duplicates "
                f"{self.duplicates}, out of order {self.out_of_order}, misplaced {self.misplaced}, phantoms "
                f"{self.phantoms}; refused {self.failed}, unknown outcome {self.unknown} "
                f"({self.unacked_delivered} of them delivered); delivered sequence {self.delivered} txns")


def _first_difference(a: Sequence[Txn], b: Sequence[Txn]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(writes: Iterable[Write], finals: Mapping[int, Sequence[Txn]], samples: Iterable[Sample] = ()) -> Verdict:
    """Check one run; see the module docstring for what each count means."""
    writes = list(writes)
    by_value: dict[str, Write] = {}
    for w in writes:
        if w.value in by_value:
            raise ValueError(f"value {w.value!r} was submitted twice: values must be unique in a run")
        by_value[w.value] = w
    v = Verdict(acked=sum(w.outcome == "ok" for w in writes), failed=sum(w.outcome == "fail" for w in writes),
                unknown=sum(w.outcome == "unknown" for w in writes))
    if not finals:
        raise ValueError("no final sequence to check: at least one server must be read at the end")
    ref_sid = max(finals, key=lambda s: (len(finals[s]), -s))
    ref = list(finals[ref_sid])
    v.delivered = len(ref)

    # Agreement / total order: every final is a prefix of the reference; zxids strictly increase.
    for sid, seq in sorted(finals.items()):
        k = _first_difference(seq, ref)
        if k < len(seq):
            v.divergent += 1
            v.note(f"server {sid} diverges from server {ref_sid} at position {k}: {seq[k]} vs "
                   f"{ref[k] if k < len(ref) else 'nothing'}")
        bad = next((i for i in range(1, len(seq)) if seq[i][0] <= seq[i - 1][0]), None)
        if bad is not None:
            v.divergent += 1
            v.note(f"server {sid}: zxid {seq[bad][0]:#x} at position {bad} does not follow {seq[bad - 1][0]:#x}")

    # Samples taken during the run: each is the reference's segment right after its `after` zxid.
    index = {z: i for i, (z, _) in enumerate(ref)}
    for s in samples:
        start = 0 if s.after == 0 else index.get(s.after)
        if start is None:
            v.divergent += 1
            v.note(f"server {s.server} once delivered zxid {s.after:#x}, which server {ref_sid} never delivered")
            continue
        start += 0 if s.after == 0 else 1
        if list(s.txns) != ref[start : start + len(s.txns)]:
            k = _first_difference(s.txns, ref[start:])
            v.divergent += 1
            v.note(f"server {s.server} delivered {s.txns[k]} after zxid {s.after:#x} (position {start + k}), "
                   f"server {ref_sid} {ref[start + k] if start + k < len(ref) else 'nothing'}")

    # Integrity: nothing twice, nothing that was never submitted or that was refused.
    for sid, seq in sorted(finals.items()):
        for value, n in Counter(val for _, val in seq).items():
            if n > 1:
                v.duplicates += 1
                v.note(f"server {sid} delivered {value!r} {n} times")
    for zxid, value in ref:
        w = by_value.get(value)
        if w is None or w.outcome == "fail":
            v.phantoms += 1
            v.note(f"{value!r} delivered at zxid {zxid:#x}, but " +
                   ("no client submitted it" if w is None else "its submit was refused"))
        elif w.outcome == "unknown":
            v.unacked_delivered += 1
        elif w.zxid != zxid:
            v.misplaced += 1
            v.note(f"{value!r} acknowledged as zxid {w.zxid:#x}, delivered as zxid {zxid:#x}")

    # A committed transaction is never lost: every acknowledged write is in every final sequence.
    final_values = {sid: {val for _, val in seq} for sid, seq in finals.items()}
    for w in writes:
        if w.outcome == "ok":
            missing = sorted(sid for sid, vals in final_values.items() if w.value not in vals)
            if missing:
                v.lost += 1
                v.note(f"{w.value!r} acknowledged as zxid {w.zxid:#x}, missing at servers {missing}")

    # Real-time order: a write acknowledged before v was invoked precedes v.
    earliest_ack_after = float("inf")  # smallest `completed` of an acknowledged write at a later position
    for zxid, value in reversed(ref):
        w = by_value.get(value)
        if w is None:
            continue
        if earliest_ack_after < w.invoked:
            v.out_of_order += 1
            v.note(f"{value!r} ({w.outcome}, zxid {zxid:#x}) precedes a write acknowledged before it was invoked")
        if w.outcome == "ok":
            earliest_ack_after = min(earliest_ack_after, w.completed)
    return v
