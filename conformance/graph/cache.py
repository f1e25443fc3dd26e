"""The traces of a model, generated once per spec and cached by its hash.

Theory of operation: the traces of a model depend only on its modules (MC_<model>.tla and the modules of the spec
folder it extends, `model_modules`) and its cfg. `spec_hash` is the first 16 hex digits of their `spec_sha256`, the
hash every trace's header holds (another model added to the folder leaves this one's traces cached); `ensure_traces`
keeps the generated traces under `.cache/traces/<model>-<hash>/` and regenerates them (`zabref traces --stream`:
`zabref check --dump-dot` with the dump parsed while TLC writes it) only when that folder is missing, so a change to the spec makes new traces and an unchanged
spec reuses them. Each hop runs as its own `zabref` subcommand, so its progress and its one-line summary show as
they would by hand; a hop that fails raises click.ClickException with its exit code. The cache folder is written
under a temporary name and renamed when complete: an interrupted run leaves nothing that looks cached. Generation
holds an exclusive lock on ``<model>-<hash>.lock`` beside the folder (``fcntl.flock``, released by the kernel if the
process dies), so runs side by side -- the test command's workers, two chains on one checkout -- generate a model's
traces once and the others wait and reuse them. The cached manifest names the cached ``graph.parquet`` as its graph
(where `zabref minimize` finds it). `committed_trace_dirs` lists the reviewed regression traces in traces/.

The repository's own cache (`.cache/traces/`, the default) is backed by a store on the machine, outside the
repository (`machine_store`: ``<cache root>/traces/``, where fetched ZooKeeper versions and compiled Java live too), so
a fresh clone or a second worktree of the same spec copies the traces instead of running TLC and Spark again. A stored
folder is keyed by the model's spec hash and by `generator_hash`: the source of the packages that make traces
(conformance/graph, conformance/tla, the grammars), the bytes of tla2tools.jar, and the versions of Python and
PySpark; a change to any of them makes new traces. A copy comes in under a temporary name, its manifest's graph
renamed to where it now lies, and is renamed when whole; a stored folder that cannot be copied (its manifest
unreadable) is named, generated again and stored over. A cache given by a caller (a test's temporary folder) is not
backed: what it holds is only what was generated into it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import click

from conformance.graph.traces import MANIFEST, model_modules, spec_sha256, write_manifest

__all__ = ["REPO", "spec_hash", "model_modules", "zabref_command", "hop", "hops", "ensure_traces", "committed_trace_dirs",
           "generator_hash", "machine_store"]

REPO = Path(__file__).resolve().parents[2]
#: The repository's own trace cache: the default of `ensure_traces`, and the one the machine's store backs.
REPO_CACHE = REPO / ".cache" / "traces"
#: The packages whose source makes traces from a spec (with what they read: the grammars).
_GENERATOR_SOURCES = ("conformance/graph", "conformance/tla", "conformance/grammars")
#: The batches in which a generation parses TLC's dump as TLC writes it: ci's 189 MB dump in about a dozen, so the
#: parse keeps pace with TLC instead of starting when it ends (docs/traces.md, "Generated once per spec").
STREAM_CHUNK_MB = 16
#: Spark's heap for a generation: a streamed parse leaves about one partition a batch (five: 107), and with Spark's
#: default 1 GiB the BFS over five's 1.48 M edges failed to acquire 100 MB (2026-11-27); the heap is a maximum, not
#: memory taken.
STREAM_DRIVER_MEMORY = "4g"


def spec_hash(spec_dir: Path, config: str) -> str:
    """The first 16 hex digits of the model's `spec_sha256` (what its traces' headers hold): another model added
    to the folder leaves this model's traces cached."""
    return spec_sha256(Path(spec_dir), config)[:16]


def zabref_command() -> list[str]:
    exe = Path(sys.executable).with_name("zabref")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from zabref.cli import main; main()"]


def hop(args: list[str]) -> None:
    click.echo(f"chain: zabref {' '.join(args)}")
    code = subprocess.call([*zabref_command(), *args])
    if code != 0:
        raise click.ClickException(f"'zabref {' '.join(args)}' failed with exit code {code}")


