"""Server processes for replay, forked from a process that has already imported zabref.

Theory of operation
-------------------
A replay starts three servers per trace and one more per Crash step. Started with ``python -m zabref.cli serve``,
each pays for an interpreter and zabref's imports (about 0.1 s of CPU), while a trace's steps take a few ms each: the
start-ups were most of a replay's time. A fork server removes that cost and keeps what replay must keep:

* ``python -m conformance.replay.forkserver`` (the *zygote*) imports zabref's server modules once, from ``code_root``
when
  one is given (a seeded bug's patched copy: the zygote runs there, with it first on its path, as
  `zabref.runtime.cluster.ServerProcess` runs a server), and then waits for commands on stdin, one JSON object per line;
* ``spawn`` forks a child that points stdin and stdout at /dev/null and stderr at the server's ``stderr.log``, adds
  the given environment (``ZABREF_DISK=powerloss``: `zabref.storage.disk_from_env` reads it when the server
  starts, not at import), and runs ``zabref <args>`` through the same click entry point as the ``zabref``
  command, then exits with its code. The child is an ordinary process: its own pid, its own memory, SIGKILL is
  a power cut, SIGSTOP pauses it; what it wrote and did not fsync dies with it;
* the zygote reaps a child only when asked (``poll``, ``wait``), so a pid the driver holds cannot be reused by
  another process before the driver has seen it exit;
* when its stdin closes (the driver exited, or `ForkServer.close`), the zygote kills and reaps every child left.

`ForkedServer` is `zabref.runtime.cluster.ServerProcess` with `_launch` going through a fork server; its ``proc``
answers pid, poll, wait, kill, terminate and returncode as `subprocess.Popen` does. `fork_server(code_root)` keeps one
zygote per code root in this process (the two most recent), so consecutive traces share it.

What differs from an exec'd server, and why it does not matter here: the children of one zygote share its hash
seed (``PYTHONHASHSEED`` is drawn once per interpreter), so a set of strings iterates in the same order in every
server of a run; every server state replay compares is mapped to sorted spec values first
(conformance/replay/mapping.py).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from zabref.errors import ZabError
from zabref.runtime.cluster import ServerProcess

__all__ = ["ForkServer", "ForkedServer", "fork_server", "close_fork_servers", "process_state"]

#: The modules a server imports on its way to serving: imported by the zygote once, before any fork.
PRELOAD = ("zabref.cli", "zabref.config", "zabref.runtime.control", "zabref.runtime.server", "zabref.runtime.drivers", "zabref.net.clientport",
           "zabref.storage", "zabref.storage.powerloss", "logging", "asyncio")
#: How many zygotes (code roots) one process keeps at once.
KEPT = 2


class ForkServer:
    """One zygote process and the line protocol to it (thread-safe)."""

    def __init__(self, code_root: Path | None = None) -> None:
        self.code_root = code_root
        env, cwd = None, None
        if code_root is not None:  # `-m` puts the working directory first on sys.path, as ServerProcess does
            cwd = code_root
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(code_root),
                                                                           os.environ.get("PYTHONPATH")])))
        self._lock = threading.Lock()
        self._proc = subprocess.Popen([sys.executable, "-m", "conformance.replay.forkserver"], cwd=cwd, env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None)
        ready = self._read()
        if ready.get("ready") is not True:
            raise ZabError(f"the fork server did not start: {ready}")

    def _read(self) -> dict[str, Any]:
        line = self._proc.stdout.readline()
        if not line:
            raise ZabError(f"the fork server exited (code {self._proc.poll()})")
        return json.loads(line)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            try:
                self._proc.stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
                self._proc.stdin.flush()
            except (OSError, ValueError) as e:  # ValueError: its stdin was closed (close_fork_servers)
                raise ZabError(f"the fork server is gone: {e}") from None
            answer = self._read()
        if "error" in answer:
            raise ZabError(f"fork server: {op}: {answer['error']}")
        return answer

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the zygote kills and reaps its children, then exits
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._proc.stdout.close()


_servers: OrderedDict[str, ForkServer] = OrderedDict()
_servers_lock = threading.Lock()


def fork_server(code_root: Path | None = None) -> ForkServer:
    """This process's zygote for ``code_root`` (None: the installed zabref), started on first use."""
    key = str(Path(code_root).resolve()) if code_root is not None else ""
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and not server.alive:
            _servers.pop(key).close()
            server = None
        if server is None:
            while len(_servers) >= KEPT:
                _servers.popitem(last=False)[1].close()
            server = _servers[key] = ForkServer(Path(key) if key else None)
        _servers.move_to_end(key)
        return server


