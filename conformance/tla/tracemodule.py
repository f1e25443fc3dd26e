"""Pieces of the TLA+ modules that check a behaviour step by step with TLC (`zabref regress --tlc`,
conformance/replay/tracecheck.py; `zabref validate`, conformance/validate/command.py).

Both write a module with a variable ``l`` (the step number), the behaviour's records as constants, and a next-state
relation that takes the l-th record's action. Two parts are the same in both: the records as a sequence TLC can
parse (`chunked`: one huge tuple expression breaks TLC's front end, so the records are split into operators of
``chunk`` records, read back by `accessor`), and the dispatch from a record's action name to the spec's action with
the record's parameters (`dispatch`).
"""

from __future__ import annotations

__all__ = ["chunked", "dispatch"]


def chunked(prefix: str, records: list[str], accessor: str, chunk: int) -> str:
    """TLA+ definitions: ``<prefix>0 == <<...>>``, ... (at most ``chunk`` records each; one, empty, when there are
    none), ``Chunks``, and ``<accessor>(k)``, the k-th record (1-based)."""
    parts, names = [], []
    for k in range(0, max(1, len(records)), chunk):
        name = f"{prefix}{k // chunk}"
        names.append(name)
        parts.append(f"{name} == <<" + ",\n    ".join(records[k:k + chunk]) + ">>")
    return (("\n".join(parts)) + f"\n\nChunks == <<{', '.join(names)}>>\n"
            f"{accessor}(k) == LET c == Chunks[((k - 1) \\div {chunk}) + 1] IN c[((k - 1) % {chunk}) + 1]")


def dispatch(actions: list[tuple[str, tuple[str, ...]]] | list[tuple[str, tuple[str, ...], str]],
             extra: tuple[str, ...] = ()) -> str:
    """``Act(e) ==`` one disjunct per action of Next: ``e.a = "Name" /\\ Name(e.p, ...)``, the record's fields
    named as the action's parameters, and ``/\\ With`` when an action comes with a third element ``With``, an action
    its step conjoins (`conformance.tla.labels.model_next`); ``extra``: more disjuncts, as TLA+ text."""
    arms = []
    for name, params, *rest in actions:
        args = ", ".join(f"e.{p}" for p in params)
        more = f" /\\ {rest[0]}" if rest and rest[0] else ""
        call = f"{name}({args})" if args else name
        arms.append(f'    \\/ e.a = "{name}" /\\ {call}{more}')
    arms += [f"    \\/ {text}" for text in extra]
    return "Act(e) ==\n" + "\n".join(arms)
