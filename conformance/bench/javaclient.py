"""ZooKeeper driven by its own Java client: `ZkLoad.java`, built at bench time, behind the adapter interface.

Theory of operation
-------------------
kazoo, the Python client, runs every request through its connection thread and a callback thread and may limit
what ZooKeeper shows (docs/performance.md). `ZkLoad.java` (beside this file; its header documents its protocol)
drives ZooKeeper with ZooKeeper's own Java client instead: the asynchronous ``create``/``getData`` API, one session,
exactly N requests in flight, the same values as `conformance.bench.workload`.

* `build` compiles it with ``javac`` (Debian ``default-jdk-headless`` installed with apt when javac is missing)
  against the Debian ZooKeeper jars (`client_classpath`: ``zookeeper.jar``, ``zookeeper-jute.jar``,
  ``slf4j-api.jar``, and ``slf4j-simple.jar`` when present so its warnings reach its stderr). The class files are
  cached under ``$ZABREF_CACHE`` (default ``$XDG_CACHE_HOME/zabref`` or ``~/.cache/zabref``) in
  ``zkload/<sha256 of the source and of `javac -version`>``, compiled into a temporary folder and renamed, so a
  build is done once per source and compiler and never half-seen.
* `JavaZooKeeperAdapter` drives whatever speaks ZooKeeper's client protocol at the ports it is given: ZooKeeper's
  servers (rows ``zookeeper-java``) or zabref's ``zk_client_port`` (rows ``zabref-java``,
  `zabref.net.zkclientport`); its ``system`` names the rows. It starts ONE JVM per harness (its JIT warms during
  the runner's warm-up writes), sends one ``row ...`` line per row and reads ``progress <n>`` lines (for the
  progress bar) until the ``result {json}`` line, which `parse_result` checks and turns into the same
  `conformance.bench.stats.Row` as the other adapters, with the JVM's CPU time over the row as the client's CPU. Any
  other line, an ``error`` answer, or the JVM ending is a `BenchError` naming ZkLoad, with the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from conformance.bench import BenchError
from conformance.bench.stats import Row, make_row
from conformance.bench.workload import ROOT
from conformance.tla.javac import JavaBuildError, compile_cached
from conformance.zk.versions import apt_install, find_classpath, install_failed

__all__ = ["SOURCE", "JavaClient", "JavaZooKeeperAdapter", "build", "client_classpath", "ensure_javac",
           "parse_line", "parse_result"]

SOURCE = Path(__file__).with_name("ZkLoad.java")
MAIN = "ZkLoad"
#: Jars the client needs from the folder holding zookeeper.jar (its manifest's Class-Path names the rest).
NEEDED_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar")
OPTIONAL_JARS = ("slf4j-simple.jar",)
_WHO = "the Java ZooKeeper client (ZkLoad)"
_WITHOUT = "run without the Java client (--zk-clients kazoo --zabref-clients zabclient)"


def client_classpath() -> list[Path]:
    """The jars ZkLoad compiles and runs against; BenchError naming a missing one."""
    cp = find_classpath()
    if cp is None:
        raise BenchError(f"zookeeper.jar not found (install Debian's zookeeper), or {_WITHOUT}")
    folder = Path(cp.split(os.pathsep)[0]).parent
    missing = [j for j in NEEDED_JARS if not (folder / j).is_file()]
    if missing:
        raise BenchError(f"{_WHO} needs {', '.join(missing)} in {folder} (Debian: libzookeeper-java, "
                         f"libslf4j-java), or {_WITHOUT}")
    return [folder / j for j in (*NEEDED_JARS, *OPTIONAL_JARS) if (folder / j).is_file()]


def ensure_javac(echo=print) -> str:
    """The path of javac; installs Debian's ``default-jdk-headless`` with apt when it is missing."""
    javac = shutil.which("javac")
    if javac is not None:
        return javac
    alternative = _WITHOUT
    done = apt_install("default-jdk-headless", echo, alternative=alternative)
    if done is None:
        raise BenchError(f"{_WHO} needs javac (a JDK 17) on PATH and apt-get is not available: install one, or "
                         f"{alternative}")
    javac = shutil.which("javac")
    if done.returncode != 0 or javac is None:
        raise install_failed(done, alternative)
    return javac


@dataclass(frozen=True, slots=True)
class JavaClient:
    """A compiled ZkLoad: the ``java`` command line that runs it."""

    classes: Path
    jars: tuple[Path, ...]

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in (self.classes, *self.jars))

    def command(self) -> list[str]:
        return ["java", "-Xms256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", self.classpath, MAIN]


def build(echo=print) -> JavaClient:
    """Compile ZkLoad.java (once per source and javac version, cached outside the repository)."""
    jars = tuple(client_classpath())
    javac = ensure_javac(echo)
    try:
        classes, built = compile_cached([SOURCE], MAIN, jars, "zkload", javac)
    except JavaBuildError as e:
        raise BenchError(str(e)) from None
    if built:
        echo(f"built {_WHO} in {classes}")
    return JavaClient(classes, jars)


