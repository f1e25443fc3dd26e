"""Seeded implementation bugs (conformance/replay/bugs/*.toml) are caught by replaying action-coverage traces.

For each bug, the action-coverage traces of its model are replayed in file order with the servers running the
patched copy of zabref, until one fails; the test reports which trace caught it first and checks that the
departure happens at the action the bug breaks. The clean implementation passes every one of those traces.

The models' traces (Zab.tla's tiny and ci and ZabSync.tla's ciconfirm, replayed on real servers;
FastLeaderElection.tla's fle_ci, replayed through the election core by conformance/replay/fle_driver.py) come from
`conformance.graph.cache.ensure_traces`:
generated from the spec (`zabref check --dump-dot`, then the Spark pipeline) and cached by spec hash under
.cache/traces, so a fresh clone generates them once and an unchanged spec reuses them. $ZABREF_<MODEL>_TRACES names
another folder instead. Bugs with expect = "regression" are missed by the action traces and caught by the committed
traces/regression/.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance.errors import SeededBugError
from conformance.graph.cache import ensure_traces
from conformance.replay.conform import run_all
from conformance.replay.driver import replay_file
from conformance.replay.seeded import BUGS_DIR, EXPECT, SeededBug, apply_bug, load_bugs, patched_package

REPO = Path(__file__).resolve().parent.parent
BUGS = load_bugs()
#: The models whose action traces the suite replays: Zab.tla's tiny and ci, ZabSync.tla's ciconfirm (a sync's steps),
#: FastLeaderElection.tla's fle_ci.
CONFIGS = ("tiny", "tinylate", "ci", "ciconfirm", "fle_ci")
REGRESSION = sorted((REPO / "traces" / "regression").glob("*.jsonl.gz"))
# The first test to use the traces generates them (TLC dump + Spark pipeline, minutes on a loaded machine).
pytestmark = pytest.mark.timeout(1800)


def test_every_bug_is_well_formed_and_applies_to_the_current_zabref(tmp_path: Path) -> None:
    assert {b.name for b in BUGS} >= {"ack_without_logging", "send_before_fsync", "commit_on_minority", "no_trunc", "newleader_before_sync",
                                      "leader_reuses_epoch", "epoch_ignores_acceptedepoch",
                                      "fle_vote_order_sid_reversed"}
    for bug in BUGS:
        assert bug.config in CONFIGS and bug.expect in EXPECT and bug.description
        with patched_package(bug, tmp_path) as root:
            changed = [r.file for r in bug.replacements]
            for name in changed:
                assert (root / "zabref" / name).read_text() != (REPO / "zabref" / name).read_text()


def test_every_bug_only_the_storage_tests_catch_has_a_case_there() -> None:
    from test_storage_seeded import CASES

    assert {b.name for b in BUGS if b.expect == "storage"} <= set(CASES)


def test_a_folder_that_does_not_exist_is_an_error_not_an_empty_catalogue(tmp_path: Path) -> None:
    with pytest.raises(SeededBugError, match="no such folder"):
        load_bugs(tmp_path / "bugs")


def test_a_bug_whose_text_no_longer_occurs_is_an_error(tmp_path: Path) -> None:
    bug = BUGS[0]
    for rep in bug.replacements:
        (tmp_path / "zabref" / rep.file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "zabref" / rep.file).write_text("nothing to find here\n")
    with pytest.raises(SeededBugError, match="occurs 0 times"):
        apply_bug(bug, tmp_path / "zabref")


@pytest.fixture(scope="session")
def trace_sets() -> dict[str, list[Path]]:
    """Each model's traces, generated side by side when not cached (each generation is mostly one core's work:
    TLC with the dump, then Spark; the cache's lock keeps other callers of the same model waiting, not repeating)."""
    def folder(config: str) -> Path:
        given = os.environ.get(f"ZABREF_{config.upper()}_TRACES")
        return Path(given) if given else ensure_traces(config)

    with ThreadPoolExecutor(len(CONFIGS)) as pool:
        folders = dict(zip(CONFIGS, pool.map(folder, CONFIGS)))
    return {config: sorted(folders[config].glob("*.jsonl.gz")) for config in CONFIGS}


def _traces(trace_sets, config: str) -> list[Path]:
    assert trace_sets[config], f"the {config} trace folder holds no traces"
    return trace_sets[config]


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_the_clean_implementation_passes_every_action_trace(trace_sets, config: str) -> None:
    traces = _traces(trace_sets, config)
    results = run_all(traces, jobs=os.cpu_count() or 2)
    failed = [(r["trace"], r.get("error") or r["failure"]["reason"]) for r in results if not r["passed"]]
    assert len(results) == len(traces) and not failed, failed


def _first_catch(bug: SeededBug, traces: list[Path]):
    with patched_package(bug) as root:
        for path in traces:
            result = replay_file(path, bug=bug.name, bug_root=root)
            assert result.error is None, result.error
            if result.failure is not None:
                return path, result
    return None, None


@pytest.mark.slow
@pytest.mark.parametrize("bug", [b for b in BUGS if b.expect == "caught"], ids=lambda b: b.name)
def test_each_seeded_bug_is_caught(trace_sets, bug: SeededBug) -> None:
    path, result = _first_catch(bug, _traces(trace_sets, bug.config))
    assert path is not None, f"{bug.name}: no {bug.config} action trace departs from the spec"
    f = result.failure
    print(f"{bug.name}: caught first by {path.name} at step {f.step} {f.action}: {', '.join(f.differences)}")
    assert f.action == bug.action, f"{bug.name} departs at {f.action}, expected {bug.action}: {f.reason}"
    assert (f.differences or f.reason) and f.command == f"zabref conform {path} --bug {bug.name}"


@pytest.mark.slow
@pytest.mark.parametrize("bug", [b for b in BUGS if b.expect == "regression"], ids=lambda b: b.name)
def test_bugs_only_the_regression_traces_catch_stay_on_record(trace_sets, bug: SeededBug) -> None:
    """The action traces miss it (when that fails, they got better: set expect = "caught"), the committed catch it."""
    path, _ = _first_catch(bug, _traces(trace_sets, bug.config))
    assert path is None, f"{bug.name} is now caught by {path}: set expect = \"caught\" in {BUGS_DIR / bug.name}.toml"
    path, result = _first_catch(bug, REGRESSION)
    assert path is not None, f"{bug.name}: no committed regression trace departs from the spec"
    print(f"{bug.name}: caught first by {path.name} at step {result.failure.step} {result.failure.action}")
    assert result.failure.action == bug.action, result.failure.reason


@pytest.mark.slow
def test_the_clean_implementation_passes_every_committed_regression_trace() -> None:
    results = run_all(REGRESSION, jobs=os.cpu_count() or 2)
    failed = [(r["trace"], r.get("error") or r["failure"]["reason"]) for r in results if not r["passed"]]
    listed = json.loads((REPO / "traces" / "regression" / "manifest.json").read_text())["traces"]
    assert len(results) == len(REGRESSION) == len(listed) >= 8 and not failed, failed
