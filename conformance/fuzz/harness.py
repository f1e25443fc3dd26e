"""The live fuzzer's harness: a cluster with a ghost, worker tasks throwing inputs, the checks after the run.

Theory of operation
-------------------
`fuzz_cluster` lays out four servers of which 1-3 run (`RUNNING`) and 4, the ghost (`GHOST`,
`conformance.fuzz.inputs`), never does. `Fuzzer.run` runs `WORKERS` asyncio tasks that take inputs one by one. Input i
is built from ``random.Random(f"{seed}:{i}")``: a kind (weighted, or round robin over the kinds a caller named), a
server whose role fits the kind, then bytes. At most `MAX_SILENT` silence inputs wait at once.

Inputs whose quorum-port FOLLOWERINFO names a configured sid take a per-server lock, so one ghost connection
never replaces another (which would close it for the wrong reason). Meanwhile a task polls every server's
``state`` (roles, for the targets) and VmRSS (/proc/<pid>/status) every `POLL` s, and a thread submits values
through `ZabClient`. An outcome that contradicts its kind while the target's role changed around it is
*inconclusive* (an election moved the leader under the input), not a failure. After the last input
`Report.problems` lists what went wrong: failed inputs, a dead server, no commit after the run, a Python traceback
in a server's stderr, or a server that closed more fuzz connections than its log explains.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conformance.fuzz.frames import CLOSE_WAIT, ROLES, Input, Kind, Target
from conformance.fuzz.inputs import ANSWER, CLOSE, SILENCE, kind_table
from conformance.fuzz.report import CLOSE_LINE, CLOSE_PORTS, Report, reason_class
from zabref.client import ClientError, ZabClient
from zabref.config import ClusterConfig, Security
from zabref.core import payloads
from zabref.core.packets import PacketType
from zabref.errors import CodecError
from zabref.net import peers, zkwire
from zabref.net.ports import find_free_base_port
from zabref.net.security import AuthError, Guard, client_context, read_secret
from zabref.runtime import control
from zabref.runtime.cluster import LocalCluster, cluster_config

__all__ = ["GHOST", "RUNNING", "Fuzzer", "fuzz_cluster", "rss_kib", "WORKERS", "MAX_SILENT", "POLL"]

WORKERS = 8
MAX_SILENT = 64  # silence inputs waiting at once
POLL = 1.0
_I32 = struct.Struct(">i")
#: The servers a fuzz run starts, and the configured server that never runs (its sid passes the handshake).
RUNNING = (1, 2, 3)
GHOST = 4


def fuzz_cluster(folder: str | os.PathLike[str], timing: ClusterConfig = ClusterConfig(),
                 security: Security = Security()) -> Path:
    """Write ``folder/cluster.toml``: servers 1-3 (`RUNNING`) and the ghost 4 (`GHOST`, never started), with
    ``security``. Returns its path."""
    return cluster_config(folder, len(RUNNING) + 1, find_free_base_port(len(RUNNING) + 1), timing,
                          security=security)


def rss_kib(pid: int) -> int:
    """A process's resident set size (VmRSS in /proc/<pid>/status), in KiB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0



