"""ZooKeeper's own configuration file, ``zoo.cfg``, read into a zabref `zabref.config.model.Config`.

Theory of operation: ``key=value`` lines (the keys zabref understands and the ones it refuses are listed in
`zabref.config`'s docstring); each server line is parsed with one regular expression; every error names the file
and the line. As in ZooKeeper, each machine has its own file, whose ``dataDir`` is the data directory of the server
started with it; such servers have no control port.

Security keys are read as ZooKeeper reads them (QuorumPeerConfig.parseProperties trims keys and values; ``sslQuorum``
is its strict ``parseBoolean``: ``true`` or ``false`` in any case, anything else an error; ``ssl.quorum.clientAuth``
is X509Util.ClientAuth.fromPropertyValue: ``need``/``want``/``none`` in any case, empty meaning ``need``), with one
deliberate difference: ``ssl.quorum.hostnameVerification`` goes through ZKConfig.getBoolean (Boolean.parseBoolean),
which reads ``yes``, ``1``, ``on`` or a typo as *false* -- verification silently off -- so zabref refuses every
value but ``true``/``false``. A key zabref cannot honour is refused, never ignored: any other key that starts with
``ssl`` or ``secureClient``, or ``quorum.auth.`` (ZooKeeper would set it as a system property and use it).
"""

from __future__ import annotations

import re
from pathlib import Path

from zabref.config.model import (
    LIMIT_RANGES,
    ClusterConfig,
    Config,
    Limits,
    Security,
    ServerConfig,
    check_host,
    check_together,
    int_in,
)
from zabref.errors import ConfigError

__all__ = ["parse_zoo_cfg"]


def _zoo_int(where: str, key: str, value: str, low: int, high: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{where}: {key}: expected an integer, got {value!r}") from None
    return int_in(where, key, number, low, high)


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
        elif key not in _ZOO_KEYS and key.lower().startswith(_ZOO_SECURITY_PREFIXES):
            raise ConfigError(f"{where}: {key}: zabref does not read this security setting, and refuses it rather "
                              f"than ignore it (it reads {', '.join(k for k in _ZOO_KEYS if 'ssl' in k.lower())})")
        elif key in _ZOO_KEYS:
            if key in values:
                raise ConfigError(f"{where}: {key}: given twice (also line {values[key][0]})")
            values[key] = (number, value)
        # ZooKeeper's other settings (autopurge, 4lw, metrics, ...) do not concern the protocol: ignored.
    timing = {key: _zoo_int(f"{path}:{values[key][0]}", key, values[key][1], 1, 3_600_000)
              for key in ("tickTime", "initLimit", "syncLimit") if key in values}
    default = ClusterConfig()
    cluster = ClusterConfig(tick_ms=timing.get("tickTime", default.tick_ms),
                            init_limit=timing.get("initLimit", default.init_limit),
                            sync_limit=timing.get("syncLimit", default.sync_limit))
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
    check_together(tuple(servers), wheres, shared_data_dir=True)
    limits = Limits(**{field: _zoo_int(f"{path}:{values[key][0]}", key, values[key][1], *LIMIT_RANGES[field])
                       for field, key in (("client_connections_per_address", "maxClientCnxns"),
                                          ("client_frame_bytes", "jute.maxbuffer")) if key in values})
    return Config(path, cluster, tuple(sorted(servers, key=lambda s: s.id)), limits,
                  _zoo_security(path, base, values))


_ZOO_KEYS = ("tickTime", "initLimit", "syncLimit", "dataDir", "clientPort", "maxClientCnxns", "jute.maxbuffer",
             "sslQuorum", "ssl.quorum.keyStore.location", "ssl.quorum.keyStore.type",
             "ssl.quorum.trustStore.location", "ssl.quorum.trustStore.type", "ssl.quorum.hostnameVerification",
             "ssl.quorum.clientAuth")
#: Keys that configure security in ZooKeeper (lower case): one zabref does not know is refused (module docstring).
_ZOO_SECURITY_PREFIXES = ("ssl", "secureclient", "quorum.auth.")


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
            lenient = "" if key == "sslQuorum" else " (ZooKeeper would silently read it as false)"
            raise ConfigError(f"{path}:{number}: {key}: expected true or false, got {value!r}{lenient}")
        return value.lower() == "true"

    for key in ("ssl.quorum.keyStore.type", "ssl.quorum.trustStore.type"):
        if key in values and values[key][1].upper() != "PEM":
            raise ConfigError(f"{path}:{values[key][0]}: {key}: zabref reads PEM files only, got {values[key][1]!r}")

    def file(key: str) -> Path | None:
        if key not in values or not values[key][1]:
            return None
        p = Path(values[key][1])
        return p if p.is_absolute() else base / p

    if "ssl.quorum.clientAuth" in values:  # ZooKeeper: empty is NEED; zabref's quorum TLS is always mutual
        number, value = values["ssl.quorum.clientAuth"]
        if value.upper() not in ("", "NEED"):
            why = ("zabref's quorum TLS always needs the dialer's certificate" if value.upper() in ("WANT", "NONE")
                   else "ZooKeeper reads need, want or none")
            raise ConfigError(f"{path}:{number}: ssl.quorum.clientAuth: {value!r} refused: {why}")

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
