"""The spec's variables as the servers' action logs say them, kept while the logs are merged into one behaviour.

Theory of operation: a `SpecView` holds, per server, the variables its log lines set (canonical forms,
docs/values.md), starting from `INIT_VARS`, the state every server starts in; `conformance.validate.merge` asks it
whether an event may come next (what the event needs of the other servers' state) and updates it as events are
taken. It reads nothing but log lines.
"""

from __future__ import annotations

import copy
from collections import deque
from typing import Any

from conformance.errors import MergeError
from conformance.replay.mapping import zxid_pair
from conformance.tla.values import make_set

__all__ = ["NONE", "INIT_VARS", "RawHistory", "SpecView", "Snapshot"]


NONE = "NONE"


#: Every server's variables in the spec's Init (for a server whose first line shows them).
INIT_VARS = {"accepted_epoch": 0, "current_epoch": 0, "state": "LOOKING", "zab_state": "ELECTION", "leader": 0,
             "last_committed": 0, "staged_history": [], "new_epoch": 0}


class RawHistory:
    """A history as the logs give it -- (zxid, value text) pairs, in a list nobody changes any more -- converted to
    the spec's transactions only when asked, and from where asked (`canonical(start)`): a record that compares a
    history whole (NEWLEADER, SNAP, a restart) need not build the dropped prefix of a rebased window
    (conformance/validate/chain.py), which on a long run is the whole cost."""

    __slots__ = ("items", "_view")

    def __init__(self, items: list[tuple[int, str]], view: "SpecView") -> None:
        self.items = items
        self._view = view

    def __len__(self) -> int:
        return len(self.items)

    def canonical(self, start: int = 0) -> list[dict[str, Any]]:
        return [self._view.txn(z, t) for z, t in self.items[start:]]

    def __eq__(self, other: object) -> bool:  # compared as the spec's value (tests compare expected dicts)
        if isinstance(other, RawHistory):
            return self.items == other.items
        return isinstance(other, list) and self.canonical() == other

    __hash__ = None  # type: ignore[assignment]


class Snapshot:
    """The spec state the logs give after some step, taken without copying a history: every history as (the view's
    list, its length then) -- the view only appends to a history list in place and replaces it by a new list
    otherwise, so that prefix of that list stays what it was -- the staged histories (lists the view no longer
    changes once a snapshot holds them: `SpecView.learns` appends in place only to a list it made after the last
    snapshot), the channels, and each server's other variables (`SpecView.expected` without the history).
    `conformance.validate.chain` renders it as a window's start or end state (only the suffix it needs)."""

    __slots__ = ("hist", "staged", "per", "msgs", "proposed", "view")

    def __init__(self, view: "SpecView") -> None:
        self.view = view
        self.hist = {s: (h, len(h)) for s, h in view.hist.items()}
        self.staged = {s: v["staged_history"] for s, v in view.vars.items()}
        self.per = {s: view.expected(s, history=False) for s in view.hist}
        self.msgs = {k: [p for p, _ in q] for k, q in view.msgs.items()}
        self.proposed = len(view.proposed)
        view.own_staged.clear()  # held here now: the view's next append to one copies it first


