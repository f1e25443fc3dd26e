"""The conformance report: ``index.html`` for people, ``report.json`` for tools, written whole or not at all.

Theory of operation: `write_report` takes the replay results (conformance/replay/driver.py, as JSON dicts) and writes

* ``report.json``: the summary line, per-trace results (failures in full: step, action, parameters, each differing
  variable's expected and actual value, the diff, server logs, the replay command), coverage by action, and the
  minimized traces, if any;
* ``index.html``: the same for reading. Failures come first; each shows the diff, the path so far drawn with
  graphviz (conformance/report/render.py, the failing step filled red; when drawing fails the steps are listed instead
  and the page says why), the server logs and the command that replays that trace alone.

Coverage by action, per model (``ci``, ``fle_ci``, ...: each trace says which): the action instances (edge labels,
e.g. ``FollowerProcessDIFF__2__1``) whose steps the replays took and matched, per action name, against the instances
the traces' manifest.json says that model's graph holds (when the traces came with one). Everything is written into
a temporary sibling folder that replaces DIR at the end; DIR is replaced only when it is empty or holds a previous
report (a report.json), so a wrong --report never deletes files.
"""

from __future__ import annotations

import html
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from conformance.errors import ConformanceError
from conformance.graph.traces import Trace, read_trace
from conformance.report.render import trace_graph
from zabref.storage.atomic import staged_folder

__all__ = ["write_report", "coverage"]

REPORT_JSON = "report.json"


class ReportError(ConformanceError):
    """The report folder cannot be written (it holds files that are not a report)."""


