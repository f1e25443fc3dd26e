"""TLS and quorum authentication: what keeps strangers off the quorum, election and client ports. Off by default.

Theory of operation
-------------------
`Guard.from_config` reads the configuration's ``[security]`` table (`zabref.config.Security`) and the files it names
when a server starts; a missing or unreadable file, a key that does not match its certificate, or a secret file that
others may read is a `ConfigError` naming the key and the file, before the server listens.

**TLS** (``quorum_tls``, ``client_tls``). Listeners hand each accepted connection, not yet read, to its port, which
opens it over TLS inside its own deadline (`zabref.net.listener.Accepted.open`, with this guard's context), so a failed
TLS handshake -- plain bytes, no certificate, a certificate of another CA, silence -- is logged with the stranger's
address and the connection closed before one byte of it is read as protocol. Quorum and election connections are mutual:
both ends present a certificate of the configured CA (as ZooKeeper's sslQuorum). The client port asks for a client
certificate with ``client_auth = "need"`` and not with ``"none"``. Unless ``hostname_verification`` is false, a dialer
checks that the certificate names the host it dialed, and a quorum or election acceptor that the dialer's certificate
names the configured host of the server its first bytes name (`Guard.check_peer_host`; ZooKeeper's sslQuorum checks a
connecting server's certificate too, against its address: ZKTrustManager.checkClientTrusted), so a certificate of the CA
issued for another host is refused at either end. A follower forwards client requests to its leader's client port with
its own certificate.

**Quorum authentication** (``quorum_secret``: a file only its owner may read, at least `MIN_SECRET` bytes). Right
after the first bytes of a quorum or election connection (a learner's FOLLOWERINFO, an initial message), the two ends
prove to each other that they know the secret, before the acceptor reads anything more of the dialer (or gives the
node that FOLLOWERINFO) and before the dialer sends anything more. Every message is a frame (``int32 length, body``):

1. acceptor -> dialer: a challenge, `NONCE` random bytes ``a``;
2. dialer -> acceptor: `NONCE` random bytes ``d`` and ``HMAC-SHA256(secret, DIALER | handshake | acceptor | a | d)``;
3. acceptor -> dialer: ``HMAC-SHA256(secret, ACCEPTOR | handshake | acceptor | a | d)``.

``handshake`` is those first bytes, so a proof is bound to the sid (and connection id) they name;
``acceptor`` is the sid of the server dialed (int64, big-endian: the dialer knows whom it dialed, the acceptor who it
is), so a proof a server made for one peer is no proof for another: a stranger listening at the address of a server
that is down cannot relay the challenge of a live server to the servers that dial it and pass their answer on
(tests/test_adversary.py). Fresh nonces from both ends make a recorded exchange useless on another connection; the
labels DIALER and ACCEPTOR make a proof sent back to its maker useless. Each side compares with
`hmac.compare_digest` and closes the connection on a wrong proof, a wrong length, or silence longer than
`zabref.net.peers.HANDSHAKE_TIMEOUT`. What it proves: the other end knows the ensemble's secret. It does not prove which
server it is (every server holds the same secret, as with ZooKeeper's DIGEST-MD5 quorum credentials); TLS with
per-server certificates is the stronger guard, and the two combine.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
import secrets
import ssl
import stat
from dataclasses import dataclass
from pathlib import Path

from zabref.config import Config, Security
from zabref.errors import ConfigError
from zabref.net import streams, wire

__all__ = ["Guard", "AuthError", "NONCE", "MAC", "MIN_SECRET", "DIALER", "ACCEPTOR", "read_secret", "dialer_proof",
           "acceptor_proof", "client_context"]

NONCE = 32
MAC = 32
#: The fewest bytes a quorum secret may have (after stripping a trailing newline).
MIN_SECRET = 16
DIALER = b"zabref quorum auth v2: dialer"
ACCEPTOR = b"zabref quorum auth v2: acceptor"


class AuthError(ConnectionError):
    """The other end of a quorum or election connection failed quorum authentication (or its TLS handshake)."""


def read_secret(path: Path, where: str = "[security] quorum_secret") -> bytes:
    """The quorum secret in ``path``: a regular file that neither group nor others may read, at least `MIN_SECRET`
    bytes (a trailing newline is not part of it)."""
    try:
        info = os.stat(path)
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: cannot read {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{where}: {path} is not a regular file")
    if info.st_mode & 0o077:
        raise ConfigError(f"{where}: {path} may be read by others (mode {stat.S_IMODE(info.st_mode):o}): "
                          "chmod 600 it")
    secret = data.rstrip(b"\r\n")
    if len(secret) < MIN_SECRET:
        raise ConfigError(f"{where}: {path} holds {len(secret)} bytes; a quorum secret has at least {MIN_SECRET}")
    return secret


def dialer_proof(secret: bytes, handshake: bytes, acceptor: int, a: bytes, d: bytes) -> bytes:
    return hmac.new(secret, DIALER + handshake + _sid(acceptor) + a + d, hashlib.sha256).digest()


def acceptor_proof(secret: bytes, handshake: bytes, acceptor: int, a: bytes, d: bytes) -> bytes:
    return hmac.new(secret, ACCEPTOR + handshake + _sid(acceptor) + a + d, hashlib.sha256).digest()


def _sid(sid: int) -> bytes:
    return sid.to_bytes(8, "big", signed=True)


def _load_chain(ctx: ssl.SSLContext, s: Security) -> None:
    try:  # ssl.SSLError is an OSError: it goes first
        ctx.load_cert_chain(str(s.cert), str(s.key))
    except ssl.SSLError as e:
        raise ConfigError(f"[security] cert/key: {s.cert} / {s.key}: not a PEM certificate chain and its "
                          f"private key: {e.reason or e}") from None
    except OSError as e:
        raise ConfigError(f"[security] cert/key: cannot read {s.cert} / {s.key}: {e.strerror or e}") from None
    try:
        ctx.load_verify_locations(cafile=str(s.ca))
    except ssl.SSLError as e:
        raise ConfigError(f"[security] ca: {s.ca}: not PEM CA certificates: {e.reason or e}") from None
    except OSError as e:
        raise ConfigError(f"[security] ca: cannot read {s.ca}: {e.strerror or e}") from None


def client_context(s: Security) -> ssl.SSLContext:
    """The context a dialer uses: it presents this machine's certificate and checks the other end's."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = s.hostname_verification
    _load_chain(ctx, s)
    return ctx


