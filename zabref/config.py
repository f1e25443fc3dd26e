"""A zabref cluster's configuration: one TOML file, read with `tomllib`, validated into frozen dataclasses.

Theory of operation
-------------------
One file describes the whole cluster, and every server reads the same file (``zabref serve --config FILE --id N``)::

    [cluster]
    tick_ms = 100        # one tick, as ZooKeeper's tickTime
    init_limit = 10      # ticks a follower (or a new leader) may take to connect and sync (initLimit)
    sync_limit = 5       # ticks without hearing the other side before giving up on it (syncLimit)

    [limits]             # optional; what one client can take of a server (the defaults shown)
    client_connections = 1024              # client connections open at once, all addresses together
    client_connections_per_address = 256   # ... from one address (ZooKeeper's maxClientCnxns)
    client_frame_bytes = 1048576           # the largest client request (ZooKeeper's jute.maxbuffer)

    [security]          # optional; everything off by default (docs/operations.md, "TLS and quorum authentication")
    quorum_tls = false   # TLS, both ends with certificates, on the quorum and election ports (ZooKeeper's sslQuorum)
    client_tls = false   # TLS on the client port
    cert = "tls/server.pem"    # this machine's certificate chain, PEM (needed when either TLS is on)
    key = "tls/server.key"     # its private key, PEM (may be the cert file when that holds both)
    ca = "tls/ca.pem"          # the CA certificates a peer's certificate must chain to, PEM
    client_auth = "need"       # client port: "need" a client certificate, or "none"
    hostname_verification = true   # a peer's certificate must name the host it was dialed at
    quorum_secret = "quorum.secret"  # a file (mode 600): quorum authentication on (`zabref.net.security`)

    [[server]]
    id = 1
    host = "127.0.0.1"   # where this server listens and the others reach it: a host name, IPv4 or IPv6
    quorum_port = 21001
    election_port = 21002
    client_port = 21003
    control_port = 21004 # optional; listens on loopback only, and only with --control-token (docs/operations.md)
    data_dir = "data/1"  # relative paths are taken from the config file's folder

`load_config` checks everything before anything starts -- keys present and known, types, id uniqueness, host names
and addresses, ports in range and distinct per host, limits positive -- and raises `ConfigError` naming the file
and the key (``cluster.toml: [[server]] #2 (id 3): quorum_port: ...``).

ZooKeeper's own form is read too (`parse_zoo_cfg`): a ``zoo.cfg`` of ``key=value`` lines with ``tickTime``,
``initLimit``, ``syncLimit``, ``dataDir``, ``clientPort`` and one ``server.N=host:quorumPort:electionPort;clientPort``
line per server (``[;[address:]clientPort]`` optional when ``clientPort`` is given; ``:participant`` accepted,
``:observer`` refused), and the limits ``maxClientCnxns`` and ``jute.maxbuffer``. Quorum TLS comes from ``sslQuorum``,
``ssl.quorum.keyStore.location`` (a PEM file with the key and the chain), ``ssl.quorum.trustStore.location`` (PEM)
and ``ssl.quorum.hostnameVerification``; a key or trust store of another type than PEM is refused, and so is
``quorum.auth.enableSasl`` (zabref's quorum authentication is a shared secret, ``[security] quorum_secret``). As in ZooKeeper, each machine
has its own file, whose ``dataDir`` is the data directory of the server started with it; such servers have no
control port. `load_config` takes a file as ``zoo.cfg`` when its name ends in ``.cfg``.

`render_config` writes the TOML format back (used by ``zabref cluster``); `write_config` writes it atomically.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zabref.errors import ConfigError

__all__ = ["ClusterConfig", "Limits", "Security", "ServerConfig", "Config", "load_config", "parse_config", "parse_zoo_cfg",
           "render_config", "write_config"]

PORT_KEYS = ("quorum_port", "election_port", "client_port", "control_port")
#: A DNS host name (RFC 1123): dot-separated labels of letters, digits and inner hyphens, at most 253 characters.
_HOST_NAME = re.compile(r"(?=.{1,253}\.?$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The ``[cluster]`` table: timing, in ZooKeeper's units (ticks)."""

    tick_ms: int = 100
    init_limit: int = 10
    sync_limit: int = 5


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
        if key not in raw and key != "control_port":
            raise ConfigError(f"{where}: missing key {key!r}")
    host = check_host(where, raw["host"])
    ports = {key: _int(where, key, raw[key], 1, 65535) if key in raw else None for key in PORT_KEYS}
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
    _known(path, raw, ("cluster", "server", "limits", "security"))
    cluster = _cluster(path, raw.get("cluster", {}))
    limits = _limits(path, raw.get("limits", {}))
    base = base if base is not None else Path.cwd()
    security = _security(path, base, raw.get("security", {}))
    entries = raw.get("server")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: server: expected one or more [[server]] tables")
    servers = tuple(_server(path, base, k, e) for k, e in enumerate(entries))
    _check_together(servers, [f"{path}: [[server]] #{k + 1} (id {s.id})" for k, s in enumerate(servers)],
                    shared_data_dir=False)
    return Config(path, cluster, tuple(sorted(servers, key=lambda s: s.id)), limits, security)


