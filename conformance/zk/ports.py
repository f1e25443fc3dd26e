"""Where every server and every proxied link listens, on loopback, below 32768.

Theory of operation
-------------------
A run leases one block of ports (`zabref.net.ports.find_free_base_port`: 10 a server, leased across processes). Server
i (counting from 1) has ``base + 10*(i-1) + {0: client, 1: quorum, 2: election}``, as the benchmark always had.

A proxied run leases twice as many: the second half holds one proxy port per directed pair and port kind. The link
(i -> j, kind) -- server i reaching server j's quorum or election port -- listens on
``base + 10*N + 10*(i-1) + 2*(j-1) + {0: quorum, 1: election}`` (N servers; at most 9 ports a server for N <= 5) and
forwards to j's real port. Server i's ``zoo.cfg`` names those ports for every other server, so each byte between two
servers crosses the proxy, and the proxy knows from the port alone who connected to whom and on which kind of port.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.zk import ZkEnsembleError

__all__ = ["KINDS", "Link", "ZkServer", "links", "MAX_SERVERS"]

KINDS = ("quorum", "election")
MAX_SERVERS = 5


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
            raise ZkEnsembleError(f"ZooKeeper ports {base_port}..{out[-1].election_port} must lie in 1024..32767")
        return out

    def port(self, kind: str) -> int:
        return self.quorum_port if kind == "quorum" else self.election_port


@dataclass(frozen=True, slots=True)
class Link:
    """A directed pair and port kind: server ``src`` connects to ``listen`` (a proxy port) to reach server ``dst``'s
    real ``kind`` port ``target``."""

    src: int
    dst: int
    kind: str
    listen: int
    target: int

    @property
    def name(self) -> str:
        return f"{self.kind[0]}{self.src}->{self.dst}"

    def to_json(self) -> dict[str, object]:
        return {"src": self.src, "dst": self.dst, "kind": self.kind, "listen": self.listen, "target": self.target}


def links(base_port: int, members: list[ZkServer]) -> list[Link]:
    """Every proxied link of a run whose block starts at ``base_port`` (which leased ``2 * len(members)`` blocks)."""
    n = len(members)
    if not 1 <= n <= MAX_SERVERS:
        raise ZkEnsembleError(f"a proxied ensemble has 1..{MAX_SERVERS} servers, not {n}")
    out = []
    for a in members:
        for b in members:
            if a.id != b.id:
                first = base_port + 10 * n + 10 * (a.id - 1) + 2 * (b.id - 1)
                out += [Link(a.id, b.id, kind, first + k, b.port(kind)) for k, kind in enumerate(KINDS)]
    if out and max(link.listen for link in out) >= 32768:
        raise ZkEnsembleError(f"proxy ports up to {max(link.listen for link in out)} must lie below 32768")
    return out
