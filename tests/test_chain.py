"""The trace cache (`conformance.graph.cache`, used by `zabref chain`): cached by spec hash, reused without TLC."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from conformance.graph import cache
from conformance.graph.cache import committed_trace_dirs, ensure_traces, model_modules, spec_hash

SPEC = Path(__file__).resolve().parent.parent / "spec"


def test_spec_hash_follows_the_modules_and_the_model(tmp_path):
    spec = tmp_path / "spec"
    shutil.copytree(SPEC, spec, ignore=shutil.ignore_patterns("mutations"))
    before = spec_hash(spec, "ci")
    assert before == spec_hash(spec, "ci") and before != spec_hash(spec, "tiny")
    (spec / "README.md").write_text("prose does not change the traces\n")
    assert spec_hash(spec, "ci") == before
    # another model, or a module ci is not made of, leaves ci's traces cached
    (spec / "MC_other.tla").write_text("---- MODULE MC_other ----\nEXTENDS Zab\n====\n")
    (spec / "MC_other.cfg").write_text("CONSTANTS N = 4\n")
    fle = spec / "FastLeaderElection.tla"
    fle.write_text(fle.read_text() + "\n\\* the election's spec is not ci's\n")
    assert spec_hash(spec, "ci") == before and model_modules(spec, "MC_ci") == ["MC_ci", "Zab"]
    assert model_modules(spec, "MC_fle_ci") == ["FastLeaderElection", "MC_fle_ci"]
    zab = spec / "Zab.tla"
    zab.write_text(zab.read_text() + "\n\\* a comment is still a change\n")
    edited = spec_hash(spec, "ci")
    assert edited != before
    (spec / "MC_ci.cfg").write_text((spec / "MC_ci.cfg").read_text() + "\n")
    assert spec_hash(spec, "ci") != edited  # and so is a change to the model's cfg


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
    assert [p.name for p in folder.iterdir()] == [f"ci-{spec_hash(SPEC, 'ci')}.lock"]  # the lock, nothing cached


def test_committed_trace_dirs_are_the_folders_with_a_manifest(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "manifest.json").write_text("{}")
    (tmp_path / "b").mkdir()
    assert committed_trace_dirs(tmp_path) == [tmp_path / "a"]


def _fake_hops(calls: list[str]):
    """A stand-in for a generation's one hop (`zabref traces --stream`, which runs `zabref check` itself): writes what
    it would, slowly."""
    def hop(args):
        out = Path(args[args.index("--out") + 1])
        calls.append(" ".join(a for a in args[:3] if a.startswith("-") or a == "traces"))
        time.sleep(0.3)  # long enough for a second caller to arrive while this one generates
        out.mkdir(parents=True)
        (out / "manifest.json").write_text(json.dumps({"graph": args[args.index("--parquet") + 1]}))
        Path(args[args.index("--parquet") + 1]).mkdir()
    return hop


def test_callers_side_by_side_generate_once_and_the_manifest_names_the_cached_graph(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(cache, "hop", _fake_hops(calls))
    folders: list[Path] = []
    threads = [threading.Thread(target=lambda: folders.append(ensure_traces("ci", SPEC, tmp_path / "cache")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    target = tmp_path / "cache" / f"ci-{spec_hash(SPEC, 'ci')}"
    assert folders == [target] * 3 and calls == ["traces --stream --discard-dump"]  # the others waited, then reused
    manifest = json.loads((target / "manifest.json").read_text())
    assert manifest["graph"] == str(target / "graph.parquet") and (target / "graph.parquet").is_dir()


def _stored_once(tmp_path: Path, monkeypatch) -> tuple[list[str], Path, Path]:
    """A clone's repository cache (tmp_path/clone) backed by a machine's store (tmp_path/machine), the ci traces
    generated into it once by the stand-in hop: the hop's calls, the clone's folder and the stored one."""
    calls: list[str] = []
    monkeypatch.setattr(cache, "hop", _fake_hops(calls))
    monkeypatch.setattr(cache, "REPO_CACHE", tmp_path / "clone" / ".cache" / "traces")
    monkeypatch.setenv("ZABREF_CACHE", str(tmp_path / "machine"))
    first = ensure_traces("ci", SPEC, cache.REPO_CACHE)
    return calls, first, tmp_path / "machine" / "traces" / f"{first.name}-{cache.generator_hash()}"


def test_the_repositorys_cache_is_backed_by_the_machines_store_and_a_fresh_clone_copies_it(tmp_path, monkeypatch):
    """Generated once into the repository's cache and stored on the machine; a fresh clone (an empty repository
    cache) copies the stored folder without a hop, its manifest naming the copy's graph; a change to the generator's
    source is another key, and a regeneration."""
    calls, first, stored = _stored_once(tmp_path, monkeypatch)
    assert calls == ["traces --stream --discard-dump"] and (stored / "manifest.json").is_file()
    assert json.loads((stored / "manifest.json").read_text())["graph"] == str(stored / "graph.parquet")
    shutil.rmtree(tmp_path / "clone")  # a fresh clone
    again = ensure_traces("ci", SPEC, cache.REPO_CACHE)
    assert again == first and calls == ["traces --stream --discard-dump"]  # copied, not generated
    assert json.loads((again / "manifest.json").read_text())["graph"] == str(again / "graph.parquet")
    assert (again / "graph.parquet").is_dir()
    assert not [p for p in again.parent.iterdir() if p.name.endswith(".partial")]
    ensure_traces("ci", SPEC, tmp_path / "elsewhere")  # a cache a caller names is not backed by the store
    assert len(calls) == 2
    repo = tmp_path / "repo"  # the generator's source changed: another key
    shutil.copytree(cache.REPO / "conformance" / "graph", repo / "conformance" / "graph",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "REPO", repo)
    before = cache.generator_hash()
    with open(repo / "conformance" / "graph" / "select.py", "a") as f:
        f.write("# a change\n")
    assert cache.generator_hash() != before


def test_a_damaged_store_is_named_and_generated_over(tmp_path, monkeypatch, capsys):
    """A stored folder whose manifest does not read is not copied half: the generation runs, the error names the
    stored folder, and the store holds the new traces afterwards."""
    calls, _, stored = _stored_once(tmp_path, monkeypatch)
    (stored / "manifest.json").write_text("{not json")
    shutil.rmtree(tmp_path / "clone")
    again = ensure_traces("ci", SPEC, cache.REPO_CACHE)
    assert len(calls) == 2
    assert json.loads((again / "manifest.json").read_text())["graph"] == str(again / "graph.parquet")
    err = capsys.readouterr().err
    assert f"the traces stored on this machine ({stored}) could not be copied (JSONDecodeError" in err
    assert json.loads((stored / "manifest.json").read_text())["graph"] == str(stored / "graph.parquet")
    assert not [p for p in again.parent.iterdir() if p.name.endswith(".partial")]


#: A stand-in `zabref`: ``NAME OTHER CODE`` writes NAME's file, waits (30 s at most) for OTHER's, prints, exits CODE.
_MEETS = """
import sys, time
from pathlib import Path
name, other, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
folder = Path(sys.argv[4])
(folder / name).touch()
deadline = time.monotonic() + 30
while other != "-" and not (folder / other).exists():
    if time.monotonic() > deadline:
        print(f"{name}: {other} never started beside me"); sys.exit(9)
    time.sleep(0.01)
print(f"{name} met {other}")
sys.exit(code)
"""


def test_hops_run_side_by_side_each_line_behind_its_name_and_every_failure_is_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cache, "zabref_command", lambda: [sys.executable, "-c", _MEETS])
    # a and b each wait for the other to start: one after the other, the first would wait in vain and exit 9
    cache.hops(["a", "b", "0", str(tmp_path)], ["b", "a", "0", str(tmp_path)])
    out = capsys.readouterr().out
    assert "[a] a met b" in out and "[b] b met a" in out, out
    with pytest.raises(cache.click.ClickException) as err:
        cache.hops(["c", "-", "3", str(tmp_path)], ["d", "-", "0", str(tmp_path)], ["e", "-", "4", str(tmp_path)])
    assert str(err.value.message) == (f"'zabref c - 3 {tmp_path}' failed with exit code 3; "
                                      f"'zabref e - 4 {tmp_path}' failed with exit code 4")
