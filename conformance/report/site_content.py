"""The pages of the auditor's site, from `conformance.report.site.SiteData`: {site path: HTML}.

Theory of operation: one function per kind of page (index, action, variables, invariant, trace, graph), each
building its HTML from the computed data with the primitives of conformance/report/site_pages.py (`Page.a` for every
link, `esc` for every text). Nothing here reads a file or decides what is true: it only shows what site.py
collected, and says where each figure comes from and the command that regenerates it.
"""

from __future__ import annotations

from conformance.report.auditmap import ActionEntry
from conformance.report.site_pages import Page, code_block, esc, layout, shown_path, src_target
from conformance.tla.values import format_value

__all__ = ["pages"]


def _var(name: str) -> str:
    return f"variables.html#var-{name}"


def _action(name: str) -> str:
    return f"actions/{name}.html"


def _signature(a: ActionEntry) -> str:
    return f"{a.name}({', '.join(a.signature.param_names)})" if a.signature.params else a.name


def _trace_cell(p: Page, data, action: str, kind: str) -> str:
    if kind == "generated" and data.generated is None:
        return '<span class="muted">not cached</span>'
    taking = data.traces_taking(action, kind)
    if not taking:
        return "0"
    return f"{len(taking)} ({p.a(taking[0].page, 'shortest' if kind == 'generated' else 'one')})"


def _problems(data) -> str:
    if data.problems:
        items = "".join(f"<li>{esc(x)}</li>" for x in data.problems)
        return f'<div class="problem"><b>{len(data.problems)} problems: the map is stale.</b><ul>{items}</ul></div>'
    seeds = (f"every seed quote was found in {esc(str(data.seeds_checked))}" if data.seeds_checked else
             "the seed files were not present at build time, so the quotes were not re-checked")
    return ('<div class="ok">The map is complete: every action of Next has a handler of its name in zabref/, every '
            "handler is named after an action of Next, every spec variable has a mapping function or a stated reason, "
            f"the persistence of every variable agrees, every invariant has a mutation; {seeds}.</div>")


