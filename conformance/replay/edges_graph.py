"""`zabref edges` over a whole graph: every edge and every state's channel heads, in this process or on Spark.

Theory of operation: `check_rows` checks a stream of edges (src and dst state JSON beside each) with
`conformance.replay.edges.check_edge` and sums the result in a `Summary`: edges per action, agreements, and the
first few disagreements per action (by label, src, dst: the same whatever the partitioning); `check_head_rows` does
the same for states (each with the Receive edges leaving it, `conformance.replay.edges.check_heads`). `check_graph`
runs it in this process (pyarrow) or as a Spark job (`conformance.graph.spark.session`: edges joined with the nodes
twice, one task per partition of edges). conformance/replay/edges_report.py writes the report and the command.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.graph.spark import session
from conformance.replay.driver import pretty_diff
from conformance.errors import ConformanceError
from conformance.replay.cutheads import Case, judge
from conformance.replay.edges import HEADS, SHOW, EdgeError, check_edge, check_heads, take_head
from conformance.replay.plan import FOLLOWS, PROCESS
from conformance.tla.modelconfig import constraints

#: The spec folder whose models the graphs are of (`model_cuts`).
SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"

__all__ = ["COLUMNS", "THEN", "follows", "graph_model", "model_cuts", "check_head_rows", "Disagreement", "Summary",
           "check_rows", "require_graph", "check_graph"]


#: The columns of an edge as `check_rows` takes it, and of the step that follows it (`THEN`), when there is one.
COLUMNS = ("src", "dst", "label", "action", "params_json", "src_json", "dst_json")
THEN = ("then_action", "then_params_json", "then_json")


#: `PROCESS` (the actions that take a packet) as a Java regular expression, for Spark's rlike (no named groups).
_RECEIVE_JAVA = re.sub(r"\?P<\w+>", "", PROCESS.pattern)


def _heads_checked(state: dict[str, Any]) -> int:
    return sum(1 for row in state["msgs"] for channel in row if channel)


def _untaken(differences: dict[str, tuple[Any, Any]]) -> bool:
    """Whether a head's disagreement is that the node takes a packet that no edge of the graph takes."""
    return all(str(want).startswith("held:") and not str(got).startswith("held:")
               for want, got in differences.values())


