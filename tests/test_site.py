"""The auditor's site (`zabref docs`, conformance/site*.py): built into tmp_path, every link resolves, every page
the issue asks for exists, the text is escaped, the seed quotes are verbatim, and the recorded counterexample
lengths match TLC.

The fast tests draw a small fixture graph and use traces made here (no TLC); the slow ones dump the real `tiny`
graph and re-run mutations.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from click.testing import CliRunner

from conformance.graph.traces import Step, Trace, TraceHeader, dump_trace
from conformance.report.site import build_site, collect, docs_command, load_seed_steps, quote_found, seeds_dir
from conformance.report.specread import read_definitions
from conformance.tla.labels import read_next
from conformance.tla.mutations import load_mutations, run_mutation

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DOT = REPO / "tests" / "fixtures" / "dot" / "channels.dot"
ACTIONS = [s.name for s in read_next(REPO / "spec" / "Zab.tla")]


# ---------------------------------------------------------------------------------------------- helpers

class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value is not None:
                self.links.append(value)
            if key == "id" and value:
                self.ids.add(value)


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def broken_links(site: Path) -> list[str]:
    """Every href/src of every page that does not resolve to a file of the site (and, with #, to an id in it)."""
    parsed = {page: _parse(page) for page in site.rglob("*.html")}
    broken = []
    for page, links in parsed.items():
        for link in links.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                broken.append(f"{page.relative_to(site)}: external link {link}")
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.is_file() or site.resolve() not in target.parents:
                broken.append(f"{page.relative_to(site)}: {link} (no such file)")
            elif parts.fragment and parts.fragment not in parsed.get(target, _Links()).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no anchor)")
    return broken


def make_trace(path: Path, actions: list[tuple[str, dict]], config: str = "ci") -> None:
    header = TraceHeader("0" * 64, config, {"N": 3}, "TLC2 Version 2.15", "action",
                         (f"{actions[-1][0]}__1",))
    steps = [Step(0, "Init", {}, None, 1, {"x": 0})]
    for k, (action, params) in enumerate(actions, 1):
        steps.append(Step(k, action, params, f"{action}__1", k + 1, {"x": k}))
    dump_trace(path, Trace(header, tuple(steps)))


@pytest.fixture(scope="module")
def trace_dirs(tmp_path_factory):
    import json

    gen = tmp_path_factory.mktemp("generated")
    make_trace(gen / "00000-a.jsonl.gz", [("ElectLeader", {"i": 2, "Q": {"$set": [1, 2]}}),
                                          ("LeaderProcessFOLLOWERINFO", {"i": 2, "j": 1})])
    make_trace(gen / "00001-b.jsonl.gz", [("ElectLeader", {"i": 1, "Q": {"$set": [1, 2]}}), ("Crash", {"i": 1})])
    (gen / "manifest.json").write_text(json.dumps({"traces": [{"file": "00000-a.jsonl.gz"},
                                                              {"file": "00001-b.jsonl.gz"}]}))
    committed = tmp_path_factory.mktemp("committed")
    make_trace(committed / "fig3.jsonl.gz", [("ElectLeader", {"i": 2, "Q": {"$set": [1, 2]}}), ("Crash", {"i": 2})])
    (committed / "manifest.json").write_text(json.dumps({"traces": [
        {"file": "fig3.jsonl.gz", "config": "ci", "why": "Fig. 3 <script>alert(1)</script> & co",
         "seed": "004 Fig. 3"}]}))
    return gen, committed


@pytest.fixture(scope="module")
def site(tmp_path_factory, trace_dirs):
    gen, committed = trace_dirs
    out = tmp_path_factory.mktemp("site") / "site"
    data = collect(REPO, traces_dir=gen, committed_dir=committed, echo=lambda _: None)
    build_site(out, data, dot=FIXTURE_DOT, echo=lambda _: None)
    return out, data


# ---------------------------------------------------------------------------------------------- the site

def test_every_link_and_image_resolves(site):
    out, _ = site
    assert broken_links(out) == []


def test_every_page_the_issue_asks_for_exists(site):
    out, data = site
    assert data.problems == []
    for action in ACTIONS:
        assert (out / "actions" / f"{action}.html").is_file(), action
    for inv in ("TypeOK", "Agreement", "CommittedNeverLost", "SkippedNeverDelivered"):
        assert (out / "invariants" / f"{inv}.html").is_file()
    for page in ("index.html", "variables.html", "graph.html", "graph/overview.svg", "graph/detail.svg",
                 "src/spec/Zab.tla.html", "style.css"):
        assert (out / page).is_file(), page
    index = (out / "index.html").read_text()
    for action in ACTIONS:
        assert f'href="actions/{action}.html"' in index


