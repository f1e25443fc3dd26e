"""An adversarial peer: a stranger that tries to get onto a server's quorum, election, client and control ports.

Theory of operation
-------------------
`make_credentials` writes the certificates a stranger may hold: the ensemble's own (a member's: an insider that has
a certificate but not the quorum secret), one of another CA, a self-signed one, an expired one of the ensemble's CA
(built with ``cryptography``, as trustme cannot date a certificate in the past) and one of the ensemble's CA for
another host. `Settings` is one combination of the security settings, `combinations` all of them for a config form
(`itertools.product` over the settings the form can express), `render_toml` / `render_zoo` write it.

`attempts` lists what the stranger tries at each port of one combination, each an `Attempt` whose ``expect`` is the
threat model as data: the regular expression of the reason the server must log when it refuses it, or None when
these settings do not protect against it (docs/operations.md, "Threat model", is this table in prose). An attempt
is a script of byte chunks, each after a delay, over plain TCP or TLS with one of the certificates (`knock` runs
it and returns what happened), or an exchange that needs the answers of the server (`reflect`, `replay`,
`relay`). Every connection's local address is returned: the server's log line must name it.

`relay` is the stranger at the address of a configured server that is down (the ghost): a live server dials it,
and it passes a second live server's challenge to the dialer and the dialer's answer back -- a proof made for one
server presented to another. `replay` sends a proof recorded by `relay` on a new connection; `reflect` sends the
server's own challenge back as the proof.

The test (tests/test_adversary.py) runs every attempt against an ensemble of each combination and checks the log
line, that nothing of the servers' state changed, and that the ensemble still commits.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import itertools
import secrets
import ssl
from dataclasses import dataclass, fields
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conformance.fuzz.frames import hello
from zabref.net import wire, zkwire
from zabref.net.security import MAC, NONCE

__all__ = ["Credentials", "make_credentials", "Settings", "combinations", "render_toml", "render_zoo", "Attempt",
           "Knock", "Relayed", "attempts", "control_attempts", "knock", "reflect", "replay", "relay", "client_hello",
           "dial_context", "quorum_hello", "QUORUM_HELLO_SIZE", "HOSTS", "STRANGER_CERTS"]

#: The names a member's certificate carries (every server runs on loopback).
HOSTS = ("localhost", "127.0.0.1", "::1")
#: The certificates a stranger presents, besides none; "member" is an insider's.
STRANGER_CERTS = ("other_ca", "self_signed", "expired", "other_host")


@dataclass(frozen=True)
class Credentials:
    ca: Path  # the ensemble's CA (PEM)
    member: Path  # a member's key and chain
    other_ca: Path  # a certificate of another CA, for the same hosts
    self_signed: Path
    expired: Path  # the ensemble's CA, expired yesterday
    other_host: Path  # the ensemble's CA, for elsewhere.example only


def _leaf(folder: Path, name: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
          days: tuple[int, int]) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"zabref adversary {name}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1"))]
    issuer_cert, issuer_key = issuer if issuer is not None else (None, key)
    cert = (x509.CertificateBuilder().subject_name(subject)
            .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now + datetime.timedelta(days=days[0]))
            .not_valid_after(now + datetime.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .sign(issuer_key, hashes.SHA256()))
    path = folder / f"{name}.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()) + cert.public_bytes(serialization.Encoding.PEM)
                     + (issuer_cert.public_bytes(serialization.Encoding.PEM) if issuer_cert is not None else b""))
    return path


def make_credentials(folder: Path) -> Credentials:
    """Write the ensemble's CA, a member's certificate and the stranger's certificates to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert(*HOSTS).private_key_and_cert_chain_pem.write_to_path(str(folder / "member.pem"))
    other.issue_cert(*HOSTS).private_key_and_cert_chain_pem.write_to_path(str(folder / "other_ca.pem"))
    ca.issue_cert("elsewhere.example").private_key_and_cert_chain_pem.write_to_path(str(folder / "other_host.pem"))
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    return Credentials(folder / "ca.pem", folder / "member.pem", folder / "other_ca.pem",
                       _leaf(folder, "self_signed", None, (-1, 30)), _leaf(folder, "expired", (ca_cert, ca_key),
                                                                             (-30, -1)), folder / "other_host.pem")


