"""Real zabref servers for one trace: start them, crash and restart them, pause them, talk to their ports.

Theory of operation
-------------------
`Cluster` starts N ``zabref serve --control`` processes on a leased block of loopback ports (`zabref.net.ports`), each
with its own data dir (forked by conformance/replay/forkserver.py from a process that has imported zabref already), and
keeps one control connection per server (`zabref.runtime.control_client.ControlClient`). A server may start from a given
persistent state (`seed`: the FastLeaderElection models give every server a last zxid and an epoch), written to its data
dir through zabref's own storage before the process starts.

What the replay driver needs besides the control socket, each through the port a real peer or client would use:

* `reset_begin()` / `reset_end()`: every server starts again on an empty data dir, in its own process (the control
  socket's ``reset``), so that conformance/replay/pool.py can give the cluster to the next trace;
* `crash(sid)`: SIGKILL and start again from the same data dir -- a power cut: the servers run on
  `zabref.storage.PowerLossDisk` (``ZABREF_DISK=powerloss``), so what a server wrote and did not fsync is lost, as
  the spec's Crash keeps only the persistent variables;
* `durable(sid)`: what the server's disk holds durably, read from its files by `zabref.storage.read_durable`, not
  asked of the server;
* `pause(sids)` / `resume(sids)`: SIGSTOP / SIGCONT -- servers that answer nothing while another one's time passes;
* `submit(sid, value)`: a client request on the server's client port, in a thread of its own (the answer comes
  when the value is delivered there, perhaps many steps later); `Submit` records the answer and when it came;
* `vote(target, sender, notification)`: an election notification on ``target``'s election port, on a connection
  that says it is from ``sender`` (the handshake names it) -- how the driver gives a server's FastLeaderElection
  the inputs that end in the decision a trace step names (conformance/replay/steer.py).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.replay.forkserver import ForkedServer, process_state
from zabref.config import ClusterConfig, load_config
from zabref.core.packets import Notification
from zabref.core.zab import AppendTxns, Persistent, SetAcceptedEpoch, SetCurrentEpoch, apply_persist
from zabref.errors import ZabError
from zabref.net import clientwire, wire, zkwire
from zabref.net.peers import new_connection_id
from zabref.runtime.cluster import ServerProcess, cluster_config, find_free_base_port, release_base_port
from zabref.storage import ENV_DISK, Storage, read_durable

__all__ = ["Cluster", "Submit", "TIMING", "LOG_LINES", "POWER_LOSS"]

#: The servers' environment: a kill is a power cut (zabref.storage).
POWER_LOSS = {ENV_DISK: "powerloss"}
#: The timing of conformance clusters (control mode: a tick is a step of the logical clock, not wall time).
TIMING = ClusterConfig(tick_ms=100, init_limit=10, sync_limit=5)
LOG_LINES = 40


def _tail(path: Path, lines: int = LOG_LINES, start: int = 0) -> str:
    """The last ``lines`` lines of the file from byte ``start`` on."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@dataclass
class Submit:
    """One client request in flight: ``answer`` once the server answered (None until then); ``judged`` once the
    driver checked that answer against the spec state of the step after which it first saw it."""

    sid: int
    value: str
    answer: dict[str, Any] | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)
    judged: bool = False