def graph_model(graph: Path) -> str | None:
    """The model whose graph this is, named by the manifest beside the graph folder as `zabref traces` writes it
    (None when there is no manifest)."""
    manifest = Path(graph).parent / "manifest.json"
    try:
        config = json.loads(manifest.read_text(encoding="utf-8"))["config"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EdgeError(f"{manifest}: not a trace manifest naming its model: {e}") from None
    if not isinstance(config, str):
        raise EdgeError(f"{manifest}: its config is {config!r}, not a model's name")
    return config


def model_cuts(config: str, spec_dir: Path = SPEC_DIR) -> tuple[str, ...]:
    """The CONSTRAINTs and ACTION_CONSTRAINTs of model ``config``. In a model with a cut, a state with no edge taking
    a packet does not say the spec leaves it waiting: a CONSTRAINT drops every successor that breaks it
    (ciconfirm's PingsBounded, at a REQUEST whose round of PINGs would owe a second), and an ACTION_CONSTRAINT every
    step it forbids (SyncAnsweredAtOnce: `follows`)."""
    cfg = spec_dir / f"MC_{config}.cfg"
    try:
        return constraints(cfg.read_text(encoding="utf-8"))
    except OSError as e:
        raise EdgeError(f"model {config!r}, named by its graph's manifest: {cfg} cannot be read: {e}") from None


def check_head_rows(rows: Iterable[tuple[int, str, str | None]], show: int = SHOW, where: str = "the graph",
                    first: bool = False, cut: str | None = None) -> Summary:
    """Check the channel heads of states given as (id, state_json, receives_json): receives_json a JSON list of
    [action, params_json] for the edges that leave the state taking a packet (None: none). ``first``: stop after
    the first state whose heads disagree. ``cut``: the model, when it cuts the spec's behaviours (`model_cuts`): a
    head the node takes and no edge does is judged by TLC (conformance/replay/cutheads.py, 1,000 heads a run): a
    disagreement when the spec does not take the node's step there (the first ``show`` found; the heads TLC did not
    get to after them are reported as not judged), else agreed; `Summary.by_tlc` counts the heads TLC was asked
    about."""
    summary = Summary(show)
    started = time.process_time()
    cases: list[tuple[int, int, int, dict[str, tuple[Any, Any]], Case]] = []
    for node, state_json, receives_json in rows:
        try:
            state = json.loads(state_json)
            receives = []
            for action, params_json in json.loads(receives_json or "[]"):
                params = json.loads(params_json)
                receives.append((action, params["i"], params["j"]))
            found = check_heads(state, receives)
        except (EdgeError, ValueError, KeyError, TypeError) as e:
            raise EdgeError(f"{where}: state {node}: {e}") from None
        to_tlc = 0
        if cut:
            kept = {k: d for k, d in found.items() if not _untaken(d)}
            for i, j in sorted(set(found) - set(kept)):
                steps, after = take_head(state, i, j)
                cases.append((node, i, j, found[(i, j)], Case(state, tuple(steps), after)))
            to_tlc, found = len(found) - len(kept), kept
            summary.by_tlc += to_tlc
        for _ in range(_heads_checked(state) - len(found) - to_tlc):
            summary.add(HEADS, None)
        for (i, j), diffs in sorted(found.items()):
            summary.add(HEADS, Disagreement(node, node, f"{HEADS}__{i}__{j}", HEADS, {"i": i, "j": j}, diffs))
        if found and first:
            break
    if cases:
        try:
            wrong, left = judge([c for *_, c in cases], cut, most=show)
        except ConformanceError as e:
            raise EdgeError(f"{where}: {e}") from None
        why = {**{k: "held: no step of the spec takes it here (TLC, without the model's cuts)" for k in wrong},
               **{k: f"not judged: TLC stopped after finding {len(wrong)} heads the spec does not take" for k in left}}
        for k, (node, i, j, diffs, _) in enumerate(cases):
            if k in why:
                (head, (_, got)), = diffs.items()
                diffs = {head: (why[k], got)}
                summary.add(HEADS, Disagreement(node, node, f"{HEADS}__{i}__{j}", HEADS, {"i": i, "j": j}, diffs))
            else:
                summary.add(HEADS, None)
    summary.cpu = time.process_time() - started
    return summary


@dataclass
class Disagreement:
    src: int
    dst: int
    label: str
    action: str
    params: dict[str, Any]
    differences: dict[str, tuple[Any, Any]]

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.label, self.src, self.dst)

    @property
    def diff(self) -> str:
        return pretty_diff(self.differences)


@dataclass
class Summary:
    """Edges checked and agreed per action, and the first `show` disagreements per action."""

    show: int = SHOW
    checked: dict[str, int] = field(default_factory=dict)
    agreed: dict[str, int] = field(default_factory=dict)
    shown: dict[str, list[Disagreement]] = field(default_factory=dict)
    #: channel heads a node takes where no edge of the graph does, in a model that cuts the spec's behaviours
    #: (`model_cuts`): the cut, not the spec, may have left that step out, so TLC judged them (counted in `heads`)
    by_tlc: int = 0
    seconds: float = 0.0  # wall, from the start of check_graph to the merged result
    cpu: float = 0.0  # CPU seconds of the processes that checked the edges (Spark: the sum over tasks)

    @property
    def edges(self) -> int:
        """Edges checked (the channel heads, `HEADS`, are not edges)."""
        return sum(k for a, k in self.checked.items() if a != HEADS)

    @property
    def heads(self) -> int:
        return self.checked.get(HEADS, 0)

    @property
    def disagreed(self) -> int:
        """Edges and channel heads that disagree."""
        return sum(self.checked.values()) - sum(self.agreed.values())

    def add(self, action: str, found: Disagreement | None) -> None:
        self.checked[action] = self.checked.get(action, 0) + 1
        if found is None:
            self.agreed[action] = self.agreed.get(action, 0) + 1
        else:
            self._keep(action, [found])

    def _keep(self, action: str, found: list[Disagreement]) -> None:
        self.shown[action] = sorted(self.shown.get(action, []) + found, key=lambda d: d.key)[: self.show]

    def merge(self, other: Summary) -> None:
        self.cpu += other.cpu
        self.by_tlc += other.by_tlc
        for action, k in other.checked.items():
            self.checked[action] = self.checked.get(action, 0) + k
            self.agreed[action] = self.agreed.get(action, 0) + other.agreed.get(action, 0)
            if other.shown.get(action):
                self._keep(action, other.shown[action])


