"""The compiled build (scripts/build_compiled.py): which build a process runs, the build's cache key, the guard that
keeps a suite meant for the compiled build off the pure one, and (deep) the compiled build itself under tests of the
core, the codecs, ZooKeeper's client port, conformance replays and the simulator (`COMPILED_SUITE`)."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import pytest

import zabref

REPO = Path(__file__).resolve().parent.parent
#: Test files run on the compiled build by the deep test: the core and its model, the election, the codecs, the
#: ZooKeeper transactions and trees, ZooKeeper's client port with kazoo (real servers), conformance replays (real
#: servers driven step by step), the simulator's checks of whole runs (in this process: the compiled build), and the
#: runtime's: servers and clusters, their connections' reading, a late leader, the pipelines, a slow follower's
#: resync. A seeded bug's patched copy runs the pure build whichever build runs the test, so those files are not
#: here; a test marked `pure_build` (it patches the runtime or hands it a stand-in) is skipped on this build.
COMPILED_SUITE = ("test_core.py", "test_core_model.py", "test_election.py", "test_wire.py", "test_zkwire.py",
                  "test_zktxn.py", "test_zktree.py", "test_zk_clients.py", "test_fuzz_codec.py", "test_replay.py",
                  "test_sim_pause.py", "test_simcheck.py", "test_cluster.py", "test_runtime.py", "test_read_stream.py",
                  "test_late_leader.py", "test_tenure.py", "test_pipeline.py", "test_slow_follower.py")


def _script():
    return helpers.load_script("build_compiled")


#: Prints, one a line, the dataclasses of the compiled modules whose ``__init__`` is interpreted Python (a function):
#: run in a process of the compiled build, it must print nothing (mypyc keeps the ``__init__`` that `dataclasses`
#: generates as Python, so a dataclass built per packet must declare its own, which mypyc compiles).
INTERPRETED_CONSTRUCTORS = """
import dataclasses, importlib, sys, types
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    for cls in vars(module).values():
        if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls):
            if isinstance(cls.__dict__["__init__"], types.FunctionType):
                print(name + "." + cls.__name__)
"""


def _compiled_module_names() -> list[str]:
    """The dotted names of the modules the compiled build compiles (`MODULES` of scripts/build_compiled.py)."""
    return [".".join(p.relative_to(REPO).with_suffix("").parts) for p in _script()._sources(REPO)]


def test_every_dataclass_the_build_compiles_declares_a_constructor_of_its_fields() -> None:
    """Each dataclass of the compiled modules has ``init=False`` and its own ``__init__`` whose parameters are its
    init fields, in order, defaults given there alone -- the ``__init__`` `dataclasses` would have made, written out
    so that mypyc compiles it (that it does is checked in the compiled build by the deep test)."""
    if zabref.build() != "pure":
        pytest.skip("signatures are read from the pure build")
    seen = []
    for name in _compiled_module_names():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not (isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)):
                continue
            seen.append(cls.__name__)
            init = cls.__dict__.get("__init__")
            assert cls.__dataclass_params__.init is False and init is not None, f"{name}.{cls.__name__}"
            assert init.__code__.co_filename == module.__file__, f"{name}.{cls.__name__}: a generated __init__"
            expected = [f.name for f in dataclasses.fields(cls) if f.init]
            params = list(inspect.signature(init).parameters.values())[1:]
            got = [p.name for p in params]
            assert got == expected, f"{name}.{cls.__name__}: __init__ takes {got}, its fields are {expected}"
            assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params), f"{name}.{cls.__name__}"
            # one copy of each default: the constructor's (a field's own default would be a second)
            assert all(f.default is f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls)), cls
    assert {"QuorumPacket", "Effects", "Action", "AppendTxns", "Send", "Output", "ZNode"} <= set(seen), seen


#: A function that binds one exception name to two types (mypyc/mypyc#620), both classes of the module.
REUSED = """
class Refused(Exception):
    pass


class Broken(Exception):
    pass


def f(x):
    try:
        {body}
    except Refused as e:
        return "refused " + str(e)
    except Broken as {second}:
        return "broken " + str({second})
"""


def test_the_build_refuses_an_exception_name_bound_to_two_types(tmp_path: Path) -> None:
    """`reused_exception_names` names the function and both types, passes over distinct names, and finds no such
    place in what the build compiles -- which would otherwise raise TypeError in the second clause (the next test
    shows mypyc doing so)."""
    build = _script()
    found = build.reused_exception_names(REUSED.format(body="pass", second="e"), "m.py")
    assert found == ["m.py:10: f binds 'e' to Broken and Refused"], found
    assert build.reused_exception_names(REUSED.format(body="pass", second="bad"), "m.py") == []
    assert [line for p in build._sources(REPO)
            for line in build.reused_exception_names(p.read_text(), str(p.relative_to(REPO)))] == []
    (tmp_path / "zabref" / "core").mkdir(parents=True)
    (tmp_path / "zabref" / "core" / "bad.py").write_text(REUSED.format(body="pass", second="e"))
    with pytest.raises(SystemExit, match=r"mypyc/mypyc#620.*\n.*zabref/core/bad.py:10: f binds 'e'"):
        build.compile_into(tmp_path)  # refused before mypyc runs


@pytest.mark.slow
def test_mypyc_compiles_an_exception_name_bound_to_two_types_wrong(tmp_path: Path) -> None:
    """Why the build refuses it: compiled, the second clause's exception fails the first clause's type check; with
    names of their own both clauses work."""
    if importlib.util.find_spec("mypyc") is None:
        pytest.skip("mypy's compiler is not installed (pip install 'zabref[dev]')")
    body = 'raise (Refused if x else Broken)("boom")'
    for name, second in (("reused", "e"), ("distinct", "bad")):
        source = REUSED.format(body=body, second=second).replace("def f(x)", "def f(x: int) -> str")
        (tmp_path / f"{name}.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "mypyc", "reused.py", "distinct.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    probe = subprocess.run([sys.executable, "-c", """