def dial_context(cert: Path | None) -> ssl.SSLContext:
    """What the stranger dials with: it presents ``cert`` (or none) and trusts any server (it only wants in)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if cert is not None:
        ctx.load_cert_chain(str(cert))
    return ctx


def client_hello(ctx: ssl.SSLContext) -> bytes:
    """The first bytes a TLS client with ``ctx`` sends: what a downgrade or a cut TLS handshake is made of."""
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


# ------------------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Settings:
    """One combination of the security settings."""

    form: str  # "toml" or "zoo"
    quorum_tls: bool
    client_tls: bool
    client_auth: str
    hostname_verification: bool
    secret: bool

    @property
    def name(self) -> str:
        on = [f.name for f in fields(self) if getattr(self, f.name) is True]
        return f"{self.form}-{'+'.join(on) or 'plain'}-{self.client_auth}"


#: What each form can say: the zoo.cfg form has quorum TLS and its hostname verification only (zabref.config.zoo).
_AXES = {"toml": {"quorum_tls": (False, True), "client_tls": (False, True), "client_auth": ("need", "none"),
                  "hostname_verification": (True, False), "secret": (False, True)},
         "zoo": {"quorum_tls": (False, True), "client_tls": (False,), "client_auth": ("need",),
                 "hostname_verification": (True, False), "secret": (False,)}}


def combinations(form: str) -> list[Settings]:
    axes = _AXES[form]
    return [Settings(form, **dict(zip(axes, values, strict=True))) for values in itertools.product(*axes.values())]


#: The ensembles' limits, in ticks of 50 ms: 3 s each. The adversary runs many ensembles in one event loop beside
#: its knocks; on a machine busy with the test command's other workers, a loop stalled longer than a 0.5 s
#: syncLimit made followers give up and the ensemble elect again (its state changed, with no stranger to blame).
INIT_LIMIT = SYNC_LIMIT = 60


def render_toml(s: Settings, creds: Credentials, secret: Path, servers: list[tuple[int, dict[str, int]]],
                folder: Path) -> str:
    """A zabref TOML config of ``servers`` (sid, ports) with the settings ``s``."""
    lines = ["[cluster]", "tick_ms = 50", f"init_limit = {INIT_LIMIT}", f"sync_limit = {SYNC_LIMIT}", "", "[security]",
             f"quorum_tls = {str(s.quorum_tls).lower()}", f"client_tls = {str(s.client_tls).lower()}",
             f'client_auth = "{s.client_auth}"', f"hostname_verification = {str(s.hostname_verification).lower()}",
             f'cert = "{creds.member}"', f'ca = "{creds.ca}"']
    if s.secret:
        lines.append(f'quorum_secret = "{secret}"')
    for sid, ports in servers:
        lines += ["", "[[server]]", f"id = {sid}", 'host = "127.0.0.1"', *(f"{k} = {v}" for k, v in ports.items()),
                  f'data_dir = "{folder / str(sid)}"']
    return "\n".join(lines) + "\n"


def render_zoo(s: Settings, creds: Credentials, servers: list[tuple[int, dict[str, int]]], data_dir: Path) -> str:
    """ZooKeeper's zoo.cfg of one machine (its ``dataDir``) with the settings ``s``."""
    lines = ["tickTime=50", f"initLimit={INIT_LIMIT}", f"syncLimit={SYNC_LIMIT}", f"dataDir={data_dir}",
             f"sslQuorum={str(s.quorum_tls).lower()}", f"ssl.quorum.keyStore.location={creds.member}",
             f"ssl.quorum.trustStore.location={creds.ca}",
             f"ssl.quorum.hostnameVerification={str(s.hostname_verification).lower()}"]
    lines += [f"server.{sid}=127.0.0.1:{p['quorum_port']}:{p['election_port']};{p['client_port']}"
              for sid, p in servers]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ attempts


