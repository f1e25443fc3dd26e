"""The layout's dependency rules (pyproject.toml's import-linter contracts) hold, and each can fail.

docs/architecture.md explains the rules; its picture (docs/img/architecture.dot) is generated from the imports, and
must be current.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import pytest

REPO = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter on the tree at ``root`` (its packages first on the import path)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_contract_is_kept():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> str:
    """A copy of the tree with one seeded violation of each contract; lint-imports' report on it."""
    root = tmp_path_factory.mktemp("tree")
    for name in ("zabref", "conformance"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    seeds = {
        "zabref/config/model.py": "from conformance import errors as _seeded_1\n",    # implementation-alone
        "zabref/core/state.py": "import time as _seeded_2\n",                          # core-sans-io
        "zabref/storage/store.py": "from zabref.runtime import drivers as _seeded_3\n",  # zabref-layers
        "zabref/net/peers.py": "from zabref.storage import records as _seeded_4\n",    # net-not-storage
        "zabref/storage/records.py": "from zabref.net import wire as _seeded_5\n",     # storage-not-net
        "conformance/tla/check.py": "from conformance.report import render as _seeded_6\n",  # conformance-layers
        "zabref/core/packets.py": "from zabref.core import node as _seeded_7\n",       # no-cycles (node imports packets)
    }
    for rel, line in seeds.items():
        path = root / rel
        path.write_text(path.read_text(encoding="utf-8") + "\n" + line, encoding="utf-8")
    done = lint(root)
    assert done.returncode != 0
    return done.stdout


@pytest.mark.parametrize("contract, importer, imported", [
    ("zabref is the implementation alone", "zabref.config.model", "conformance"),
    ("zabref.core is sans-IO", "zabref.core.state", "time"),
    ("zabref's layers", "zabref.storage.store", "zabref.runtime.drivers"),
    ("net does not import storage", "zabref.net.peers", "zabref.storage.records"),
    ("storage does not import net", "zabref.storage.records", "zabref.net.wire"),
    ("conformance's parts", "conformance.tla.check", "conformance.report.render"),
])
def test_a_seeded_import_breaks_its_contract(broken, contract, importer, imported):
    section = broken[broken.index("Broken contracts"):]
    assert contract in section, section
    assert importer in section and imported in section, section


def test_a_seeded_cycle_is_reported(broken):
    section = broken[broken.index("Broken contracts"):]
    assert "No cycles are allowed in zabref.core" in section, section


def test_the_architecture_picture_is_current():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "architecture.py"), "--check"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_the_long_files_the_suite_starts_first_exist_and_come_first(request):
    """conftest.LONG_FILES names test files (a renamed one would silently lose its place) and collection puts them
    first, in that order."""
    from conftest import LONG_FILES

    tests = Path(__file__).resolve().parent
    assert all((tests / name).is_file() for name in LONG_FILES)
    files = list(dict.fromkeys(item.path.name for item in request.session.items))
    collected = [name for name in LONG_FILES if name in files]
    assert files[:len(collected)] == collected


def _compiled_modules() -> tuple[str, ...]:
    """What the compiled build compiles (scripts/build_compiled.py's `MODULES`, expanded): mypyc refuses code mypy
    finds errors in, so these stay type-clean."""
    modules = helpers.load_script("build_compiled").MODULES
    return tuple(str(p.relative_to(REPO)) for pattern in modules for p in sorted(REPO.glob(pattern)))


TYPED = _compiled_modules()


def _mypy(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy"), "--no-error-summary",
                           *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_the_core_and_the_codec_are_type_clean(tmp_path):
    done = _mypy(tmp_path, *TYPED)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_reports_a_seeded_type_error(tmp_path):
    """The check above can fail: the vote a handler compares may be None until the first election (election.py's
    `_proposal` says so); read unguarded, mypy names it."""
    source = (REPO / "zabref" / "core" / "election.py").read_text()
    seeded = source.replace('Step("ResendNotifications", self._broadcast(self._proposal))',
                            'Step("ResendNotifications", self._broadcast(self.proposed_vote))')
    assert seeded != source
    (tmp_path / "election.py").write_text(seeded)
    done = _mypy(tmp_path, "--shadow-file", "zabref/core/election.py", str(tmp_path / "election.py"), *TYPED)
    assert done.returncode == 1 and 'incompatible type "Vote | None"' in done.stdout, done.stdout + done.stderr