class Fuzzer:
    """Throws ``inputs`` inputs at every port of every running server of ``cluster`` (see the module docstring)."""

    def __init__(self, cluster: LocalCluster, *, inputs: int, seed: int = 0, kinds: list[str] | None = None,
                 include_known: bool = False, progress: Callable[[int], None] | None = None,
                 stranger: ssl.SSLContext | None = None) -> None:
        """``stranger``: a TLS client context with a certificate of another CA (the tls-*-stranger kinds)."""
        self.cluster = cluster
        self.live = {sid: s for sid, s in cluster.servers.items() if s.running}
        timing = cluster.config.cluster
        sec = cluster.config.security
        # Past the gates: a member's certificate and the quorum secret, as the servers themselves hold them.
        self.member_tls = client_context(sec) if sec.quorum_tls or sec.client_tls else None
        self.tls_ports = {p for p, on in (("quorum_port", sec.quorum_tls), ("election_port", sec.quorum_tls),
                                          ("client_port", sec.client_tls), ("zk_client_port", sec.client_tls)) if on}
        self.guard = Guard(secret=read_secret(sec.quorum_secret) if sec.quorum_secret is not None else None)
        self.stranger = stranger
        table = kind_table(timing.tick_ms / 1000, timing.init_limit, tls=bool(self.tls_ports),
                           auth=self.guard.secret is not None, stranger=stranger is not None)
        names = kinds if kinds is not None else list(table)
        self.kinds = [table[n] for n in names if include_known or kinds is not None or not table[n].known_issue]
        self.report = Report(inputs=inputs, seed=seed)
        self.report.skipped = [n for n in names if table[n] not in self.kinds]
        self.round_robin = kinds is not None
        self.inputs, self.seed, self.progress = inputs, seed, progress
        self.ghost = GHOST
        self.participants = RUNNING
        self.targets: dict[int, Target] = {}
        self.last_change: dict[int, float] = {sid: 0.0 for sid in self.live}
        self._stop = threading.Event()
        self._done = 0

    # ---------------------------------------------------------------------------------------------- observing

    def _poll_once(self) -> None:
        for sid, s in self.live.items():
            r = self.report
            kib = rss_kib(s.proc.pid)
            r.rss_peak[sid] = max(r.rss_peak.get(sid, 0), kib)
            try:
                with s.control(timeout=10) as c:
                    v = c.request("state")["variables"]
            except (OSError, control.ControlError):
                continue
            t = Target(sid, v["state"], v["leader"] if v["leader"] is not None else -1,
                       max([z for z, _ in v["history"]], default=0), self.ghost, self.participants)
            old = self.targets.get(sid)
            if old is not None and (old.role, old.leader) != (t.role, t.leader):
                self.last_change[sid] = time.monotonic()
                r.role_changes += 1
            self.targets[sid] = t

    async def _poller(self) -> None:
        while True:
            await asyncio.to_thread(self._poll_once)
            await asyncio.sleep(POLL)

    def _writer(self) -> None:
        with ZabClient(self.cluster.client_addresses(), timeout=15, attempts=10, max_backoff=0.5,
                       tls=self._client_tls) as c:
            k = 0
            while not self._stop.is_set():
                try:
                    c.submit(f"fuzz-write-{k}")
                    self.report.writes_ok += 1
                except ClientError:
                    self.report.writes_failed += 1
                    self._stop.wait(0.2)
                k += 1
                self._stop.wait(0.02)

    # ---------------------------------------------------------------------------------------------- inputs

    async def _closed(self, reader: asyncio.StreamReader, wait: float) -> bool:
        """Whether the server closes the connection within ``wait`` seconds (what it sends meanwhile is dropped)."""
        deadline = time.monotonic() + wait
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not await asyncio.wait_for(reader.read(65536), left):
                    return left > 0
        except (TimeoutError, asyncio.TimeoutError):
            return False
        except (ConnectionError, OSError):
            return True

    async def _answers(self, reader: asyncio.StreamReader, kind: Kind, inp: Input) -> str | None:
        """None if every request got a JSON object (with "error" when bad), else what was wrong."""
        for i, bad in enumerate(inp.bad):
            try:
                if kind.port == "client_port":
                    n = _I32.unpack(await asyncio.wait_for(reader.readexactly(4), CLOSE_WAIT))[0]
                    raw = await asyncio.wait_for(reader.readexactly(n), CLOSE_WAIT)
                else:
                    raw = await asyncio.wait_for(reader.readline(), CLOSE_WAIT)
                answer = json.loads(raw)
            except (TimeoutError, asyncio.TimeoutError):
                return f"no answer to request {i} within {CLOSE_WAIT} s"
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                return f"connection closed before the answer to request {i}"
            except ValueError as e:
                return f"answer {i} is not JSON: {e}"
            if not isinstance(answer, dict) or (bad and "error" not in answer):
                return f"answer {i} to a bad request is {str(answer)[:120]}"
        return None

    async def _one(self, i: int, kind: Kind, t: Target, inp: Input) -> None:
        s = self.live[t.sid]
        start = time.monotonic()
        host = s.me.host
        if kind.port == "control_port":
            host = s.me.control_host
            if kind.authenticate:  # past the gate: the input is read as requests of an authenticated connection
                auth = json.dumps({"op": "auth", "token": s.token.decode()}).encode() + b"\n"
                inp = dataclasses.replace(inp, payload=auth + inp.payload,
                                          bad=(False, *inp.bad) if inp.expect == ANSWER else inp.bad)
        lock = self._locks[t.sid] if inp.exclusive else None
        if lock is not None:
            await lock.acquire()
        writer = None
        try:
            tls = self._tls(kind, inp, host)
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, getattr(s.me, kind.port), limit=4 << 20, **tls), CLOSE_WAIT)
            except ssl.SSLError as e:
                if inp.tls == "member" or inp.expect != CLOSE:
                    return self._outcome(i, kind, t, start, f"TLS with a member's certificate failed: {e}")
                self.report.closed_by_server[(t.sid, kind.port)] += 1  # refused during the TLS handshake: logged
                return self._outcome(i, kind, t, start, None, "closed")
            except (OSError, TimeoutError, asyncio.TimeoutError) as e:
                return self._outcome(i, kind, t, start, f"cannot connect: {e}")
            wrote = True
            payload = inp.payload
            try:
                payload = await self._pass_auth(kind, t, reader, writer, payload)
                writer.write(payload)
                await asyncio.wait_for(writer.drain(), CLOSE_WAIT)
            except AuthError as e:
                return self._outcome(i, kind, t, start, f"quorum authentication with the secret failed: {e}")
            except (ConnectionError, OSError, TimeoutError, asyncio.TimeoutError):
                wrote = False
            if inp.expect in (CLOSE, SILENCE):
                closed = not wrote or await self._closed(reader, inp.wait)
                if closed and inp.reason:
                    self.report.closed_by_server[(t.sid, self._log_key(kind.port, inp.payload, t.sid))] += 1
                problem = None if closed else f"{inp.expect}: still open after {inp.wait} s"
                return self._outcome(i, kind, t, start, problem, "closed")
            if inp.expect == ANSWER:
                problem = await self._answers(reader, kind, inp) if wrote else "connection closed while writing"
                return self._outcome(i, kind, t, start, problem, "answered")
            return self._outcome(i, kind, t, start, None, "sent")
        finally:
            if writer is not None:
                writer.transport.abort()
            if lock is not None:
                lock.release()

    @property
    def _client_tls(self) -> ssl.SSLContext | None:
        return self.member_tls if "client_port" in self.tls_ports else None

    def _tls(self, kind: Kind, inp: Input, host: str) -> dict[str, Any]:
        """open_connection's TLS arguments: a member's certificate on a TLS port, unless the input tests the gate."""
        if kind.port not in self.tls_ports or inp.tls == "none":
            return {}
        ctx = self.stranger if inp.tls == "stranger" else self.member_tls
        return {"ssl": ctx, "server_hostname": host, "ssl_handshake_timeout": CLOSE_WAIT}

    async def _pass_auth(self, kind: Kind, t: Target, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                         payload: bytes) -> bytes:
        """With quorum authentication on, an input that starts with first bytes the server accepts (a configured sid
        other than the target's) proves the secret after it, as a server would; returns the bytes left to send.
        Gate kinds and every other input go as they are."""
        hello = _hello(kind.port, payload)
        if self.guard.secret is None or kind.gate is not None or hello is None:
            return payload
        sid, first, bound = hello
        if sid not in self.cluster.config.sids or sid == t.sid:
            return payload
        writer.write(payload[:first])
        await self.guard.prove(reader, writer, bound, t.sid, CLOSE_WAIT)
        return payload[first:]

    def _log_key(self, port: str, payload: bytes, target: int) -> str:
        """``port``, or ``port`` "as a live server" when the input's first bytes name a participant: its close is
        logged under that sid, among the closes of real connections."""
        hello = _hello(port, payload)
        if hello is not None and hello[0] in self.participants and hello[0] != target:
            return f"{port} as a live server"  # its own sid is refused at the handshake, by address
        return port

    def _outcome(self, i: int, kind: Kind, t: Target, start: float, problem: str | None, ok: str = "") -> None:
        self._done += 1
        if self.progress is not None:
            self.progress(1)
        if problem is None:
            self.report.outcomes[(kind.name, ok)] += 1
            return
        if self.last_change[t.sid] >= start - 2 * POLL:  # an election moved roles around the input
            self.report.outcomes[(kind.name, "inconclusive")] += 1
            return
        self.report.outcomes[(kind.name, "FAILED")] += 1
        self.report.failures.append(f"input {i} ({kind.name} -> server {t.sid} {t.role} {kind.port}): {problem}")

    async def _worker(self, indexes: list[int], silent: asyncio.Semaphore, pending: set[asyncio.Task[None]]) -> None:
        while indexes:
            i = indexes.pop()
            rng = random.Random(f"{self.seed}:{i}")
            if self.round_robin:  # kinds named by the caller: each gets its share, whatever its weight
                kind = self.kinds[i % len(self.kinds)]
            else:
                kind = rng.choices(self.kinds, [k.weight for k in self.kinds])[0]
            targets = [t for sid, t in sorted(self.targets.items()) if t.role in kind.roles]
            if not targets:
                kind = next(k for k in self.kinds if k.roles == ROLES)
                targets = sorted(self.targets.values(), key=lambda t: t.sid)
            t = rng.choice(targets)
            inp = kind.make(rng, t)
            self.report.by_kind[kind.name] += 1
            if inp.expect == SILENCE:
                await silent.acquire()
                task = asyncio.get_running_loop().create_task(self._one(i, kind, t, inp))
                pending.add(task)
                task.add_done_callback(lambda tk: (pending.discard(tk), silent.release()))
            else:
                await self._one(i, kind, t, inp)

    async def _run_inputs(self) -> None:
        self._locks = {sid: asyncio.Lock() for sid in self.live}
        await asyncio.to_thread(self._poll_once)
        poller = asyncio.get_running_loop().create_task(self._poller())
        indexes = list(range(self.inputs - 1, -1, -1))
        silent, pending = asyncio.Semaphore(MAX_SILENT), set()
        try:
            await asyncio.gather(*(self._worker(indexes, silent, pending) for _ in range(WORKERS)))
            while pending:
                await asyncio.gather(*list(pending))
        finally:
            poller.cancel()

    # ---------------------------------------------------------------------------------------------- checks

    def run(self) -> Report:
        r = self.report
        log_offsets = {sid: _size(s.me.data_dir / "server.log") for sid, s in self.live.items()}
        err_offsets = {sid: _size(s.stderr_path) for sid, s in self.live.items()}
        r.rss_before = {sid: rss_kib(s.proc.pid) for sid, s in self.live.items()}
        writer = threading.Thread(target=self._writer, name="fuzz-writer", daemon=True)
        start = time.monotonic()
        writer.start()
        try:
            asyncio.run(self._run_inputs())
        finally:
            self._stop.set()
            writer.join(60)
        r.seconds = time.monotonic() - start
        r.problems += r.failures
        for sid, s in self.live.items():
            if not s.running:
                r.problems.append(f"server {sid} exited with code {s.proc.returncode}: {s.tail(5)}")
        addresses = [(s.me.host, s.me.client_port) for s in self.live.values()]
        try:
            with ZabClient(addresses, timeout=15, attempts=60, tls=self._client_tls) as c:
                r.after_zxid = c.submit("after-fuzz")
        except ClientError as e:
            r.problems.append(f"no commit after the run: {e}; servers: {self._roles()}")
        for sid, s in self.live.items():
            r.rss_after[sid] = rss_kib(s.proc.pid)
            r.rss_peak[sid] = max(r.rss_peak.get(sid, 0), r.rss_after[sid])
            if "Traceback" in _tail_from(s.stderr_path, err_offsets[sid]):
                r.problems.append(f"server {sid} wrote a Python traceback to {s.stderr_path}")
            self._count_log(sid, _tail_from(s.me.data_dir / "server.log", log_offsets[sid]))
        for key, n in sorted(r.closed_by_server.items()):
            if r.logged_closes[key] < n:
                r.problems.append(f"server {key[0]} {key[1]}: closed {n} fuzz connections but logged only "
                                  f"{r.logged_closes[key]} reasons")
        return r

    def _roles(self) -> str:
        out = []
        for sid, s in self.live.items():
            try:
                with s.control(timeout=5) as c:
                    v = c.request("state")["variables"]
                out.append(f"{sid}: {v['state']}/{v['zab_state']} leader {v['leader']}")
            except (OSError, control.ControlError) as e:
                out.append(f"{sid}: no state ({e})")
        return "; ".join(out)

    def _count_log(self, sid: int, text: str) -> None:
        live_sids = {str(p) for p in self.participants}
        for line in text.splitlines():
            m = CLOSE_LINE.search(line)
            if m is None:
                continue
            port = CLOSE_PORTS[m.group(1)]
            if m.group(2) in live_sids:  # real connections, and fuzz inputs that spoke as a live server
                port = f"{port} as a live server"
            self.report.logged_closes[(sid, port)] += 1
            self.report.reasons[(port, reason_class(m.group(3)))] += 1


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _tail_from(path: Path, offset: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _hello(port: str, payload: bytes) -> tuple[int, int, bytes] | None:
    """When ``payload`` starts with a port's whole first bytes (a quorum port's FOLLOWERINFO, an election port's
    initial message): the sid they name, their length, and the bytes quorum authentication binds; else None."""
    if port == "quorum_port":
        cur = zkwire.Cursor(payload, "fuzz input")
        try:
            packet = zkwire.read_quorum_packet(cur)
            if packet.type != PacketType.FOLLOWERINFO:
                return None
            sid = payloads.decode_followerinfo_data(packet.data).serverid
        except (zkwire.Short, CodecError):
            return None
        return sid, cur.pos, payload[:cur.pos]
    if port == "election_port":
        cur = zkwire.Cursor(payload, "fuzz input")
        try:
            initial = zkwire.read_initial(cur)
        except (zkwire.Short, CodecError):
            return None
        return initial.sid, cur.pos, payload[:cur.pos]
    return None