def check_rows(rows: Iterable[tuple], show: int = SHOW, where: str = "the graph", first: bool = False) -> Summary:
    """Check edges given as (src, dst, label, action, params_json, src_json, dst_json), each followed, optionally, by
    the step dst always takes next (then_action, then_params_json, then_json: `follows`; None when none); EdgeError
    names the edge. ``first``: stop after the first edge that disagrees."""
    summary = Summary(show)
    started = time.process_time()
    for src, dst, label, action, params_json, src_json, dst_json, *after in rows:
        try:
            params = json.loads(params_json)
            then = None
            if after and after[0] is not None:
                then = (after[0], json.loads(after[1]), json.loads(after[2]))
            diffs = check_edge(json.loads(src_json), action, params, json.loads(dst_json), then)
        except (EdgeError, ValueError) as e:  # json's errors are ValueErrors
            raise EdgeError(f"{where}: edge {src}:{dst} ({label}): {e}") from None
        summary.add(action, Disagreement(src, dst, label, action, params, diffs) if diffs else None)
        if diffs and first:
            break
    summary.cpu = time.process_time() - started
    return summary


def _partition(rows: Iterator[Any], show: int, where: str, heads: bool = False,
               cut: str | None = None) -> Iterator[Summary | str]:
    try:  # Rows are tuples, in the order of COLUMNS (edges) or (id, state_json, receives_json) (heads)
        yield check_head_rows(rows, show, where, cut=cut) if heads else check_rows(rows, show, where)
    except EdgeError as e:  # returned, not raised: the driver reports it as bad input, not as a failed Spark job
        yield str(e)


def _receives_json(moves: list[tuple[str, str]]) -> str:
    return json.dumps(sorted(moves))


def require_graph(graph: Path) -> None:
    """EdgeError naming the folder unless it holds the pipeline's Parquet graph (nodes/ and edges/)."""
    missing = [part for part in ("nodes", "edges") if not (Path(graph) / part).is_dir()]
    if missing:
        raise EdgeError(f"{graph}: not a graph Parquet folder: no {' and no '.join(f'{m}/' for m in missing)} in it "
                        "(`zabref traces --parquet` writes one; `zabref edges --config NAME` finds a model's)")


def _read_local(graph: Path) -> tuple[dict[int, str], dict[str, list]]:
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow loads only when a Parquet graph is read)

    require_graph(graph)
    try:
        nodes = pq.read_table(graph / "nodes", columns=["id", "state_json"]).to_pydict()
        edges = pq.read_table(graph / "edges", columns=["src", "dst", "label", "action", "params_json"]).to_pydict()
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise EdgeError(f"{graph}: not a readable graph Parquet folder: {e}") from None
    return dict(zip(nodes["id"], nodes["state_json"])), edges


