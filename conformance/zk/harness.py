"""A ZooKeeper ensemble whose every server-to-server byte crosses the recording proxy: `ProxiedEnsemble`.

Theory of operation
-------------------
``ProxiedEnsemble(folder, servers, version)`` resolves the version (`conformance.zk.versions`), leases a port block
for the servers and their links (`conformance.zk.ports`), and on ``start()`` starts the proxy (recording to
``<folder>/recording.zkrec``) and then the servers, each configured to reach the others through the proxy
(`conformance.zk.serverconfig`), and waits until every one serves. ``faults`` is the proxy (cut, heal, isolate);
``ensemble`` is the `conformance.zk.ensemble.ZkEnsemble` (kill, pause, resume, restart).

``stop()`` kills the servers first, then gives the proxy a moment to see their connections close (so the recording
ends with their CLOSE records), then stops the proxy and releases the ports. It runs at the end of the ``with``
block, on garbage collection and at exit, whatever happened before. ``client_writes`` does a few writes through
kazoo (ZooKeeper's Python client) so that the recording holds a broadcast.
"""

from __future__ import annotations

import logging
import time
import weakref
from pathlib import Path
from typing import Callable

from conformance.zk.ensemble import ZkEnsemble
from conformance.zk.ports import ZkServer, links
from conformance.zk.proxy import Proxy
from conformance.zk.versions import Distribution, resolve
from zabref.net.ports import find_free_base_port, release_base_port

__all__ = ["ProxiedEnsemble", "rss_mb"]

HARNESS_TICK_MS = 200
HARNESS_HEAP_MB = 256


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process in MiB (``VmRSS`` of /proc/PID/status), None when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _release(proxy: Proxy, ensemble: ZkEnsemble, base: int) -> None:
    ensemble.stop()
    proxy.stop()
    release_base_port(base)


#: zoo.cfg lines of ZooKeeper members of a mixed ensemble: local sessions (a zabref leader tracks no session, and a
#: zabref server's sessions are its own: docs/zookeeper.md, "Mixed ensembles").
MIXED_CONFIG = ("localSessionsEnabled=true", "localSessionsUpgradingEnabled=false")


class ProxiedEnsemble:
    """``with ProxiedEnsemble(folder, 3, "3.8.0").start() as z: z.faults.cut(1, 2); z.ensemble.kill(3) ...``"""

    def __init__(self, folder: str | Path, servers: int = 3, version: str = "3.8.0", *,
                 distribution: Distribution | None = None, tick_time_ms: int = HARNESS_TICK_MS,
                 init_limit: int = 10, sync_limit: int = 5, heap_mb: int = HARNESS_HEAP_MB,
                 power_loss: bool = False, writeback: float | None = 30.0, force_sync: bool = True,
                 zabref: frozenset[int] = frozenset(), echo: Callable[[str], None] = print) -> None:
        self.folder = Path(folder).resolve()
        self.distribution = distribution or resolve(version, echo)
        self.base = find_free_base_port(2 * servers)
        try:
            members = ZkServer.layout(self.base, servers)
            self.links = links(self.base, members)
        except BaseException:
            release_base_port(self.base)
            raise
        peers = {m.id: {} for m in members}
        for link in self.links:
            quorum, election = peers[link.src].get(link.dst, (0, 0))
            peers[link.src][link.dst] = (link.listen, election) if link.kind == "quorum" else (quorum, link.listen)
        self.recording = self.folder / "recording.zkrec"
        self.faults = Proxy(self.links, self.recording,
                            meta={"servers": servers, "version": self.distribution.version,
                                  "source": self.distribution.source, "tickTime": tick_time_ms,
                                  "initLimit": init_limit, "syncLimit": sync_limit, "zabref": sorted(zabref)})
        self.ensemble = ZkEnsemble(self.folder, self.base, servers, distribution=self.distribution,
                                   tick_time_ms=tick_time_ms, init_limit=init_limit, sync_limit=sync_limit,
                                   heap_mb=heap_mb, peers=peers, power_loss=power_loss, writeback=writeback,
                                   force_sync=force_sync, zabref=zabref, extra_config=MIXED_CONFIG if zabref else ())
        self._finalizer = weakref.finalize(self, _release, self.faults, self.ensemble, self.base)

    @property
    def members(self) -> list[ZkServer]:
        return self.ensemble.members

    def start(self, timeout: float = 60.0) -> ProxiedEnsemble:
        try:
            self.faults.start()
            self.ensemble.start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``condition`` every 50 ms until it holds; TimeoutError naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout} s (modes {self.ensemble.modes()})")
            time.sleep(0.05)

    def client_writes(self, count: int, path: str = "/zabref-harness", timeout: float = 30.0) -> list[int]:
        """``count`` creates through kazoo (connected to every server); the zxids ZooKeeper gave them."""
        from kazoo.client import KazooClient  # noqa: PLC0415 (optional dependency: the dev / bench extras)

        logging.getLogger("kazoo").setLevel(logging.ERROR)
        hosts = ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)
        client = KazooClient(hosts=hosts, timeout=timeout)
        client.start(timeout=timeout)
        try:
            client.ensure_path(path)
            zxids = []
            for i in range(count):
                created = client.create(f"{path}/n-", f"value {i}".encode(), sequence=True)
                zxids.append(client.exists(created).czxid)
            return zxids
        finally:
            client.stop()
            client.close()

    def client_syncs(self, path: str = "/zabref-harness", timeout: float = 30.0) -> dict[int, int]:
        """A client's sync of ``path`` at each server alone, then a read there (kazoo, one session a server): the
        zxid each read's reply says the server had applied (ZooKeeper's reply header). At a follower the sync is
        forwarded to the leader as REQUEST and answered with SYNC, which the recording then holds."""
        from kazoo.client import KazooClient  # noqa: PLC0415 (optional dependency: the dev / bench extras)

        logging.getLogger("kazoo").setLevel(logging.ERROR)
        seen = {}
        for m in self.members:
            client = KazooClient(hosts=f"127.0.0.1:{m.client_port}", timeout=timeout)
            client.start(timeout=timeout)
            try:
                client.sync(path)
                client.exists(path)
                seen[m.id] = client.last_zxid
            finally:
                client.stop()
                client.close()
        return seen

    def stop(self, settle: float = 2.0) -> None:
        """Kill every server, let the proxy see their connections close (up to ``settle`` s), stop the proxy."""
        self.ensemble.stop()
        deadline = time.monotonic() + settle
        while self.faults.conns and time.monotonic() < deadline:
            time.sleep(0.02)
        self._finalizer()

    def __enter__(self) -> ProxiedEnsemble:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
