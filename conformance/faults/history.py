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

Reads (`Read`: one reader's ``read`` at one server, with or without a ``sync`` first on the same connection; its
result is ``end``, the last zxid delivered at that server, which the read answer carries) are held to what
docs/runtime.md promises for them:

``stale_reads``
    a ``sync`` then ``read`` is linearizable: there are moments ``t_1 < t_2 < ...``, one per transaction of the
    reference in its order, each within its write's interval (invocation to acknowledgement; to infinity for an
    unknown outcome), such that every synced read has a moment within its own interval after ``t_end`` and before
    the next. With the order fixed by the reference this is decided exactly and in linear time: a read ending at
    position p forces ``t_{p+1}`` after the read's invocation and ``t_p`` before its completion, and the earliest
    increasing schedule within the narrowed windows exists iff the history is linearizable (`_linearizable`). The
    usual form of a failure: a write acknowledged before the sync was sent, missing from what the read saw;
``backward_reads``
    a plain ``read`` is sequentially consistent at one server: on one connection (a server that restarts closes it)
    what it reports delivered never goes backwards; and every ``end`` is a zxid of the reference (or 0).

``ok`` is true when every count above is 0. ``unacked_delivered`` (unknown outcomes that were committed) is
information, not an error.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["Write", "Sample", "Read", "Verdict", "check", "check_reads"]

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


@dataclass(frozen=True)
class Read:
    """One read by ``reader`` at ``server`` on connection ``session`` (a number the reader gives each connection),
    invoked at ``invoked``, answered at ``completed``: the server had delivered up to zxid ``end``. ``synced``: a
    ``sync`` on the same connection came first (and the interval covers both)."""

    reader: int
    server: int
    session: int
    invoked: float
    completed: float
    synced: bool
    end: int

    def __post_init__(self) -> None:
        if self.completed < self.invoked:
            raise ValueError(f"read by reader {self.reader}: completed before it was invoked")


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
    reads: int = 0
    synced_reads: int = 0
    stale_reads: int = 0
    backward_reads: int = 0
    examples: list[str] = field(default_factory=list)
    #: the stale reads of the usual form, each with the zxid of the write acknowledged before its sync was sent and
    #: missing from what it saw (a caller names the bug behind them: `conformance.faults.syncquorum`)
    missed: list[tuple[Read, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.divergent or self.misplaced or self.duplicates or self.out_of_order
                    or self.phantoms or self.stale_reads or self.backward_reads)

    def note(self, text: str) -> None:
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)

    def summary(self) -> str:
        return (f"writes acknowledged {self.acked}, lost {self.lost}, divergent {self.divergent}, duplicates "
                f"{self.duplicates}, out of order {self.out_of_order}, misplaced {self.misplaced}, phantoms "
                f"{self.phantoms}; refused {self.failed}, unknown outcome {self.unknown} "
                f"({self.unacked_delivered} of them delivered); delivered sequence {self.delivered} txns; reads "
                f"{self.reads} ({self.synced_reads} after a sync), stale {self.stale_reads}, backward "
                f"{self.backward_reads}")