import distinct, reused
assert reused.__file__.endswith(".so"), reused.__file__
print(reused.f(1), "|", distinct.f(0))
try:
    print(reused.f(0))
except TypeError as e:
    print("TypeError:", e)
"""], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(tmp_path)), capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert probe.stdout.splitlines() == ["refused boom | broken boom",
                                         "TypeError: reused.Refused object expected; got reused.Broken"]


def test_this_process_runs_the_build_the_suite_was_asked_for() -> None:
    assert zabref.build() == os.environ.get("ZABREF_EXPECT_BUILD", "pure")


def test_the_cache_key_follows_every_file_of_the_package_and_nothing_else(tmp_path: Path) -> None:
    """The build's folder holds a copy of the whole package, so a change to any of its files -- compiled or not --
    names a new build; Python's caches and earlier builds' extension modules do not."""
    build = _script()
    shutil.copytree(REPO / "zabref", tmp_path / "zabref", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    key = build.key_of(tmp_path)
    assert build.key_of(tmp_path) == key
    (tmp_path / "zabref" / "core" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "zabref" / "core" / "__pycache__" / "zab.cpython-311.pyc").write_bytes(b"x")
    (tmp_path / "zabref" / "core" / "zab.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x")
    assert build.key_of(tmp_path) == key
    keys = {key}
    for name in ("core/zab.py", "runtime/server.py", "net/wire.py"):  # compiled, pure, compiled
        path = tmp_path / "zabref" / name
        path.write_text(path.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
        keys.add(build.key_of(tmp_path))
    assert len(keys) == 4


def test_a_suite_meant_for_the_compiled_build_stops_on_the_pure_one(tmp_path: Path) -> None:
    """tests/conftest.py's guard: with ZABREF_EXPECT_BUILD=compiled and the pure package on the import path, pytest
    stops before any test (a usage error, exit 4) and says which build it found where."""
    if zabref.build() != "pure":
        pytest.skip("this process runs the compiled build")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                           str(REPO / "tests" / "test_compiled.py::test_this_process_runs_the_build_the_suite_was_"
                                                "asked_for")],
                          cwd=REPO, env=dict(env, ZABREF_EXPECT_BUILD="compiled"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "ZABREF_EXPECT_BUILD=compiled, but this process runs zabref's pure build from" in done.stderr


@pytest.mark.slow
@pytest.mark.deep
def test_the_compiled_build_passes_the_tests_of_what_it_compiles(tmp_path: Path) -> None:
    """Build (or take from the cache) the compiled build, check that its core really is extension modules, and run
    `COMPILED_SUITE` on it through the test command's own switch (``scripts/test.sh --build compiled``)."""
    if importlib.util.find_spec("mypyc") is None:
        pytest.skip("mypy's compiler is not installed (pip install 'zabref[dev]')")
    build = _script()
    folder = build.build()
    assert sorted(p.name.split(".")[0] for p in (folder / "zabref" / "core").glob("*.so")) == sorted(
        p.stem for p in (REPO / "zabref" / "core").glob("*.py"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "ZABREF_EXPECT_BUILD")}
    probe = subprocess.run([sys.executable, "-c", "import importlib, sys, zabref; print(zabref.build()); "
                            "[print(importlib.import_module(m).__file__) for m in sys.argv[1:]]",
                            *_compiled_module_names()], cwd=tmp_path,
                           env=dict(env, PYTHONPATH=str(folder), PYTHONSAFEPATH="1"), capture_output=True, text=True,
                           timeout=60)
    assert probe.returncode == 0 and probe.stdout.split()[0] == "compiled", probe.stdout + probe.stderr
    files = probe.stdout.split()[1:]
    assert len(files) == len(_compiled_module_names()) and all(f.endswith(".so") for f in files), probe.stdout
    interpreted = subprocess.run([sys.executable, "-c", INTERPRETED_CONSTRUCTORS, *_compiled_module_names()],
                                 cwd=tmp_path, env=dict(env, PYTHONPATH=str(folder), PYTHONSAFEPATH="1"),
                                 capture_output=True, text=True, timeout=60)
    assert interpreted.returncode == 0 and interpreted.stdout == "", interpreted.stdout + interpreted.stderr
    done = subprocess.run(["bash", "scripts/test.sh", "--build", "compiled", "-q", "-p", "no:cacheprovider",
                           *(f"tests/{name}" for name in COMPILED_SUITE)],
                          cwd=REPO, env=dict(env, ZABREF_TEST_WORKERS="1"), capture_output=True, text=True,
                          timeout=1500)
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
    assert done.returncode == 0, tail
    assert f"the compiled build in {folder}" in done.stdout, tail
    # tests/conftest.py skips the tests marked pure_build there (test_zk_clients.py's stand-in servers among them)
    assert re.search(r"SKIPPED \[\d+\] tests/test_zk_clients.py:\d+: patches the runtime or hands it a stand-in, "
                     r"which the compiled build refuses", done.stdout), tail