def index(data, graph) -> str:
    p = Page("index.html")
    rows, group = [], None
    for a in data.amap.actions:
        if a.group != group:
            group = a.group
            rows.append(f'<tr><th colspan="6">{esc(group)}</th></tr>')
        h = a.handler
        handler = p.a(src_target(h.path, h.line), f"{h.name} ({h.path}:{h.line})") if h else "<b>missing</b>"
        seeds = "<br>".join(esc(w) for w in dict.fromkeys(f"{s['seed']}: {s['where']}"
                                                           for s in data.seed_steps.get(a.name, [])))
        rows.append(f"<tr><td>{p.a(_action(a.name), _signature(a))}</td><td><code>{handler}</code></td>"
                    f"<td>{seeds}</td><td>{', '.join(p.a(_var(v), v) for v in a.primes)}</td>"
                    f"<td>{_trace_cell(p, data, a.name, 'generated')}</td>"
                    f"<td>{_trace_cell(p, data, a.name, 'committed')}</td></tr>")
    impl_only = ", ".join(p.a(src_target(c.path, c.line), c.name) for c in data.amap.implementation_only)
    inv_rows = "".join(
        f"<tr><td>{p.a(f'invariants/{i.name}.html', i.name)}</td><td>{esc(i.english)}</td>"
        f"<td>{esc(i.mutation.description) if i.mutation else '<b>none</b>'}</td>"
        f"<td>{esc(i.mutation.config) if i.mutation else ''}</td><td>{i.counterexample_states or '?'}</td></tr>"
        for i in data.invariants)
    gen = ("<p>No generated traces are cached for this spec (" + esc(str(data.generated_dir)) + "): run "
           f"<code>zabref chain --config {esc(data.config)}</code>, then build again.</p>") if data.generated is None \
        else (f"<p>{len(data.generated)} generated traces of <code>spec/MC_{esc(data.config)}</code> for this exact "
              f"spec, from <code>{esc(shown(data, data.generated_dir))}</code> (action coverage).</p>")
    committed = "".join(
        f"<tr><td>{p.a(t.page, t.path.name)}</td><td>{esc(t.trace.header.config)}</td><td>{esc(t.why)}</td>"
        f"<td>{esc(t.seed)}</td><td>{len(t.trace.steps) - 1}</td></tr>" for t in data.committed)
    committed = (f"<table><tr><th>file</th><th>config</th><th>why</th><th>seed</th><th>steps</th></tr>{committed}"
                 "</table>") if committed else ""
    graph_line = p.a("graph.html", f"the state graph of spec/MC_{data.graph_config}") + (
        f": {graph['states']:,} states, {graph['edges']:,} edges." if graph else " (not drawn in this build).")
    body = f"""
<p>This site puts <code>spec/Zab.tla</code> beside its implementation in <code>zabref/</code>, one protocol step at a
time, with the evidence that they agree. Every table is computed from the checkout when the site is built
(<code>zabref docs</code>); nothing is written by hand except the seed quotes, which are checked against the seeds.
How to read it and how to check each claim yourself: <code>docs/auditing.md</code>.</p>
{_problems(data)}
<h2 id="actions">Actions of Next</h2>
<p>One row per action of the spec's <code>Next</code>, in its order and groups. The handler is the method of
<code>ZabCore</code> named after the action (snake case), found by name in zabref/. "Changes" are the variables the
action's definition primes, directly or through the operators it calls. Traces: how many traces take the action at
least once, with a link to one.</p>
<table><tr><th>action</th><th>handler</th><th>seed step</th><th>changes</th><th>generated traces</th>
<th>committed traces</th></tr>{''.join(rows)}</table>
<p>Implementation only (observers, which the spec does not model): {impl_only or 'none'}.</p>
<h2 id="variables">Variables</h2>
<p>{p.a('variables.html', 'Every spec variable')}: its implementation field, where it lives (disk or memory) on both
sides, and the function of <code>conformance/replay/mapping.py</code> that turns the implementation's state into it.</p>
<h2 id="invariants">Invariants</h2>
<p>Each invariant the models check, its English statement (the comment above it in the spec), the mutation of the
spec that violates it, and the length of TLC's counterexample to the mutated spec.</p>
<table><tr><th>invariant</th><th>statement</th><th>mutation that violates it</th><th>model</th>
<th>counterexample (states)</th></tr>{inv_rows}</table>
<h2 id="traces">Traces</h2>
{gen}
<p>{esc(data.committed_note)}</p>{committed}
<h2 id="graph">State graph</h2><p>{graph_line}</p>
"""
    return layout(p, "zabref: the spec beside the code", body)


def shown(data, path) -> str:
    return shown_path(path, data.root)