class Cluster:
    """N control-mode servers for one trace, with one kept control connection each."""

    def __init__(self, folder: Path, n: int, root: Path | None, *, seed: dict[int, Persistent] | None = None,
                 attempts: int = 3, forked: bool = True, late: bool = False) -> None:
        """``forked``: fork the servers from this process's zygote (conformance/replay/forkserver.py); False starts each
        with
        ``python -m zabref.cli serve`` (`zabref.runtime.cluster.ServerProcess`), as scripts/bench_replay.py compares."""
        last: Exception | None = None
        server_class = ForkedServer if forked else ServerProcess
        self.base: int | None = None
        self.submits: list[Submit] = []
        self._votes: dict[tuple[int, int], socket.socket] = {}
        self._incarnations: dict[int, int] = {}
        self._log_start: dict[tuple[int, str], int] = {}  # (sid, log file) -> where this trace's lines start
        self.folder = folder
        for attempt in range(attempts):
            where = folder / f"try{attempt}"
            self.base = find_free_base_port(n)  # leased until stop(): no parallel replay can take these ports
            timing = dataclasses.replace(TIMING, leader_logs_late=late)  # the trace's model's LeaderLogsLate
            path = cluster_config(where, n, self.base, timing).resolve()
            self.config = load_config(path)
            self.servers = {sid: server_class(path, self.config, sid, code_root=root, env=POWER_LOSS)
                            for sid in self.config.sids}
            try:
                for sid, state in (seed or {}).items():
                    _write_state(self.servers[sid].me.data_dir, state)
                for s in self.servers.values():
                    s.start(control=True)
                self.controls = {sid: s.ready_control(30.0) for sid, s in self.servers.items()}
                return
            except ZabError as e:
                last = e
                self.stop()
        raise ZabError(f"servers would not start after {attempts} attempts: {last}")

    # ------------------------------------------------------------------------------------------ processes

    def crash(self, sid: int) -> None:
        """Crash(i): SIGKILL, then start again from the same data dir."""
        self.controls[sid].close()
        self.close_votes(sid)
        server = self.servers[sid]
        server.kill()
        self.controls[sid] = server.start(control=True).ready_control(30.0)

    def reset_begin(self) -> None:
        """Ask every server to start again on an empty data directory in its own process (the control socket's
        ``reset``, `zabref.runtime.server.run_server`): the initial state of a trace from Init, without forking new
        servers. `reset_end` waits until they are back. ControlError/OSError when a server does not answer."""
        self._incarnations = {sid: c.request("reset", pause=True)["incarnation"] for sid, c in self.controls.items()}
        for c in self.controls.values():
            c.close()
        for sock in self._votes.values():
            sock.close()
        self._votes.clear()
        self.submits = []
        # each process stops itself once its old server is gone; the new ones start together, as a new cluster's
        wait_until("every server of the cluster to stop its old incarnation",
                   lambda: all(self.stopped(sid) or not s.running for sid, s in self.servers.items()), 30.0)
        self.resume(set(self.servers))

    def reset_end(self) -> None:
        """Wait until every server runs its new incarnation; reconnect the control connections. ZabError if one
        does not come back."""
        self.controls = {sid: s.ready_control(30.0, incarnation=self._incarnations[sid])
                         for sid, s in self.servers.items()}
        for sid, s in self.servers.items():  # the logs a failure report shows start at this reset
            for name in ("server.log", "stderr.log"):
                self._log_start[(sid, name)] = _size(s.me.data_dir / name)

    def durable(self, sid: int) -> Persistent:
        """What server ``sid``'s disk holds durably (its files, not its memory)."""
        return read_durable(self.servers[sid].me.data_dir).persistent()

    def stopped(self, sid: int) -> bool:
        """Whether server ``sid``'s process is stopped (SIGSTOP: state T in /proc)."""
        state = process_state(self.servers[sid].proc.pid)
        return state is not None and state in "Tt"

    def pause(self, sids: set[int]) -> None:
        for sid in sids:
            os.kill(self.servers[sid].proc.pid, signal.SIGSTOP)

    def resume(self, sids: set[int]) -> None:
        for sid in sids:
            os.kill(self.servers[sid].proc.pid, signal.SIGCONT)

    def logs(self) -> dict[str, str]:
        out = {}
        for sid, s in sorted(self.servers.items()):
            for name in ("server.log", "stderr.log"):
                text = _tail(s.me.data_dir / name, start=self._log_start.get((sid, name), 0))
                if text:
                    out[f"server {sid} {name}"] = text
        return out

    def stop(self) -> None:
        for c in getattr(self, "controls", {}).values():
            c.close()
        for sock in self._votes.values():
            sock.close()
        self._votes.clear()
        for s in self.servers.values():
            if s.running:
                os.kill(s.proc.pid, signal.SIGCONT)
            s.kill()
        if self.base is not None:
            release_base_port(self.base)
            self.base = None

    # ------------------------------------------------------------------------------------------ ports

    def submit(self, sid: int, value: str) -> Submit:
        """Send ``{"op": "submit", "value": value}`` to ``sid``'s client port; the answer is awaited in a thread."""
        sub = self._client(sid, {"op": "submit", "value": value}, value)
        self.submits.append(sub)
        return sub

    def client_sync(self, sid: int) -> Submit:
        """Send ``{"op": "sync"}`` to ``sid``'s client port; the answer is awaited in a thread."""
        return self._client(sid, {"op": "sync"}, "sync")

    def _client(self, sid: int, request: dict[str, Any], value: str) -> Submit:
        sub = Submit(sid, value)
        me = self.config.server(sid)
        sock = socket.create_connection((me.host, me.client_port), timeout=5.0)
        sock.sendall(clientwire.encode(request))

        def wait() -> None:
            try:
                sock.settimeout(120.0)
                sub.answer = clientwire.read_answer(sock)
            except (OSError, ValueError) as e:
                sub.error = f"{type(e).__name__}: {e}"
            finally:
                sock.close()
                sub.done.set()

        threading.Thread(target=wait, name=f"{request['op']}-{sid}", daemon=True).start()
        return sub

    def close_votes(self, target: int) -> None:
        """End the connections `vote` opened to ``target``: the one from a larger id was the pair's connection at
        ``target`` while it lasted (`zabref.net.votes`), and the real pair's takes its place when either sends."""
        for key in [k for k in self._votes if k[0] == target]:
            self._votes.pop(key).close()

    def vote(self, target: int, sender: int, n: Notification) -> None:
        """One notification to ``target``'s election port on a connection whose handshake says ``sender``."""
        key = (target, sender)
        sock = self._votes.get(key)
        if sock is None:
            me = self.config.server(target)
            sock = socket.create_connection((me.host, me.election_port), timeout=5.0)
            address = f"{self.config.server(sender).host}:{self.config.server(sender).election_port}"
            sock.sendall(zkwire.encode_initial(zkwire.Initial(sender, zkwire.PROTOCOL_V1, (address,))))
            self._votes[key] = sock
        sock.sendall(wire.frame(wire.encode_notification(n)))

    def request(self, sid: int, op: str, **fields: Any) -> dict[str, Any]:
        return self.controls[sid].request(op, **fields)


def _write_state(data_dir: Path, state: Persistent) -> None:
    """Give a server's data dir ``state`` before its process starts (through zabref's own storage)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    storage, _ = Storage.open(data_dir)
    try:
        ops: list[Any] = []
        if state.history:
            ops.append(AppendTxns(state.history))
        ops += [SetAcceptedEpoch(state.accepted_epoch), SetCurrentEpoch(state.current_epoch)]
        apply_persist(ops, storage)
    finally:
        storage.close()


def wait_until(what: str, predicate: Any, timeout: float) -> Any:
    """Poll ``predicate`` until it returns something true (first after 0.5 ms, backing off to every 8 ms); ZabError
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ZabError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(pause)
        pause = min(2 * pause, 0.008)
