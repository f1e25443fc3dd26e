"""A zabref cluster's configuration: one TOML file, read with `tomllib`, validated into frozen dataclasses.

Theory of operation
-------------------
One file describes the whole cluster, and every server reads the same file (``zabref serve --config FILE --id N``)::

    [cluster]
    tick_ms = 100        # one tick, as ZooKeeper's tickTime
    init_limit = 10      # ticks a follower (or a new leader) may take to connect and sync (initLimit)
    sync_limit = 5       # ticks without hearing the other side before giving up on it (syncLimit)

    [[server]]
    id = 1
    host = "127.0.0.1"   # loopback only: zabref is a reference, not a hardened network service
    quorum_port = 21001
    election_port = 21002
    client_port = 21003
    control_port = 21004
    data_dir = "data/1"  # relative paths are taken from the config file's folder

`load_config` checks everything before anything starts -- keys present and known, types, id uniqueness, ports in
range and all distinct, loopback hosts, limits positive -- and raises
`ConfigError` naming the file and the key (``cluster.toml: [[server]] #2 (id 3): quorum_port: ...``).
`render_config` writes the same format back (used by ``zabref cluster``); `write_config` writes it atomically (temp
file, fsync, rename).
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zabref.errors import ConfigError

__all__ = ["ClusterConfig", "ServerConfig", "Config", "load_config", "parse_config", "render_config", "write_config"]

PORT_KEYS = ("quorum_port", "election_port", "client_port", "control_port")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The ``[cluster]`` table: timing, in ZooKeeper's units (ticks)."""

    tick_ms: int = 100
    init_limit: int = 10
    sync_limit: int = 5


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One ``[[server]]`` entry."""

    id: int
    host: str
    quorum_port: int
    election_port: int
    client_port: int
    control_port: int
    data_dir: Path


@dataclass(frozen=True, slots=True)
class Config:
    """A whole configuration file, validated. ``path`` is where it was read from (for messages)."""

    path: str
    cluster: ClusterConfig
    servers: tuple[ServerConfig, ...]

    @property
    def sids(self) -> tuple[int, ...]:
        """Every server's id: the spec's Server (each votes; quorums are majorities)."""
        return tuple(s.id for s in self.servers)

    def server(self, sid: int) -> ServerConfig:
        for s in self.servers:
            if s.id == sid:
                return s
        raise ConfigError(f"{self.path}: no [[server]] has id = {sid} (ids: {list(self.sids)})")


def _int(where: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: {key}: expected an integer, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise ConfigError(f"{where}: {key}: {value} is outside {low}..{high}")
    return value


def _known(where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {key!r} (allowed: {', '.join(allowed)})")


def _cluster(path: str, raw: Any) -> ClusterConfig:
    where = f"{path}: [cluster]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = ("tick_ms", "init_limit", "sync_limit")
    _known(where, raw, fields)
    default = ClusterConfig()
    values = {k: _int(where, k, raw.get(k, getattr(default, k)), 1, 3_600_000) for k in fields}
    return ClusterConfig(**values)


def _server(path: str, base: Path, k: int, raw: Any) -> ServerConfig:
    where = f"{path}: [[server]] #{k + 1}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = ("id", "host", *PORT_KEYS, "data_dir")
    if "role" in raw:
        raise ConfigError(f"{where}: role: zabref has no observers (spec/Zab.tla does not model them; "
                          "spec/README.md says why); every server votes")
    _known(where, raw, fields)
    if "id" not in raw:
        raise ConfigError(f"{where}: missing key 'id'")
    sid = _int(where, "id", raw["id"], 1, (1 << 31) - 1)  # 0 is the spec's NoServer
    where = f"{where} (id {sid})"
    for key in fields:
        if key not in raw:
            raise ConfigError(f"{where}: missing key {key!r}")
    host = raw["host"]
    if not isinstance(host, str):
        raise ConfigError(f"{where}: host: expected a string, got {type(host).__name__}")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            raise ConfigError(f"{where}: host: {host!r} is not an IP address or 'localhost'") from None
        if not loopback:
            raise ConfigError(f"{where}: host: {host} is not a loopback address (zabref listens on loopback only)")
    ports = {key: _int(where, key, raw[key], 1, 65535) for key in PORT_KEYS}
    data_dir = raw["data_dir"]
    if not isinstance(data_dir, str) or not data_dir:
        raise ConfigError(f"{where}: data_dir: expected a non-empty string")
    resolved = Path(data_dir) if os.path.isabs(data_dir) else base / data_dir
    return ServerConfig(sid, host, data_dir=resolved, **ports)


def parse_config(text: str, path: str = "<config>", base: Path | None = None) -> Config:
    """Validate TOML ``text``; ``path`` names it in errors, ``base`` anchors relative data dirs (default: cwd)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    _known(path, raw, ("cluster", "server"))
    cluster = _cluster(path, raw.get("cluster", {}))
    entries = raw.get("server")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: server: expected one or more [[server]] tables")
    base = base if base is not None else Path.cwd()
    servers = tuple(_server(path, base, k, e) for k, e in enumerate(entries))
    seen_ids: dict[int, int] = {}
    seen_ports: dict[tuple[str, int], str] = {}
    seen_dirs: dict[Path, int] = {}
    for k, s in enumerate(servers):
        where = f"{path}: [[server]] #{k + 1} (id {s.id})"
        if s.id in seen_ids:
            raise ConfigError(f"{where}: id: {s.id} is also the id of [[server]] #{seen_ids[s.id] + 1}")
        seen_ids[s.id] = k
        for key in PORT_KEYS:
            port = getattr(s, key)
            if (s.host, port) in seen_ports:
                raise ConfigError(f"{where}: {key}: port {port} is already the {seen_ports[(s.host, port)]}")
            seen_ports[(s.host, port)] = f"{key} of server {s.id}"
        if s.data_dir in seen_dirs:
            raise ConfigError(f"{where}: data_dir: {s.data_dir} is also the data_dir of server {seen_dirs[s.data_dir]}")
        seen_dirs[s.data_dir] = s.id
    return Config(path, cluster, tuple(sorted(servers, key=lambda s: s.id)))


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate the configuration file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})") from None
    return parse_config(text, str(p), p.resolve().parent)


def render_config(cluster: ClusterConfig, servers: list[ServerConfig] | tuple[ServerConfig, ...]) -> str:
    """The TOML text of a configuration (data dirs written as given)."""
    lines = ["[cluster]"]
    lines += [f"{k} = {getattr(cluster, k)}" for k in ("tick_ms", "init_limit", "sync_limit")]
    for s in servers:
        lines += ["", "[[server]]", f"id = {s.id}", f'host = "{s.host}"']
        lines += [f"{k} = {getattr(s, k)}" for k in PORT_KEYS]
        lines.append(f"data_dir = {_toml_string(str(s.data_dir))}")
    return "\n".join(lines) + "\n"


def _toml_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically and durably (`zabref.storage.atomic.write_file`)."""
    from zabref.storage.atomic import write_file  # noqa: PLC0415 -- the storage package is not needed to read one

    return write_file(path, text)