def test_an_action_page_shows_the_spec_the_seed_and_the_handler(site):
    out, _ = site
    page = (out / "actions" / "FollowerProcessDIFF.html").read_text()
    assert "FollowerProcessDIFF(i, j) ==" in page
    assert "def follower_process_diff(self, j: int, packet: QuorumPacket)" in page
    assert "zabref/core/follower.py:" in page and 'href="../src/zabref/core/follower.py.html#L' in page
    assert "DIFF if the leader is sending transactions that the follower is missing." in page
    assert "mapping.stagedHistory()" in page and "mapping.msgs()" in page
    crash = (out / "actions" / "Crash.html").read_text()
    assert "process restart" in crash and "def __init__(" in crash


def test_an_action_page_folds_the_operators_and_helpers_it_uses(site):
    out, _ = site
    page = (out / "actions" / "FollowerProcessNEWLEADER.html").read_text()
    details = page.split("<details>", 1)[1].split("</details>", 1)[0]
    assert "SyncingFrom(i, j) ==" in details and "def _history_ops(" in details
    assert 'href="../src/zabref/core/follower.py.html#L' in details


def test_trace_counts_and_links(site):
    out, data = site
    assert [t.path.name for t in data.traces_taking("ElectLeader", "generated")] == ["00000-a.jsonl.gz",
                                                                                      "00001-b.jsonl.gz"]
    page = (out / "actions" / "Crash.html").read_text()
    assert "Generated (<code>spec/MC_ci</code>): 1; the shortest:" in page
    assert 'href="../traces/reg-fig3.html"' in page
    assert "Committed regression traces: 1;" in page
    assert (out / "traces" / "gen-00000-a.svg").is_file() and (out / "traces" / "reg-fig3.svg").is_file()
    assert "Committed regression traces: none." in (out / "actions" / "FollowerProcessDIFF.html").read_text()


def test_text_from_files_is_escaped(site):
    out, _ = site
    index = (out / "index.html").read_text()
    assert "<script>" not in index and "Fig. 3 &lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in index
    spec = (out / "src" / "spec" / "Zab.tla.html").read_text()
    pre = spec.split('<pre class="src">', 1)[1].split("</pre>", 1)[0]
    text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r'<span class="ln">\d+</span>', "", pre)))
    assert text == (REPO / "spec" / "Zab.tla").read_text().rstrip("\n")


def test_the_link_checker_sees_a_missing_page_and_a_missing_anchor(site, tmp_path):
    out, _ = site
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "actions" / "Crash.html").unlink()
    (copy / "extra.html").write_text('<a href="variables.html#var-nosuch">x</a><img src="graph/none.svg">')
    broken = broken_links(copy)
    assert "index.html: actions/Crash.html (no such file)" in broken
    assert "extra.html: variables.html#var-nosuch (no anchor)" in broken
    assert "extra.html: graph/none.svg (no such file)" in broken


def test_variables_page_has_every_variable_with_field_and_persistence(site):
    out, data = site
    page = (out / "variables.html").read_text()
    for v in data.amap.variables:
        assert f'id="var-{v.name}"' in page
    assert "disk / disk (Persistent)" in page and "volatile / volatile" in page
    assert "checking only" in page  # proposed/committed: NOT_MAPPED's reason


def test_invariant_page_has_statement_formula_mutation_and_length(site):
    out, data = site
    page = (out / "invariants" / "CommittedNeverLost.html").read_text()
    assert "a delivered message is never forgotten" in page
    assert "CommittedNeverLost ==" in page
    assert "ACK before fsync" in page
    recorded = tomllib.loads((REPO / "spec" / "mutations" / "CommittedNeverLost.toml").read_text())
    assert f"{recorded['counterexample_states']}\nstates" in page or \
        f"{recorded['counterexample_states']} states" in page


def test_without_a_committed_manifest_the_site_says_so(tmp_path, trace_dirs):
    gen, _ = trace_dirs
    data = collect(REPO, traces_dir=gen, committed_dir=tmp_path / "none", echo=lambda _: None)
    assert data.committed == [] and data.problems == []
    build_site(tmp_path / "site", data, graph=False, echo=lambda _: None)
    assert "manifest.json does not exist: there are no committed regression traces" in \
        (tmp_path / "site" / "index.html").read_text()
    assert broken_links(tmp_path / "site") == []


