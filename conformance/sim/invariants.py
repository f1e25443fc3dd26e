"""The spec's invariants, checked on a simulated cluster after every step (`conformance.sim`, docs/simulation.md).

Theory of operation
-------------------
`SpecInvariants` is an `conformance.sim.Observer`. After every step of every server it reads the server's variables the
way the conformance driver does (`zabref.runtime.control`'s snapshot of the core) and turns them into the spec's
variables with `conformance.replay.mapping` -- the one mapping from implementation state to spec state. A server whose
machine is down is what the spec's Crash leaves: its durable history and epochs (read from its simulated disk), LOOKING,
lastCommitted 0. The three checking-only variables no server holds are kept here, as the spec keeps them:
``proposed`` (every transaction a ClientRequest broadcast), ``committed`` (every delivery, in the order of first
deliveries, across servers and crashes) and ``established`` (every server that ever established an epoch, by
epoch).

Each invariant of spec/Zab.tla is one function below, named as in the spec, over those spec-form values (a
transaction is ``{"zxid": [e, c], "value": v}``). The run fails at the first step after which one is false, with
the invariant's name. To stay fast (thousands of runs), only the server that stepped is read again (the others did
not change), and invariants about every server are evaluated again only when what they depend on changed
(``committed`` grew).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.replay import mapping
from zabref.core.zab import Persistent
from zabref.errors import ZabError
from zabref.runtime.control import snapshot_variables  # the control socket's snapshot of a core, as the driver reads it
from zabref.storage import LOG_NAME, read_durable

__all__ = ["SpecInvariants", "INVARIANTS", "NOT_SIMULATED"]

Txn = dict[str, Any]  # the spec's [zxid |-> <<e, c>>, value |-> v], as conformance.replay.mapping produces it


def _key(t: Txn) -> tuple[int, int, Any]:
    return (t["zxid"][0], t["zxid"][1], t["value"])


class _View:
    """The spec's variables of every server, in the form conformance.replay.mapping gives them, plus the ghosts."""

    def __init__(self, sids: tuple[int, ...]) -> None:
        self.sids = sids
        self.history: dict[int, list[Txn]] = {s: [] for s in sids}
        self.lastCommitted: dict[int, int] = {s: 0 for s in sids}
        self.state: dict[int, str] = {s: "LOOKING" for s in sids}
        self.zabState: dict[int, str] = {s: "ELECTION" for s in sids}
        self.acceptedEpoch: dict[int, int] = {s: 0 for s in sids}
        self.currentEpoch: dict[int, int] = {s: 0 for s in sids}
        self.proposed: set[tuple[int, int, Any]] = set()
        self.committed: list[Txn] = []
        self.committed_keys: set[tuple[int, int, Any]] = set()
        self.established: dict[int, set[int]] = {}  # epoch -> every server ever established in it
        self.keys: dict[int, set[tuple[int, int, Any]]] = {s: set() for s in sids}
        self.raw: dict[int, list[Any]] = {s: [] for s in sids}  # the core's history as last mapped
        self.by_zxid: dict[tuple[int, int], Any] = {}  # every zxid seen in a history or broadcast -> its value
        self.shrank: dict[int, bool] = {s: False for s in sids}  # did the last step take back a delivery?
        self.changed = False  # did the last `set` change the server's history?

    def set(self, sid: int, variables: dict[str, Any], history: list[Any], *, crash: bool = False) -> bool:
        """Server ``sid``'s variables now (``variables`` as `zabref.runtime.control` gives them, without the history;
        ``history`` the core's transactions; ``crash`` when this is what a power cut left). Returns whether a
        transaction left its history."""
        one = [{"sid": sid, "variables": variables}]
        old_lc, old_history = self.lastCommitted[sid], self.history[sid]
        self.lastCommitted[sid] = mapping.lastCommitted(one)[0]
        self.state[sid] = mapping.state(one)[0]
        self.zabState[sid] = mapping.zabState(one)[0]
        self.acceptedEpoch[sid] = mapping.acceptedEpoch(one)[0]
        self.currentEpoch[sid] = mapping.currentEpoch(one)[0]
        raw, n = self.raw[sid], len(self.raw[sid])
        if len(history) >= n and history[:n] == raw:  # appended to (the common case): map only what is new
            new = history[n:]
            self.changed = bool(new)
            self.shrank[sid] = not crash and self.lastCommitted[sid] < old_lc  # the delivered prefix is untouched
            if new:
                mapped = [mapping.txn((t.zxid, t.value.decode("utf-8", "backslashreplace"))) for t in new]
                self.raw[sid] = raw + list(new)
                self.history[sid] = self.history[sid] + mapped
                self.keys[sid] = self.keys[sid] | {_key(t) for t in mapped}
            return False
        self.changed = True
        self.raw[sid] = list(history)
        self.history[sid] = mapping.history([{"variables": {"history": [
            (t.zxid, t.value.decode("utf-8", "backslashreplace")) for t in history]}}])[0]
        self.shrank[sid] = not crash and (self.lastCommitted[sid] < old_lc
                                          or self.history[sid][:old_lc] != old_history[:old_lc])
        old, self.keys[sid] = self.keys[sid], {_key(t) for t in self.history[sid]}
        return bool(old - self.keys[sid])

    def delivered(self, s: int) -> list[Txn]:
        """Delivered(s) == SubSeq(history[s], 1, lastCommitted[s])."""
        return self.history[s][: self.lastCommitted[s]]

    def is_quorum(self, members: set[int]) -> bool:
        return 2 * len(members) > len(self.sids)


