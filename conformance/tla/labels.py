"""Edge labels that carry action parameters.

Theory of operation: TLC 2.15 writes only an action's *name* on each edge of a ``-dump dot`` graph, and it names an
action after the innermost operator it expands.  A disjunct ``\\E i, j \\in Server : FollowerProcessDIFF(i, j)``
therefore labels every edge "FollowerProcessDIFF", whatever i and j were.  This module reads the ``Next`` of a spec,
and writes a wrapper module in which every parameter instance is an operator of its own, for example::

    FollowerProcessDIFF__2__1 == TRUE /\\ FollowerProcessDIFF(2, 1)

(the ``TRUE /\\`` stops TLC from expanding further, so the wrapper's name is the label), and a ``LabeledNext`` that is
the disjunction of them all.  ``LabeledNext`` has exactly the behaviours of ``Next``: the state graph is the same,
state for state; only the labels say more.  Each edge is then attributable to one action with one parameter tuple,
with no bookkeeping variable in the spec (a ``recorder`` variable would multiply the states; see spec/README.md).

Label grammar: ``Name("__" arg)*`` where an integer argument is written in decimal and a set of integers as ``S``
followed by its members joined by ``_`` (``S1_2`` is ``{1, 2}``, ``S`` is ``{}``).

The ``Next`` it reads must keep the regular form the spec promises: one disjunct per line, each
``\\/ \\E v1, v2 \\in Domain, v3 \\in Domain2 : Action(v1, v2, v3)`` or ``\\/ Action``.  Domains understood:
``Server`` (1..N) and ``Quorums`` (the subsets of Server of more than N/2 members).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import SpecFormatError
from conformance.tla.values import canonical_json, make_set

__all__ = [
    "ActionSignature",
    "Labels",
    "read_next",
    "model_next",
    "module_next",
    "instances",
    "encode_label",
    "decode_label",
    "write_labeled_model",
    "LABELED_NEXT",
]

LABELED_NEXT = "LabeledNext"
_SEP = "__"

_DISJUNCT = re.compile(
    r"^\s*\\/\s*(?:\\E\s+(?P<binders>.+?)\s*:\s*)?(?P<name>[A-Za-z][A-Za-z0-9_]*)\s*(?:\((?P<args>[^()]*)\))?\s*$"
)
_BINDER = re.compile(r"^(?P<vars>[A-Za-z]\w*(?:\s*,\s*[A-Za-z]\w*)*)\s*\\in\s*(?P<domain>[A-Za-z]\w*)$")


@dataclass(frozen=True)
class ActionSignature:
    """One disjunct of Next: the action's name and its parameters with their domains, in argument order."""

    name: str
    params: tuple[tuple[str, str], ...]  # (parameter name, domain name)
    line: int
    with_: str = ""  # an action the step conjoins to this one (`model_next`: a module's step of its base module)

    def call(self, args: tuple) -> str:
        """The TLA+ expression of this action's step with arguments ``args``."""
        call = f"{self.name}({', '.join(_tla_arg(a) for a in args)})" if args else self.name
        return f"({call} /\\ {self.with_})" if self.with_ else call

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.params)


def _split_binders(text: str) -> list[str]:
    """Split ``i, j \\in Server, Q \\in Quorums`` into ``["i, j \\in Server", "Q \\in Quorums"]``."""
    parts: list[str] = []
    current: list[str] = []
    for piece in text.split(","):
        current.append(piece)
        if "\\in" in piece:
            parts.append(",".join(current).strip())
            current = []
    if current:
        raise SpecFormatError(f"binder without a domain: {','.join(current).strip()!r}")
    return parts


