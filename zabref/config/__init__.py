"""A zabref cluster's configuration: one TOML file, read with `tomllib`, validated into frozen dataclasses.

Theory of operation
-------------------
One file describes the whole cluster, and every server reads the same file (``zabref serve --config FILE --id N``)::

    [cluster]
    tick_ms = 100        # one tick, as ZooKeeper's tickTime
    init_limit = 10      # ticks a follower (or a new leader) may take to connect and sync (initLimit)
    sync_limit = 5       # ticks without hearing the other side before giving up on it (syncLimit)
    leader_logs_late = false  # true: a leader sends a PROPOSAL before its own log write is durable (ZooKeeper's way)

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
    zk_client_port = 21005  # optional: ZooKeeper's client protocol, for kazoo or ZooKeeper's Java client
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
``quorum.auth.enableSasl`` (zabref's quorum authentication is a shared secret, ``[security] quorum_secret``). As in
ZooKeeper, each machine has its own file, whose ``dataDir`` is the data directory of the server started with it; such
servers have no control port. `load_config` takes a file as ``zoo.cfg`` when its name ends in ``.cfg``.

`render_config` writes the TOML format back (used by ``zabref cluster``); `write_config` writes it atomically.

Modules: `model` (the dataclasses and the checks both forms share), `toml` (zabref's form), `zoo` (ZooKeeper's).
This package's root holds `load_config` and `write_config`, and names the whole API.
"""

from __future__ import annotations

import os
from pathlib import Path

from zabref.config.model import (
    CLIENT_AUTH,
    PORT_KEYS,
    ClusterConfig,
    Config,
    Limits,
    Security,
    ServerConfig,
    check_host,
    is_loopback,
)
from zabref.config.toml import parse_config, render_config
from zabref.config.zoo import parse_zoo_cfg
from zabref.errors import ConfigError
from zabref.storage.atomic import write_file

__all__ = ["ClusterConfig", "Limits", "Security", "ServerConfig", "Config", "PORT_KEYS", "CLIENT_AUTH", "check_host",
           "is_loopback", "load_config", "parse_config", "parse_zoo_cfg", "render_config", "write_config"]


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


def write_config(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically and durably (`zabref.storage.atomic.write_file`)."""
    return write_file(path, text)
