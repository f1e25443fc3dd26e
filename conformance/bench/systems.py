"""Start, inspect and crash each system under test, behind one small interface (`Harness`).

Theory of operation
-------------------
A harness owns one 3-server cluster in a folder of its own, on a leased port block: `ZabrefHarness` wraps
`zabref.runtime.cluster.LocalCluster` (default timing: tick 100 ms, initLimit 10, syncLimit 5; fsync before every ACK,
group commit; every server also listens on ``zk_client_port``, ZooKeeper's client protocol) and is driven by zabref's
Python client on its client port (system ``zabref``) or by the Java client on its ``zk_client_port``
(``zabref-java``); `ZooKeeperHarness` wraps `conformance.zk.ensemble.ZkEnsemble` (tickTime 2000, forceSync=yes) and
is driven by kazoo (system ``zookeeper``) or by the Java client (``zookeeper-java``, `conformance.bench.javaclient`).
Whatever drives it, a harness finds the leader and checks serving the same way (zabref: its control and client
ports; ZooKeeper: ``srvr``), and the servers' CPU and memory are read from the same pids. Each gives
the workload adapter for its client, ``pids()`` (server id -> process id, for CPU and memory), ``leader()`` (blocking
until one serves), ``kill(sid)`` (SIGKILL),
``restart(sid)`` (same data dir; returns once the whole cluster serves again) and ``serving_leader(sids)`` (a
non-blocking probe used while timing a failover). Leaving the ``with`` block stops every process and releases the
ports (and ends the client's process, if it has one).
"""

from __future__ import annotations

import dataclasses

import json
import socket
import time
from pathlib import Path
from typing import Any

from conformance.bench import BenchError
from conformance.bench.javaclient import JavaClient, JavaZooKeeperAdapter
from conformance.bench.workload import ZabrefAdapter, ZooKeeperAdapter
from conformance.zk.ensemble import ZkEnsemble, mode_of
from zabref.config import ClusterConfig
from zabref.net import wire
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port

__all__ = ["ZabrefHarness", "ZooKeeperHarness"]

SERVERS = 3
#: zabref's default tick (100 ms: election finalize wait 200 ms, vote resend 400 ms) with ZooKeeper's liveness in wall
#: time: syncLimit 5 x tickTime 2000 = 10 s, initLimit 10 x 2000 = 20 s. zabref's default sync_limit (5 ticks =
#: 0.5 s) counts ticks in the event pump, so on a loaded 2-core machine a pump stall of 0.5 s under 128 writes in
#: flight made a follower give up a live leader (docs/performance.md).
TIMING = ClusterConfig(tick_ms=100, init_limit=200, sync_limit=100)
#: The settings' ``fsync`` of servers with [cluster] leader_logs_late.
FSYNC_LATE = "before every follower's ACK; a leader's after its PROPOSAL left (leader_logs_late)"


