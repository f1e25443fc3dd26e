"""A zabref server as a member of a ZooKeeper ensemble the harness runs (a mixed ensemble, issue 37).

Theory of operation: `conformance.zk.ensemble.ZkEnsemble` starts a member whose id it was given in ``zabref`` as
``python -m zabref.cli serve`` in place of a JVM, in the same folder, process group and ports, so that every
fault (kill -9, pause, restart, the proxy's cuts) and every look from outside (``srvr`` on its client port, kazoo
sessions, ``server.log``) is the same as for a ZooKeeper member. Its configuration (`render_zabref_config`, written
as ``zabref.toml`` beside where a ZooKeeper member's ``zoo.cfg`` would be) names the layout's client port as its
``zk_client_port`` (ZooKeeper's client protocol, `zabref.net.zkclientport`), so the workload's kazoo clients and
the harness's four-letter words reach it there; its own JSON client port is the block's fourth port
(`JSON_OFFSET`). The other servers are named at the addresses this member reaches them at: the proxy's ports when
the ensemble is proxied (``peers``), else their own.
"""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.zk.ports import ZkServer

__all__ = ["render_zabref_config", "zabref_command", "JSON_OFFSET"]

#: Where in a member's block of ports (client, quorum, election, ...) its zabref JSON client port is.
JSON_OFFSET = 3


def render_zabref_config(me: ZkServer, members: list[ZkServer], data: Path, tick_time_ms: int, init_limit: int,
                         sync_limit: int, peers: dict[int, tuple[int, int]] | None) -> str:
    """The TOML configuration of zabref member ``me`` (its data in ``data``)."""
    out = [f"[cluster]\ntick_ms = {tick_time_ms}\ninit_limit = {init_limit}\nsync_limit = {sync_limit}\n"]
    for m in members:
        quorum, election = (m.quorum_port, m.election_port) if m.id == me.id or peers is None else peers[m.id]
        folder = data if m.id == me.id else data.parent / f"elsewhere-{m.id}"  # a peer's, never opened here
        out.append(f"[[server]]\nid = {m.id}\nhost = \"127.0.0.1\"\nquorum_port = {quorum}\n"
                   f"election_port = {election}\nclient_port = {m.client_port + JSON_OFFSET}\n"
                   f"zk_client_port = {m.client_port}\ndata_dir = \"{folder}\"\n")
    return "\n".join(out)


def zabref_command(cfg: Path, sid: int) -> list[str]:
    """``python -m zabref.cli serve`` of member ``sid`` with configuration ``cfg``."""
    return [sys.executable, "-m", "zabref.cli", "serve", "--config", str(cfg), "--id", str(sid)]
