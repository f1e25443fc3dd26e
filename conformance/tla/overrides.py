"""TLC operators written in Java (the folder override/): a TLA+ module each, and the class that stands for it.

TLC loads a class named after a module from its classpath and lets the class's public static methods stand for the
module's operators of the same name and arity ("Loading ... operator override" in its output). Two modules here:

* ``ZabrefData`` -- ``Datum(file, k)``, the value on line k of a data file (conformance/tla/datafile.py). Its TLA+
  definition can only fail: without the class the check stops with an assertion, never with a verdict.
* ``ZabrefSeq`` -- ``IsSuffix(s, t)``. Its TLA+ definition is the meaning; the class computes the same comparing
  elements by identity first (TLC's Tail and Append keep them), so a channel of thousands of packets costs
  microseconds a step instead of a copy and a deep comparison.

`classes` compiles both (conformance/tla/javac.py: once per source and javac, cached outside the repository) against
the toolchain's tla2tools.jar; pass the folder as ``run_tlc(..., classpath=[classes(tools)])`` and copy `MODULES`
beside the generated module that EXTENDS them.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from conformance.tla.javac import JavaBuildError, cache_root, compile_cached
from conformance.tla.tools import Toolchain, ToolchainError

__all__ = ["MODULES", "classes"]

_FOLDER = Path(__file__).parent / "override"
_NAMES = ("ZabrefData", "ZabrefSeq")
#: The TLA+ modules, to copy beside a module that EXTENDS them.
MODULES = tuple(_FOLDER / f"{name}.tla" for name in _NAMES)


def classes(tools: Toolchain) -> Path:
    """The folder holding the classes, compiled against the toolchain's tla2tools.jar; ToolchainError naming what is
    missing, or javac's complaint. Found once per process (a pool worker checks batch after batch; each look at the
    cache starts ``javac -version``, a JVM)."""
    return _classes(tools.java, tools.jar.path, cache_root())


@functools.lru_cache(maxsize=None)
def _classes(java: str, jar: Path, _cache: Path) -> Path:  # _cache: the key includes where compile_cached looks
    beside = Path(java).with_name("javac")
    javac = str(beside) if beside.is_file() else shutil.which("javac")
    if javac is None:
        raise ToolchainError(f"javac not found beside {java} nor on PATH: TLC's Java operators "
                             f"({', '.join(_NAMES)}) need it (Debian: apt-get install default-jdk-headless)")
    try:
        folder, _ = compile_cached([_FOLDER / f"{name}.java" for name in _NAMES], _NAMES[0], [jar], "tlc-java",
                                   javac)
    except JavaBuildError as e:
        raise ToolchainError(str(e)) from None
    return folder