def _security(path: str, base: Path, raw: Any) -> Security:
    where = f"{path}: [security]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    _known(where, raw, Security.__slots__)
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
    return _tls_complete(where, Security(**values))


def _tls_complete(where: str, security: Security) -> Security:
    """With TLS on, cert, key and ca are all named (a key may live in the cert file: then key = cert)."""
    if security.quorum_tls or security.client_tls:
        if security.cert is not None and security.key is None:
            security = dataclasses.replace(security, key=security.cert)
        for key in ("cert", "key", "ca"):
            if getattr(security, key) is None:
                raise ConfigError(f"{where}: {key}: missing (TLS is on: quorum_tls or client_tls)")
    return security


#: The bounds of each limit: at least one connection and a request of 1 KiB; at most what a process can hold.
_LIMIT_RANGES = {"client_connections": (1, 100_000), "client_connections_per_address": (1, 100_000),
                 "client_frame_bytes": (1024, 64 * 1024 * 1024)}


def _limits(path: str, raw: Any) -> Limits:
    where = f"{path}: [limits]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    _known(where, raw, tuple(_LIMIT_RANGES))
    default = Limits()
    return Limits(**{k: _int(where, k, raw.get(k, getattr(default, k)), *r) for k, r in _LIMIT_RANGES.items()})


def _machine(host: str) -> str:
    """Which machine a host is, as far as a configuration can tell: every loopback address is this one."""
    return "loopback" if is_loopback(host) else host


def _check_together(servers: tuple[ServerConfig, ...], wheres: list[str], *, shared_data_dir: bool) -> None:
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
        place = (_machine(s.host), s.data_dir)
        if place in seen_dirs and not shared_data_dir:
            raise ConfigError(f"{where}: data_dir: {s.data_dir} is also the data_dir of server {seen_dirs[place]} "
                              "on the same machine")
        seen_dirs[place] = s.id


