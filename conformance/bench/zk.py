"""A 3-server Apache ZooKeeper 3.8 ensemble on loopback, from Debian's ``zookeeper`` package.

Theory of operation
-------------------
`ensure_zookeeper` finds ``zookeeper.jar`` (its manifest's Class-Path names netty, jute, slf4j-api, ...) and installs
the package with ``apt-get install -y zookeeper`` (through sudo when not root) when it is missing; it raises
`BenchError` saying what to do when it cannot. The classpath adds ``slf4j-simple.jar`` so the server logs to its
stderr, which goes to ``<dir>/<id>/stderr.log``.

`render_zoo_cfg` writes one server's ``zoo.cfg``: tickTime 2000, initLimit 10, syncLimit 5 (ZooKeeper's sample
config), ``forceSync=yes`` (fsync before ACK, as zabref), the admin server off, the four-letter words ``srvr``,
``stat``, ``ruok``, ``mntr`` allowed. Ports come from one leased block (`zabref.runtime.cluster.find_free_base_port`):
server i has ``base + 10*(i-1) + {0: client, 1: quorum, 2: election}``, all below 32768.

`ZkEnsemble` starts the servers as ``java -cp ... QuorumPeerMain zoo.cfg`` child processes, waits until every one
answers ``srvr`` with a mode (leader or follower), finds the leader the same way, kills (SIGKILL) and restarts one.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.bench import BenchError

__all__ = ["ZkServer", "ZkEnsemble", "ensure_zookeeper", "find_classpath", "render_zoo_cfg", "four_letter",
           "TICK_TIME_MS", "apt_install", "install_failed"]

JAR_DIRS = (Path("/usr/share/java"), Path("/usr/share/zookeeper"), Path("/usr/share/zookeeper/lib"))
TICK_TIME_MS = 2000
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


@dataclass(frozen=True, slots=True)
class ZkServer:
    """One member: its id and loopback ports."""

    id: int
    client_port: int
    quorum_port: int
    election_port: int

    @staticmethod
    def layout(base_port: int, servers: int) -> list[ZkServer]:
        out = [ZkServer(i, base_port + 10 * (i - 1), base_port + 10 * (i - 1) + 1, base_port + 10 * (i - 1) + 2)
               for i in range(1, servers + 1)]
        if base_port < 1024 or out[-1].election_port >= 32768:
            raise BenchError(f"ZooKeeper ports {base_port}..{out[-1].election_port} must lie in 1024..32767")
        return out


def render_zoo_cfg(me: ZkServer, members: list[ZkServer], data_dir: Path, tick_time_ms: int = TICK_TIME_MS) -> str:
    """The text of ``zoo.cfg`` for server ``me`` of ``members``."""
    lines = [
        f"tickTime={tick_time_ms}",
        "initLimit=10",
        "syncLimit=5",
        f"dataDir={data_dir}",
        f"clientPort={me.client_port}",
        "clientPortAddress=127.0.0.1",
        "forceSync=yes",
        "admin.enableServer=false",
        "4lw.commands.whitelist=srvr,stat,ruok,mntr",
        "maxClientCnxns=0",
        "autopurge.purgeInterval=0",
    ]
    lines += [f"server.{m.id}=127.0.0.1:{m.quorum_port}:{m.election_port}" for m in members]
    return "\n".join(lines) + "\n"


def find_classpath() -> str | None:
    """The classpath for QuorumPeerMain, or None when zookeeper.jar is not installed."""
    for d in JAR_DIRS:
        jar = d / "zookeeper.jar"
        if jar.is_file():
            extra = [d / "slf4j-simple.jar"] if (d / "slf4j-simple.jar").is_file() else []
            return os.pathsep.join(str(p) for p in [jar, *extra])
    return None


def apt_install(package: str, echo=print, *, alternative: str) -> subprocess.CompletedProcess[str] | None:
    """``apt-get install -y <package>`` (through ``sudo -n`` when not root); None when apt-get is not available.
    Raises BenchError (ending with ``alternative``, what the user can do instead) when it cannot even try."""
    if shutil.which("apt-get") is None:
        return None
    cmd = ["apt-get", "install", "-y", package]
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise BenchError(f"{package} is not installed and this user is not root (no sudo): run "
                             f"`sudo apt-get install -y {package}`, or {alternative}")
        cmd = ["sudo", "-n", *cmd]
    echo(f"installing {package}: {' '.join(cmd)}")
    return subprocess.run(cmd, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True,
                          text=True)


def install_failed(done: subprocess.CompletedProcess[str], alternative: str) -> BenchError:
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-8:])
    return BenchError(f"`{' '.join(done.args)}` failed (exit {done.returncode}); install it by hand or {alternative}:"
                      f"\n{tail}")


def ensure_zookeeper(echo=print) -> str:
    """The classpath; installs Debian's ``zookeeper`` with apt first when it is missing."""
    cp = find_classpath()
    if cp is not None:
        return cp
    if shutil.which("java") is None:
        raise BenchError("ZooKeeper needs java on PATH (e.g. apt-get install -y openjdk-17-jre-headless)")
    done = apt_install("zookeeper", echo, alternative="run with --systems zabref")
    if done is None:
        raise BenchError("zookeeper.jar not found in /usr/share/java and apt-get is not available: install "
                         "Apache ZooKeeper 3.8 and put zookeeper.jar there, or run with --systems zabref")
    cp = find_classpath()
    if done.returncode != 0 or cp is None:
        raise install_failed(done, "run with --systems zabref")
    return cp