def read_next(spec_path: Path, operator: str = "Next") -> list[ActionSignature]:
    """Read the disjuncts of ``operator`` (default Next) from a TLA+ module, in order."""
    lines = Path(spec_path).read_text(encoding="utf-8").splitlines()
    start = next((k for k, line in enumerate(lines) if re.match(rf"^{operator}\s*==\s*$", line)), None)
    if start is None:
        raise SpecFormatError(f"{spec_path}: no line '{operator} ==' (the definition must start a line of its own)")
    actions: list[ActionSignature] = []
    for k in range(start + 1, len(lines)):
        raw = lines[k]
        stripped = raw.strip()
        if not stripped or not raw[:1].isspace():
            break  # the definition ends at a blank line or at the next top-level definition
        if stripped.startswith("\\*"):
            continue
        where = f"{spec_path}:{k + 1}"
        m = _DISJUNCT.match(raw)
        if not m:
            raise SpecFormatError(f"{where}: a disjunct of {operator} not in the form '\\/ \\E v \\in D : A(v)': {stripped}")
        domains: dict[str, str] = {}
        if m.group("binders"):
            for binder in _split_binders(m.group("binders")):
                b = _BINDER.match(binder)
                if not b:
                    raise SpecFormatError(f"{where}: cannot read the binder {binder!r}")
                for var in re.split(r"\s*,\s*", b.group("vars")):
                    domains[var] = b.group("domain")
        args = [a.strip() for a in (m.group("args") or "").split(",") if a.strip()]
        if sorted(args) != sorted(domains):
            raise SpecFormatError(f"{where}: the arguments {args} of {m.group('name')} are not exactly its bound variables")
        actions.append(ActionSignature(m.group("name"), tuple((a, domains[a]) for a in args), k + 1))
    if not actions:
        raise SpecFormatError(f"{spec_path}: {operator} has no disjuncts")
    return actions


#: A disjunct with no parameters defined as a step of the base module's Next and one more action, ``ZabStep == Next
#: /\ SyncsDropped`` (spec/ZabSync.tla).
_BASE_STEP = re.compile(r"^(?P<name>[A-Za-z]\w*)\s*==\s*Next\s*/\\\s*(?P<with>[A-Za-z]\w*)\s*$")


def model_next(spec_dir: Path, config: str) -> list[ActionSignature]:
    """The actions of model ``config``'s next-state relation (its cfg's ``NEXT``, default Next) in the module it
    extends (`module_next`)."""
    spec_dir = Path(spec_dir)
    cfg_text = (spec_dir / f"MC_{config}.cfg").read_text(encoding="utf-8")
    m = re.search(r"^\s*NEXT\s+([A-Za-z]\w*)\s*$", cfg_text, re.M)
    return module_next(spec_dir / f"{config_module_base(spec_dir, config)}.tla", m.group(1) if m else "Next")


def module_next(path: Path, operator: str = "Next") -> list[ActionSignature]:
    r"""The actions of ``operator`` in the module at ``path``. A disjunct that is a step of the base module's Next
    with one more action (``ZabStep == Next /\ SyncsDropped``: spec/ZabSync.tla extends spec/Zab.tla) is replaced by
    the base module's actions, each taken with that one (`ActionSignature.with_`), so that every edge still names one
    action of spec/Zab.tla or the module."""
    path = Path(path)
    if operator == "Next":
        return read_next(path)
    base, spec_dir = path.stem, path.parent
    text = path.read_text(encoding="utf-8")
    extends = re.search(r"^EXTENDS\s+([A-Za-z]\w*)", text, re.M)
    out: list[ActionSignature] = []
    for action in read_next(path, operator):
        d = None if action.params else next(
            (d for line in text.splitlines() if (d := _BASE_STEP.match(line)) and d["name"] == action.name), None)
        if d is None:
            out.append(action)
            continue
        if extends is None:
            raise SpecFormatError(f"{path}:{action.line}: {action.name} is a step of Next, but {base} extends none")
        out += [ActionSignature(a.name, a.params, a.line, d["with"])
                for a in read_next(spec_dir / f"{extends.group(1)}.tla")]
    names = [a.name for a in out]
    if len(set(names)) != len(names):
        twice = sorted(n for n in set(names) if names.count(n) > 1)
        raise SpecFormatError(f"{path}: {operator} names an action twice: {twice}")
    return out


