"""Java sources of the toolchain's, compiled once per source and compiler and cached outside the repository.

`compile_cached` compiles source files with ``javac`` against a classpath into
``<cache_root>/<folder>/<sha256 of the sources and of `javac -version`>``: into a temporary folder first, then renamed,
so a build is never seen half-written and two runs building at once keep one. The cache root is ``$ZABREF_CACHE``,
else ``$XDG_CACHE_HOME/zabref``, else ``~/.cache/zabref`` (ZooKeeper's fetched versions live there too).
Users: ZkLoad.java, the benchmark's Java ZooKeeper client (conformance/bench/javaclient.py), and the TLC operators
written in Java (conformance/tla/overrides.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

__all__ = ["JavaBuildError", "cache_root", "compile_cached"]


class JavaBuildError(RuntimeError):
    """javac failed, or is missing; the message names the source and javac's words."""


def cache_root() -> Path:
    if os.environ.get("ZABREF_CACHE"):
        return Path(os.environ["ZABREF_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zabref"


def compile_cached(sources: Sequence[Path], main: str, classpath: Sequence[Path], folder: str,
                   javac: str) -> tuple[Path, bool]:
    """The folder holding the class files compiled from ``sources`` (module docstring; ``main``: a class that must be
    there), and whether this call built it."""
    version = subprocess.run([javac, "-version"], capture_output=True, text=True)
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    key = hashlib.sha256(digest.digest() + (version.stdout + version.stderr).encode()).hexdigest()[:20]
    root = cache_root() / folder
    final = root / key
    if (final / f"{main}.class").is_file():
        return final, False
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    # -proc:none -implicit:none: no annotation processors, and no classes compiled from sources found in jars
    done = subprocess.run([javac, "-proc:none", "-implicit:none", "-Xlint:-options", "-d", str(tmp), "-cp",
                           os.pathsep.join(map(str, classpath)), *map(str, sources)], capture_output=True, text=True)
    if done.returncode != 0 or not (tmp / f"{main}.class").is_file():
        shutil.rmtree(tmp, ignore_errors=True)
        names = ", ".join(str(s) for s in sources)
        raise JavaBuildError(f"javac failed on {names} (exit {done.returncode}):\n{done.stderr[-2000:]}")
    try:
        tmp.rename(final)
    except OSError:  # built meanwhile by another run: keep that one
        shutil.rmtree(tmp, ignore_errors=True)
    return final, True