def test_a_stale_map_is_on_the_front_page(tmp_path, trace_dirs):
    root = tmp_path / "tree"
    for folder in ("spec", "zabref"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "states"))
    (root / "conformance" / "replay").mkdir(parents=True)
    shutil.copy(REPO / "conformance" / "replay" / "mapping.py", root / "conformance" / "replay" / "mapping.py")
    path = root / "zabref" / "core" / "follower.py"
    path.write_text(path.read_text().replace("def follower_process_snap(", "def follower_take_snap("))
    data = collect(root, traces_dir=trace_dirs[0], committed_dir=tmp_path / "none", echo=lambda _: None)
    assert any("FollowerProcessSNAP has no handler" in p for p in data.problems)
    build_site(tmp_path / "site", data, graph=False, echo=lambda _: None)
    assert "the map is stale" in (tmp_path / "site" / "index.html").read_text()
    assert "No handler found" in (tmp_path / "site" / "actions" / "FollowerProcessSNAP.html").read_text()


def test_docs_command_builds_and_prints_a_summary(tmp_path, trace_dirs):
    result = CliRunner().invoke(docs_command, ["--out", str(tmp_path / "site"), "--no-graph",
                                               "--traces", str(trace_dirs[0])])
    assert result.exit_code == 0, result.output
    assert "result=ok" in result.output and f"actions={len(ACTIONS)}" in result.output
    assert (tmp_path / "site" / "index.html").is_file() and broken_links(tmp_path / "site") == []


# ---------------------------------------------------------------------------------------------- seed quotes

def test_every_action_of_next_has_a_seed_step():
    steps = load_seed_steps()
    assert {s["action"] for s in steps} == set(ACTIONS)


@pytest.mark.skipif(seeds_dir(REPO) is None, reason="shared/seeds is not beside the repository")
def test_every_seed_quote_is_verbatim_in_its_seed():
    seeds = seeds_dir(REPO)
    missing = [f"{s['action']}: {s['quote'][:60]}" for s in load_seed_steps()
               if not quote_found(s["quote"], (seeds / s["file"]).read_text(encoding="utf-8"))]
    assert missing == []


def test_quote_matching_ignores_line_breaks_only():
    assert quote_found("a b\nc", "x a  b c y")
    assert not quote_found("a b c", "a b d")


# ---------------------------------------------------------------------------------------------- slow: TLC

@pytest.mark.deep
@pytest.mark.slow
def test_the_site_of_this_checkout_builds_whole_with_no_broken_link(tmp_path, tiny_dot):
    """What `zabref docs` builds from this checkout: the ci traces of this spec, traces/regression/, the tiny graph."""
    from conformance.graph.cache import ensure_traces

    generated = ensure_traces("ci")
    result = CliRunner().invoke(docs_command, ["--out", str(tmp_path / "site"), "--traces", str(generated),
                                               "--dot", str(tiny_dot)])
    assert result.exit_code == 0 and "problems=0" in result.output and "result=ok" in result.output, result.output
    site = tmp_path / "site"
    assert broken_links(site) == []
    committed = json.loads((REPO / "traces" / "regression" / "manifest.json").read_text())["traces"]
    assert f"committed_traces={len(committed)}" in result.output
    for entry in committed:  # each committed regression trace has its page and its path picture
        stem = entry["file"].removesuffix(".jsonl.gz")
        assert (site / "traces" / f"reg-{stem}.html").is_file() and (site / "traces" / f"reg-{stem}.svg").is_file()
    actions = [a.name for a in read_next(REPO / "spec" / "Zab.tla")]
    assert len(actions) == 21 and all((site / "actions" / f"{a}.html").is_file() for a in actions)
    page = (site / "graph.html").read_text()  # the real tiny graph, drawn and linked
    assert "14,600 states" in page and 'href="actions/FollowerProcessDIFF.html"' in page
    assert b"FollowerProcessDIFF" in (site / "graph" / "overview.svg").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["CommittedNeverLost", "Integrity", "TypeOK"])
def test_recorded_counterexample_length_matches_tlc(name, tla):
    mutation = next(m for m in load_mutations(REPO / "spec" / "mutations") if m.name == name)
    recorded = tomllib.loads(mutation.path.read_text())["counterexample_states"]
    result = run_mutation(mutation, REPO / "spec", workers=1, tools=tla)
    assert len(result.trace) == recorded


def test_definitions_used_by_the_site_exist():
    defs = read_definitions(REPO / "spec" / "Zab.tla")
    assert {"Next", "GoLooking", "Deliver", "CommittedNeverLost"} <= set(defs)


def test_the_conformance_report_links_to_the_site_relative_to_itself(tmp_path):
    from conformance.report.results import write_report

    (tmp_path / "out" / "site").mkdir(parents=True)
    write_report(tmp_path / "out" / "report", [], [], "conform: traces=0", site=tmp_path / "out" / "site" / "index.html")
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert 'href="../site/index.html"' in page and "auditor" in page
    write_report(tmp_path / "out" / "report", [], [], "conform: traces=0")
    assert "site/index.html" not in (tmp_path / "out" / "report" / "index.html").read_text()