def hops(*commands: list[str]) -> None:
    """Independent hops side by side: each `zabref` subcommand runs at once, its output lines shown as they come,
    each behind ``[<subcommand>]``; when all have ended, a ClickException names every one that failed."""
    procs = []
    for args in commands:
        click.echo(f"chain: zabref {' '.join(args)} (side by side)")
        procs.append(subprocess.Popen([*zabref_command(), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, text=True, errors="replace"))

    def forward(name: str, stream) -> None:
        for line in stream:
            click.echo(f"[{name}] {line}", nl=False)

    threads = [threading.Thread(target=forward, args=(args[0], p.stdout), daemon=True)
               for args, p in zip(commands, procs)]
    for t in threads:
        t.start()
    try:
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:  # an interrupted chain leaves no hop running
            if p.poll() is None:
                p.kill()
                p.wait()
    for t in threads:
        t.join()
    failed = [f"'zabref {' '.join(args)}' failed with exit code {code}" for args, code in zip(commands, codes) if code]
    if failed:
        raise click.ClickException("; ".join(failed))


def generator_hash() -> str:
    """The first 16 hex digits of a SHA-256 over what makes traces from a spec besides the spec (module docstring):
    each source file of `_GENERATOR_SOURCES` by its path, the jar's bytes, Python's and PySpark's versions."""
    import pyspark

    from conformance.tla.tools import resolve_jar

    digest = hashlib.sha256()
    for folder in _GENERATOR_SOURCES:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(f"{path.relative_to(REPO)}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    digest.update(hashlib.sha256(resolve_jar().path.read_bytes()).hexdigest().encode())
    digest.update(f"\npython {sys.version_info[:3]} pyspark {pyspark.__version__}\n".encode())
    return digest.hexdigest()[:16]


def machine_store() -> Path:
    """The machine's store of generated traces, outside the repository (module docstring)."""
    from conformance.tla.javac import cache_root

    return cache_root() / "traces"


def ensure_traces(config: str, spec_dir: Path = REPO / "spec", cache: Path = REPO_CACHE,
                  regenerate: bool = False) -> Path:
    """The folder of `config`'s action-coverage traces for the current spec, generating them when not cached (nor
    stored on the machine, for the repository's own cache)."""
    target = Path(cache) / f"{config}-{spec_hash(spec_dir, config)}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_name(target.name + ".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or by the kernel if this process dies
        if regenerate and target.exists():
            shutil.rmtree(target)
        if (target / MANIFEST).is_file():
            click.echo(f"chain: {config}: this spec passed the model check and its traces are cached in {target}")
            return target
        stored = None
        if Path(cache).resolve() == REPO_CACHE.resolve():
            stored = machine_store() / f"{target.name}-{generator_hash()}"
        if stored is not None and not regenerate and (stored / MANIFEST).is_file():
            try:
                _copy(stored, target)
                click.echo(f"chain: {config}: this spec passed the model check and its traces, stored on this "
                           f"machine ({stored}), are copied to {target}")
                return target
            except (OSError, ValueError) as e:  # a damaged store: generated again, and stored over it
                click.echo(f"chain: {config}: the traces stored on this machine ({stored}) could not be copied "
                           f"({type(e).__name__}: {e}): generating them", err=True)
        _generate(config, spec_dir, target)
        if stored is not None:
            try:
                _copy(target, stored)
            except OSError as e:  # a store that cannot be written costs the next clone a generation, nothing more
                click.echo(f"chain: {config}: the traces were not stored on this machine ({stored}): {e}", err=True)
    return target


def _copy(source: Path, target: Path) -> None:
    """A whole copy of the trace folder ``source`` at ``target`` (written under a temporary name, then renamed), its
    manifest's graph named where the copy lies."""
    work = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(work, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copytree(source, work)
        _install(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _generate(config: str, spec_dir: Path, target: Path) -> None:
    work = target.with_name(f".{target.name}.{os.getpid()}.partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        # TLC writes the dump while the pipeline parses it (`zabref traces --stream`: the same `zabref check`, every
        # invariant and property of the cfg, then the same parse, in batches of STREAM_CHUNK_MB as the dump grows),
        # and the dump's blocks go back as they are parsed: the Parquet keeps the graph at a tenth of the size
        hop(["traces", "--stream", "--discard-dump", "--chunk-mb", str(STREAM_CHUNK_MB), "--graph",
             str(work / f"{config}.dot"), "--out", str(work / "traces"), "--spec-dir", str(spec_dir),
             "--config", config, "--parquet", str(work / "graph.parquet"), "--conf",
             f"spark.driver.memory={STREAM_DRIVER_MEMORY}"])
        shutil.move(str(work / "traces"), str(work / "final"))
        if (work / "graph.parquet").exists():  # the dump it was read from is gone
            shutil.move(str(work / "graph.parquet"), str(work / "final" / "graph.parquet"))
        _install(work / "final", target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install(folder: Path, target: Path) -> None:
    """The whole trace folder ``folder`` (written beside ``target``) renamed to ``target``, its manifest naming the
    graph where it will lie; what ``target`` held (a folder left without its manifest.json: not a cached result,
    or an older copy) goes."""
    if (folder / "graph.parquet").exists():
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        manifest["graph"] = str(target / "graph.parquet")
        write_manifest(folder, manifest)
    if target.exists():
        shutil.rmtree(target)
    os.replace(folder, target)


def committed_trace_dirs(root: Path = REPO / "traces") -> list[Path]:
    """The reviewed regression traces: every folder under traces/ with a manifest.json."""
    return sorted(p.parent for p in Path(root).glob("*/manifest.json"))