@dataclass(frozen=True)
class Attempt:
    """One try at one port: ``cert`` is None for plain TCP, "none" for TLS without a certificate, or a field of
    `Credentials`; ``script`` the chunks sent, each after its delay; ``cut``: the stranger closes after the script.
    ``expect``: the reason the server must log (a regular expression), or None (these settings admit it)."""

    name: str
    port: str  # quorum_port, election_port, client_port, control_port
    cert: str | None
    script: tuple[tuple[float, bytes], ...]
    expect: str | None
    cut: bool = False


_TLS_FAILED = r"TLS handshake failed"
_PROOF = r"quorum authentication failed"
_SLOW = (r"not complete within|no FOLLOWERINFO within|no initial message within|no proof within|not authenticated"
         r"|TLS handshake failed")


def attempts(s: Settings, sid: int, hello: dict[str, bytes], timeout: float, every_byte: bool) -> list[Attempt]:
    """Everything the stranger tries at one server of combination ``s``, its first bytes (a quorum port's
    FOLLOWERINFO, an election port's initial message) naming server ``sid`` (a configured server that is not running:
    a name that passes admission and replaces no connection).
    ``hello``: a ClientHello by certificate name; ``timeout``: the admission deadline; ``every_byte``: cut every
    handshake at every byte (else at every 7th, and the first and last)."""
    out: list[Attempt] = []

    def cuts(data: bytes) -> list[int]:
        return list(range(len(data))) if every_byte else sorted({*range(0, len(data), 7), len(data) - 1})

    for port in ("quorum_port", "election_port"):
        if port == "quorum_port":
            hs = quorum_hello(sid)
            tls_as_handshake = r"not FOLLOWERINFO"  # a ClientHello's first bytes, read as a packet's type
        else:  # ZooKeeper's initial message; a ClientHello's first eight bytes read as a sid of the form before 3.5
            hs = zkwire.encode_initial(zkwire.Initial(sid, zkwire.PROTOCOL_V1, ("127.0.0.1:1",)))
            tls_as_handshake = r"handshake names server"
        plain = hs + (wire.frame(secrets.token_bytes(NONCE + MAC)) if s.secret else b"")
        protected = s.quorum_tls
        # plain TCP: a downgrade when TLS is on, a stranger without the secret when it is not
        out.append(Attempt("plain", port, None, ((0, plain),),
                           _TLS_FAILED if protected else _PROOF if s.secret else None))
        for cert in ("none", *STRANGER_CERTS, "member"):
            if not protected:  # TLS to a plain port: its ClientHello is read as first bytes
                if cert in ("none", "other_ca"):
                    out.append(Attempt(f"tls-{cert}", port, cert, ((0, plain),), tls_as_handshake))
                continue
            if cert in ("none", "other_ca", "self_signed", "expired"):
                expect: str | None = _TLS_FAILED
            elif cert == "other_host" and s.hostname_verification:
                expect = r"certificate names \['elsewhere.example'\]"
            else:  # a certificate of the CA for this host (an insider's), or for any host without verification
                expect = _PROOF if s.secret else None
            out.append(Attempt(f"tls-{cert}", port, cert, ((0, plain),), expect))
        cert = "member" if protected else None
        data = hello["member"] if protected else plain
        for k in cuts(data):
            out.append(Attempt(f"cut-{k}", port, None, ((0, data[:k]),), r"closed: ", cut=True))
        if protected:  # a cut inside TLS: the first bytes and the proof
            for k in cuts(plain)[:: 1 if every_byte else 3]:
                out.append(Attempt(f"cut-inside-{k}", port, cert, ((0, plain[:k]),), r"closed: ", cut=True))
        # slow: each half arrives within a stage's own bound, the whole after the deadline
        out.append(Attempt("slow", port, cert, ((0.6 * timeout, plain[:4]), (0.6 * timeout, plain[4:])), _SLOW))
    # the client port: TLS protects it (and a client certificate with client_auth = "need"); plain otherwise
    request = wire.frame(b'{"op": "sync"}')
    if s.client_tls:
        out.append(Attempt("plain", "client_port", None, ((0, request),), _TLS_FAILED))
        for cert in ("none", *STRANGER_CERTS):
            needs = s.client_auth == "need" and cert != "other_host"  # ZooKeeper's client port checks no host
            out.append(Attempt(f"tls-{cert}", "client_port", cert, ((0, request),), _TLS_FAILED if needs else None))
        for k in cuts(hello["member"]):
            out.append(Attempt(f"cut-{k}", "client_port", None, ((0, hello["member"][:k]),), _TLS_FAILED, cut=True))
        out.append(Attempt("slow", "client_port", None, ((0.6 * timeout, hello["member"][:50]),
                                                         (0.6 * timeout, hello["member"][50:])), _SLOW))
    else:
        out.append(Attempt("tls-other_ca", "client_port", "other_ca", ((0, request),), r"bad input"))
    return out


