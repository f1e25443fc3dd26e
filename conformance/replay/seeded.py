"""Seeded implementation bugs: known-wrong variants of zabref, to show that conformance replay catches them.

Theory of operation: the implementation stays clean. A seeded bug is data, ``conformance/replay/bugs/NAME.toml``, in the
form of the spec mutations (spec/mutations/*.toml)::

    description = "ACK before fsync: ..."
    config = "tiny"                      # the model whose action-coverage traces exercise it
    action = "FollowerProcessPROPOSAL"   # the spec action at which the replay departs
    expect = "caught"                    # or "regression": those traces miss it (a gap kept on record) and the
                                         # committed regression traces (traces/regression/) catch it; or
                                         # "storage": the storage crash tests catch it (tests/test_storage_seeded.py)
                                         # or "simulation": only the deterministic simulator catches it
                                         # (zabref simulate; tests/test_sim_bugs.py); or "security": the
                                         # TLS / quorum-auth ensemble tests catch it (tests/test_security.py);
                                         # or "reads": the fault runner's read checker (tests/test_faults.py);
                                         # or "adversary": the adversarial peer (tests/test_adversary.py);
                                         # or "scenario": a scenario searched in the config's graph at test
                                         # time (LATE_SCENARIOS: tests/test_late_leader.py)
    validated = true                     # optional: a short run of the patched servers in normal mode (zabref
                                         # cluster) fails `zabref validate` too (tests/test_validate.py)
    [[replace]]
    file = "core/follower.py"            # under zabref/
    find = "..."                         # must occur exactly once
    with = "..."

`patched_package` copies the zabref package into a scratch folder and applies the replacements there; a `find` that
does not occur exactly once is a `SeededBugError` (the code moved: update the bug), never silently skipped. The
replay driver then starts the servers with that folder first on their import path (conformance/replay/driver.py); the
driver itself, and every other process, keeps the clean package.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import zabref
from conformance.errors import SeededBugError
from conformance.patches import Replacement, apply_replacements, read_replacements

__all__ = ["BUGS_DIR", "EXPECT", "SeededBug", "load_bugs", "load_bug", "apply_bug", "patched_package",
           "run_patched"]

BUGS_DIR = Path(__file__).resolve().parent / "bugs"
#: What catches a bug: the config's action-coverage traces, only the committed regression traces, the storage
#: crash tests (a crash inside a step's sync, which conformance -- crashing between steps -- never makes), or only
#: the deterministic simulator (`zabref simulate`: five servers, long fault schedules), or the security tests (TLS
#: and quorum authentication are off in conformance), or the fault runner's read checker (conformance never syncs),
#: or the adversarial peer (conformance/fuzz/adversary.py), or a real ZooKeeper server beside zabref's in one ensemble
#: (tests/test_zk_mixed.py: what an all-zabref run cannot tell apart), or a scenario of the config's graph that no
#: action-coverage trace reaches, searched when the test runs (`conformance.replay.scenarios.LATE_SCENARIOS`).
EXPECT = ("caught", "regression", "storage", "simulation", "security", "reads", "adversary", "zookeeper", "scenario")


@dataclass(frozen=True)
class SeededBug:
    name: str
    description: str
    config: str
    action: str
    replacements: tuple[Replacement, ...]
    path: Path
    expect: str = "caught"  # see EXPECT
    validated: bool = False  # a normal-mode run of the patched servers fails `zabref validate`


def _load(path: Path) -> SeededBug:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        reps = read_replacements(data["replace"])
        bug = SeededBug(path.stem, data["description"], data["config"], data.get("action", ""), reps, path,
                        data.get("expect", "caught"), data.get("validated", False))
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SeededBugError(f"{path}: not a seeded bug ({type(exc).__name__}: {exc})") from None
    if not isinstance(bug.validated, bool):
        raise SeededBugError(f"{path}: validated = {bug.validated!r}; expected true or false")
    if bug.expect not in EXPECT:
        raise SeededBugError(f"{path}: expect = {bug.expect!r}; known: {', '.join(EXPECT)}")
    return bug


def load_bugs(directory: Path = BUGS_DIR) -> list[SeededBug]:
    """Every NAME.toml of the folder, by name; SeededBugError if the folder does not exist (a wrong path is not an
    empty catalogue)."""
    if not Path(directory).is_dir():
        raise SeededBugError(f"{directory}: no such folder of seeded bugs")
    return [_load(p) for p in sorted(Path(directory).glob("*.toml"))]


def load_bug(name: str, directory: Path = BUGS_DIR) -> SeededBug:
    path = Path(directory) / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(Path(directory).glob("*.toml"))) or "none"
        raise SeededBugError(f"no seeded bug {name!r} in {directory} (known: {known})")
    return _load(path)


def apply_bug(bug: SeededBug, package_dir: Path) -> None:
    """Apply the replacements in place to a COPY of the zabref package at package_dir."""
    apply_replacements(package_dir, bug.replacements, bug.path, SeededBugError, "zabref")


@contextlib.contextmanager
def patched_package(bug: SeededBug, workdir: Path | None = None) -> Iterator[Path]:
    """A scratch folder holding ``zabref/`` with the bug applied (put it first on the servers' import path)."""
    root = Path(tempfile.mkdtemp(prefix=f"zabref-bug-{bug.name}-", dir=workdir))
    try:
        # the source only: a compiled build's extension modules (scripts/build_compiled.py) would be imported before
        # the patched source beside them, so a bug seeded while the compiled build runs runs in the pure one
        shutil.copytree(Path(zabref.__file__).resolve().parent, root / "zabref",
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        apply_bug(bug, root / "zabref")
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_patched(bug_name: str, module: str, command: str, argv: list[str]) -> int:
    """Run click command ``module.command`` with ``argv`` in a child process whose import path starts with the
    seeded bug's patched zabref (checked in the child before the command runs); its exit code. The commands that
    check zabref in this process (`zabref simulate --bug`, `zabref edges --bug`) run themselves again this way."""
    bug = load_bug(bug_name)
    with patched_package(bug) as root:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
        # `-c` puts the working directory first on sys.path: run in the patched folder, and check the import.
        here = str(root.resolve())
        code = ("import sys, zabref; from pathlib import Path\n"
                f"assert Path(zabref.__file__).resolve().is_relative_to(Path({here!r})), zabref.__file__\n"
                f"from {module} import {command}; {command}(sys.argv[1:])")
        return subprocess.run([sys.executable, "-c", code, *argv], env=env, cwd=root).returncode