def domain_values(domain: str, constants: dict[str, int]) -> list:
    """The members of a domain for the model's constants, in a fixed order."""
    if "N" not in constants:
        raise SpecFormatError("the model does not set the constant N")
    servers = list(range(1, constants["N"] + 1))
    if domain == "Server":
        return servers
    if domain == "Quorums":
        return [
            frozenset(c)
            for size in range(len(servers) // 2 + 1, len(servers) + 1)
            for c in itertools.combinations(servers, size)
        ]
    raise SpecFormatError(f"unknown domain {domain!r} in Next (known: Server, Quorums)")


def instances(actions: list[ActionSignature], constants: dict[str, int]):
    """Every (action, argument tuple) of Next for the model's constants."""
    for action in actions:
        pools = [domain_values(domain, constants) for _, domain in action.params]
        for args in itertools.product(*pools):
            yield action, args


def _encode_arg(value) -> str:
    if isinstance(value, frozenset):
        return "S" + "_".join(str(v) for v in sorted(value))
    if isinstance(value, int) and value >= 0:
        return str(value)
    raise SpecFormatError(f"cannot write {value!r} into an edge label")


def _tla_arg(value) -> str:
    if isinstance(value, frozenset):
        return "{" + ", ".join(str(v) for v in sorted(value)) + "}"
    return str(value)


def encode_label(name: str, args: tuple) -> str:
    return _SEP.join([name, *(_encode_arg(a) for a in args)])


def decode_label(label: str) -> tuple[str, tuple]:
    """``"ElectLeader__2__S1_2"`` -> ``("ElectLeader", (2, frozenset({1, 2})))``."""
    name, *parts = label.split(_SEP)
    args: list = []
    for part in parts:
        if part.startswith("S"):
            body = part[1:]
            args.append(frozenset(int(x) for x in body.split("_")) if body else frozenset())
        elif part.isdigit():
            args.append(int(part))
        else:
            raise SpecFormatError(f"edge label {label!r}: cannot read the argument {part!r}")
    return name, tuple(args)


_CONSTANT = re.compile(r"^\s*([A-Za-z]\w*)\s*=\s*(-?\d+)\s*$")


def read_constants(cfg_text: str) -> dict[str, int]:
    """The integer constants a .cfg assigns (``N = 3``)."""
    return {m.group(1): int(m.group(2)) for line in cfg_text.splitlines() if (m := _CONSTANT.match(line))}


def write_labeled_model(spec_dir: Path, config: str, out_dir: Path) -> tuple[Path, Path]:
    """Write ``MCL_<config>.tla`` (EXTENDS MC_<config>, defines LabeledNext) and its .cfg into out_dir.

    Returns the two paths.  The .cfg is the model's own with ``NEXT Next`` replaced by ``NEXT LabeledNext``; a
    ``signatures.json`` beside them records each action's parameter names for the pipeline.
    """
    spec_dir, out_dir = Path(spec_dir), Path(out_dir)
    cfg_path = spec_dir / f"MC_{config}.cfg"
    cfg_text = cfg_path.read_text(encoding="utf-8")
    if not re.search(r"^\s*NEXT\s+[A-Za-z]\w*\s*$", cfg_text, re.M):
        raise SpecFormatError(f"{cfg_path}: expected a line 'NEXT <operator>'")
    actions = model_next(spec_dir, config)
    constants = read_constants(cfg_text)
    if "N" not in constants:
        constants["N"] = server_count(spec_dir, config, cfg_text, cfg_path)
    module = f"MCL_{config}"
    defs, names = [], []
    for action, args in instances(actions, constants):
        label = encode_label(action.name, args)
        defs.append(f"{label} == TRUE /\\ {action.call(args)}")
        names.append(label)
    body = "\n".join(
        [
            f"---- MODULE {module} ----",
            "\\* Generated by conformance/tla/labels.py: every parameter instance of Next as an action of its own,",
            "\\* so that TLC's edge labels carry the parameters. Same behaviours as Next.",
            f"EXTENDS MC_{config}",
            *defs,
            f"{LABELED_NEXT} ==",
            *(f"    \\/ {n}" for n in names),
            "====",
            "",
        ]
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tla = out_dir / f"{module}.tla"
    cfg = out_dir / f"{module}.cfg"
    tla.write_text(body, encoding="utf-8")
    cfg.write_text(re.sub(r"^(\s*NEXT\s+)[A-Za-z]\w*(\s*)$", rf"\g<1>{LABELED_NEXT}\g<2>", cfg_text, flags=re.M),
                   encoding="utf-8")
    (out_dir / "signatures.json").write_text(
        json.dumps({a.name: list(a.param_names) for a in actions}, indent=1, sort_keys=True), encoding="utf-8"
    )
    return tla, cfg


def _override(cfg_text: str, mc: Path, name: str) -> str | None:
    """The right-hand side of the definition a model substitutes for ``name`` (its cfg's ``name <- Def``, and
    ``Def == ...`` in its MC module ``mc``), or None when it substitutes none."""
    sub = re.search(rf"^\s*{re.escape(name)}\s*<-\s*([A-Za-z]\w*)\s*$", cfg_text, re.M)
    if not sub:
        return None
    d = re.search(rf"^{sub.group(1)}\s*==\s*(.*?)\s*$", mc.read_text(encoding="utf-8"), re.M)
    return d.group(1) if d else None


def server_count(spec_dir: Path, config: str, cfg_text: str, cfg_path: Path) -> int:
    """N for a model that sets `Server <- Def` with `Def == 1..K` in its MC module instead of a constant N."""
    mc = Path(spec_dir) / f"MC_{config}.tla"
    m = re.fullmatch(r"1\s*\.\.\s*(\d+)", _override(cfg_text, mc, "Server") or "")
    if m:
        return int(m.group(1))
    raise SpecFormatError(f"{cfg_path}: neither a constant N nor 'Server <- Def' with 'Def == 1..K' in {mc.name}")


def model_switch(spec_dir: Path, config: str, name: str) -> bool:
    """Whether model ``config`` turns on the spec's switch ``name`` (a definition such as ``TruncAtOnce == FALSE``
    in Zab.tla): its cfg overrides it (``name <- Def``) with ``Def == TRUE`` in MC_<config>.tla. A model that
    spec/ does not hold is refused with its path."""
    cfg_path, mc = Path(spec_dir) / f"MC_{config}.cfg", Path(spec_dir) / f"MC_{config}.tla"
    if not cfg_path.is_file() or not mc.is_file():
        raise SpecFormatError(f"no model {config!r}: {cfg_path} and {mc.name} are not both there")
    return _override(cfg_path.read_text(encoding="utf-8"), mc, name) == "TRUE"


def config_module_base(spec_dir: Path, config: str) -> str:
    """The spec module a model extends: the module named on ``EXTENDS`` in MC_<config>.tla."""
    mc = Path(spec_dir) / f"MC_{config}.tla"
    m = re.search(r"^EXTENDS\s+([A-Za-z]\w*)", mc.read_text(encoding="utf-8"), re.M)
    if not m:
        raise SpecFormatError(f"{mc}: no 'EXTENDS Module' line")
    return m.group(1)


@dataclass
class Labels:
    """Every edge label the model can produce -> (action name, canonical JSON of its named parameters)."""

    actions: dict[str, ActionSignature]
    known: dict[str, tuple[str, str]] = field(default_factory=dict)

    @classmethod
    def for_model(cls, actions: list[ActionSignature], constants: dict[str, int]) -> "Labels":
        known = {}
        for action, args in instances(actions, constants):
            params = {name: (make_set(sorted(arg)) if isinstance(arg, frozenset) else arg)
                      for name, arg in zip(action.param_names, args)}
            known[encode_label(action.name, args)] = (action.name, canonical_json(params))
        return cls({a.name: a for a in actions}, known)

    def decode(self, label: str | None) -> tuple[str, str]:
        """(action, params_json) of a label; ValueError with the reason when the label is not one of Next's."""
        found = self.known.get(label) if label else None
        if found is not None:
            return found
        if not label:
            raise ValueError("an edge without an action label (TLC must run with -dump dot,actionlabels on the "
                             "labeled model that `zabref check --dump-dot` writes)")
        name, _, rest = label.partition("__")
        action = self.actions.get(name)
        if action is None:
            raise ValueError(f"edge label {label!r}: {name!r} is not an action of Next "
                             f"(Next has {', '.join(sorted(self.actions))})")
        args = rest.split("__") if rest else []
        if len(args) != len(action.params):
            raise ValueError(f"edge label {label!r}: {name} takes {len(action.params)} parameter(s) "
                             f"({', '.join(action.param_names) or 'none'}), the label gives {len(args)}")
        expected = ", ".join(f"{p} \\in {d}" for p, d in action.params)
        raise ValueError(f"edge label {label!r}: the arguments are not a parameter instance of {name}({expected}) "
                         f"in this model (is the graph from another config?)")