class ZabrefHarness:
    def __init__(self, folder: Path, code_root: Path | None = None, action_log: Path | None = None,
                 java_client: JavaClient | None = None, late: bool = False) -> None:
        """``code_root``: run the servers from the ``zabref`` package in that folder (e.g. a patched copy);
        ``action_log``: every server writes its action log there (`zabref.runtime.actionlog`); ``java_client``:
        drive it with that compiled Java client on the servers' ``zk_client_port`` (system ``zabref-java``), else
        with zabref's Python client on their client port (``zabref``); ``late``: the servers run with ``[cluster]
        leader_logs_late`` (a leader's PROPOSAL leaves before its own log write is durable)."""
        self.base = find_free_base_port(SERVERS)
        try:
            timing = dataclasses.replace(TIMING, leader_logs_late=late)
            self.cluster = LocalCluster(cluster_config(folder, SERVERS, self.base, timing), action_log=action_log,
                                        code_root=code_root)
            self.cluster.start()
            self.sids = list(self.cluster.servers)
            #: each server's own client port: where the harness asks ``sync`` whatever client drives the rows
            self.addresses = {s.sid: (s.me.host, s.me.client_port) for s in self.cluster.servers.values()}
            self.adapter: Any = ZabrefAdapter(self.addresses) if java_client is None else \
                JavaZooKeeperAdapter(self.zk_client_ports(), java_client, folder / "zkload.stderr.log",
                                     system="zabref-java")
        except BaseException:
            self.close()
            raise
        self.system: str = self.adapter.system
        self.settings = {"build": self.build(), "tick_ms": self.cluster.config.cluster.tick_ms,
                         "init_limit": self.cluster.config.cluster.init_limit,
                         "sync_limit": self.cluster.config.cluster.sync_limit,
                         "fsync": FSYNC_LATE if late else "before every ACK",
                         "code_root": str(code_root) if code_root else None,
                         "action_log": str(action_log) if action_log else None,
                         "client": "zabclient (Python, asyncio) on client_port" if java_client is None else
                         "ZkLoad.java (ZooKeeper's Java client, async) on zk_client_port"}

    def build(self) -> str:
        """Which build of zabref the servers run (each says it in ``ping``: ``pure`` or ``compiled``; mixed builds
        are named as ``pure+compiled``)."""
        builds = set()
        for s in self.cluster.servers.values():
            with s.control(timeout=10.0) as c:
                builds.add(str(c.request("ping").get("build", "unknown")))
        return "+".join(sorted(builds))

    def zk_client_ports(self) -> dict[int, int]:
        """Each server's ``zk_client_port`` (ZooKeeper's client protocol), which `cluster_config` always sets."""
        ports = {s.sid: s.me.zk_client_port for s in self.cluster.servers.values()}
        missing = sorted(sid for sid, port in ports.items() if port is None)
        if missing:
            raise BenchError(f"zabref-java: servers {missing} have no zk_client_port in {self.cluster.config_path}")
        return {sid: port for sid, port in ports.items() if port is not None}

    def pids(self) -> dict[int, int]:
        return {sid: s.proc.pid for sid, s in self.cluster.servers.items() if s.proc is not None and s.running}

    def _state(self, sid: int) -> dict[str, Any] | None:
        s = self.cluster[sid]
        if not s.running:
            return None
        try:
            with s.control(timeout=5.0) as c:
                return c.request("state")["variables"]
        except Exception:  # noqa: BLE001 -- not up yet
            return None

    def _serves(self, sid: int, timeout: float = 0.5) -> bool:
        """Does server ``sid`` answer ``sync`` (one try, no retry)?"""
        try:
            with socket.create_connection(self.addresses[sid], timeout=timeout) as sock:
                sock.sendall(wire.frame(b'{"op":"sync"}'))
                buf = b""
                while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return False
                    buf += chunk
            return "zxid" in json.loads(buf[4:])
        except (OSError, ValueError):
            return False

    def leader(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for sid in self.sids:
                v = self._state(sid)
                if v and v["state"] == "LEADING" and v["zab_state"] == "BROADCAST" \
                        and all(self._serves(s) for s in self.sids if self.cluster[s].running):
                    return sid
            time.sleep(0.05)
        raise BenchError(f"zabref: no leader serving within {timeout} s; see {self.cluster.config_path.parent}")

    def serving_leader(self, sids: list[int]) -> tuple[int | None, float] | None:
        """(leader, when) once one of ``sids`` answers ``sync`` -- a leader is in BROADCAST and serves -- else None."""
        if not any(self._serves(sid, 0.2) for sid in sids):
            return None
        when = time.monotonic()
        states = {sid: self._state(sid) for sid in sids}
        return next((sid for sid, v in states.items() if v and v["state"] == "LEADING"), None), when

    def kill(self, sid: int) -> None:
        self.cluster[sid].kill()

    def restart(self, sid: int, timeout: float = 60.0) -> None:
        self.cluster[sid].start()
        self.cluster[sid].wait_ready(timeout)
        deadline = time.monotonic() + timeout
        while not all(self._serves(s, 2.0) for s in self.sids):
            if time.monotonic() > deadline:
                raise BenchError(f"zabref: server {sid} restarted but the cluster does not serve within {timeout} s")
            time.sleep(0.1)

    def close(self) -> None:
        if getattr(self, "adapter", None) is not None:
            self.adapter.close()
        if getattr(self, "cluster", None) is not None:
            self.cluster.stop()
        release_base_port(self.base)

    def __enter__(self) -> ZabrefHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ZooKeeperHarness:
    """``java_client``: drive it with that compiled Java client (system ``zookeeper-java``), else with kazoo."""

    def __init__(self, folder: Path, classpath: str, java_client: JavaClient | None = None) -> None:
        self.base = find_free_base_port(SERVERS)
        try:
            self.ensemble = ZkEnsemble(folder, self.base, SERVERS, classpath=classpath)
            self.ensemble.start()
        except BaseException:
            self.close()
            raise
        self.sids = [m.id for m in self.ensemble.members]
        ports = {m.id: m.client_port for m in self.ensemble.members}
        self.adapter: Any = ZooKeeperAdapter(ports) if java_client is None else \
            JavaZooKeeperAdapter(ports, java_client, folder / "zkload.stderr.log")
        self.system = self.adapter.system
        self.settings = {"tickTime_ms": self.ensemble.tick_time_ms, "initLimit": 10, "syncLimit": 5,
                         "forceSync": "yes", "heap_mb": self.ensemble.heap_mb,
                         "client": "kazoo" if java_client is None else "ZkLoad.java (ZooKeeper's Java client, async)"}

    def pids(self) -> dict[int, int]:
        return {sid: p.pid for sid, p in self.ensemble.procs.items() if p.poll() is None}

    def leader(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sid = self.ensemble.leader()
            if sid is not None:
                return sid
            time.sleep(0.05)
        raise BenchError(f"ZooKeeper: no leader within {timeout} s; see {self.ensemble.folder}")

    def serving_leader(self, sids: list[int]) -> tuple[int | None, float] | None:
        """(leader, when) once one of ``sids`` answers ``srvr`` with ``Mode: leader``, else None."""
        sid = next((sid for sid in sids if mode_of(self.ensemble.member(sid).client_port) == "leader"), None)
        return None if sid is None else (sid, time.monotonic())

    def kill(self, sid: int) -> None:
        self.ensemble.kill(sid)

    def restart(self, sid: int, timeout: float = 60.0) -> None:
        self.ensemble.start_server(sid)
        self.ensemble.wait_serving(self.sids, timeout)

    def close(self) -> None:
        if getattr(self, "adapter", None) is not None:
            self.adapter.close()
        if getattr(self, "ensemble", None) is not None:
            self.ensemble.stop()
        release_base_port(self.base)

    def __enter__(self) -> ZooKeeperHarness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