def _local_head_rows(text: dict[int, str], edges: dict[str, list], only: int | None) -> Iterator[tuple]:
    """The heads of every state but those the model's rule leaves by one `FOLLOWS` step only: a node never rests in
    one (it took that step in the input that reached it), and the rule, not the spec, keeps its other edges out."""
    restricted = follows(zip(edges["src"], edges["dst"], edges["action"], edges["params_json"]))
    moves: dict[int, list[tuple[str, str]]] = {}
    for src, action, params_json in zip(edges["src"], edges["action"], edges["params_json"]):
        if PROCESS.match(action):
            moves.setdefault(src, []).append((action, params_json))
    for node in sorted(text) if only is None else [only] if only in text else []:
        if node not in restricted:
            yield node, text[node], _receives_json(moves.get(node, []))


def follows(edges: Iterable[tuple[int, int, str, str]]) -> dict[int, tuple[str, str, int]]:
    """The states whose one way out is a `FOLLOWS` step (a leader's LeaderSendSYNC in a model that keeps the rule
    SyncAnsweredAtOnce): state -> (action, params_json, the state after it), from (src, dst, action, params_json).
    A node takes that step in the input of the step that reached the state (conformance/replay/edges.py,
    ``check_edge``'s ``then``); a state with other ways out as well (a model without the rule) is one a node never
    rests in, and the edges into it are held to it as they are."""
    out: dict[int, tuple[str, str, int] | None] = {}
    for src, dst, action, params_json in edges:
        out[src] = (action, params_json, dst) if src not in out and action in FOLLOWS else None
    return {k: v for k, v in out.items() if v is not None}


def _local_rows(text: dict[int, str], edges: dict[str, list], graph: Path, only: tuple[int, int] | None,
                limit: int | None) -> Iterator[tuple]:
    after = follows(zip(edges["src"], edges["dst"], edges["action"], edges["params_json"]))
    rows = zip(edges["src"], edges["dst"], edges["label"], edges["action"], edges["params_json"])
    if only is not None:
        rows = (r for r in rows if (r[0], r[1]) == only)
    for k, (src, dst, label, action, params_json) in enumerate(rows):
        if limit is not None and k >= limit:
            return
        if src not in text or dst not in text:
            raise EdgeError(f"{graph}: edge {src}:{dst} ({label}) names a node that nodes/ does not hold")
        then = after.get(dst) if action not in FOLLOWS else None
        yield (src, dst, label, action, params_json, text[src], text[dst],
               *((then[0], then[1], text[then[2]]) if then else (None, None, None)))


def _collect(ss: Any, rows: Any, task: Any, partitions: int | None) -> list[Any]:
    """Run `task` on every partition of the joined rows; the join's shuffle makes `partitions` of them (default 4
    per core of the session), hashed by edge, and adaptive execution may not merge them (it would merge a small
    graph's into one task, one core)."""
    n = partitions or 4 * ss.sparkContext.defaultParallelism
    keys = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.coalescePartitions.enabled")
    old = {k: ss.conf.get(k, None) for k in keys}
    ss.conf.set(keys[0], str(n))
    ss.conf.set(keys[1], "false")
    try:
        return rows.rdd.mapPartitions(task).collect()
    finally:
        for k, v in old.items():
            ss.conf.unset(k) if v is None else ss.conf.set(k, v)


def _ways(ss: Any, graph: Path) -> Any:
    """The states whose one way out is a `FOLLOWS` step (`follows`) as a DataFrame (dst, then_action,
    then_params_json, then_id); None for a graph with no `FOLLOWS` edge (every model of spec/Zab.tla)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    edges = ss.read.parquet(str(graph / "edges")).select("src", "dst", "action", "params_json")
    if not edges.where(F.col("action").isin(*FOLLOWS)).limit(1).count():
        return None
    return (edges.groupBy("src").agg(F.count("*").alias("n"), F.first("action").alias("then_action"),
                                     F.first("params_json").alias("then_params_json"), F.first("dst").alias("then_id"))
            .where((F.col("n") == 1) & F.col("then_action").isin(*FOLLOWS)).drop("n")
            .withColumnRenamed("src", "dst"))


def _then(rows: Any, ways: Any, nodes: Any) -> Any:
    """`rows` with the columns `THEN`: the step its dst always takes next (`follows`), null when none."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    if ways is None:
        return rows.select("*", *(F.lit(None).cast("string").alias(c) for c in THEN))
    then_nodes = nodes.withColumnRenamed("id", "then_id").withColumnRenamed("state_json", "then_json")
    joined = rows.join(ways, "dst", "left").join(then_nodes, "then_id", "left")
    off = F.col("action").isin(*FOLLOWS)
    return joined.select(*rows.columns, *(F.when(off, F.lit(None)).otherwise(F.col(c)).alias(c) for c in THEN))


