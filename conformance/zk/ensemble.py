"""A ZooKeeper ensemble of 3 or 5 unmodified servers on loopback, as child processes that never outlive it.

Theory of operation
-------------------
`ZkEnsemble` writes each server's folder ``<folder>/<id>/`` (``zoo.cfg``, ``myid``, its logging config;
`conformance.zk.serverconfig`), which is also its dataDir, and starts ``java ... QuorumPeerMain zoo.cfg`` there with
``start_new_session``: each server is the leader of its own process group, so a signal to the group reaches the JVM
and anything it might start, and nothing is left when the group is killed.

* ``kill(sid)``: SIGKILL to the group (a crash), then ``wait``: the kernel keeps a killed child as a zombie until its
  parent reaps it, and a zombie still has a PID -- the wait reaps it. `process_state` reads ``/proc/PID/stat`` to tell
  a running, stopped or zombie process from one that is gone.
* ``pause(sid)`` / ``resume(sid)``: SIGSTOP / SIGCONT to the group (a server that stops answering but keeps its
  sockets, as in a long GC pause). ``kill`` works on a paused server too.
* ``restart(sid)``: kill if running, start again on the same folder (its disk as the crash left it).
* ``stop()``: kill every server. It runs when the ``with`` block ends (an exception included), when the ensemble is
  garbage-collected, and at interpreter exit (`weakref.finalize`), so no JVM outlives a failing test.

Whether a server serves is asked through the ``srvr`` four-letter word on its client port: ``Mode: leader`` or
``Mode: follower``. ``leader()`` finds the leader the same way.

A member whose id is in ``zabref`` is a zabref server (`conformance.zk.zabrefmember`): the same folder, process group,
ports and signals, its client port ZooKeeper's client protocol (``srvr`` included).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import weakref
from pathlib import Path

from conformance.zk import ZkEnsembleError
from conformance.zk.ports import ZkServer
from conformance.zk.powercut import PowerCutMount
from conformance.zk.serverconfig import TICK_TIME_MS, java_command, render_zoo_cfg
from conformance.zk.versions import Distribution, ensure_zookeeper
from conformance.zk.zabrefmember import render_zabref_config, zabref_command

__all__ = ["ZkEnsemble", "four_letter", "mode_of", "process_state"]


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


#: How long a pause or resume waits for the kernel to show the server stopped or running: a guard, not a pace.
SIGNAL_TIMEOUT = 10.0


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat`` (R, S, D, T stopped, Z zombie, ...), None when there is no such PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()[0]  # the command name may hold spaces and parentheses


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group led by ``proc`` and reap ``proc``: afterwards it is neither running nor a zombie."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # the group is gone and the PID reused: kill only what we started
            proc.kill()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:  # pragma: no cover -- SIGKILL is not ignored; a D-state disk wait at worst
        pass


def _stop_all(procs: dict[int, subprocess.Popen[bytes]], mounts: dict[int, PowerCutMount] | None = None) -> None:
    for proc in list(procs.values()):
        _kill_group(proc)
    for mount in list((mounts or {}).values()):
        mount.stop()


class ZkEnsemble:
    """``with ZkEnsemble(folder, base_port).start() as e: ...``; every server it started is dead after the block."""

    def __init__(self, folder: str | os.PathLike[str], base_port: int, servers: int = 3,
                 classpath: str | None = None, tick_time_ms: int = TICK_TIME_MS, heap_mb: int = 1024, *,
                 distribution: Distribution | None = None, init_limit: int = 10, sync_limit: int = 5,
                 peers: dict[int, dict[int, tuple[int, int]]] | None = None, power_loss: bool = False,
                 writeback: float | None = 30.0, force_sync: bool = True, extra_config: tuple[str, ...] = (),
                 zabref: frozenset[int] = frozenset()) -> None:
        """``peers[i][j]``: the (quorum, election) ports at which server i reaches server j (a proxy's); None: direct.
        ``distribution`` (or a ``classpath``; neither: Debian's 3.8.0) says which ZooKeeper runs. ``power_loss``:
        each server's dataDir is a `conformance.zk.powercut` mount (``<sid>/data``, its files in
        ``<sid>/.backing``), and every `kill` is a power cut: what the server never fsynced in the last ``writeback``
        seconds is gone (None: whatever it never fsynced). ``force_sync``: zoo.cfg's
        forceSync (no: ZooKeeper ACKs before its log reaches the disk). ``extra_config``: more zoo.cfg lines.
        ``zabref``: the ids of members that are zabref servers (`conformance.zk.zabrefmember`)."""
        if servers < 1:
            raise ZkEnsembleError(f"an ensemble needs at least one server, not {servers}")
        self.folder = Path(folder)
        self.members = ZkServer.layout(base_port, servers)
        if distribution is None:
            distribution = Distribution.from_classpath(classpath or ensure_zookeeper(), "3.8.0", "debian")
        self.distribution = distribution
        self.classpath = distribution.classpath
        self.tick_time_ms = tick_time_ms
        self.init_limit = init_limit
        self.sync_limit = sync_limit
        self.heap_mb = heap_mb
        self.peers = peers
        self.power_loss = power_loss
        self.writeback = writeback
        self.force_sync = force_sync
        self.extra_config = tuple(extra_config)
        self.zabref = frozenset(zabref)
        self.mounts: dict[int, PowerCutMount] = {}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()
        self.started_pids: list[int] = []
        self._finalizer = weakref.finalize(self, _stop_all, self.procs, self.mounts)

    def member(self, sid: int) -> ZkServer:
        return self.members[sid - 1]

    def data_dir(self, sid: int) -> Path:
        return self.folder / str(sid)

    def store_dir(self, sid: int) -> Path:
        """Where server ``sid``'s ``version-2`` is on the machine's disk (under a power-loss mount: its backing)."""
        return self.data_dir(sid) / ".backing" if self.power_loss else self.data_dir(sid)

    def log_of(self, sid: int) -> Path:
        return self.data_dir(sid) / "server.log"

    def running(self, sid: int) -> bool:
        p = self.procs.get(sid)
        return p is not None and p.poll() is None

    def pid(self, sid: int) -> int | None:
        return self.procs[sid].pid if self.running(sid) else None

    def start_server(self, sid: int) -> None:
        if self.running(sid):
            raise ZkEnsembleError(f"ZooKeeper server {sid} is already running (pid {self.procs[sid].pid})")
        me, d = self.member(sid), self.data_dir(sid)
        d.mkdir(parents=True, exist_ok=True)
        data = d
        if self.power_loss:
            data = d / "data"
            if sid not in self.mounts:
                self.mounts[sid] = PowerCutMount(self.store_dir(sid), data, d / "powercut.log", self.writeback)
                self.mounts[sid].start()
        with open(data / "myid", "w") as f:  # fsynced: under a power-loss mount an unsynced file is volatile
            f.write(f"{sid}\n")
            f.flush()
            os.fsync(f.fileno())
        peers = None if self.peers is None else self.peers[sid]
        if sid in self.zabref:
            cfg = d / "zabref.toml"
            cfg.write_text(render_zabref_config(me, self.members, data.resolve(), self.tick_time_ms, self.init_limit,
                                                self.sync_limit, peers))
            args = zabref_command(cfg.resolve(), sid)
        else:
            cfg = d / "zoo.cfg"
            cfg.write_text(render_zoo_cfg(me, self.members, data.resolve(), self.tick_time_ms,
                                          init_limit=self.init_limit, sync_limit=self.sync_limit,
                                          force_sync=self.force_sync, extra=self.extra_config, peers=peers))
            args = java_command(self.distribution, d, cfg.resolve(), self.heap_mb)
        with open(d / "console.log", "ab") as out:
            self.procs[sid] = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=d,
                                               start_new_session=True)
        self.started_pids.append(self.procs[sid].pid)
        self.paused.discard(sid)

    def start(self, timeout: float = 60.0) -> ZkEnsemble:
        """Start every member and wait until all serve."""
        try:
            for m in self.members:
                self.start_server(m.id)
            self.wait_serving([m.id for m in self.members], timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_serving(self, sids: list[int], timeout: float) -> None:
        """Until every server of ``sids`` answers ``srvr`` as leader or follower; ZkEnsembleError naming the log of
        one that exited, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            for sid in sids:
                if not self.running(sid):
                    raise ZkEnsembleError(f"ZooKeeper server {sid} exited; see {self.data_dir(sid) / 'console.log'} "
                                          f"and {self.log_of(sid)}")
            if all(mode_of(self.member(s).client_port) in ("leader", "follower") for s in sids):
                return
            if time.monotonic() > deadline:
                modes = {s: mode_of(self.member(s).client_port) for s in sids}
                raise ZkEnsembleError(f"ZooKeeper ensemble not serving within {timeout} s (modes {modes}); see "
                                      f"{self.folder}/*/server.log")
            time.sleep(0.1)

    def leader(self) -> int | None:
        """The id of the server whose ``srvr`` says ``Mode: leader`` (None when none does)."""
        for m in self.members:
            if self.running(m.id) and m.id not in self.paused and mode_of(m.client_port) == "leader":
                return m.id
        return None

    def modes(self) -> dict[int, str | None]:
        return {m.id: mode_of(m.client_port) if self.running(m.id) and m.id not in self.paused else None
                for m in self.members}

    def kill(self, sid: int) -> None:
        """SIGKILL one server's process group (a crash) and reap it. With ``power_loss`` the crash is a power cut:
        what the server never fsynced is gone too."""
        p = self.procs.get(sid)
        if p is not None:
            _kill_group(p)
            if sid in self.mounts:
                self.mounts[sid].cut()
        self.paused.discard(sid)

    def pause(self, sid: int) -> None:
        """SIGSTOP one server's process group; returns once the kernel shows the server stopped."""
        self._signal(sid, signal.SIGSTOP, lambda state: state == "T", "stopped")
        self.paused.add(sid)

    def resume(self, sid: int) -> None:
        """SIGCONT one server's process group; returns once the kernel no longer shows the server stopped."""
        self._signal(sid, signal.SIGCONT, lambda state: state != "T", "running again")
        self.paused.discard(sid)

    def _signal(self, sid: int, sig: signal.Signals, done, what: str, timeout: float = SIGNAL_TIMEOUT) -> None:
        """Send ``sig`` and wait until ``done(state)`` of the server's process: a signal is delivered
        asynchronously, and a JVM's many threads stop one by one (a loaded machine showed "R" just after SIGSTOP)."""
        if not self.running(sid):
            raise ZkEnsembleError(f"ZooKeeper server {sid} is not running")
        pid = self.procs[sid].pid
        os.killpg(pid, sig)
        deadline = time.monotonic() + timeout
        while not done(process_state(pid)):
            if time.monotonic() > deadline:
                raise ZkEnsembleError(f"ZooKeeper server {sid} (pid {pid}) not {what} {timeout} s after "
                                      f"{sig.name} (state {process_state(pid)!r})")
            time.sleep(0.005)

    def restart(self, sid: int, timeout: float | None = None) -> None:
        """Kill server ``sid`` if it runs and start it again on its folder; with ``timeout``, wait until the whole
        ensemble serves."""
        self.kill(sid)
        self.start_server(sid)
        if timeout is not None:
            self.wait_serving([m.id for m in self.members if self.running(m.id)], timeout)

    def stop(self) -> None:
        """Kill every server and reap it; unmount the power-loss file systems."""
        _stop_all(self.procs, self.mounts)
        self.paused.clear()
        self.mounts.clear()

    def leftovers(self) -> dict[int, str]:
        """Every process started by this ensemble that still exists, with its state letter (empty after stop)."""
        states = {pid: process_state(pid) for pid in self.started_pids}
        return {pid: s for pid, s in states.items() if s is not None}

    def __enter__(self) -> ZkEnsemble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