def control_attempts(token: bytes, hello: bytes, timeout: float, every_byte: bool) -> list[Attempt]:
    """What the stranger tries at a control port whose token is ``token`` (used only to cut a right line)."""
    line = b'{"op": "auth", "token": "' + token + b'"}\n'
    why = r"not authenticated"
    out = [Attempt("wrong-token", "control_port", None, ((0, b'{"op": "auth", "token": "' + b"x" * 20 + b'"}\n'),),
                   why),
           Attempt("no-auth", "control_port", None, ((0, b'{"op": "state"}\n'),), why),
           Attempt("tls", "control_port", None, ((0, hello),), why),
           Attempt("slow", "control_port", None, ((0.6 * timeout, line[:10]), (0.6 * timeout, line[10:])), why)]
    ks = range(len(line)) if every_byte else range(0, len(line), 7)
    out += [Attempt(f"cut-{k}", "control_port", None, ((0, line[:k]),), why, cut=True) for k in ks]
    return out


@dataclass
class Knock:
    """What happened to one connection: its local address (the server's log names it), whether the server closed
    it, and what the server sent."""

    address: tuple[str, int]
    closed: bool
    received: bytes = b""


async def _open(host: str, port: int, tls: ssl.SSLContext | None, timeout: float,
                source: str | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, tuple[str, int]]:
    local = {"local_addr": (source, 0)} if source is not None else {}
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, **local), timeout)
    address = writer.get_extra_info("sockname")[:2]
    if tls is not None:
        await writer.start_tls(tls, server_hostname=host, ssl_handshake_timeout=timeout)
    return reader, writer, address


async def _read_until(reader: asyncio.StreamReader, until: float, got: bytearray) -> bool:
    """Read what the server sends into ``got`` until loop time ``until``; True when it closed the connection."""
    loop = asyncio.get_running_loop()
    while (left := until - loop.time()) > 0:
        try:
            data = await asyncio.wait_for(reader.read(4096), left)
        except TimeoutError:
            return False
        if not data:
            return True
        got += data
    return False


#: How long a knock waits for its TCP connection (`knock`).
CONNECT_TIMEOUT = 15.0


async def knock(host: str, port: int, attempt: Attempt, tls: ssl.SSLContext | None, hold: float,
                source: str | None = None) -> Knock:
    """Run ``attempt``'s script from address ``source`` (a loopback address of its own makes the server's log lines
    about this stranger its own); wait until the server closes the connection or ``hold`` seconds passed."""
    local = {"local_addr": (source, 0)} if source is not None else {}
    # The connect is the kernel's, not the attempt: hundreds of knocks at once on a loaded machine can fill the
    # listen backlog, and a SYN sent again waits a second or three (a TimeoutError within ``hold`` failed CI once)
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, **local), CONNECT_TIMEOUT)
    address = writer.get_extra_info("sockname")[:2]
    loop = asyncio.get_running_loop()
    end = loop.time() + hold
    got = bytearray()
    try:
        if tls is not None:
            try:
                await writer.start_tls(tls, server_hostname=host, ssl_handshake_timeout=hold)
            except (ssl.SSLError, OSError, TimeoutError):
                return Knock(address, True)
        for delay, chunk in attempt.script:
            if await _read_until(reader, loop.time() + delay, got):  # the whole delay; the server may close
                return Knock(address, True, bytes(got))
            writer.write(chunk)
            await writer.drain()
        if attempt.cut:
            return Knock(address, False, bytes(got))
        return Knock(address, await _read_until(reader, end, got), bytes(got))
    except (ConnectionError, OSError, ssl.SSLError):
        return Knock(address, True, bytes(got))
    finally:
        writer.close()