def check_graph(graph: Path, *, master: str | None = None, spark: bool = False, only: tuple[int, int] | None = None,
                limit: int | None = None, show: int = SHOW, partitions: int | None = None,
                heads: bool = True, first: bool = False) -> Summary:
    """Check the edges of the Parquet graph folder `graph` (all, the edges `only` src -> dst, or the first `limit`)
    and, with `heads`, the channel heads of every state (of state src alone with `only`; none with `limit`): in
    this process, or on Spark (`partitions` tasks) when `spark` or a `master` is given. ``first`` (in this process
    only): stop at the first disagreement, the heads not checked when an edge disagreed (the mutation killer)."""
    started = time.monotonic()
    where = str(graph)
    heads = heads and limit is None
    model = graph_model(graph) if "://" not in where else None
    cut = model if model is not None and model_cuts(model) else None
    if not spark and master is None:
        text, edges = _read_local(graph)
        summary = check_rows(_local_rows(text, edges, graph, only, limit), show, where, first)
        if heads and not (first and summary.disagreed):
            head = check_head_rows(_local_head_rows(text, edges, only[0] if only else None), show, where, first, cut)
            summary.merge(head)
    else:
        if first:
            raise ValueError("check_graph: first=True is for a check in this process, not on Spark")
        from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)


        ss = session(master)
        edges = ss.read.parquet(str(graph / "edges")).select("src", "dst", "label", "action", "params_json")
        if only is not None:
            edges = edges.where((F.col("src") == only[0]) & (F.col("dst") == only[1]))
        if limit is not None:
            edges = edges.limit(limit)
        nodes = ss.read.parquet(str(graph / "nodes")).select("id", "state_json")
        rows = (edges.join(nodes.withColumnRenamed("id", "src").withColumnRenamed("state_json", "src_json"), "src")
                .join(nodes.withColumnRenamed("id", "dst").withColumnRenamed("state_json", "dst_json"), "dst"))
        ways = _ways(ss, graph)
        rows = _then(rows, ways, nodes).select(*COLUMNS, *THEN)
        parts = _collect(ss, rows, lambda part: _partition(part, show, where), partitions)
        if heads:
            moves = (ss.read.parquet(str(graph / "edges")).where(F.col("action").rlike(_RECEIVE_JAVA))
                     .groupBy("src").agg(F.collect_list(F.array("action", "params_json")).alias("moves"))
                     .withColumnRenamed("src", "id"))
            states = nodes if only is None else nodes.where(F.col("id") == only[0])
            if ways is not None:  # a state the model's rule leaves by one step only: a node never rests there
                states = states.join(ways.select(F.col("dst").alias("id")), "id", "left_anti")
            head_rows = (states.join(moves, "id", "left")
                         .select("id", "state_json", F.to_json("moves").alias("receives_json")))
            parts += _collect(ss, head_rows, lambda part: _partition(part, show, where, heads=True, cut=cut),
                              partitions)
        errors = [p for p in parts if isinstance(p, str)]
        if errors:
            raise EdgeError(sorted(errors)[0])
        summary = Summary(show)
        for part in parts:
            summary.merge(part)
    summary.seconds = time.monotonic() - started
    return summary