def _zoo_int(where: str, key: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{where}: {key}: expected an integer, got {value!r}") from None
    return _int(where, key, number, low, high)


#: ``server.N=host:quorumPort:electionPort[:participant|:observer][;[address:]clientPort]``
_ZOO_SERVER = re.compile(r"(?P<host>\[[^\]]*\]|[^:;\s]+):(?P<quorum>[^:;]*):(?P<election>[^:;]*)"
                         r"(?::(?P<role>[^;]*))?(?:;(?:(?P<client_host>\[[^\]]*\]|[^;]*):)?(?P<client>[^:;]*))?")


def parse_zoo_cfg(text: str, path: str = "<zoo.cfg>", base: Path | None = None) -> Config:
    """A ZooKeeper ``zoo.cfg`` (module docstring) as a `Config`; ConfigError naming the file and the line."""
    base = base if base is not None else Path.cwd()
    values: dict[str, tuple[int, str]] = {}
    server_lines: list[tuple[int, int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{path}:{number}"
        key, eq, value = stripped.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise ConfigError(f"{where}: expected key=value, got {stripped!r}")
        if key.startswith("server."):
            sid = _zoo_int(where, key, key.removeprefix("server."), 1, (1 << 31) - 1)
            server_lines.append((number, sid, value))
        elif key in _ZOO_REFUSED:
            raise ConfigError(f"{where}: {key}: {_ZOO_REFUSED[key]}")
        elif key in _ZOO_KEYS:
            if key in values:
                raise ConfigError(f"{where}: {key}: given twice (also line {values[key][0]})")
            values[key] = (number, value)
        # ZooKeeper's other settings (autopurge, 4lw, metrics, ...) do not concern the protocol: ignored.
    cluster = ClusterConfig(**{
        field: _zoo_int(f"{path}:{values[key][0]}", key, values[key][1], 1, 3_600_000)
        for field, key in (("tick_ms", "tickTime"), ("init_limit", "initLimit"), ("sync_limit", "syncLimit"))
        if key in values})
    if "dataDir" not in values or not values["dataDir"][1]:
        raise ConfigError(f"{path}: dataDir: missing (the data directory of the server started with this file)")
    data_dir = Path(values["dataDir"][1])
    data_dir = data_dir if data_dir.is_absolute() else base / data_dir
    default_client = (_zoo_int(f"{path}:{values['clientPort'][0]}", "clientPort", values["clientPort"][1], 1, 65535)
                      if "clientPort" in values else None)
    if not server_lines:
        raise ConfigError(f"{path}: no server.N=host:quorumPort:electionPort;clientPort line")
    servers, wheres = [], []
    for number, sid, value in server_lines:
        where = f"{path}:{number}: server.{sid}"
        m = _ZOO_SERVER.fullmatch(value)
        if m is None:
            raise ConfigError(f"{where}: expected host:quorumPort:electionPort[:participant][;clientPort], "
                              f"got {value!r}")
        if m["role"] not in (None, "participant"):
            raise ConfigError(f"{where}: {m['role']}: zabref has no observers (spec/Zab.tla does not model them); "
                              "every server votes" if m["role"] == "observer" else
                              f"{where}: unknown role {m['role']!r} (participant or observer)")
        client = (_zoo_int(where, "clientPort", m["client"], 1, 65535) if m["client"] is not None
                  else default_client)
        if client is None:
            raise ConfigError(f"{where}: no client port: add ;clientPort to the line or a clientPort=N line")
        servers.append(ServerConfig(sid, check_host(where, m["host"]), _zoo_int(where, "quorumPort", m["quorum"], 1,
                                    65535), _zoo_int(where, "electionPort", m["election"], 1, 65535), client, None,
                                    data_dir))
        wheres.append(where)
    _check_together(tuple(servers), wheres, shared_data_dir=True)
    limits = Limits(**{field: _zoo_int(f"{path}:{values[key][0]}", key, values[key][1], *_LIMIT_RANGES[field])
                       for field, key in (("client_connections_per_address", "maxClientCnxns"),
                                          ("client_frame_bytes", "jute.maxbuffer")) if key in values})
    return Config(path, cluster, tuple(sorted(servers, key=lambda s: s.id)), limits,
                  _zoo_security(path, base, values))


_ZOO_KEYS = ("tickTime", "initLimit", "syncLimit", "dataDir", "clientPort", "maxClientCnxns", "jute.maxbuffer",
             "sslQuorum", "ssl.quorum.keyStore.location", "ssl.quorum.keyStore.type",
             "ssl.quorum.trustStore.location", "ssl.quorum.trustStore.type", "ssl.quorum.hostnameVerification")
_ZOO_REFUSED = {
    "quorum.auth.enableSasl": "zabref has no SASL; its quorum authentication is a shared secret "
                              "([security] quorum_secret in a zabref TOML config, docs/operations.md)",
    "ssl.quorum.keyStore.password": "zabref reads unencrypted PEM keys only",
    "secureClientPort": "zabref has one client port; client TLS is [security] client_tls in a zabref TOML config",
}


def _zoo_security(path: str, base: Path, values: dict[str, tuple[int, str]]) -> Security:
    """Quorum TLS from ZooKeeper's ``sslQuorum`` family of keys (PEM stores only)."""
    def flag(key: str, default: bool) -> bool:
        if key not in values:
            return default
        number, value = values[key]
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{path}:{number}: {key}: expected true or false, got {value!r}")
        return value.lower() == "true"

    for key in ("ssl.quorum.keyStore.type", "ssl.quorum.trustStore.type"):
        if key in values and values[key][1].upper() != "PEM":
            raise ConfigError(f"{path}:{values[key][0]}: {key}: zabref reads PEM files only, got {values[key][1]!r}")

    def file(key: str) -> Path | None:
        if key not in values or not values[key][1]:
            return None
        p = Path(values[key][1])
        return p if p.is_absolute() else base / p

    store = file("ssl.quorum.keyStore.location")
    security = Security(quorum_tls=flag("sslQuorum", False), cert=store, key=store,
                        ca=file("ssl.quorum.trustStore.location"),
                        hostname_verification=flag("ssl.quorum.hostnameVerification", True))
    names = {"cert": "ssl.quorum.keyStore.location", "key": "ssl.quorum.keyStore.location",
             "ca": "ssl.quorum.trustStore.location"}
    for field, key in names.items():
        if security.quorum_tls and getattr(security, field) is None:
            raise ConfigError(f"{path}: {key}: missing (sslQuorum=true)")
    return security


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate the configuration file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})") from None
    if p.suffix == ".cfg":
        return parse_zoo_cfg(text, str(p), p.resolve().parent)
    return parse_config(text, str(p), p.resolve().parent)


def render_config(cluster: ClusterConfig, servers: list[ServerConfig] | tuple[ServerConfig, ...],
                  security: Security = Security()) -> str:
    """The TOML text of a configuration (data dirs and security files written as given; no ``[limits]``: the
    defaults; a ``[security]`` table when some security is on)."""
    lines = ["[cluster]"]
    lines += [f"{k} = {getattr(cluster, k)}" for k in ("tick_ms", "init_limit", "sync_limit")]
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


def write_config(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically and durably (`zabref.storage.atomic.write_file`)."""
    from zabref.storage.atomic import write_file  # noqa: PLC0415 -- the storage package is not needed to read one

    return write_file(path, text)
