"""The trace cache (`conformance.graph.cache`, used by `zabref chain`): cached by spec hash, reused without TLC."""

from __future__ import annotations

import shutil
from pathlib import Path

from conformance.graph import cache
from conformance.graph.cache import committed_trace_dirs, ensure_traces, spec_hash

SPEC = Path(__file__).resolve().parent.parent / "spec"


def test_spec_hash_follows_the_modules_and_the_model(tmp_path):
    spec = tmp_path / "spec"
    shutil.copytree(SPEC, spec, ignore=shutil.ignore_patterns("mutations"))
    before = spec_hash(spec, "ci")
    assert before == spec_hash(spec, "ci") and before != spec_hash(spec, "tiny")
    (spec / "README.md").write_text("prose does not change the traces\n")
    assert spec_hash(spec, "ci") == before
    zab = spec / "Zab.tla"
    zab.write_text(zab.read_text() + "\n\\* a comment is still a change\n")
    assert spec_hash(spec, "ci") != before


def test_a_cached_folder_is_reused_and_nothing_runs(tmp_path, monkeypatch):
    cached = tmp_path / "cache" / f"ci-{spec_hash(SPEC, 'ci')}"
    cached.mkdir(parents=True)
    (cached / "manifest.json").write_text("{}")
    monkeypatch.setattr(cache, "hop", lambda args: (_ for _ in ()).throw(AssertionError(f"ran {args}")))
    assert ensure_traces("ci", SPEC, tmp_path / "cache") == cached


def test_a_failed_generation_leaves_no_cache(tmp_path, monkeypatch):
    def fail(args):
        raise cache.click.ClickException("TLC failed")

    monkeypatch.setattr(cache, "hop", fail)
    folder = tmp_path / "cache"
    try:
        ensure_traces("ci", SPEC, folder)
    except cache.click.ClickException:
        pass
    else:
        raise AssertionError("expected the hop's failure")
    assert [p.name for p in folder.iterdir()] == []


def test_committed_trace_dirs_are_the_folders_with_a_manifest(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "manifest.json").write_text("{}")
    (tmp_path / "b").mkdir()
    assert committed_trace_dirs(tmp_path) == [tmp_path / "a"]