def quorum_hello(sid: int) -> bytes:
    """A quorum connection's first bytes as a zabref learner ``sid`` writes them: its FOLLOWERINFO, with a random
    connection id."""
    return hello(sid, cid=secrets.randbits(63))


#: Bytes of `quorum_hello`: a packet's head (16), the LearnerInfo and connection id (28), a null authinfo (4).
QUORUM_HELLO_SIZE = len(hello(0))


async def _exactly(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes | None:
    """``size`` bytes, or None if the other end closed first."""
    try:
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except (asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError):
        return None


async def _frame(reader: asyncio.StreamReader, size: int, timeout: float) -> bytes | None:
    """One frame of ``size`` bytes, or None if the other end closed (or sent something else) first."""
    try:
        prefix = await asyncio.wait_for(reader.readexactly(4), timeout)
        if int.from_bytes(prefix, "big", signed=True) != size:
            return None
        return await asyncio.wait_for(reader.readexactly(size), timeout)
    except (asyncio.IncompleteReadError, ConnectionError, OSError, TimeoutError):
        return None


async def reflect(host: str, port: int, sid: int, tls: ssl.SSLContext | None, timeout: float,
                  source: str | None = None) -> Knock:
    """Handshake as ``sid``, then send the server's own challenge back, twice, as the proof."""
    reader, writer, address = await _open(host, port, tls, timeout, source)
    try:
        writer.write(quorum_hello(sid))
        challenge = await _frame(reader, NONCE, timeout)
        if challenge is None:
            return Knock(address, True)
        writer.write(wire.frame(challenge + challenge[:MAC]))
        answer = await _frame(reader, MAC, timeout)
        return Knock(address, answer is None, answer or b"")
    finally:
        writer.close()


@dataclass
class Relayed:
    """What `relay` did: the connection to the live server, and the dialer's first bytes (FOLLOWERINFO) and answer
    it carried."""

    knock: Knock
    handshake: bytes
    answer: bytes
    late: bool = False  # the answer left for the live server ``timeout / 2`` or more after the connection opened


async def relay(dialer_reader: asyncio.StreamReader, dialer_writer: asyncio.StreamWriter, host: str, port: int,
                tls: ssl.SSLContext | None, timeout: float, source: str | None = None) -> Relayed | None:
    """The stranger at a down server's address, dialed by a live server (``dialer_*``): open a connection to the
    live server at ``host:port`` with the dialer's handshake, give the dialer that server's challenge, pass its
    answer on. None if the dialer did not answer."""
    body = await _exactly(dialer_reader, QUORUM_HELLO_SIZE, timeout)
    if body is None:
        return None
    loop = asyncio.get_running_loop()
    opened = loop.time()
    reader, writer, address = await _open(host, port, tls, timeout, source)
    try:
        writer.write(body)
        challenge = await _frame(reader, NONCE, timeout)
        if challenge is None:
            return Relayed(Knock(address, True), body, b"")
        dialer_writer.write(wire.frame(challenge))
        answer = await _frame(dialer_reader, NONCE + MAC, timeout)
        if answer is None:
            return None
        writer.write(wire.frame(answer))
        # late: the live server may reach its admission deadline before it reads the answer. Written at 1.9 s of a
        # 2 s deadline, it was read after it on a loaded machine (a fresh clone's test run): half the deadline is the
        # margin for the live server's loop to read and check it
        late = loop.time() - opened >= timeout / 2
        proof = await _frame(reader, MAC, timeout)
        return Relayed(Knock(address, proof is None, proof or b""), body, answer, late)
    finally:
        writer.close()


async def replay(host: str, port: int, recorded: Relayed, tls: ssl.SSLContext | None, timeout: float,
                 source: str | None = None) -> Knock:
    """A new connection with a recorded handshake and answer (`relay`): the fresh challenge makes it stale."""
    reader, writer, address = await _open(host, port, tls, timeout, source)
    try:
        writer.write(recorded.handshake)
        if await _frame(reader, NONCE, timeout) is None:
            return Knock(address, True)
        writer.write(wire.frame(recorded.answer))
        answer = await _frame(reader, MAC, timeout)
        return Knock(address, answer is None, answer or b"")
    finally:
        writer.close()