def close_fork_servers() -> None:
    with _servers_lock:
        while _servers:
            _servers.popitem()[1].close()


atexit.register(close_fork_servers)


def process_state(pid: int) -> str | None:
    """Process ``pid``'s state letter from /proc (R, S, T when stopped, Z a zombie, ...), or None when it has none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


class ForkedProcess:
    """A zygote's child, answering as much of `subprocess.Popen` as the harness uses."""

    def __init__(self, zygote: ForkServer, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._alive():
            self.returncode = self.zygote.request("poll", pid=self.pid).get("returncode")
        return self.returncode

    def _alive(self) -> bool:
        """Whether the child still runs (or is stopped), read from /proc without a round trip to the zygote. The
        zygote reaps a child only when asked (poll, wait), so until this process has its return code the pid is
        this child's: alive, stopped, or a zombie (state Z) that the zygote's poll reaps."""
        state = process_state(self.pid)
        return state is not None and state not in "ZXx"

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            answer = self.zygote.request("wait", pid=self.pid, timeout=timeout if timeout is not None else 3600.0)
            if answer.get("returncode") is None:
                raise subprocess.TimeoutExpired(f"server pid {self.pid}", timeout or 0.0)
            self.returncode = answer["returncode"]
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)  # not yet reaped: the pid is still this child's, never another process's

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkedServer(ServerProcess):
    """`zabref.runtime.cluster.ServerProcess` whose process is forked by this process's zygote for its code root."""

    def _launch(self, args: list[str], extra: dict[str, str]) -> ForkedProcess:
        zygote = fork_server(self.code_root)
        answer = zygote.request("spawn", args=list(args), env=extra, stderr=str(self.stderr_path))
        return ForkedProcess(zygote, int(answer["pid"]))


# ------------------------------------------------------------------------------------------------ the zygote


def _returncode(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def _child(args: list[str], env: dict[str, str], stderr: str) -> None:
    """In the forked child: stdio, environment, then ``zabref <args>``; never returns."""
    code: Any = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(stderr, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(null)
        os.close(err)
        os.environ.update(env)
        # As a fresh interpreter has it (the zygote ignores ^C); SIGPIPE stays ignored, as Python starts with it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from zabref.cli import main  # noqa: PLC0415 -- preloaded by the zygote; this is a dictionary lookup

        sys.argv = ["zabref", *args]
        main.main(args=list(args), prog_name="zabref", standalone_mode=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 -- the child reports anything on its stderr and exits
        import traceback  # noqa: PLC0415 -- only on this path

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def zygote_main() -> None:
    """The zygote: preload, then serve spawn/poll/wait commands on stdin until it closes."""
    import importlib  # noqa: PLC0415 -- the zygote's own start-up, not the driver's

    out = sys.stdout.buffer
    for name in PRELOAD:
        importlib.import_module(name)
    import gc  # noqa: PLC0415 -- the zygote's own start-up, as importlib above

    gc.collect()
    gc.freeze()  # the preloaded objects are never scanned by a child's collector: fewer copy-on-write page faults
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the driver's terminal is the driver's to handle
    done: dict[int, int] = {}
    children: set[int] = set()

    def reap(pid: int, block_s: float) -> int | None:
        if pid in done:
            return done[pid]
        if pid not in children:
            raise ValueError(f"pid {pid} is not a child of this fork server")
        deadline = time.monotonic() + block_s
        while True:
            got, status = os.waitpid(pid, os.WNOHANG)
            if got == pid:
                children.discard(pid)
                done[pid] = _returncode(status)
                return done[pid]
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.001)

    def answer(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj).encode() + b"\n")
        out.flush()

    answer({"ready": True, "pid": os.getpid()})
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            op = request["op"]
            if op == "spawn":
                pid = os.fork()
                if pid == 0:
                    _child(request["args"], request.get("env") or {}, request["stderr"])
                children.add(pid)
                answer({"pid": pid})
            elif op == "poll":
                answer({"returncode": reap(int(request["pid"]), 0.0)})
            elif op == "wait":
                answer({"returncode": reap(int(request["pid"]), float(request["timeout"]))})
            else:
                answer({"error": f"unknown op {op!r}"})
        except (KeyError, TypeError, ValueError, OSError) as e:
            answer({"error": f"{type(e).__name__}: {e}"})
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap(pid, 10.0)


if __name__ == "__main__":
    zygote_main()