def _is_prefix(a: list[Txn], b: list[Txn]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


# ---- the invariants of spec/Zab.tla, each over the servers it must look at ------------------------------------

def TypeOK(v: _View, s: int) -> bool:  # noqa: N802 (the spec's names)
    """The parts of TypeOK that are not types in Python: currentEpoch <= acceptedEpoch, lastCommitted in range."""
    return v.currentEpoch[s] <= v.acceptedEpoch[s] and 0 <= v.lastCommitted[s] <= len(v.history[s])


def Integrity(v: _View, s: int) -> bool:  # noqa: N802
    """Range(Delivered(s)) \\subseteq proposed."""
    return all(_key(t) in v.proposed for t in v.delivered(s))


def Agreement(v: _View, s: int) -> bool:  # noqa: N802
    """IsPrefix(Delivered(p), Delivered(q)) \\/ IsPrefix(Delivered(q), Delivered(p)), for s and every other q."""
    mine = v.delivered(s)
    return all(_is_prefix(mine, v.delivered(q)) or _is_prefix(v.delivered(q), mine) for q in v.sids)


def TotalOrder(v: _View, s: int) -> bool:  # noqa: N802
    """IsPrefix(Delivered(s), committed)."""
    return _is_prefix(v.delivered(s), v.committed)


def _epochs_in_order(seq: list[Txn]) -> bool:
    return all(seq[k]["zxid"][0] <= seq[k + 1]["zxid"][0] for k in range(len(seq) - 1))


def GlobalPrimaryOrder(v: _View, s: int) -> bool:  # noqa: N802
    """EpochsInOrder(committed) /\\ EpochsInOrder(Delivered(s))."""
    return _epochs_in_order(v.committed) and _epochs_in_order(v.delivered(s))


def LocalPrimaryOrder(v: _View, s: int) -> bool:  # noqa: N802
    """Every committed <<e, c>> with c > 1 comes after <<e, c - 1>> in committed."""
    seen: set[tuple[int, int]] = set()
    for t in v.committed:
        e, c = t["zxid"]
        if c > 1 and (e, c - 1) not in seen:
            return False
        seen.add((e, c))
    return True


def PrimaryIntegrity(v: _View, s: int) -> bool:  # noqa: N802
    """A primary (LEADING, BROADCAST) holds every delivered transaction of an earlier epoch, ahead of its own."""
    if not (v.state[s] == "LEADING" and v.zabState[s] == "BROADCAST"):
        return True
    epoch = v.currentEpoch[s]
    position = {_key(t): k for k, t in enumerate(v.history[s])}
    first_own = next((k for k, t in enumerate(v.history[s]) if t["zxid"][0] >= epoch), len(v.history[s]))
    for t in _delivered_ever(v):
        if t["zxid"][0] < epoch:
            k = position.get(_key(t))
            if k is None or k >= first_own:
                return False
    return True


def _is_established(v: _View, s: int) -> bool:
    """IsEstablished(s): LEADING, and discovery done (SYNCHRONIZATION or BROADCAST)."""
    return v.state[s] == "LEADING" and v.zabState[s] in ("SYNCHRONIZATION", "BROADCAST")


def LeaderUniqueness(v: _View, s: int) -> bool:  # noqa: N802
    """Every established leader is recorded in ``established``, and no epoch was ever established by two servers
    (over the whole run, not only at one moment)."""
    return (all(a in v.established.get(v.currentEpoch[a], ()) for a in v.sids if _is_established(v, a))
            and all(len(leaders) == 1 for leaders in v.established.values()))


def ZxidUnique(v: _View, s: int) -> bool:  # noqa: N802
    """Two transactions with one zxid are the same: over everything broadcast and every history (``by_zxid`` keeps
    the value each zxid was first seen with)."""
    for t in v.history[s]:
        z = (t["zxid"][0], t["zxid"][1])
        if v.by_zxid.setdefault(z, t["value"]) != t["value"]:
            return False
    return True


def HistoryContiguous(v: _View, s: int) -> bool:  # noqa: N802
    """Each epoch's counters run 1, 2, ... in s's history, with no gap."""
    before = (-1, 0)
    for t in v.history[s]:
        e, c = t["zxid"]
        if c != (before[1] + 1 if e == before[0] else 1):
            return False
        before = (e, c)
    return True


def LogMatching(v: _View, s: int) -> bool:  # noqa: N802
    """Two histories that hold one zxid hold it at the same position, after the same transactions: for s against
    every other server, it is enough to compare at the last zxid they share."""
    mine = v.history[s]
    for q in v.sids:
        other = v.history[q]
        position = {tuple(t["zxid"]): k for k, t in enumerate(other)}
        for k in range(len(mine) - 1, -1, -1):
            k2 = position.get(tuple(mine[k]["zxid"]))
            if k2 is not None:
                if k2 != k or mine[: k + 1] != other[: k + 1]:
                    return False
                break
    return True


def HistoryWithinCurrentEpoch(v: _View, s: int) -> bool:  # noqa: N802
    """No transaction of s's history is of an epoch above s's currentEpoch."""
    e = v.currentEpoch[s]
    return all(t["zxid"][0] <= e for t in v.history[s])


def LeaderHoldsCommitted(v: _View, s: int) -> bool:  # noqa: N802
    """A primary holds every delivered transaction of its own and earlier epochs."""
    if not (v.state[s] == "LEADING" and v.zabState[s] == "BROADCAST"):
        return True
    return all(_key(t) in v.keys[s] for t in _delivered_ever(v) if t["zxid"][0] <= v.currentEpoch[s])


def DeliveredGrows(v: _View, s: int) -> bool:  # noqa: N802
    """The action property: within an incarnation, what s delivered stays delivered, in place (a power cut starts
    a new incarnation)."""
    return not v.shrank[s]


def CommittedNeverLost(v: _View, s: int) -> bool:  # noqa: N802
    """Every committed transaction is in the history of a quorum."""
    return all(v.is_quorum({q for q in v.sids if _key(t) in v.keys[q]}) for t in v.committed)


def SkippedNeverDelivered(v: _View, s: int) -> bool:  # noqa: N802
    """A server in BROADCAST in epoch e holds every delivered transaction of an earlier epoch."""
    if v.zabState[s] != "BROADCAST":
        return True
    return all(_key(t) in v.keys[s] for t in _delivered_ever(v) if t["zxid"][0] < v.currentEpoch[s])


def _delivered_ever(v: _View) -> list[Txn]:
    """DeliveredEver: committed holds every delivery ever (it is updated before the invariants are evaluated)."""
    return v.committed


Invariant = Callable[[_View, int], bool]
#: (invariant, when it is evaluated after a step, and for whom): "self" -- for the server that stepped; "all" -- for
#: every server when ``committed`` grew, else for the server that stepped; "cluster" -- once; "grown" -- once, when
#: ``committed`` grew; "lost" -- once, when ``committed`` grew or a transaction left a history; "hist" -- for the
#: server that stepped, when its history changed. An invariant is
#: skipped only where nothing it reads changed since it last held.
INVARIANTS: tuple[tuple[Invariant, str], ...] = (
    (TypeOK, "self"), (Integrity, "self"), (Agreement, "self"), (TotalOrder, "self"),
    (GlobalPrimaryOrder, "self"), (LocalPrimaryOrder, "grown"), (PrimaryIntegrity, "all"),
    (LeaderUniqueness, "cluster"), (CommittedNeverLost, "lost"), (SkippedNeverDelivered, "all"),
    (ZxidUnique, "hist"), (LogMatching, "hist"), (HistoryContiguous, "hist"), (HistoryWithinCurrentEpoch, "self"),
    (LeaderHoldsCommitted, "all"),
    (DeliveredGrows, "self"),
)

#: The checks of the models (spec/MC_*.cfg) that the simulator does not evaluate, each with the reason.
NOT_SIMULATED = {
    "SyncedFollowerPrefix": "needs the leader's learnerPhase, which the simulator's view does not read",
    "ProposalInFlight": "about packets in flight; the simulator's view holds server variables only",
    "AckInFlight": "about packets in flight; the simulator's view holds server variables only",
    "CommitInFlight": "about packets in flight; the simulator's view holds server variables only",
    "SyncKeepsCommitted": "about packets in flight; the simulator's view holds server variables only",
    "NoHiddenDeadlock": "about the model's bounds (MaxTxns, MaxFaults); a simulated run has none, and its own "
                        "liveness check (one leader commits again after the last fault) takes this place",
}


class SpecInvariants:
    """The `conformance.sim.Observer` of the module docstring."""

    def __init__(self) -> None:
        self.view: _View | None = None
        self.checks = 0

    def step(self, sim: Any, sid: int, eff: Any) -> str | None:
        v = self.view
        if v is None:
            v = self.view = _View(sim.sids)
        core = sim.server(sid).node.core
        lost = v.set(sid, snapshot_variables(core.variables(histories=False)), core.history)
        if any(a.name == "ClientRequest" for a in eff.actions) and v.history[sid]:
            v.proposed.add(_key(v.history[sid][-1]))
        if any(a.name == "LeaderProcessACKEPOCH" for a in eff.actions) and _is_established(v, sid):
            v.established.setdefault(v.currentEpoch[sid], set()).add(sid)  # as the spec's LeaderProcessACKEPOCH
        grew = False
        if eff.deliver:
            for t in v.delivered(sid):
                k = _key(t)
                if k not in v.committed_keys:
                    v.committed_keys.add(k)
                    v.committed.append(t)
                    grew = True
        return self._check(v, sid, grew, lost)

    def _check(self, v: _View, sid: int, grew: bool, lost: bool) -> str | None:
        self.checks += 1
        for invariant, scope in INVARIANTS:
            if scope == "all" and grew:
                targets: list[int] | tuple[int, ...] = v.sids
            elif scope in ("self", "all", "cluster") or (scope == "grown" and grew) or (scope == "lost" and
                                                                                         (grew or lost)) \
                    or (scope == "hist" and v.changed):
                targets = [sid]
            else:
                continue
            for s in targets:
                if not invariant(v, s):
                    return f"invariant {invariant.__name__} violated (server {s}): {self._describe(v)}"
        return None

    def crashed(self, sim: Any, sid: int) -> str | None:
        """The spec's Crash: the durable history and epochs stay; LOOKING, lastCommitted 0."""
        v = self.view
        if v is None:
            v = self.view = _View(sim.sids)
        data_dir, disk = sim.config.server(sid).data_dir, sim.machines[sid].disk
        if LOG_NAME not in disk.listdir_durable(data_dir):
            durable = Persistent((), 0, 0)  # the power went before the log was created
        else:
            try:
                durable = read_durable(data_dir, disk).persistent()
            except ZabError as e:
                return f"the durable log of server {sid} is unreadable after its power cut: {e}"
        lost = v.set(sid, snapshot_variables({"last_committed": 0, "state": "LOOKING", "zab_state": "ELECTION",
                                      "accepted_epoch": durable.accepted_epoch,
                                      "current_epoch": durable.current_epoch}), list(durable.history), crash=True)
        return self._check(v, sid, False, lost)

    def finished(self, sim: Any) -> str | None:
        return None

    @staticmethod
    def _describe(v: _View) -> str:
        def short(seq: list[Txn]) -> str:
            return "[" + " ".join(f"{t['zxid'][0]}.{t['zxid'][1]}" for t in seq[-6:]) + "]"
        rows = [f"s{s}: {v.state[s]}/{v.zabState[s]} epoch {v.currentEpoch[s]}/{v.acceptedEpoch[s]} "
                f"history ...{short(v.history[s])} lastCommitted {v.lastCommitted[s]}" for s in v.sids]
        return "; ".join(rows) + f"; committed ...{short(v.committed)}"