def action_page(data, k: int) -> str:
    a = data.amap.actions[k]
    p = Page(_action(a.name))
    acts = data.amap.actions
    around = " | ".join(
        x for x in (p.a(_action(acts[k - 1].name), "previous: " + acts[k - 1].name) if k > 0 else "",
                    p.a(_action(acts[k + 1].name), "next: " + acts[k + 1].name) if k + 1 < len(acts) else "") if x)
    quotes = "".join(
        f"<p><b>Seed {esc(s['seed'])}</b> ({esc(s['file'])}), {esc(s['where'])}:</p><blockquote>"
        f"{'<br>'.join(esc(line) for line in s['quote'].splitlines())}</blockquote>"
        for s in data.seed_steps.get(a.name, [])) or '<p class="problem">No seed step recorded.</p>'
    d = a.definition
    spec_text = (d.comment + "\n" if d.comment else "") + d.text
    h = a.handler
    if h:
        right = (f"<h3>{p.a(src_target(h.path, h.line), f'{h.path}:{h.line}')}: <code>{esc(h.owner)}.{esc(h.name)}"
                 f"</code></h3>" + (f"<p>{esc(a.handler_note)}</p>" if a.handler_note else "")
                 + code_block(h.source, h.line))
    else:
        right = '<p class="problem">No handler found in zabref/.</p>'
    by = {v.name: v for v in data.amap.variables}
    var_rows = ""
    for name in a.primes:
        v = by[name]
        fn = (p.a(src_target(v.mapping.path, v.mapping.line), f"mapping.{v.mapping.name}()") if v.mapping
              else f"not mapped: {esc(v.not_mapped or '')}")
        var_rows += (f"<tr><td>{p.a(_var(name), name)}</td><td><code>{esc(v.field or '-')}</code></td>"
                     f"<td>{fn}</td><td>{'disk' if v.spec_persistent else 'volatile'}</td></tr>")

    def trace_list(kind: str) -> str:
        if kind == "generated" and data.generated is None:
            return "no generated traces cached for this spec"
        taking = data.traces_taking(a.name, kind)
        if not taking:
            return "none"
        first = taking[0]
        more = "" if kind == "generated" else ": " + ", ".join(p.a(t.page, t.path.name) for t in taking)
        return (f"{len(taking)}; the shortest: {p.a(first.page, first.path.name)} ({len(first.trace.steps) - 1} steps)"
                + more)
    body = f"""<p class="muted">{esc(a.group)} &middot; {around}</p>
<h2>Seed steps it implements</h2>{quotes}
<h2>Spec and implementation</h2>
<div class="side"><div><h3>{p.a(src_target('spec/Zab.tla', d.line), f'spec/Zab.tla:{d.line}')}</h3>
{code_block(spec_text, d.comment_line)}</div><div>{right}</div></div>
{_uses_block(p, data, a)}
<h2>Variables it may change, and how the mapping relates them</h2>
<table><tr><th>spec variable</th><th>implementation field</th><th>conformance mapping</th><th>persistence</th></tr>
{var_rows}</table>
<h2>Traces that take it</h2>
<p>Generated (<code>spec/MC_{esc(data.config)}</code>): {trace_list('generated')}.</p>
<p>Committed regression traces: {trace_list('committed')}.</p>
"""
    return layout(p, _signature(a), body)


def _uses_block(p: Page, data, a: ActionEntry) -> str:
    """The spec operators the action calls, beside the helpers its handler calls (folded)."""
    defs = data.amap.definitions
    left = "".join(f"<p>{p.a(src_target('spec/Zab.tla', defs[u].line), f'{u} (Zab.tla:{defs[u].line})')}</p>"
                   + code_block(defs[u].text, defs[u].line) for u in a.spec_uses) or "<p>none</p>"
    right = "".join(f"<p>{p.a(src_target(h.path, h.line), f'{h.name} ({h.path}:{h.line})')}</p>"
                    + code_block(h.source, h.line) for h in a.helpers) or "<p>none</p>"
    names = ", ".join(a.spec_uses) or "none"
    helpers = ", ".join(h.name for h in a.helpers) or "none"
    return (f"<details><summary>The operators the spec calls ({esc(names)}) and the helpers the handler calls "
            f'({esc(helpers)})</summary><div class="side"><div>{left}</div><div>{right}</div></div></details>')


