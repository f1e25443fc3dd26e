"""Election connections as ZooKeeper's QuorumCnxManager keeps them (`zabref.net.votes`): one connection a pair of
servers, the one the larger id dialed, carrying both directions."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zabref.config import load_config
from zabref.core.packets import Notification, ServerState
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.cluster import cluster_config
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.machine import Machine
from zabref.runtime.server import Server


def _one_connection_a_pair(servers: dict[int, Server]) -> str | None:
    """None when every pair holds exactly one election connection, dialed by its larger id; else what is not so."""
    for i, server in servers.items():
        for j, sender in server.senders.items():
            d = sender.describe()
            if not d["connected"] or d["dialed"] != (i > j):
                return f"server {i}'s connection with {j}: {d}"
        peers = sorted(v.peer for v in server.votes.values() if not v.closed)
        if peers != sorted(server.senders):
            return f"server {i} reads election connections from {peers}"
    return None


def test_each_pair_holds_one_election_connection_the_larger_id_dialed(tmp_path: Path) -> None:
    base = find_free_base_port(3)
    config = load_config(cluster_config(tmp_path, 3, base))
    servers = {sid: Server(config, sid, NormalDriver(0.05), machine=Machine(signals=False)) for sid in config.sids}

    async def main() -> None:
        tasks = [asyncio.create_task(s.run()) for s in servers.values()]
        try:
            loop = asyncio.get_running_loop()
            end, problem = loop.time() + 30, "not started"
            while loop.time() < end:
                leading = [s for s in servers.values() if s.node is not None and s.core.state.name == "LEADING"]
                problem = "no leader yet" if not leading else _one_connection_a_pair(servers)
                if problem is None:
                    break
                await asyncio.sleep(0.05)
            assert problem is None, problem
            # the pair's connection gone, the smaller id's dial only asks: 3 closes it and dials back, and server 1's
            # notification goes out on 3's connection
            old = servers[1].senders[3]._writer
            old.close()
            vote = Notification(ServerState.LOOKING, 1, 0, 99, 0)
            end = loop.time() + 10
            while loop.time() < end and servers[1].senders[3]._writer is old:
                await asyncio.sleep(0.01)
            servers[1].senders[3].send(vote)
            while loop.time() < end:
                got = [v for v in servers[3].votes.values() if v.peer == 1 and v.received]
                d = servers[1].senders[3].describe()
                if got and d["sent"] == 1 and d["connected"] and not d["dialed"]:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"server 1's vote did not reach 3 on 3's connection: {d}")
        finally:
            for s in servers.values():
                s.stop()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        release_base_port(base)
