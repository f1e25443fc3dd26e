#!/usr/bin/env python3
"""The compiled build: zabref's sans-IO core, its wire codecs and the runtime a packet crosses compiled with mypyc,
the source unchanged.

Theory of operation: the ``zabref`` package is copied into a folder of its own, and mypyc (mypy's compiler of typed
Python to C extension modules) compiles `MODULES` there -- every module of ``zabref/core``, the three wire codecs
of ``zabref/net``, and the server, its connections, its client ports' pipelines and its log store, the code
tests/test_architecture.py keeps type-clean -- in place: each ``.so`` sits beside its ``.py``, which Python's import
system then passes over (an extension module is found first). The rest of the package (the CLI, the control port,
the disks, the simulator) stays Python in both builds. A compiled class takes no attribute it does not declare and
no method patched in from outside, and a compiled function checks the types of what it is given, so the tests that
patch the runtime or hand it stand-ins run on the pure build. mypyc compiles one Python construct wrong (an
exception name bound to two types: `reused_exception_names`); the build refuses code that has it. The folder is
named by a hash of `MODULES`, the package's files, mypy's version and Python's, so an unchanged tree is compiled
once (about two minutes here) and a changed one never runs stale code. The pure-Python package in this checkout
stays the reference that conformance reads; the compiled build is run from its folder:

    .venv/bin/python scripts/build_compiled.py                       # prints the folder, building it if needed
    zabref bench cluster --zabref-code "$(.venv/bin/python scripts/build_compiled.py)"
    bash scripts/test.sh --build compiled tests/test_core.py         # the suite on the compiled build
    .venv/bin/python scripts/bench_ab.py --before work --after compiled:work   # pure against compiled

A process runs the compiled build when its ``zabref`` resolves to that folder: ``PYTHONPATH=FOLDER`` and
``PYTHONSAFEPATH=1`` (so that ``python -m`` does not put the working directory, this checkout, first);
``zabref.build()`` says which build a process runs, and a server's ``ping`` and start-up line say it too.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "compiled"
#: What is compiled, relative to the package's parent folder: the sans-IO core and the codecs of the quorum and
#: election connections (`wire`, `zkwire`) and of ZooKeeper's client protocol (`zkclientwire`); and the runtime a
#: packet crosses -- the server and its pump (`server`, `links`, `inbox`, `drivers`, `tenure`), the connections'
#: reading (`peers`), the client ports' pipelines (`pipeline`, `zkclientport`) and the log (`store`).
#: mypyc refuses code mypy finds errors in, so tests/test_architecture.py keeps these type-clean.
MODULES = ("zabref/core/*.py", "zabref/net/wire.py", "zabref/net/zkwire.py", "zabref/net/zkclientwire.py",
           "zabref/runtime/server.py", "zabref/runtime/links.py", "zabref/runtime/inbox.py",
           "zabref/runtime/drivers.py", "zabref/runtime/tenure.py", "zabref/net/peers.py", "zabref/net/pipeline.py",
           "zabref/net/zkclientport.py", "zabref/storage/store.py")


def _sources(package_parent: Path) -> list[Path]:
    return sorted(p for pattern in MODULES for p in package_parent.glob(pattern))


def key_of(package_parent: Path) -> str:
    """A name for the build of the ``zabref`` package in ``package_parent``: what is compiled (`MODULES`), every file
    of the package (the build's folder holds a copy of all of it, compiled or not), mypy's version and Python's."""
    h = hashlib.sha256("\0".join(MODULES).encode() + b"\0")
    files = sorted(p for p in (package_parent / "zabref").rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so"))
    for path in files:
        h.update(str(path.relative_to(package_parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(importlib.metadata.version("mypy").encode() + sys.version.encode())
    return h.hexdigest()[:16]


def reused_exception_names(source: str, filename: str) -> list[str]:
    """Where a function binds one name in two ``except ... as`` clauses of different types: mypyc gives the name
    the first clause's type, so the second clause's exception fails with "TypeError: <first> object expected"
    (mypyc/mypyc#620, open; measured with mypy 2.4.1). One line a place, naming the function and the types."""
    found = []
    for fn in ast.walk(ast.parse(source, filename)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound: dict[str, set[str]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.ExceptHandler) and node.name:
                bound.setdefault(node.name, set()).add(ast.unparse(node.type) if node.type else "BaseException")
        found += [f"{filename}:{fn.lineno}: {fn.name} binds {name!r} to {' and '.join(sorted(types))}"
                  for name, types in bound.items() if len(types) > 1]
    return found


def compile_into(folder: Path) -> None:
    """Compile `MODULES` of the ``zabref`` package in ``folder`` in place (mypyc's scratch in ``folder/build``,
    removed after); raises SystemExit with mypyc's output if it fails, or naming code mypyc may compile wrong."""
    reused = [line for p in _sources(folder)
              for line in reused_exception_names(p.read_text(), str(p.relative_to(folder)))]
    if reused:
        sys.exit("build_compiled: mypyc may compile these wrong (mypyc/mypyc#620: an exception name bound to two "
                 "types); give each clause a name of its own:\n" + "\n".join(reused))
    headers = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not headers.is_file():
        sys.exit(f"build_compiled: {headers} is missing: this Python has no C headers to compile against (on "
                 "Debian: apt-get install python3-dev)")
    modules = [str(p.relative_to(folder)) for p in _sources(folder)]
    done = subprocess.run([sys.executable, "-m", "mypyc", *modules], cwd=folder, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONSAFEPATH="1"))
    if done.returncode != 0:
        sys.exit(f"build_compiled: mypyc failed in {folder} (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    shutil.rmtree(folder / "build", ignore_errors=True)
    missing = [m for m in modules if not list((folder / m).parent.glob(Path(m).stem + ".*.so"))]
    if missing:
        sys.exit(f"build_compiled: mypyc left no extension module for {missing} in {folder}")


def build(source: Path = ROOT, out: Path | None = None) -> Path:
    """The compiled build of ``source/zabref`` (built unless ``out`` or the cache already holds it); its folder."""
    folder = out if out is not None else CACHE / key_of(source)
    if (folder / "BUILT").is_file():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(source / "zabref", tmp / "zabref", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    compile_into(tmp)
    (tmp / "BUILT").write_text(f"compiled from {source / 'zabref'} by mypy {importlib.metadata.version('mypy')}\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, default=ROOT, help="the folder holding the zabref package to compile")
    p.add_argument("--out", type=Path, default=None, help="the build's folder (default: .cache/compiled/<hash>)")
    args = p.parse_args()
    print(build(args.source.resolve(), args.out.resolve() if args.out else None))


if __name__ == "__main__":
    main()