_RESULT_FIELDS = {"count": int, "errors": int, "seconds": (int, float), "cpu_seconds": (int, float, type(None)),
                  "last_error": (str, type(None)), "latencies_ns": list}


def parse_result(payload: str) -> dict[str, Any]:
    """The JSON of a ``result`` line, checked; BenchError naming ZkLoad and the bad part."""
    try:
        r = json.loads(payload)
    except ValueError as e:
        raise BenchError(f"{_WHO}: malformed result ({e}): {payload[:200]!r}") from None
    if not isinstance(r, dict):
        raise BenchError(f"{_WHO}: result is not an object: {payload[:200]!r}")
    for key, kind in _RESULT_FIELDS.items():
        if key not in r:
            raise BenchError(f"{_WHO}: result has no {key!r}: {payload[:200]!r}")
        if isinstance(r[key], bool) or not isinstance(r[key], kind):
            raise BenchError(f"{_WHO}: result {key!r} = {str(r[key])[:80]!r} has the wrong type")
    lat = r["latencies_ns"]
    if any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in lat):
        raise BenchError(f"{_WHO}: result latencies_ns holds something other than non-negative integers")
    if len(lat) != r["count"] or r["count"] < 0 or r["errors"] < 0 or r["seconds"] <= 0:
        raise BenchError(f"{_WHO}: result inconsistent: count {r['count']}, {len(lat)} latencies, "
                         f"errors {r['errors']}, seconds {r['seconds']}")
    return r


def parse_line(line: str) -> tuple[str, Any]:
    """One line of ZkLoad's output: ("progress", answered) or ("result", checked dict); BenchError otherwise
    (including its own ``error <why>`` answer)."""
    word, _, rest = line.rstrip("\n").partition(" ")
    if word == "progress":
        try:
            return "progress", int(rest)
        except ValueError:
            pass
    elif word == "result":
        return "result", parse_result(rest)
    elif word == "error":
        raise BenchError(f"{_WHO} failed: {rest}")
    raise BenchError(f"{_WHO}: unexpected output line {line[:200]!r}")


class JavaZooKeeperAdapter:
    """ZooKeeper's client protocol through ZkLoad; ``ports[sid]`` = the port on 127.0.0.1 that speaks it (a ZooKeeper
    server's client port, or a zabref server's ``zk_client_port``). ``stderr``: where the JVM logs; ``system``: the
    rows' system name (``zookeeper-java`` or ``zabref-java``)."""

    def __init__(self, ports: dict[int, int], client: JavaClient, stderr: Path,
                 system: str = "zookeeper-java") -> None:
        self.system = system
        self.ports = ports
        self.client = client
        self.stderr_path = stderr
        self.written: list[tuple[str, int]] = []  # (parent, count) of every write row, for the reads
        self.last_error: str | None = None
        self.completed = 0  # requests of the current row answered (for progress)
        self._rows = 0
        self._proc: subprocess.Popen[str] | None = None
        self._err: TextIO | None = None

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            self._err = open(self.stderr_path, "a")  # noqa: SIM115 -- closed in close()
            self._proc = subprocess.Popen(self.client.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._err, text=True, bufsize=1, start_new_session=True)
        return self._proc

    def _failed(self, why: str) -> BenchError:
        tail = ""
        if self.stderr_path.is_file():
            tail = "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-8:])
        return BenchError(f"{_WHO} {why}; its stderr ({self.stderr_path}) ends:\n{tail}")

    def run_row(self, op: str, target: str, sid: int, in_flight: int, count: int) -> Row:
        self._rows += 1
        parent = f"{ROOT}/r{self._rows}"
        if op == "read" and not self.written:
            raise ValueError("reads need writes first")
        reads = ",".join(f"{p}:{n}" for p, n in self.written) if op == "read" else "-"
        proc = self._start()
        self.completed = 0
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(f"row {op} 127.0.0.1 {self.ports[sid]} {in_flight} {count} {parent} {reads}\n")
            proc.stdin.flush()
            while True:
                line = proc.stdout.readline()
                if not line:
                    code = proc.wait(10)
                    raise self._failed(f"ended (exit {code}) before answering the row")
                kind, got = parse_line(line)
                if kind == "progress":
                    self.completed = got
                    continue
                break
        except BrokenPipeError:
            raise self._failed(f"ended (exit {proc.wait(10)}) before taking the row") from None
        except subprocess.TimeoutExpired:
            raise self._failed("closed its output but did not exit") from None
        if op == "write":
            self.written.append((parent, count))
        self.completed = count
        self.last_error = got["last_error"]
        return make_row(self.system, op, target, in_flight, [ns / 1e9 for ns in got["latencies_ns"]],
                        got["seconds"], got["errors"], client_cpu_s=got["cpu_seconds"])

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                try:
                    assert self._proc.stdin is not None
                    self._proc.stdin.write("quit\n")
                    self._proc.stdin.close()
                    self._proc.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    self._proc.kill()
                    self._proc.wait(10)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None
        if self._err is not None:
            self._err.close()
            self._err = None