def four_letter(port: int, word: str = "srvr", timeout: float = 2.0) -> str:
    """Send a four-letter word to 127.0.0.1:port; the answer text ('' if the server closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def mode_of(port: int) -> str | None:
    """'leader', 'follower', ... from ``srvr``; None when the server does not serve (yet)."""
    try:
        m = re.search(r"^Mode: (\w+)", four_letter(port), re.M)
    except OSError:
        return None
    return m.group(1) if m else None


class ZkEnsemble:
    """``ZkEnsemble(folder, base_port).start()``; a context manager that kills every server it started."""

    def __init__(self, folder: str | os.PathLike[str], base_port: int, servers: int = 3,
                 classpath: str | None = None, tick_time_ms: int = TICK_TIME_MS, heap_mb: int = 1024) -> None:
        self.folder = Path(folder)
        self.members = ZkServer.layout(base_port, servers)
        self.classpath = classpath or ensure_zookeeper()
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def member(self, sid: int) -> ZkServer:
        return self.members[sid - 1]

    def data_dir(self, sid: int) -> Path:
        return self.folder / str(sid)

    def start_server(self, sid: int) -> None:
        me, d = self.member(sid), self.data_dir(sid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "myid").write_text(f"{sid}\n")
        cfg = d / "zoo.cfg"
        cfg.write_text(render_zoo_cfg(me, self.members, d.resolve(), self.tick_time_ms))
        args = ["java", f"-Xmx{self.heap_mb}m", "-Dzookeeper.jmx.log4j.disable=true",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", self.classpath, MAIN, str(cfg)]
        with open(d / "stderr.log", "ab") as err:
            self.procs[sid] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                               start_new_session=True)

    def start(self, timeout: float = 60.0) -> ZkEnsemble:
        for m in self.members:
            self.start_server(m.id)
        self.wait_serving([m.id for m in self.members], timeout)
        return self

    def wait_serving(self, sids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            for sid in sids:
                p = self.procs.get(sid)
                if p is None or p.poll() is not None:
                    raise BenchError(f"ZooKeeper server {sid} exited; see {self.data_dir(sid) / 'stderr.log'}")
            if all(mode_of(self.member(s).client_port) in ("leader", "follower") for s in sids):
                return
            if time.monotonic() > deadline:
                raise BenchError(f"ZooKeeper ensemble not serving within {timeout} s; see {self.folder}/*/stderr.log")
            time.sleep(0.1)

    def leader(self) -> int | None:
        """The id of the server whose ``srvr`` says ``Mode: leader`` (None when none does)."""
        for m in self.members:
            if self.procs.get(m.id) is not None and self.procs[m.id].poll() is None \
                    and mode_of(m.client_port) == "leader":
                return m.id
        return None

    def kill(self, sid: int) -> None:
        """SIGKILL one server (a crash)."""
        p = self.procs.get(sid)
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)

    def stop(self) -> None:
        for sid in list(self.procs):
            self.kill(sid)

    def __enter__(self) -> ZkEnsemble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
