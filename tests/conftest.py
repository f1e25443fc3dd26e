"""Fixtures shared by the whole suite. Keep each small; put a module's own fixtures in its test file."""

from __future__ import annotations

import os
from pathlib import Path

import helpers
import pytest
from hypothesis import settings

import zabref

from conformance.tla.tools import Toolchain, toolchain

REPO_ROOT = Path(__file__).resolve().parent.parent

#: No per-example deadline for Hypothesis: a deadline is a timed check, and on a machine whose cores the test command
#: keeps busy an example that takes 0.25 ms alone took 419 ms once (tests/test_values.py, a fresh clone's run of
#: 2026-11-28). Speed is measured by the benchmark scripts, never by a test.
settings.register_profile("zabref", deadline=None)
settings.load_profile("zabref")

#: The files that take minutes (measured: `bash scripts/test.sh --durations=25`), longest first. The test command
#: runs whole files on its workers (pytest-xdist `--dist loadfile`) and hands out files in collection order, so a
#: long file collected last would start last and stretch the wall time; these are collected first instead.
LONG_FILES = ("test_seeded_bugs.py", "test_sim.py", "test_mutations.py", "test_spec.py", "test_pipeline.py",
              "test_edges.py", "test_sim_validation.py", "test_sim_bugs.py", "test_fle_spec.py", "test_follow.py",
              "test_zk_validate.py", "test_site.py")


def pytest_configure(config: pytest.Config) -> None:
    """``ZABREF_EXPECT_BUILD`` (set by ``scripts/test.sh --build compiled``): stop before any test unless this
    process runs that build of zabref, so that a suite meant for the compiled build never passes on the pure one."""
    expected = os.environ.get("ZABREF_EXPECT_BUILD")
    if expected is not None and zabref.build() != expected:
        raise pytest.UsageError(f"ZABREF_EXPECT_BUILD={expected}, but this process runs zabref's {zabref.build()} "
                                f"build from {Path(zabref.__file__).parent}")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help="also run the tests marked `long` (scripts/test-long.sh; the test command skips them)")
    parser.addoption("--deep", action="store_true",
                     help="also run the tests marked `deep` (CI runs `bash scripts/test.sh --deep`; the test command "
                          "alone skips them)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long files first (`LONG_FILES`); every file's own tests keep their order, the other files theirs. Tests
    marked `long` are skipped unless --long is given: they are the longer command's (scripts/test-long.sh). Tests
    marked `deep` are skipped unless --deep is given: CI gives it (.ci/run), so they guard every change that lands,
    and the test command a developer runs stays within 20 minutes on a fresh clone. Tests marked `pure_build` are
    skipped on the compiled build (`scripts/test.sh --build compiled`): they patch the runtime or hand it stand-ins."""
    rank = {name: k for k, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    left_out = {"long": "a long check: bash scripts/test-long.sh runs it",
                "deep": "a deep check: CI runs it (bash scripts/test.sh --deep)"}
    for marker, reason in left_out.items():
        if not config.getoption(f"--{marker}"):
            for item in items:
                if marker in item.keywords:
                    item.add_marker(pytest.mark.skip(reason=reason))
    if zabref.build() != "pure":
        for item in items:
            if "pure_build" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="patches the runtime or hands it a stand-in, which the "
                                                        f"{zabref.build()} build refuses: run on the pure build"))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder (holds pyproject.toml, spec/, zabref/, conformance/)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def toy_dir() -> Path:
    """tests/fixtures/toy: a toy TLA+ spec with MC_<name>.tla/.cfg configs, counted by hand in Toy.tla."""
    return REPO_ROOT / "tests" / "fixtures" / "toy"


@pytest.fixture(scope="session")
def tla() -> Toolchain:
    """java and tla2tools.jar as resolved for this machine (fails, naming what is missing, when they are not)."""
    return toolchain()


@pytest.fixture(scope="session")
def tiny_dot(tmp_path_factory, tla) -> Path:
    """The labeled state graph of spec/MC_tiny, dumped once per test session."""
    from conformance.tla.modelconfig import prepare
    from conformance.tla.tools import Outcome, run_tlc

    work = tmp_path_factory.mktemp("tiny-dot")
    model = prepare(REPO_ROOT / "spec", "tiny", work / "model")
    out = work / "tiny.dot"
    result = run_tlc(model.module, model.cfg, workers=1, fp=0, dump_dot=out, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    return out


@pytest.fixture(scope="session")
def zk380() -> str:
    """The classpath of Debian's ZooKeeper 3.8.0 (scripts/bootstrap.sh installs the package); skips the test where it
    is not installed (a machine without apt)."""
    from conformance.zk.versions import find_classpath

    cp = find_classpath()
    if cp is None:
        pytest.skip("needs Debian's zookeeper package (scripts/bootstrap.sh installs it)")
    pytest.importorskip("kazoo")
    return cp


@pytest.fixture
def lines():
    """A `helpers.Lines` on the "zabref" logger, set to INFO for the test (its level and handlers restored after)."""
    with helpers.capture(helpers.Lines()) as handler:
        yield handler


@pytest.fixture
def powercut(tmp_path):
    """The power-cut file system (conformance/zk/powercut.py, FUSE) mounted in ``tmp_path``: ``.mount`` is the folder
    whose unsynced writes ``.cut()`` forgets; unmounted after the test. A test that uses it skips where FUSE is
    missing (`conformance.zk.powercut.fuse_available` says why)."""
    from conformance.zk.powercut import PowerCutMount, fuse_available

    if (why := fuse_available()) is not None:
        pytest.skip(f"no FUSE here: {why}")
    m = PowerCutMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fs.log")
    m.start()
    yield m
    m.stop()
    assert not os.path.ismount(tmp_path / "mnt")
