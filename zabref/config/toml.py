"""zabref's own configuration file: TOML (the format is in `zabref.config`'s docstring), read and written.

Theory of operation: `parse_config` reads the text with `tomllib` and checks every table and key into a
`zabref.config.model.Config` (unknown keys, types, ranges, hosts, ports, security files), raising `ConfigError`
that names the file and the key; `render_config` writes the same format back (``zabref cluster`` uses it).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from zabref.config.model import (
    CLIENT_AUTH,
    LIMIT_RANGES,
    OPTIONAL_PORTS,
    PORT_KEYS,
    ClusterConfig,
    Config,
    Limits,
    Security,
    ServerConfig,
    check_host,
    check_together,
    int_in,
    known_keys,
    tls_complete,
)
from zabref.errors import ConfigError

__all__ = ["parse_config", "render_config"]


def _cluster(path: str, raw: Any) -> ClusterConfig:
    where = f"{path}: [cluster]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = ("tick_ms", "init_limit", "sync_limit")
    known_keys(where, raw, (*fields, "leader_logs_late"))
    default = ClusterConfig()
    values: dict[str, Any] = {k: int_in(where, k, raw.get(k, getattr(default, k)), 1, 3_600_000) for k in fields}
    late = raw.get("leader_logs_late", default.leader_logs_late)
    if not isinstance(late, bool):
        raise ConfigError(f"{where}: leader_logs_late: expected true or false, got {type(late).__name__} {late!r}")
    return ClusterConfig(**values, leader_logs_late=late)


def _server(path: str, base: Path, k: int, raw: Any) -> ServerConfig:
    where = f"{path}: [[server]] #{k + 1}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    fields = ("id", "host", *PORT_KEYS, "data_dir")
    if "role" in raw:
        raise ConfigError(f"{where}: role: zabref has no observers (spec/Zab.tla does not model them; "
                          "spec/README.md says why); every server votes")
    known_keys(where, raw, fields)
    if "id" not in raw:
        raise ConfigError(f"{where}: missing key 'id'")
    sid = int_in(where, "id", raw["id"], 1, (1 << 31) - 1)  # 0 is the spec's NoServer
    where = f"{where} (id {sid})"
    for key in fields:
        if key not in raw and key not in OPTIONAL_PORTS:
            raise ConfigError(f"{where}: missing key {key!r}")
    host = check_host(where, raw["host"])
    ports = {key: int_in(where, key, raw[key], 1, 65535) if key in raw else None for key in PORT_KEYS}
    data_dir = raw["data_dir"]
    if not isinstance(data_dir, str) or not data_dir:
        raise ConfigError(f"{where}: data_dir: expected a non-empty string")
    resolved = Path(data_dir) if os.path.isabs(data_dir) else base / data_dir
    required = {key: value for key, value in ports.items() if value is not None}  # checked present above
    return ServerConfig(sid, host, quorum_port=required["quorum_port"], election_port=required["election_port"],
                        client_port=required["client_port"], control_port=ports["control_port"], data_dir=resolved,
                        zk_client_port=ports["zk_client_port"])


def parse_config(text: str, path: str = "<config>", base: Path | None = None) -> Config:
    """Validate TOML ``text``; ``path`` names it in errors, ``base`` anchors relative data dirs (default: cwd)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    known_keys(path, raw, ("cluster", "server", "limits", "security"))
    cluster = _cluster(path, raw.get("cluster", {}))
    limits = _limits(path, raw.get("limits", {}))
    base = base if base is not None else Path.cwd()
    security = _security(path, base, raw.get("security", {}))
    entries = raw.get("server")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: server: expected one or more [[server]] tables")
    servers = tuple(_server(path, base, k, e) for k, e in enumerate(entries))
    check_together(servers, [f"{path}: [[server]] #{k + 1} (id {s.id})" for k, s in enumerate(servers)],
                    shared_data_dir=False)
    return Config(path, cluster, tuple(sorted(servers, key=lambda s: s.id)), limits, security)


def _security(path: str, base: Path, raw: Any) -> Security:
    where = f"{path}: [security]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    known_keys(where, raw, Security.__slots__)
    values: dict[str, Any] = {}
    for key in ("quorum_tls", "client_tls", "hostname_verification"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise ConfigError(f"{where}: {key}: expected true or false, got {raw[key]!r}")
            values[key] = raw[key]
    for key in ("cert", "key", "ca", "quorum_secret"):
        if key in raw:
            if not isinstance(raw[key], str) or not raw[key]:
                raise ConfigError(f"{where}: {key}: expected a file path (a non-empty string), got {raw[key]!r}")
            values[key] = Path(raw[key]) if os.path.isabs(raw[key]) else base / raw[key]
    if "client_auth" in raw:
        if raw["client_auth"] not in CLIENT_AUTH:
            raise ConfigError(f"{where}: client_auth: expected one of {', '.join(CLIENT_AUTH)}, "
                              f"got {raw['client_auth']!r}")
        values["client_auth"] = raw["client_auth"]
    return tls_complete(where, Security(**values))




def _limits(path: str, raw: Any) -> Limits:
    where = f"{path}: [limits]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    known_keys(where, raw, tuple(LIMIT_RANGES))
    default = Limits()
    return Limits(**{k: int_in(where, k, raw.get(k, getattr(default, k)), *r) for k, r in LIMIT_RANGES.items()})


def render_config(cluster: ClusterConfig, servers: list[ServerConfig] | tuple[ServerConfig, ...],
                  security: Security = Security()) -> str:
    """The TOML text of a configuration (data dirs and security files written as given; no ``[limits]``: the
    defaults; a ``[security]`` table when some security is on)."""
    lines = ["[cluster]"]
    lines += [f"{k} = {getattr(cluster, k)}" for k in ("tick_ms", "init_limit", "sync_limit")]
    if cluster.leader_logs_late:
        lines.append("leader_logs_late = true")
    if security.enabled:
        lines += ["", "[security]"]
        for key in Security.__slots__:
            value = getattr(security, key)
            if isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            elif value is not None:
                lines.append(f"{key} = {_toml_string(str(value))}")
    for s in servers:
        lines += ["", "[[server]]", f"id = {s.id}", f'host = "{s.host}"']
        lines += [f"{k} = {getattr(s, k)}" for k in PORT_KEYS if getattr(s, k) is not None]
        lines.append(f"data_dir = {_toml_string(str(s.data_dir))}")
    return "\n".join(lines) + "\n"


def _toml_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