def coverage(results: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model (a result's ``config``: ``ci``, ``fle_ci``, ...), per action name: the instances the replays took
    and matched, against the instances that model's graph holds. A generated manifest (one model, with ``coverage``)
    gives the graph's totals, of action instances, edges and states; the committed traces' manifest names the model
    of each trace. A model none of whose manifests has totals shows what was taken only."""
    taken: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in results:
        for label in r.get("labels") or []:
            taken[r.get("config") or "?"][label.split("__")[0]].add(label)
    known: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    graph: dict[str, dict[str, Any]] = {}
    for m in manifests:
        for t in m.get("traces", []):
            for label in t.get("covers", []):
                known[t.get("config") or m.get("config") or "?"][label.split("__")[0]].add(label)
        cov = m.get("coverage") or {}
        if m.get("config") and cov.get("action_instances"):
            graph[m["config"]] = cov
    models = []
    for model in sorted(set(taken) | set(known)):
        names = sorted(set(taken[model]) | set(known[model]))
        cov = graph.get(model, {})
        total = cov.get("action_instances", [None, None])[1]
        models.append({
            "model": model,
            "instances_taken": sum(len(v) for v in taken[model].values()),
            "instances_in_graph": total,
            "edges_in_graph": cov.get("edges"), "states_in_graph": cov.get("states"),
            "by_action": [{"action": n, "taken": sorted(taken[model][n]),
                           "in_graph": len(known[model][n]) if manifests else None} for n in names],
        })
    return {"models": models}


def _svg(trace_path: str, step: int) -> tuple[str | None, str]:
    """The path up to the failing step as inline SVG, or (None, why not)."""
    try:

        t = read_trace(Path(trace_path))
        cut = Trace(t.header, t.steps[: step + 1])
        return trace_graph(cut, step, f"{Path(trace_path).name}: first divergence at step {step}").pipe(
            format="svg").decode("utf-8"), ""
    except Exception as e:  # graphviz missing, a trace moved away: the list below still tells the story
        return None, f"{type(e).__name__}: {e}"


def _steps_list(trace_path: str, step: int) -> str:
    try:

        t = read_trace(Path(trace_path))
    except Exception as e:
        return f"<p>(the trace cannot be read: {html.escape(str(e))})</p>"
    items = []
    for s in t.steps[: step + 1]:
        params = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(s.params.items()))
        text = html.escape(f"step {s.index}: {s.action}({params})")
        items.append(f"<li><b class=bad>{text} &larr; diverges</b></li>" if s.index == step else f"<li>{text}</li>")
    return "<ol start=0>" + "".join(items) + "</ol>"


_CSS = """body{font-family:sans-serif;margin:2em;max-width:110em}pre{background:#f6f6f6;padding:.6em;overflow:auto;
max-height:40em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}
.bad{color:#b00000}.ok{color:#006000}code{background:#f0f0f0}"""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _failure_html(r: dict[str, Any], n: int) -> str:
    f = r["failure"]
    params = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(f["params"].items()))
    svg, why = _svg(r["trace"], f["step"])
    picture = svg if svg else (f"<p>(the path could not be drawn: {_esc(why)}; the steps instead)</p>"
                               + _steps_list(r["trace"], f["step"]))
    rows = "".join(f"<tr><td><code>{_esc(k)}</code></td><td><code>{_esc(json.dumps(e))}</code></td>"
                   f"<td><code>{_esc(json.dumps(a))}</code></td></tr>" for k, (e, a) in f["differences"].items())
    logs = "".join(f"<details><summary>{_esc(k)}</summary><pre>{_esc(v)}</pre></details>" for k, v in f["logs"].items())
    return f"""<h3 id="f{n}" class=bad>{_esc(Path(r['trace']).name)}: step {f['step']},
<code>{_esc(f['action'])}({_esc(params)})</code></h3>
<p>Reproduce: <code>{_esc(f['command'])}</code></p>
<p>Why: {_esc(f['reason'])}</p>
<table><tr><th>variable</th><th>spec (expected)</th><th>zabref (actual)</th></tr>{rows}</table>
<h4>Diff (pretty JSON, spec &rarr; zabref)</h4><pre>{_esc(f['diff'] or '(no variable differs)')}</pre>
<h4>The path so far</h4>{picture}
<h4>Server logs (tails)</h4>{logs or '<p>(none)</p>'}"""


def _html(doc: dict[str, Any]) -> str:
    results = doc["results"]
    failed = [r for r in results if not r["passed"]]
    parts = [f"<h1>zabref conformance report</h1><p><code>{_esc(doc['summary'])}</code></p>"]
    if doc.get("bug"):
        parts.append(f"<p>Servers ran with the seeded bug <code>{_esc(doc['bug'])}</code>.</p>")
    if doc.get("site"):
        parts.append(f'<p>The spec beside the code, action by action, with the evidence they agree: '
                     f'<a href="{_esc(doc["site"])}">the auditor\'s site</a> (docs/auditing.md).</p>')
    parts.append("<h2>Failures</h2>" if failed else "<h2 class=ok>Every trace passed</h2>")
    for n, r in enumerate(failed):
        if r.get("failure"):
            parts.append(_failure_html(r, n))
        else:
            parts.append(f"<h3 class=bad>{_esc(Path(r['trace']).name)}: not replayed</h3><pre>{_esc(r['error'])}</pre>")
    for m in doc.get("minimized", []):
        parts.append(f"<h3>Minimized: {_esc(Path(m['original']).name)}</h3><p>{m['original_length']} steps to the "
                     f"divergence &rarr; {m['minimized_length']} steps: <code>{_esc(m['path'])}</code>; "
                     f"reproduce: <code>{_esc(m['command'])}</code></p>")
    for cov in doc["coverage"]["models"]:
        rows = "".join(f"<tr><td>{_esc(c['action'])}</td><td>{len(c['taken'])}</td>"
                       f"<td>{'' if c['in_graph'] is None else c['in_graph']}</td>"
                       f"<td><small>{_esc(' '.join(c['taken']))}</small></td></tr>" for c in cov["by_action"])
        total = cov["instances_in_graph"]
        graph = (f" The graph has {cov['states_in_graph']:,} states and {cov['edges_in_graph']:,} edges; "
                 "<code>zabref edges</code> checks every edge on the core." if cov.get("edges_in_graph") else "")
        parts.append(f"<h2>Coverage by action: model {_esc(cov['model'])}</h2><p>{cov['instances_taken']} action "
                     "instances taken and matched" + (f", of {total} in the graph" if total else "") + f".{graph}</p>"
                     "<table><tr><th>action</th><th>instances taken</th><th>in graph</th><th>which</th></tr>"
                     f"{rows}</table>")
    rows = "".join(
        f"<tr><td>{_esc(Path(r['trace']).name)}</td><td class={'ok' if r['passed'] else 'bad'}>"
        f"{'pass' if r['passed'] else ('error' if r.get('error') else 'FAIL at step ' + str(r['failure']['step']))}"
        f"</td><td>{r['replayed']}/{r['steps']}</td><td>{r['wall']:.2f}</td></tr>" for r in results)
    parts.append(f"<h2>Traces</h2><table><tr><th>trace</th><th>result</th><th>steps matched</th><th>wall (s)</th>"
                 f"</tr>{rows}</table>")
    return (f"<!doctype html><html><head><meta charset=utf-8><title>zabref conformance</title><style>{_CSS}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")


def write_report(target: Path, results: list[dict[str, Any]], manifests: list[dict[str, Any]], summary: str, *,
                 bug: str | None = None, minimized: list[dict[str, Any]] | None = None,
                 site: Path | None = None) -> Path:
    """Write DIR/index.html and DIR/report.json atomically; returns DIR. ``site``: the auditor's site's index.html,
    linked from the page (relative to DIR, so the two folders can move together)."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or (any(target.iterdir()) and not (target / REPORT_JSON).is_file())):
        raise ReportError(f"{target} exists and is not a report folder (no {REPORT_JSON}); refusing to replace it")
    doc = {"format": "zabref-conform-report", "version": 1, "summary": summary, "bug": bug,
           "coverage": coverage(results, manifests), "results": results, "minimized": minimized or [],
           "site": os.path.relpath(Path(site).resolve(), target.resolve()) if site else None}
    with staged_folder(target) as tmp:
        (tmp / REPORT_JSON).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (tmp / "index.html").write_text(_html(doc), encoding="utf-8")
    return target