def _first_difference(a: Sequence[Txn], b: Sequence[Txn]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def check(writes: Iterable[Write], finals: Mapping[int, Sequence[Txn]], samples: Iterable[Sample] = (),
          reads: Iterable[Read] = ()) -> Verdict:
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
    _check_reads(v, list(reads), ref, index, by_value)
    return v


def check_reads(writes: Iterable[Write], ref: Sequence[Txn], reads: Iterable[Read]) -> Verdict:
    """Only the reads (``stale_reads``, ``backward_reads``, reads of a zxid outside ``ref`` as ``divergent``),
    against the reference order ``ref`` -- for a checker that has its own reference (the simulator's final
    leader). Values must be unique among ``writes``."""
    by_value: dict[str, Write] = {}
    for w in writes:
        if w.value in by_value:
            raise ValueError(f"value {w.value!r} was submitted twice: values must be unique in a run")
        by_value[w.value] = w
    ref = list(ref)
    v = Verdict()
    _check_reads(v, list(reads), ref, {z: i for i, (z, _) in enumerate(ref)}, by_value)
    return v


def _check_reads(v: Verdict, reads: list[Read], ref: list[Txn], index: dict[int, int],
                 by_value: Mapping[str, Write]) -> None:
    v.reads, v.synced_reads = len(reads), sum(r.synced for r in reads)
    positions: list[tuple[Read, int]] = []  # (read, how many transactions of the reference it saw)
    last: dict[tuple[int, int], Read] = {}
    for r in sorted(reads, key=lambda r: r.invoked):
        if r.end != 0 and r.end not in index:
            v.divergent += 1
            v.note(f"reader {r.reader} read zxid {r.end:#x} as delivered at server {r.server}, which the reference "
                   "never delivered")
            continue
        positions.append((r, 0 if r.end == 0 else index[r.end] + 1))
        prev = last.get((r.reader, r.session))
        if prev is not None and r.end < prev.end:
            v.backward_reads += 1
            v.note(f"reader {r.reader} at server {r.server}, one connection: delivered up to {prev.end:#x}, then "
                   f"up to {r.end:#x}")
        last[(r.reader, r.session)] = r
    synced = [(r, p) for r, p in positions if r.synced]
    for text, missed in _linearizable(ref, by_value, synced):
        v.stale_reads += 1
        v.note(text)
        if missed is not None:
            v.missed.append(missed)


def _linearizable(ref: list[Txn], by_value: Mapping[str, Write],
                  reads: list[tuple[Read, int]]) -> list[tuple[str, tuple[Read, int] | None]]:
    """Why the reference's writes and the synced reads are not linearizable (empty: they are), each with, for a read
    that missed a write acknowledged before its sync was sent, the read and that write's zxid. See the module
    docstring: each read narrows two writes' windows; then the earliest increasing schedule must fit them."""
    n = len(ref)
    lo = [by_value[val].invoked if val in by_value else 0.0 for _, val in ref]
    # an acknowledged write took effect by its acknowledgement -- at the zxid it was told; the same value elsewhere
    # (a client's retry of an unknown outcome, committed twice) has no such bound
    hi = [by_value[val].completed if val in by_value and by_value[val].zxid == zxid else float("inf")
          for zxid, val in ref]
    why_lo: dict[int, Read] = {}
    why_hi: dict[int, Read] = {}
    for r, p in reads:
        if p < n and r.invoked > lo[p]:  # the (p+1)-th write (index p) takes effect after the read began
            lo[p], why_lo[p] = r.invoked, r
        if p > 0 and r.completed < hi[p - 1]:  # the p-th write (index p-1) took effect before the read ended
            hi[p - 1], why_hi[p - 1] = r.completed, r
    problems: list[tuple[str, tuple[Read, int] | None]] = []
    t = float("-inf")
    t_from: Read | None = None  # the read that set t (it began then and had not seen the write at index i yet)
    for i in range(n):
        if lo[i] > t:
            t, t_from = lo[i], why_lo.get(i)
        if t > hi[i]:
            zxid, value = ref[i]
            w, early, late = by_value.get(value), why_lo.get(i), why_hi.get(i)
            if early is not None and w is not None and w.outcome == "ok" and w.completed <= early.invoked:
                problems.append((f"reader {early.reader}: sync+read at server {early.server} saw up to zxid "
                                 f"{early.end:#x}, but {value!r} (zxid {zxid:#x}) was acknowledged before the sync "
                                 "was sent", (early, zxid)))
            elif late is not None and w is not None and late.completed < w.invoked:
                problems.append((f"reader {late.reader}: sync+read at server {late.server} saw {value!r} (zxid "
                                 f"{zxid:#x}) before it was submitted", None))
            else:  # the read that missed it first (it began at t), then the one that had seen it (by hi)
                named = [f"reader {r.reader} at server {r.server}, {what} {r.end:#x}"
                         for r, what in ((t_from, "began then and read up to"), (late, "read by then up to"))
                         if r is not None]
                problems.append((f"no linearization: {value!r} (zxid {zxid:#x}) must take effect after "
                                 f"{t:.3f} and by {hi[i]:.3f}" + (f" ({'; '.join(named)})" if named else ""), None))
            t, t_from = hi[i], None  # go on from the latest moment allowed, to report the next independent problem
    return problems
