"""The auditor's map from spec/Zab.tla to zabref/, computed from the two texts, never written by hand.

Theory of operation: everything here is read from source text, nothing is imported, so the map can be computed for
any copy of the tree (tests/test_auditmap.py renames a handler in a temporary copy and watches the map break):

* actions: the disjuncts of the spec's ``Next`` (`conformance.tla.labels.read_next`), grouped under the comment lines
  that head them; each action's definition (with the comment above it) is cut out of the module, and the variables
  it may prime are found in its text and, transitively, in the spec operators it calls (GoLooking, Deliver, ...);
* handlers: spec action ``FollowerProcessLEADERINFO`` is implemented by the method ``follower_process_leaderinfo``
  of ``ZabCore``, found by name with `ast` in zabref/ (the class and its bases); ``Crash`` alone is no method but a
  process restart, i.e. the constructor (`NOT_A_METHOD` says so, with the reason);
* the reverse: every ``leader_process_*`` / ``follower_process_*`` method of ZabCore and every method the dispatch
  table ``HANDLERS`` routes to (through the private dispatchers too) must be named after a spec action;
* variables: the spec's VARIABLES block (name, comment, owner group), the implementation's field
  (`zabref.core.state.SPEC_VARIABLES`, the field's line in ``CoreState.__init__``), whether the implementation keeps
  it on disk (a field of `zabref.core.types.Persistent`), and conformance/replay/mapping.py's function of that name or
  the reason in ``NOT_MAPPED``.

`compute_map(root)` returns an `AuditMap`; its ``problems`` list everything that has drifted apart (an action with
no handler, a handler named after no action, a variable with neither a mapping nor a reason, a persistence that
disagrees). An empty list is the claim the site makes.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from conformance.errors import SpecFormatError
from conformance.report.specread import IDENT, Definition, next_groups, primed, read_definitions, read_variables
from conformance.tla.labels import ActionSignature, read_next

__all__ = ["Code", "ActionEntry", "VariableEntry", "AuditMap", "compute_map", "snake",
           "NOT_A_METHOD", "LATE_ONLY", "HANDLER_PREFIXES"]

#: Spec actions implemented by something other than a method of the same name, and why.
NOT_A_METHOD = {
    "Crash": ("__init__", "Crash(i) is a process restart, not a method: the new process builds "
                          "ZabCore(sid, servers, Persistent.from_storage(storage)), whose constructor keeps exactly "
                          "history, acceptedEpoch and currentEpoch (read from disk) and starts every other variable "
                          "as Init does."),
}
#: Spec actions enabled only by a switch (LeaderLogsLate) that zabref's default models leave FALSE: their traces
#: never reach them (their coverage counts them among Next's actions, not reached); the late models (tinylate) and
#: ZooKeeper's reach them, and zabref takes them with ``[cluster] leader_logs_late``.
LATE_ONLY = frozenset({"LeaderOwnACK"})
#: Method names that claim to implement a spec action (a packet taken by a role).
HANDLER_PREFIXES = ("leader_process_", "follower_process_")
CORE_CLASS = "ZabCore"

_TRIVIAL = re.compile(r'^(?:"[^"]*"|<<[\w\s,]*>>)$')  # a name for a string, or for a tuple of variables


def snake(name: str) -> str:
    """Spec name to code name: FollowerProcessPROPOSALInSync -> follower_process_proposal_in_sync."""
    return "_".join(w.lower() for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z][a-z0-9]*|[a-z0-9]+", name))


@dataclass(frozen=True)
class Code:
    """A Python function found in a source file: repo-relative path, lines, source, class, docstring."""

    name: str
    path: str
    line: int
    end_line: int
    source: str
    owner: str
    doc: str


@dataclass(frozen=True)
class ActionEntry:
    signature: ActionSignature
    group: str
    definition: Definition
    handler: Code | None
    handler_note: str  # why the handler is not a method of the same name ("" when it is)
    primes: tuple[str, ...]  # spec variables the action may change, in VARIABLES order
    spec_uses: tuple[str, ...] = ()  # the spec operators its definition calls (not actions)
    helpers: tuple[Code, ...] = ()  # the functions its handler calls: self.<method>() and the module's functions

    @property
    def name(self) -> str:
        return self.signature.name


@dataclass(frozen=True)
class VariableEntry:
    name: str
    line: int
    comment: str
    group: str  # the spec's heading of its block: "every server, persistent (on disk; survive a crash)", ...
    spec_persistent: bool
    field: str | None  # the key of CoreState.variables() (SPEC_VARIABLES)
    field_code: str | None  # "zabref/core/state.py:84"
    field_comment: str
    impl_persistent: bool | None  # a field of Persistent (on disk); None when there is no field
    mapping: Code | None
    not_mapped: str | None  # NOT_MAPPED's reason


@dataclass
class AuditMap:
    actions: list[ActionEntry]
    variables: list[VariableEntry]
    definitions: dict[str, Definition]
    implementation_only: list[Code]
    problems: list[str] = field(default_factory=list)

    def action(self, name: str) -> ActionEntry:
        return next(a for a in self.actions if a.name == name)


# ---------------------------------------------------------------------------------------------------------------
# The spec


# ---------------------------------------------------------------------------------------------------------------
# The code


class _Source:
    """Parsed Python files of one folder, with their classes."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.trees: dict[str, tuple[ast.Module, str]] = {}
        self.classes: dict[str, tuple[str, ast.ClassDef]] = {}
        for path in sorted(Path(folder).glob("*.py")):
            rel = path.relative_to(root).as_posix()
            text = path.read_text(encoding="utf-8")
            tree = ast.parse(text, filename=rel)
            self.trees[rel] = (tree, text)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, (rel, node))

    def code(self, rel: str, node: ast.FunctionDef, owner: str) -> Code:
        text = self.trees[rel][1]
        return Code(node.name, rel, node.lineno, node.end_lineno or node.lineno,
                    "\n".join(text.splitlines()[node.lineno - 1:node.end_lineno]), owner, ast.get_docstring(node) or "")

    def methods(self, cls: str) -> dict[str, Code]:
        """The methods of `cls` and its bases defined in this folder, as Python resolves them (first in MRO wins)."""
        found: dict[str, Code] = {}
        order, queue = [], [cls]
        while queue:  # breadth-first over bases is enough for this single-inheritance-per-branch tree
            name = queue.pop(0)
            if name in order or name not in self.classes:
                continue
            order.append(name)
            queue.extend(b.id for b in self.classes[name][1].bases if isinstance(b, ast.Name))
        for name in order:
            rel, node = self.classes[name]
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name not in found:
                    found[item.name] = self.code(rel, item, name)
        return found

    def assignment(self, name: str) -> tuple[str, ast.AST] | None:
        for rel, (tree, _) in self.trees.items():
            for node in tree.body:
                target = node.target if isinstance(node, ast.AnnAssign) else (
                    node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
                if isinstance(target, ast.Name) and target.id == name and node.value is not None:
                    return rel, node.value
        return None

    def functions(self) -> dict[str, Code]:
        out = {}
        for rel, (tree, _) in self.trees.items():
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    out[node.name] = self.code(rel, node, "")
        return out


def _attr_names(node: ast.AST | None, owner: str) -> list[str]:
    """Every `Owner.name` inside node (the handlers a dispatch table routes to)."""
    if node is None:
        return []
    return [n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == owner]


def _dedent_parse(code: Code) -> list[str]:

    tree = ast.parse(textwrap.dedent(code.source))
    return [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]


def _helpers(handler: Code, methods: dict[str, Code], source: _Source, skip: set[str]) -> tuple[Code, ...]:
    """What the handler calls, one level deep: methods of the core (not other handlers) and functions of its module."""

    tree = ast.parse(textwrap.dedent(handler.source))
    module = {n.name: source.code(handler.path, n, "") for n in source.trees[handler.path][0].body
              if isinstance(n, ast.FunctionDef)}
    out: dict[str, Code] = {}
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and f.attr in methods and f.attr not in skip:
            out.setdefault(f.attr, methods[f.attr])
        elif isinstance(f, ast.Name) and f.id in module:
            out.setdefault(f.id, module[f.id])
    return tuple(out.values())


def _field_line(source: _Source, field_name: str) -> tuple[str | None, str]:
    """Where CoreState.__init__ assigns self.<field>, and the comment on that line."""
    if "CoreState" not in source.classes:
        return None, ""
    rel, cls = source.classes["CoreState"]
    text = source.trees[rel][1].splitlines()
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                        and t.attr == field_name:
                    line = text[node.lineno - 1]
                    return f"{rel}:{node.lineno}", line.split("#", 1)[1].strip() if "#" in line else ""
    return None, ""


def _literal(source: _Source, name: str) -> object:
    found = source.assignment(name)
    if found is None:
        return None
    try:
        return ast.literal_eval(found[1])
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# The map


def compute_map(root: Path, spec: str = "spec/Zab.tla", code_dir: str = "zabref/core",
                mapping: str = "conformance/replay/mapping.py") -> AuditMap:
    """The map for the tree at `root` (a checkout, or a copy of one)."""
    root = Path(root)
    spec_path = root / spec
    defs = read_definitions(spec_path)
    var_rows = read_variables(spec_path)
    var_names = [v[0] for v in var_rows]
    groups = next_groups(spec_path)
    problems: list[str] = []

    zab = _Source(root / code_dir, root)
    methods = zab.methods(CORE_CLASS)
    if not methods:
        problems.append(f"no class {CORE_CLASS} in {code_dir}/: the handlers cannot be found")

    actions = []
    signatures = read_next(spec_path)
    action_names = {s.name for s in signatures}
    for sig in signatures:
        if sig.name not in defs:
            raise SpecFormatError(f"{spec_path}:{sig.line}: Next names {sig.name}, which the module does not define")
        method, note = NOT_A_METHOD.get(sig.name, (snake(sig.name), ""))
        handler = methods.get(method)
        if handler is None:
            problems.append(f"spec action {sig.name} has no handler: no method {method} of {CORE_CLASS} in "
                            f"{code_dir}/")
        primes = primed(sig.name, defs, var_names)
        body = defs[sig.name].text.split("==", 1)[1]
        uses = tuple(dict.fromkeys(i for i in IDENT.findall(body)
                                   if i in defs and i not in action_names and i != sig.name
                                   and not _TRIVIAL.match(defs[i].text.split("==", 1)[1].strip())))
        helpers = _helpers(handler, methods, zab, {snake(a) for a in action_names} | {handler.name}) \
            if handler else ()
        actions.append(ActionEntry(sig, groups.get(sig.name, ""), defs[sig.name], handler, note,
                                   tuple(v for v in var_names if v in primes), uses, helpers))

    # The reverse: every method that claims to be a spec action's handler is one.
    expected = {snake(a) for a in action_names} | {m for m, _ in NOT_A_METHOD.values()}
    found = zab.assignment("HANDLERS")
    routed = set(_attr_names(found[1] if found else None, CORE_CLASS))
    if found is None:
        problems.append(f"no dispatch table HANDLERS in {code_dir}/")
    claimed = {m for m in methods if m.startswith(HANDLER_PREFIXES)}
    for name in sorted(routed):
        if name not in methods:
            problems.append(f"HANDLERS routes to {CORE_CLASS}.{name}, which {code_dir}/ does not define")
        elif name.startswith("_"):  # a private dispatcher: what it calls is routed too
            claimed |= {c for c in _dedent_parse(methods[name]) if c in methods and not c.startswith("_")}
        else:
            claimed.add(name)
    for name in sorted(claimed - expected):
        c = methods[name]
        problems.append(f"handler {name} ({c.path}:{c.line}) names no spec action of Next")

    impl_only_names = set()
    obs = zab.assignment("OBSERVER_HANDLERS")
    impl_only_names |= set(_attr_names(obs[1] if obs else None, CORE_CLASS))
    io = zab.assignment("IMPLEMENTATION_ONLY")
    if io is not None:
        impl_only_names |= {n.value for n in ast.walk(io[1]) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    implementation_only = [methods[n] for n in sorted(impl_only_names) if n in methods]

    # Variables.
    spec_vars = _literal(zab, "SPEC_VARIABLES") or {}
    if not spec_vars:
        problems.append(f"no SPEC_VARIABLES table in {code_dir}/")
    persistent_fields = set()
    if "Persistent" in zab.classes:
        persistent_fields = {n.target.id for n in zab.classes["Persistent"][1].body
                             if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    mapping_src = _Source((root / mapping).parent, root)
    mapping_rel = (Path(mapping)).as_posix()
    mapping_tree, _ = mapping_src.trees.get(mapping_rel, (None, ""))
    functions = {}
    not_mapped: dict = {}
    in_mapped: set[str] = set()
    if mapping_tree is None:
        problems.append(f"no conformance mapping {mapping}")
    else:
        functions = {n.name: mapping_src.code(mapping_rel, n, "") for n in mapping_tree.body
                     if isinstance(n, ast.FunctionDef)}
        for node in mapping_tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if "NOT_MAPPED" in names:
                not_mapped = ast.literal_eval(node.value)
            if "MAPPED" in names:
                in_mapped = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    variables = []
    for name, line, comment, group in var_rows:
        key = spec_vars.get(name)
        where, fcomment = _field_line(zab, key) if key else (None, "")
        spec_persistent = "persistent" in group
        impl_persistent = (key in persistent_fields) if key else None
        fn = functions.get(name)
        reason = not_mapped.get(name)
        if fn is None and reason is None:
            problems.append(f"spec variable {name} ({spec}:{line}) has no mapping function in {mapping} and no "
                            f"reason in NOT_MAPPED")
        if fn is not None and name not in in_mapped:
            problems.append(f"{mapping} defines {name}() but MAPPED does not list it")
        if fn is not None and reason is not None:
            problems.append(f"spec variable {name} is both mapped and in NOT_MAPPED ({mapping})")
        if key is not None and where is None:
            problems.append(f"SPEC_VARIABLES maps {name} to field {key}, which CoreState.__init__ never sets")
        if impl_persistent is not None and impl_persistent != spec_persistent:
            problems.append(f"spec variable {name} is {'persistent' if spec_persistent else 'volatile'} in the "
                            f"spec but {'on disk' if impl_persistent else 'volatile'} in the implementation")
        variables.append(VariableEntry(name, line, comment, group, spec_persistent, key, where, fcomment,
                                       impl_persistent, fn, reason))
    for name in sorted(set(spec_vars) - set(var_names)):
        problems.append(f"SPEC_VARIABLES names {name}, which is no variable of {spec}")
    for name in sorted(set(not_mapped) - set(var_names)):
        problems.append(f"NOT_MAPPED names {name}, which is no variable of {spec}")
    return AuditMap(actions, variables, defs, implementation_only, problems)
