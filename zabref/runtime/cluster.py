"""``zabref cluster``: N servers on loopback as child processes, and the classes that start, kill and restart them.

Theory of operation
-------------------
`cluster_config` lays a cluster out under one folder: ``cluster.toml`` plus ``data/<id>`` per server, ports
``base_port + 10*(id-1) + {0: quorum, 1: election, 2: client, 3: control}`` (kept below 32768, outside Linux's
ephemeral range, so outgoing connections never take them). `ServerProcess` runs one ``zabref serve`` as a child
process (``python -m zabref.cli``), its stderr appended to ``<data_dir>/stderr.log``; ``kill`` is SIGKILL -- a power
cut when the server runs with ``ZABREF_DISK=powerloss`` (only what it fsynced survives), a mere process crash
otherwise (the operating system keeps what it wrote) -- ``stop`` is SIGTERM (clean), ``start`` again reopens the
same data dir.
`wait_ready` polls the control port (`ready_control` keeps the connection that answered). The tests and the
conformance driver use these classes too.

Control token: `LocalCluster` gives every server the token in ``control.token`` beside the config (`control_token`
creates it, 32 random bytes as hex, readable by its owner only), so that its clients -- the tests, the conformance
driver, the fault runner, the benchmark -- can inspect and step the servers; a server started by hand without
``--control-token`` has no control port.

The ``cluster`` command writes the config (keeping existing data dirs, so a cluster restarted from the same folder
keeps its history), starts the servers, prints where each listens and the client commands to use, and waits; SIGINT
or SIGTERM stops the children with SIGTERM (SIGKILL after a grace period).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from zabref.config import ClusterConfig, Config, Security, ServerConfig, load_config, render_config, write_config
from zabref.errors import ConfigError, ZabError
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.control import ControlError, read_token
from zabref.runtime.control_client import ControlClient

__all__ = ["cluster_config", "find_free_base_port", "release_base_port", "ServerProcess", "LocalCluster",
           "run_cluster"]

CONFIG_NAME = "cluster.toml"
TOKEN_NAME = "control.token"


def control_token(folder: str | os.PathLike[str]) -> Path:
    """``folder/control.token``, created (mode 600 from its first byte) with a fresh random token if missing."""
    path = Path(folder) / TOKEN_NAME
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    try:
        os.write(fd, secrets.token_hex(32).encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def cluster_config(folder: str | os.PathLike[str], servers: int, base_port: int,
                   timing: ClusterConfig = ClusterConfig(), host: str = "127.0.0.1",
                   security: Security = Security()) -> Path:
    """Write ``folder/cluster.toml`` for ``servers`` servers (with ``security``'s ``[security]`` table); returns its
    path. Server i's ports are ``base_port + 10 * (i - 1)`` and the next four: quorum, election, client, control,
    and ZooKeeper's client protocol (``zk_client_port``: kazoo or ZooKeeper's Java client reach it there)."""
    if servers < 1:
        raise ConfigError(f"--servers: {servers} must be at least 1")
    top = base_port + 10 * (servers - 1) + 4
    if base_port < 1024 or top >= 32768:
        raise ConfigError(f"--base-port: ports {base_port}..{top} must lie in 1024..32767")
    entries = [ServerConfig(i, host, base_port + 10 * (i - 1), base_port + 10 * (i - 1) + 1,
                            base_port + 10 * (i - 1) + 2, base_port + 10 * (i - 1) + 3, Path("data") / str(i),
                            zk_client_port=base_port + 10 * (i - 1) + 4)
               for i in range(1, servers + 1)]
    return write_config(Path(folder) / CONFIG_NAME, render_config(timing, entries, security))


class ServerProcess:
    """One ``zabref serve`` child process."""

    def __init__(self, config_path: str | os.PathLike[str], config: Config, sid: int,
                 code_root: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), token_path: str | os.PathLike[str] | None = None) -> None:
        """``code_root``: run the server from the ``zabref`` package in that folder (put first on its import path)
        instead of the installed one -- e.g. a patched copy. ``env``: extra environment variables (e.g.
        ``ZABREF_DISK=powerloss``: a kill is then a power cut, `zabref.storage`); ``args``: extra ``serve`` options;
        ``token_path``: the control token file (default: `control_token` beside the config)."""
        self.config_path = str(config_path)
        self.token_path = Path(token_path) if token_path is not None else control_token(Path(config_path).parent)
        self.token = read_token(self.token_path)
        self.sid = sid
        self.me = config.server(sid)
        self.code_root = Path(code_root) if code_root is not None else None
        self.proc: Any = None  # a subprocess.Popen, or what `_launch` returns in its place
        self.control_mode = False
        self.env = dict(env or {})
        self.args = tuple(args)

    @property
    def stderr_path(self) -> Path:
        return self.me.data_dir / "stderr.log"

    def start(self, *, control: bool = False, env: dict[str, str] | None = None) -> ServerProcess:
        """Start the process (``env``: extra environment for this start only, e.g. a crash point)."""
        if self.running:
            raise ZabError(f"server {self.sid} is already running (pid {self.proc.pid})")
        self.me.data_dir.mkdir(parents=True, exist_ok=True)
        args = ["serve", "--config", self.config_path, "--id", str(self.sid),
                "--control-token", str(self.token_path.resolve())]
        if control:
            args.append("--control")
        args += self.args
        self.proc = self._launch(args, {**self.env, **(env or {})})
        self.control_mode = control
        return self

    def _launch(self, args: list[str], extra: dict[str, str]) -> Any:
        """Start ``zabref <args>`` as a child process with ``extra`` added to the environment, stderr appended to
        `stderr_path`; a `subprocess.Popen` (or an object with its pid, poll, wait, kill, terminate, returncode)."""
        env, cwd = (dict(os.environ, **extra) if extra else None), None
        if self.code_root is not None:  # `-m` puts the working directory first on sys.path
            cwd = self.code_root
            env = dict(env or os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(self.code_root),
                                                                                  os.environ.get("PYTHONPATH")])))
        with open(self.stderr_path, "ab") as err:
            return subprocess.Popen([sys.executable, "-m", "zabref.cli", *args], cwd=cwd, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 30.0, incarnation: int | None = None) -> None:
        """Poll the control port until the server answers ``ping`` (as ``incarnation``, when given: after a
        ``reset``); ZabError if it exits or times out."""
        self.ready_control(timeout, incarnation).close()

    def ready_control(self, timeout: float = 30.0, incarnation: int | None = None,
                      request_timeout: float = 30.0) -> ControlClient:
        """`wait_ready`, returning the control connection whose ``ping`` the server answered, open and
        authenticated, its requests bounded by ``request_timeout`` seconds (a caller that keeps a connection saves
        opening a second one)."""
        deadline = time.monotonic() + timeout
        pause = 0.0005  # a forked server answers within milliseconds; an exec'd one in about 0.1 s
        while True:
            if not self.running:
                raise ZabError(f"server {self.sid} exited with code {self.proc.returncode if self.proc else None}; "
                               f"see {self.stderr_path}:\n{self.tail()}")
            c = self.control(timeout=2.0)
            try:
                answer = c.request("ping")
                pid = answer.get("pid")
                if incarnation is not None and answer.get("incarnation") != incarnation and pid == self.proc.pid:
                    pid = None  # the previous incarnation, still stopping
            except ControlError as e:
                c.close()
                if "not authenticated" in str(e):  # another cluster's server, with another token, has our port
                    raise ZabError(f"server {self.sid}: control port {self.me.control_port} refuses this cluster's "
                                   f"token ({self.token_path}): another server has the port") from None
                pid = None
            except OSError:
                c.close()
                pid = None
            except BaseException:  # e.g. an answer that is not JSON: a stranger on the port
                c.close()
                raise
            if pid == self.proc.pid:
                c.set_timeout(request_timeout)
                return c
            c.close()
            if pid is not None:  # some other program answers on our port: never talk to it as if it were ours
                raise ZabError(f"server {self.sid}: control port {self.me.control_port} is answered by pid {pid}, "
                               f"not by the server started here (pid {self.proc.pid})")
            if time.monotonic() > deadline:
                raise ZabError(f"server {self.sid} not ready within {timeout} s; see {self.stderr_path}")
            time.sleep(pause)
            pause = min(2 * pause, 0.002)

    def control(self, timeout: float = 30.0) -> ControlClient:
        if self.me.control_port is None:
            raise ConfigError(f"{self.config_path}: server {self.sid} has no control_port")
        return ControlClient(self.me.control_host, self.me.control_port, self.token, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL. With ``ZABREF_DISK=powerloss`` in ``env`` this is a power cut (only what the server fsynced
        survives); without it the operating system keeps what the server wrote and did not fsync."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class LocalCluster:
    """Every server of one config file as child processes (a context manager that stops them all)."""

    def __init__(self, config_path: str | os.PathLike[str], *, action_log: str | os.PathLike[str] | None = None,
                 env: dict[str, str] | None = None, code_root: str | os.PathLike[str] | None = None) -> None:
        """``action_log``: every server appends the spec actions it takes to that folder (`zabref validate`);
        ``env``: extra environment for every server (e.g. ``ZABREF_DISK=powerloss``); ``code_root``: run every
        server from the ``zabref`` package in that folder (`ServerProcess`)."""
        self.config_path = Path(config_path)
        self.config = load_config(self.config_path)
        args = ("--action-log", str(Path(action_log).resolve())) if action_log else ()
        self.servers = {sid: ServerProcess(self.config_path, self.config, sid, code_root=code_root, env=env, args=args)
                        for sid in self.config.sids}

    def __getitem__(self, sid: int) -> ServerProcess:
        return self.servers[sid]

    def start(self, *, control: bool = False, timeout: float = 30.0) -> LocalCluster:
        for s in self.servers.values():
            s.start(control=control)
        for s in self.servers.values():
            s.wait_ready(timeout)
        return self

    def stop(self) -> None:
        for s in self.servers.values():
            if s.running:
                s.proc.terminate()
        for s in self.servers.values():
            s.stop()

    def client_addresses(self) -> list[tuple[str, int]]:
        return [(s.me.host, s.me.client_port) for s in self.servers.values()]

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cluster(servers: int, data_dir: str, base_port: int, tick_ms: int, log_actions: str | None = None,
                leader_logs_late: bool = False) -> None:
    """The ``zabref cluster`` command: start the servers, print where they listen, wait for SIGINT/SIGTERM."""
    path = cluster_config(data_dir, servers, base_port, ClusterConfig(tick_ms=tick_ms,
                                                                      leader_logs_late=leader_logs_late))
    cluster = LocalCluster(path, action_log=log_actions)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        click.echo(f"config: {path}")
        for s in cluster.servers.values():
            m = s.me
            click.echo(f"server {m.id}: pid {s.proc.pid}, client {m.host}:{m.client_port}, quorum {m.quorum_port}, "
                       f"election {m.election_port}, control {m.control_port}, ZooKeeper clients "
                       f"{m.host}:{m.zk_client_port}, data {m.data_dir} "
                       f"(log {s.stderr_path})")
        click.echo(f"try: zabref client --config {path} submit hello; zabref client --config {path} read")
        if log_actions:
            click.echo(f"action logs: {log_actions} (check them with: zabref validate {log_actions})")
        click.echo("Ctrl-C stops the cluster.")
        exited: set[int] = set()
        while not stop["now"]:
            time.sleep(0.2)
            for s in cluster.servers.values():
                if not s.running and s.sid not in exited:
                    exited.add(s.sid)
                    click.echo(f"server {s.sid} exited with code {s.proc.returncode}; see {s.stderr_path}", err=True)
    finally:
        click.echo("stopping the cluster")
        cluster.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
