"""What a conformance run against a real ZooKeeper server reached of the spec (`zabref conform --system zookeeper`).

Theory of operation: each trace's `conformance.zk.conform.Outcome` says which of its steps were carried out and
compared (``reached``, their state-graph ``edges``), which of those were the real server's own (``own``: the steps
whose server parameter ``i`` is the server under test), and which were not reached (``left``: after a stop or a
departure). `coverage` sums them over the run, model by model, against the model's whole graph as the trace
pipeline measured it (the ``coverage`` of the traces folder's manifest, docs/traces.md): action instances (edge
labels), action names, edges and states. "Reached" is of the whole system -- the played servers' steps too, which
the driver carries out from the spec's own states -- so the real server's share is given apart: its own action
instances and names.

A second run: the traces whose unreached steps hold an action instance that no trace of the run reached (the
others' unreached steps are reached elsewhere already). Rerunning those, once the reason each stopped or departed is
dealt with, is what would raise the coverage; ``second_run`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["Coverage", "coverage", "second_run"]


@dataclass
class Coverage:
    """One model's figures: ``(reached, of)`` pairs; ``of`` is None where the model's graph was not measured (a
    folder of committed traces has no manifest coverage)."""

    config: str
    traces: int = 0
    steps: tuple[int, int] = (0, 0)  # steps carried out, steps of the traces
    instances: tuple[int, int | None] = (0, None)
    names: tuple[int, int | None] = (0, None)
    edges: tuple[int, int | None] = (0, None)
    states: tuple[int, int | None] = (0, None)
    own_instances: int = 0
    own_names: list[str] = field(default_factory=list)
    traced: dict[str, int] = field(default_factory=dict)  # what the traces themselves cover, when known

    def line(self) -> str:
        def part(name: str, pair: tuple[int, int | None]) -> str:
            got, of = pair
            return f"{name}={got}" + ("" if not of else f"/{of:,}({100 * got / of:.1f}%)")

        of_traces = ("" if "edges" not in self.traced else
                     f" (the traces cover {self.traced['instances']} instances, {self.traced['edges']} edges)")
        return (f"coverage {self.config}: traces={self.traces} steps={self.steps[0]}/{self.steps[1]} "
                + " ".join(part(n, p) for n, p in (("action_instances", self.instances), ("action_names", self.names),
                                                    ("edges", self.edges), ("states", self.states)))
                + f"{of_traces}; the real server's own steps: {self.own_instances} instances of "
                f"{len(self.own_names)} actions ({', '.join(self.own_names)})")

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "traces": self.traces, "steps": list(self.steps),
                "action_instances": list(self.instances), "action_names": list(self.names),
                "edges": list(self.edges), "states": list(self.states), "own_instances": self.own_instances,
                "own_names": self.own_names, "traced": self.traced}


def _name(label: str) -> str:
    return label.split("__", 1)[0]


def coverage(outcomes: Iterable[Any], manifests: Iterable[dict[str, Any]] = ()) -> list[Coverage]:
    """The figures of each model the ``outcomes`` (Outcome objects, or their JSON) have traces of, in name order;
    ``manifests``: the traces folders' manifests (`conformance.replay.conform.find_traces`), whose ``coverage``
    gives a model's whole graph."""
    whole: dict[str, dict[str, Any]] = {}
    for m in manifests:
        if isinstance(m.get("coverage"), dict) and m.get("config"):
            whole[m["config"]] = m["coverage"]
    by: dict[str, list[Any]] = {}
    for o in outcomes:
        by.setdefault(_get(o, "config") or "?", []).append(o)
    out = []
    for config in sorted(by):
        group, c = by[config], whole.get(config, {})
        reached = {x for o in group for x in _get(o, "reached")}
        own = {x for o in group for x in _get(o, "own")}
        edges = {tuple(e) for o in group for e in _get(o, "edges")}
        states = {n for e in edges for n in e}

        def of(key: str) -> int | None:
            v = c.get(key)
            return v[1] if isinstance(v, list) else v if isinstance(v, int) else None

        cov = Coverage(config, len(group), (sum(_get(o, "done") for o in group), sum(_get(o, "steps") for o in group)),
                       (len(reached), of("action_instances")), (len({_name(x) for x in reached}), of("action_names")),
                       (len(edges), of("edges")), (len(states), of("states")), len(own),
                       sorted({_name(x) for x in own}))
        if isinstance(c.get("edges_covered"), list):
            cov.traced = {"instances": c["action_instances"][0], "edges": c["edges_covered"][0]}
        out.append(cov)
    return out


def second_run(outcomes: Iterable[Any]) -> list[tuple[str, list[str]]]:
    """The traces a second run needs: each not followed to its end whose unreached steps hold action instances no
    trace reached, with those instances."""
    group = list(outcomes)
    reached = {x for o in group for x in _get(o, "reached")}
    out = []
    for o in group:
        new = sorted({x for x in _get(o, "left") if x not in reached})
        if new:
            out.append((_get(o, "trace"), new))
    return out


def _get(o: Any, name: str) -> Any:
    return o[name] if isinstance(o, dict) else getattr(o, name)