class SpecView:
    """The spec's variables as the logs say them, kept while merging (canonical forms, docs/values.md)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._peer_keys = [str(f) for f in range(1, n + 1)]  # how the lines key per-peer variables
        self.hist: dict[int, list[tuple[int, str]]] = {s: [] for s in range(1, n + 1)}
        self.vars: dict[int, dict[str, Any]] = {s: copy.deepcopy(INIT_VARS) for s in range(1, n + 1)}
        self.msgs: dict[tuple[int, int], deque[tuple[dict[str, Any], int | None]]] = {
            (a, b): deque() for a in range(1, n + 1) for b in range(1, n + 1)}  # (packet, connection id)
        self.learner_conn: dict[tuple[int, int], int | None] = {}  # (leader, learner) -> connection it knows it by
        self.values: dict[tuple[int, str], int] = {}  # (zxid, value text) -> the spec's number
        self.proposed: list[dict[str, Any]] = []
        # server -> its staged history list when the view made it and nobody else holds it (no Snapshot, not
        # INIT_VARS'): a sync's PROPOSALs append to it in place, O(1) each, not a copy of the whole list each
        self.own_staged: dict[int, list[tuple[int, str]]] = {}

    # ---- values

    def number(self, zxid: int, text: str) -> Any:
        return self.values.get((zxid, text), text)

    def txn(self, zxid: int, text: str) -> dict[str, Any]:
        return {"value": self.number(zxid, text), "zxid": zxid_pair(zxid)}

    def packet(self, p: dict[str, Any]) -> dict[str, Any]:
        kind, zxid, data = p["type"], int(p["zxid"]), p.get("data")
        if kind in ("FOLLOWERINFO", "ACKEPOCH"):
            spec: Any = int(data)
        elif kind == "PROPOSAL":
            spec = self.number(zxid, data)
        elif kind == "SNAP":
            spec = [self.txn(int(z), v) for z, v in data]
        else:
            spec = "n/a"
        return {"data": spec, "type": kind, "zxid": zxid_pair(zxid)}

    # ---- one server's logged variables

    def learns(self, sid: int, line_vars: dict[str, Any], persist: list[list[Any]] | None) -> None:
        """Take a line's variables (and the history changes of its step) as server ``sid``'s."""
        if persist is not None:
            h = self.hist[sid]
            for op in persist:
                kind, arg = op
                if kind == "append":
                    h.extend((int(z), v) for z, v in arg)
                elif kind == "truncate":
                    self.hist[sid] = h = [t for t in h if t[0] <= int(arg)]
                elif kind == "replace":
                    self.hist[sid] = h = [(int(z), v) for z, v in arg]
        if "history" in line_vars:
            self.hist[sid] = [(int(z), v) for z, v in line_vars["history"]]
        staged = self.vars[sid]["staged_history"]
        if "staged_history" in line_vars:
            staged = self.own_staged[sid] = [(int(z), v) for z, v in line_vars["staged_history"]]
        elif line_vars.get("staged", {}).get("prefix"):  # DIFF, TRUNC: the first len transactions of the history
            staged = self.own_staged[sid] = self._prefix(sid, line_vars["staged"]["len"], line_vars["staged"]["last"])
        elif "staged" in line_vars:  # length and last transaction: unchanged, emptied, or one appended
            length, last = line_vars["staged"]["len"], line_vars["staged"]["last"]
            if length == 0:
                staged = self.own_staged[sid] = []
            elif length == len(staged) + 1:
                if self.own_staged.get(sid) is not staged:
                    staged = self.own_staged[sid] = list(staged)
                staged.append((int(last[0]), last[1]))
            elif length != len(staged):
                raise MergeError(f"server {sid}: its staged history went from {len(staged)} to {length} "
                                 "transactions in one step without being logged whole")
        self.vars[sid] = {k: v for k, v in line_vars.items() if k not in ("history", "staged")}
        self.vars[sid]["staged_history"] = staged

    def _prefix(self, sid: int, length: Any, last: Any) -> list[tuple[int, str]]:
        """The staged history a line gives as the first ``length`` transactions of the server's history, ending with
        ``last`` (zabref/runtime/actionlog.py). The history is the one after the line's own storage operations
        (`learns` applies them first; DIFF and TRUNC have none): the writer compared the staged history with its
        history after the step."""
        h = self.hist[sid]
        if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= len(h):
            raise MergeError(f"server {sid}: its staged history is logged as the first {length!r} transactions of "
                             f"its history, which has {len(h)}")
        staged = h[:length]
        end = (int(last[0]), last[1]) if last is not None else None
        if (staged[-1] if staged else None) != end:
            raise MergeError(f"server {sid}: its staged history is logged as the first {length} transactions of its "
                             f"history, ending with {last!r}; they end with {staged[-1] if staged else None!r}")
        return staged

    def expected(self, sid: int, *, history: bool = True) -> dict[str, Any]:
        """Server ``sid``'s spec variables (per-server slices, canonical). Without ``history`` the history is given
        by its length (``hl``) and last transaction (``hlast``) only: what a trace record needs, in O(1)."""
        v = self.vars[sid]
        h = self.hist[sid]
        # the per-peer variables as the lines give them: keyed by the peer's sid as text, "1" .. "n" (a merge step
        # reads them once each; converting them is most of what this costs, so it is done in one pass each)
        keys = self._peer_keys
        phase = v.get("learner_phase") or {}
        last = v.get("learner_last_zxid") or {}
        acks = v.get("ack_index") or {}
        return {
            "history": RawHistory(list(h), self) if history else None,
            "hl": len(h), "hlast": self.txn(*h[-1]) if h else None,
            "acceptedEpoch": v["accepted_epoch"], "currentEpoch": v["current_epoch"], "state": v["state"],
            "zabState": v["zab_state"], "leader": v["leader"], "lastCommitted": v["last_committed"],
            "stagedHistory": RawHistory([(int(z), t) for z, t in v["staged_history"]], self) if history else None,
            "sl": len(v["staged_history"]),
            "slast": self.txn(*v["staged_history"][-1]) if v["staged_history"] else None,
            "newEpoch": v["new_epoch"],
            "learnerPhase": [str(phase[k]) if k in phase else NONE for k in keys],
            "learnerLastZxid": [zxid_pair(int(last[k])) if k in last else [0, 0] for k in keys],
            "ackIndex": [int(acks[k]) if k in acks else 0 for k in keys],
        }

    def state(self) -> dict[str, Any]:
        """The whole spec state as the logs give it (``committed`` and ``faults`` are left to TLC: not here)."""
        per = {s: self.expected(s) for s in range(1, self.n + 1)}
        out = {name: [per[s][name] for s in range(1, self.n + 1)] for name in per[1]
               if name not in ("hl", "hlast", "sl", "slast")}
        for name in ("history", "stagedHistory"):
            out[name] = [h.canonical() for h in out[name]]
        out["msgs"] = [[[p for p, _ in self.msgs[a, b]] for b in range(1, self.n + 1)] for a in range(1, self.n + 1)]
        out["proposed"] = make_set(self.proposed)
        return out

    def learner_of(self, y: int, x: int) -> bool:
        """Does leader y know x as a learner (the spec's learnerPhase[y][x] /= "NONE")?"""
        return self.vars[y].get("learner_phase", {}).get(str(x), NONE) != NONE

    def cids(self, x: int, y: int) -> set[int | None]:
        """The connections of the packets x sent to y that y has not taken."""
        return {c for _, c in self.msgs[x, y]}

    def go_looking(self, x: int) -> None:
        """The spec's GoLooking(x) at every OTHER server: channels to and from x emptied, x forgotten as a learner
        (x's own variables come from its line)."""
        for y in range(1, self.n + 1):
            self.msgs[x, y].clear()
            self.msgs[y, x].clear()
            if y != x:
                v = self.vars[y]
                for key, default in (("learner_phase", NONE), ("learner_last_zxid", 0), ("ack_index", 0)):
                    if str(x) in v.get(key, {}):
                        v[key] = {**v[key], str(x): default}