def _server_context(s: Security, require_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
    _load_chain(ctx, s)
    return ctx


@dataclass(frozen=True)
class Guard:
    """What one server needs to guard its ports and to dial others (see the module docstring)."""

    quorum_server: ssl.SSLContext | None = None  # quorum and election listeners
    quorum_client: ssl.SSLContext | None = None  # dialing another server's quorum or election port
    client_server: ssl.SSLContext | None = None  # the client port
    forward_client: ssl.SSLContext | None = None  # a follower forwarding to its leader's client port
    secret: bytes | None = None
    verify_peer_host: bool = False  # quorum TLS with hostname verification: a dialer's certificate names its host

    @classmethod
    def from_config(cls, config: Config) -> Guard:
        s = config.security
        if not s.enabled:
            return cls()
        try:
            return cls(quorum_server=_server_context(s, True) if s.quorum_tls else None,
                       quorum_client=client_context(s) if s.quorum_tls else None,
                       client_server=_server_context(s, s.client_auth == "need") if s.client_tls else None,
                       forward_client=client_context(s) if s.client_tls else None,
                       secret=read_secret(s.quorum_secret) if s.quorum_secret is not None else None,
                       verify_peer_host=s.quorum_tls and s.hostname_verification)
        except ConfigError as e:
            raise ConfigError(f"{config.path}: {e}") from None

    # ---------------------------------------------------------------------------------------------- TLS

    def check_peer_host(self, writer: asyncio.StreamWriter, host: str) -> None:
        """Quorum TLS acceptor with hostname verification: the dialer's certificate (already checked against the CA)
        must name ``host`` -- the configured host of the server its handshake names -- in its subjectAltName;
        AuthError saying what it names instead. Nothing without quorum TLS or with hostname_verification false."""
        if not self.verify_peer_host or self.quorum_server is None:
            return
        cert = writer.get_extra_info("peercert") or {}
        names = [(kind, value) for kind, value in cert.get("subjectAltName", ()) if kind in ("DNS", "IP Address")]
        if not any(_names_host(kind, value, host) for kind, value in names):
            raise AuthError(f"TLS: the dialer's certificate names {[v for _, v in names] or 'no host'}, not {host} "
                            "(the configured host of the server its handshake names)")

    # ---------------------------------------------------------------------------------------------- quorum auth

    async def prove(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handshake: bytes,
                    acceptor: int, timeout: float) -> None:
        """Dialer's side, after writing its first bytes to server ``acceptor`` (nothing without a secret);
        AuthError if the acceptor does not know the secret or does not follow the exchange."""
        if self.secret is None:
            return
        a = await _read_body(reader, NONCE, "challenge", timeout)
        d = secrets.token_bytes(NONCE)
        streams.write(writer, wire.frame(d + dialer_proof(self.secret, handshake, acceptor, a, d)))
        answer = await _read_body(reader, MAC, "acceptor's proof", timeout)
        if not hmac.compare_digest(answer, acceptor_proof(self.secret, handshake, acceptor, a, d)):
            raise AuthError("quorum authentication failed: the acceptor's proof is wrong (another secret)")

    async def check(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handshake: bytes,
                    me: int, timeout: float) -> None:
        """Acceptor's side on server ``me``, after reading the dialer's first bytes (nothing without a secret);
        AuthError if the dialer does not prove the secret. Nothing after the dialer's proof is read here."""
        if self.secret is None:
            return
        a = secrets.token_bytes(NONCE)
        streams.write(writer, wire.frame(a))
        body = await _read_body(reader, NONCE + MAC, "proof", timeout)
        d, proof = body[:NONCE], body[NONCE:]
        if not hmac.compare_digest(proof, dialer_proof(self.secret, handshake, me, a, d)):
            raise AuthError("quorum authentication failed: the dialer's proof is wrong (another secret, or none)")
        streams.write(writer, wire.frame(acceptor_proof(self.secret, handshake, me, a, d)))


def _names_host(kind: str, value: str, host: str) -> bool:
    """Does one subjectAltName entry name ``host``? An address matches an IP entry of the same address; a name a DNS
    entry, case-insensitively, a leading ``*.`` standing for exactly one label (RFC 6125)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        try:
            return kind == "IP Address" and ipaddress.ip_address(value.strip()) == address
        except ValueError:
            return False
    if kind != "DNS":
        return False
    name, host = value.lower().rstrip("."), host.lower().rstrip(".")
    if name.startswith("*."):
        return "." in host and host.split(".", 1)[1] == name[2:]
    return name == host


async def _read_body(reader: asyncio.StreamReader, size: int, what: str, timeout: float) -> bytes:
    """One frame whose body must be ``size`` bytes; AuthError on anything else."""
    try:
        prefix = await asyncio.wait_for(reader.readexactly(4), timeout)
        length = int.from_bytes(prefix, "big", signed=True)
        if length != size:
            raise AuthError(f"quorum authentication failed: the {what} frame is {length} bytes, expected {size}")
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except asyncio.IncompleteReadError as e:
        raise AuthError(f"quorum authentication failed: the connection ended during the {what} "
                        f"({len(e.partial)} bytes of it)") from None
    except (TimeoutError, asyncio.TimeoutError):
        raise AuthError(f"quorum authentication failed: no {what} within {timeout} s") from None
    except (ConnectionError, OSError) as e:
        if isinstance(e, AuthError):
            raise
        raise AuthError(f"quorum authentication failed during the {what}: {type(e).__name__}: {e}") from None
