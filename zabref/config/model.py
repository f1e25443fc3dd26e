"""A zabref cluster's configuration as frozen dataclasses, and the checks both file forms share.

Theory of operation: `Config` holds the cluster's timing (`ClusterConfig`), its client limits (`Limits`), its
security settings (`Security`) and one `ServerConfig` per server. The helpers check one value (`int_in`,
`check_host`, `known_keys`), a security table (`tls_complete`) or the servers together (`check_together`: ids
distinct, no two listeners on one address and port, no two servers of one machine in one data dir), each raising
`ConfigError` that names the file and the key. `zabref.config.toml` and `zabref.config.zoo` read the two file forms
into these.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zabref.errors import ConfigError

__all__ = ["PORT_KEYS", "OPTIONAL_PORTS", "CLIENT_AUTH", "LIMIT_RANGES", "ClusterConfig", "Limits", "Security",
           "ServerConfig", "Config", "is_loopback",
           "check_host", "int_in", "known_keys", "tls_complete", "machine_of", "check_together"]


PORT_KEYS = ("quorum_port", "election_port", "client_port", "control_port", "zk_client_port")
#: The ports a [[server]] may leave out.
OPTIONAL_PORTS = ("control_port", "zk_client_port")


#: A DNS host name (RFC 1123): dot-separated labels of letters, digits and inner hyphens, at most 253 characters.
_HOST_NAME = re.compile(r"(?=.{1,253}\.?$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The ``[cluster]`` table: timing, in ZooKeeper's units (ticks), and when a leader logs its proposals."""

    tick_ms: int = 100
    init_limit: int = 10
    sync_limit: int = 5
    #: spec/Zab.tla's LeaderLogsLate: a leader sends each PROPOSAL before its own log write of it is durable and
    #: counts itself in a quorum once it is (LeaderOwnACK), as ZooKeeper's leader does; off, it logs first.
    leader_logs_late: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    """The ``[limits]`` table: how much of a server clients may hold (docs/runtime.md, "Caps")."""

    client_connections: int = 1024
    client_connections_per_address: int = 256
    client_frame_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Security:
    """The ``[security]`` table: TLS and quorum authentication, all off by default (`zabref.net.security` uses it).
    Paths are resolved against the config file's folder; the files are read when a server starts."""

    quorum_tls: bool = False
    client_tls: bool = False
    cert: Path | None = None
    key: Path | None = None
    ca: Path | None = None
    client_auth: str = "need"
    hostname_verification: bool = True
    quorum_secret: Path | None = None

    @property
    def enabled(self) -> bool:
        return self.quorum_tls or self.client_tls or self.quorum_secret is not None


CLIENT_AUTH = ("need", "none")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One ``[[server]]`` entry."""

    id: int
    host: str
    quorum_port: int
    election_port: int
    client_port: int
    control_port: int | None
    data_dir: Path
    #: ZooKeeper's client protocol (`zabref.net.zkclientport`), when set
    zk_client_port: int | None = None

    @property
    def control_host(self) -> str:
        """Where the control port listens: this server's host when that is a loopback address, else 127.0.0.1 --
        never an interface other machines reach."""
        return self.host if is_loopback(self.host) else "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Is ``host`` ``localhost`` or a loopback address (127.0.0.0/8, ::1)?"""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(where: str, raw: Any) -> str:
    """A host name or an IPv4/IPv6 address (an IPv6 one may come in brackets); ConfigError naming ``where``."""
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: host: expected a string, got {type(raw).__name__}")
    host = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if raw.startswith("[") or not _HOST_NAME.fullmatch(host):
        raise ConfigError(f"{where}: host: {raw!r} is neither a host name nor an IPv4 or IPv6 address")
    return host


@dataclass(frozen=True, slots=True)
class Config:
    """A whole configuration file, validated. ``path`` is where it was read from (for messages)."""

    path: str
    cluster: ClusterConfig
    servers: tuple[ServerConfig, ...]
    limits: Limits = Limits()
    security: Security = Security()

    @property
    def sids(self) -> tuple[int, ...]:
        """Every server's id: the spec's Server (each votes; quorums are majorities)."""
        return tuple(s.id for s in self.servers)

    def server(self, sid: int) -> ServerConfig:
        for s in self.servers:
            if s.id == sid:
                return s
        raise ConfigError(f"{self.path}: no [[server]] has id = {sid} (ids: {list(self.sids)})")


def int_in(where: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key}: expected an integer, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{where}: {key}: {value} is outside {low}..{high}")
    return value


def known_keys(where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def tls_complete(where: str, security: Security) -> Security:
    """With TLS on, cert, key and ca are all named (a key may live in the cert file: then key = cert)."""
    if security.quorum_tls or security.client_tls:
        if security.cert is not None and security.key is None:
            security = dataclasses.replace(security, key=security.cert)
        for key in ("cert", "key", "ca"):
            if getattr(security, key) is None:
                raise ConfigError(f"{where}: {key}: missing (TLS is on: quorum_tls or client_tls)")
    return security


def machine_of(host: str) -> str:
    """Which machine a host is, as far as a configuration can tell: every loopback address is this one."""
    return "loopback" if is_loopback(host) else host


def check_together(servers: tuple[ServerConfig, ...], wheres: list[str], *, shared_data_dir: bool) -> None:
    """Ids distinct; no two listeners on one address and port (the control port counts at its own host); no two
    servers of one machine in one data dir (unless ``shared_data_dir``: a zoo.cfg names only its own server's)."""
    seen_ids: dict[int, str] = {}
    seen_ports: dict[tuple[str, int], str] = {}
    seen_dirs: dict[tuple[str, Path], int] = {}
    for where, s in zip(wheres, servers, strict=True):
        if s.id in seen_ids:
            raise ConfigError(f"{where}: id: {s.id} is also the id of {seen_ids[s.id]}")
        seen_ids[s.id] = where.split(": ", 1)[-1]
        for key in PORT_KEYS:
            port = getattr(s, key)
            if port is None:
                continue
            at = (s.control_host if key == "control_port" else s.host, port)  # a listener's own address
            if at in seen_ports:
                raise ConfigError(f"{where}: {key}: port {port} is already the {seen_ports[at]}")
            seen_ports[at] = f"{key} of server {s.id}"
        place = (machine_of(s.host), s.data_dir)
        if place in seen_dirs and not shared_data_dir:
            raise ConfigError(f"{where}: data_dir: {s.data_dir} is also the data_dir of server {seen_dirs[place]} "
                              "on the same machine")
        seen_dirs[place] = s.id


#: The bounds of each limit: at least one connection and a request of 1 KiB; at most what a process can hold.
LIMIT_RANGES = {"client_connections": (1, 100_000), "client_connections_per_address": (1, 100_000),
                 "client_frame_bytes": (1024, 64 * 1024 * 1024)}