def variables_page(data) -> str:
    p = Page("variables.html")
    changers: dict[str, list[str]] = {}
    for a in data.amap.actions:
        for v in a.primes:
            changers.setdefault(v, []).append(a.name)
    rows = []
    for v in data.amap.variables:
        impl = (f"<code>{esc(v.field)}</code> ({p.a(src_target(v.field_code.split(':')[0], int(v.field_code.split(':')[1])), v.field_code)})"
                f"<br>{esc(v.field_comment)}") if v.field and v.field_code else "no field of the core"
        persist = ("disk" if v.spec_persistent else "volatile") + " / " + (
            "-" if v.impl_persistent is None else "disk (Persistent)" if v.impl_persistent else "volatile")
        if v.mapping:
            mapping = (p.a(src_target(v.mapping.path, v.mapping.line), f"mapping.{v.mapping.name}()")
                       + code_block(v.mapping.source, v.mapping.line))
        else:
            mapping = f"<b>not mapped</b>: {esc(v.not_mapped or '')}"
        rows.append(f'<tr id="var-{esc(v.name)}"><td><b>{esc(v.name)}</b><br>'
                    f'{p.a(src_target("spec/Zab.tla", v.line), f"Zab.tla:{v.line}")}</td><td>{esc(v.group)}<br>'
                    f"{esc(v.comment)}</td><td>{impl}</td><td>{esc(persist)}</td><td>{mapping}</td>"
                    f"<td>{', '.join(p.a(_action(x), x) for x in changers.get(v.name, []))}</td></tr>")
    body = f"""<p>Every variable of the spec's VARIABLES block, in order. "Persistence" is spec / implementation: the
spec's heading says which survive a crash; the implementation keeps on disk exactly the fields of
<code>zabref.core.types.Persistent</code>. The implementation field is <code>SPEC_VARIABLES</code>' entry
(zabref/core/state.py) and the line of <code>CoreState.__init__</code> that sets it. The mapping is the function of
conformance/replay/mapping.py that the replay uses to turn the servers' state into the spec variable, or the reason there
is none (<code>NOT_MAPPED</code>).</p>
<table><tr><th>spec variable</th><th>spec comment</th><th>implementation</th><th>persistence</th>
<th>conformance mapping</th><th>changed by</th></tr>{''.join(rows)}</table>"""
    return layout(p, "Spec variables", body)


def invariant_page(data, inv) -> str:
    p = Page(f"invariants/{inv.name}.html")
    d = inv.definition
    uses = "".join(f"<p>{p.a(src_target('spec/Zab.tla', u.line), f'{u.name} (Zab.tla:{u.line})')}</p>"
                   + code_block(u.text, u.line) for u in inv.uses) or "<p>none</p>"
    m = inv.mutation
    if m:
        reps = "".join(f'<p>In <code>{esc(r.file)}</code>:</p><div class="side"><div><b>the spec</b>'
                       f"{code_block(r.find)}</div><div><b>mutated</b>{code_block(r.with_)}</div></div>"
                       for r in m.replacements)
        mutation = f"""<p>{esc(m.description)}</p><p>File: <code>{esc(shown(data, m.path))}</code>, model
<code>spec/MC_{esc(m.config)}</code>. TLC's counterexample to the mutated spec: <b>{inv.counterexample_states or '?'}
states</b> (recorded in the file as <code>counterexample_states</code>; re-measure with
<code>zabref mutations --workers 1 --only {esc(m.name)}</code>).</p>{reps}"""
    else:
        mutation = '<p class="problem">No mutation violates this invariant: nothing shows it can fail.</p>'
    body = f"""<h2>Statement</h2><blockquote>{esc(inv.english) or '(no comment above the formula)'}</blockquote>
<h2>Formula ({p.a(src_target('spec/Zab.tla', d.line), f'spec/Zab.tla:{d.line}')})</h2>{code_block(d.text, d.line)}
<h2>Operators it uses</h2>{uses}
<h2>The mutation that violates it</h2>{mutation}
<p>Checked on every model: <code>zabref check --config tiny</code>, <code>zabref check --config ci</code>.</p>"""
    return layout(p, f"Invariant {inv.name}", body)


def trace_page(data, t) -> str:
    p = Page(t.page)
    svg = t.page.removesuffix(".html") + ".svg"
    h = t.trace.header
    zab_actions = {a.name for a in data.amap.actions}  # an FLE trace's actions have no page here (spec/FLE.md)

    def action_cell(step) -> str:
        if not step.index:
            return "Init"
        return p.a(_action(step.action), step.action) if step.action in zab_actions else esc(step.action)

    rows = "".join(
        f"<tr><td>{s.index}</td><td>{action_cell(s)}</td>"
        f"<td><code>{esc(', '.join(f'{k}={format_value(v)}' for k, v in sorted(s.params.items())))}</code></td></tr>"
        for s in t.trace.steps)
    why = f"<p><b>Why it exists:</b> {esc(t.why)} (seed: {esc(t.seed)})</p>" if t.kind == "committed" else ""
    body = f"""<p>{esc(t.kind)} trace <code>{esc(t.shown)}</code>: model <code>{esc(h.config)}</code>
{esc(str(h.constants))}, criterion {esc(h.criterion)}, {len(t.trace.steps) - 1} steps, {esc(h.tlc_version)}.</p>{why}
<p>Replay it on real servers: <code>zabref conform {esc(t.shown)}</code>; draw it: <code>zabref render {esc(t.shown)}
</code>.</p>
<table><tr><th>step</th><th>action</th><th>parameters</th></tr>{rows}</table>
<h2>Path</h2><p>Each box lists what the step changed ({p.a(svg, 'open the SVG')}: hover a box for the whole state).</p>
<img class="graph" src="{p.href(svg)}" alt="the path of {esc(t.path.name)}">"""
    return layout(p, t.path.name, body)


def graph_page(data, graph) -> str:
    p = Page("graph.html")
    cfg = data.graph_config
    if graph is None:
        return layout(p, f"State graph of spec/MC_{cfg}", "<p>Not drawn in this build (<code>--no-graph</code>).</p>")
    legend = "".join(
        f'<tr><td><span class="swatch" style="background:{esc(c)}"></span></td><td>'
        f"{p.a(_action(a), a) if a in {x.name for x in data.amap.actions} else esc(a)}</td>"
        f"<td>{graph['counts'].get(a, 0):,}</td></tr>" for a, c in graph["colours"].items())
    body = f"""<p>The whole state graph TLC explores for <code>spec/MC_{esc(cfg)}</code>: {graph['states']:,} states
({graph['initial']} initial), {graph['edges']:,} edges, from the dump <code>{esc(graph['dot'])}</code>. Each edge is
coloured by its action: one hue per group of Next (election, discovery, synchronization, broadcast, failures). An
action with 0 edges is never enabled in this model (spec/README.md says which, and why).</p>
<table><tr><th></th><th>action</th><th>edges</th></tr>{legend}</table>
<h2>Every state</h2><p>All states as dots (the initial state in red), laid out by graphviz <code>sfdp</code>;
{p.a('graph/overview.svg', 'open the SVG')}. It shows where each phase's actions sit, not single states.</p>
<img class="graph" src="{p.href('graph/overview.svg')}" alt="every state of MC_{esc(cfg)}">
<h2>The first states, in full</h2><p>A bounded subset: the first states in breadth-first order from the initial state,
each box listing the variables that changed from its parent, each edge the action and its parameters
({p.a('graph/detail.svg', 'open the SVG')}; hover a box for the whole state).</p>
<img class="graph" src="{p.href('graph/detail.svg')}" alt="the first states of MC_{esc(cfg)}">
<p>Regenerate: <code>zabref check --config {esc(cfg)} --dump-dot out/{esc(cfg)}.dot</code>, then
<code>zabref docs --dot out/{esc(cfg)}.dot</code> (or <code>zabref render --graph out/{esc(cfg)}.dot --max-states 60
</code> for the detail without colours).</p>"""
    return layout(p, f"State graph of spec/MC_{cfg}", body)


def pages(data, graph) -> dict[str, str]:
    out = {"index.html": index(data, graph), "variables.html": variables_page(data),
           "graph.html": graph_page(data, graph)}
    for k, a in enumerate(data.amap.actions):
        out[_action(a.name)] = action_page(data, k)
    for inv in data.invariants:
        out[f"invariants/{inv.name}.html"] = invariant_page(data, inv)
    for t in data.linked_traces():
        out[t.page] = trace_page(data, t)
    return out
