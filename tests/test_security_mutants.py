"""The gates of one server, driven in-process connection by connection: written for the mutants of the guarding code
that the other security tests left alive (scripts/mutation-security.sh; docs/operations.md, "Mutation score of the
guarding code"). Each test starts one server of three configured (the others never run: the gates answer alone) in
this process, knocks on one gate at a time with generous deadlines, and checks what the server says and logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import ssl
import struct
import time
from pathlib import Path

import pytest
import trustme

from conformance.fuzz.frames import hello
from zabref.config import parse_config
from zabref.net import peers, wire, zkwire
from zabref.net.listener import Listener
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.net.security import AuthError, Guard, client_context
from zabref.runtime import control, links
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.machine import Machine
from zabref.runtime.server import Server

TOKEN = b"mutants-control-token-0123456789abcdef"
SECRET = b"the ensemble's secret, 32 bytes."
WAIT = 10.0  # every wait here is bounded by this; none is expected to come near it


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; a member's certificate for loopback; one of the same CA for another host."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(folder / "member.pem"))
    ca.issue_cert("other.example").private_key_and_cert_chain_pem.write_to_path(str(folder / "other.pem"))
    return folder


def _config(folder: Path, base: int, security: str = ""):
    secret = folder / "quorum.secret"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, SECRET + b"\n")
    os.close(fd)
    servers = "".join(f"""
[[server]]
id = {sid}
host = "127.0.0.1"
quorum_port = {base + 10 * (sid - 1)}
election_port = {base + 10 * (sid - 1) + 1}
client_port = {base + 10 * (sid - 1) + 2}
control_port = {base + 10 * (sid - 1) + 3}
data_dir = "d{sid}"
""" for sid in (1, 2, 3))
    return parse_config(f"[cluster]\ntick_ms = 50\n{security}\n{servers}", str(folder / "c.toml"), base=folder)


@contextlib.asynccontextmanager
async def _server(folder: Path, security: str = ""):
    """Server 1 of three, running in this loop until the block ends."""
    base = find_free_base_port(3)
    try:
        server = Server(_config(folder, base, security), 1, NormalDriver(0.05), machine=Machine(signals=False),
                        control_token=TOKEN)
        task = asyncio.create_task(server.run())
        for _ in range(int(WAIT / 0.02)):
            if len(server._listeners) == 4 or task.done():
                break
            await asyncio.sleep(0.02)
        assert len(server._listeners) == 4, "the server did not listen"
        try:
            yield server
        finally:
            server.stop()
            await asyncio.wait_for(task, WAIT)
    finally:
        release_base_port(base)


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (bounded by WAIT)."""
    data = b""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := await asyncio.wait_for(reader.read(65536), WAIT):
            data += chunk
    return data


async def _knock(port: int, payload: bytes, ssl_ctx: ssl.SSLContext | None = None) -> tuple[tuple, bytes]:
    """Send ``payload`` to a port of 127.0.0.1; (this end's address, what came back until the close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ssl_ctx,
                                                   server_hostname="127.0.0.1" if ssl_ctx else None)
    address = writer.get_extra_info("sockname")
    try:
        writer.write(payload)
        if ssl_ctx is None:
            writer.write_eof()  # all it will send: a cut handshake ends here
        await writer.drain()
        return address, await _closed(reader)
    finally:
        writer.close()


def _handshake(sid: int, cid: int = 5) -> bytes:
    """A quorum connection's first bytes: a learner's FOLLOWERINFO naming ``sid``, with connection id ``cid``."""
    return hello(sid, cid=cid)


def _initial(sid: int) -> bytes:
    """An election connection's first bytes: ZooKeeper's initial message naming ``sid``."""
    return zkwire.encode_initial(zkwire.Initial(sid, zkwire.PROTOCOL_V1, ("127.0.0.1:1",)))


# ------------------------------------------------------------------------------------------------ admission, plain


def test_a_plain_acceptor_admits_a_member_and_refuses_itself_strangers_and_bad_handshakes(tmp_path, lines) -> None:
    """Without [security] the first bytes are the whole admission: a configured other server is admitted (on both
    ports, and it stays open), the server's own sid, an unknown sid, a first packet that is no FOLLOWERINFO and a bad
    LearnerInfo are refused and logged."""

    async def main():
        async with _server(tmp_path) as server:
            me = server.me
            bad = {"quorum": ((_handshake(1), "handshake names server 1, not another server of [1, 2, 3]"),
                              (_handshake(7), "handshake names server 7, not another server of [1, 2, 3]"),
                              (wire.frame(b"x" * 15), "the first packet is SNAP, not FOLLOWERINFO"),
                              (struct.pack(">iqi", 16, 0, 20) + bytes(24), "OBSERVERINFO, not FOLLOWERINFO (zabref has "
                                                                          "no observers)"),
                              (struct.pack(">iqi", 11, 0, 12) + bytes(16), "FOLLOWERINFO's data is 12 bytes"),
                              (_handshake(2)[:10], "connection ended after 10 bytes of the first packet")),
                   # ZooKeeper's initial message on the election port
                   "election": ((_initial(1), "handshake names server 1, not another server of [1, 2, 3]"),
                                (_initial(7), "handshake names server 7, not another server of [1, 2, 3]"),
                                (struct.pack(">qqi", -3, 2, 1) + b"x", "unknown election protocol version -3"),
                                (struct.pack(">qqi", zkwire.PROTOCOL_V1, 2, 0), "address length is 0"),
                                (_initial(2)[:10], "connection ended after 10 bytes of the initial message"))}
            for port, kind in ((me.quorum_port, "quorum"), (me.election_port, "election")):
                for payload, why in bad[kind]:
                    address, answer = await _knock(port, payload)
                    assert answer == b""
                    assert why in await lines.wait_for(f"{kind} connection from {address!r} closed")
            # a member: the quorum connection is the node's, the election one a vote channel; both stay open
            reader, writer = await asyncio.open_connection(me.host, me.quorum_port)
            writer.write(_handshake(2, 77))
            await lines.wait_for("quorum connection from 2 open")
            assert server.conns[2].cid == 77 and not server.conns[2].closed
            vreader, vwriter = await asyncio.open_connection(me.host, me.election_port)
            vwriter.write(_initial(3))  # a larger id: its connection is the pair's (`zabref.net.votes`)
            for _ in range(int(WAIT / 0.02)):
                if any(v.peer == 3 for v in server.votes.values()):
                    break
                await asyncio.sleep(0.02)
            assert [v.peer for v in server.votes.values()] == [3]
            await asyncio.sleep(0.2)
            assert not server.conns[2].closed and [v.peer for v in server.votes.values()] == [3]
            writer.close()
            vwriter.close()

    asyncio.run(main())


def test_an_admission_has_one_deadline_from_the_accept(tmp_path, lines, monkeypatch) -> None:
    """Half a FOLLOWERINFO then silence is closed at HANDSHAKE_TIMEOUT after the accept, and logged so; a whole
    one before it is admitted."""
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT", 0.6)

    async def main():
        async with _server(tmp_path) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
            address = writer.get_extra_info("sockname")
            writer.write(_handshake(2)[:8])
            loop = asyncio.get_running_loop()
            start = loop.time()
            assert await _closed(reader) == b""
            took = loop.time() - start
            assert 0.5 < took < 5, took
            line = await lines.wait_for(f"quorum connection from {address!r} closed")
            assert line.endswith(("not complete within 0.6 s", "no FOLLOWERINFO within 0.6 s")), line
            writer.close()
            # each of the three reads of the FOLLOWERINFO (type, zxid and length, data) within its own bound of 0.6 s,
            # the whole past the deadline, 0.6 s after the accept: closed then, before the last bytes (1.1 s after the
            # accept; the stages' bounds alone would have held the connection until then)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
            address = writer.get_extra_info("sockname")
            handshake = _handshake(2)
            closed = asyncio.create_task(_closed(reader))
            for pause, (start, end) in ((0.0, (0, 2)), (0.55, (2, 4)), (0.3, (4, 16)), (0.25, (16, 48))):
                await asyncio.sleep(pause)
                if (start, end) == (16, 48):
                    assert closed.done(), "the connection was still open when the last bytes were due"
                if not writer.is_closing():
                    writer.write(handshake[start:end])
            assert await closed == b""
            line = await lines.wait_for(f"quorum connection from {address!r} closed")
            assert line.endswith("admission (TLS, first bytes, quorum authentication) not complete within 0.6 s"), line
            assert 2 not in server.conns
            writer.close()

    asyncio.run(main())


class _CoarseClock(asyncio.SelectorEventLoop):
    """asyncio's loop on a clock of 1/1024 s steps: when a timer set on a step fires, the clock reads its time
    exactly, as uvloop's clock of whole milliseconds often does."""

    def time(self) -> float:
        return math.floor(super().time() * 1024) / 1024


def test_an_admission_whose_deadline_fired_is_refused_for_it_on_a_clock_that_reads_the_deadline(
        tmp_path, lines, monkeypatch) -> None:
    """A stranger that sends nothing is closed at the deadline and logged so, also where the clock reads the
    deadline itself when its timer fires (uvloop: the secured fuzzer's half TLS hellos were closed unlogged when
    `_handshake` asked only whether the clock was past the deadline)."""
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT", 0.25)  # a step of the clock: deadlines fall on steps

    async def main():
        async with _server(tmp_path) as server:
            for _ in range(3):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
                address = writer.get_extra_info("sockname")
                assert await _closed(reader) == b""
                line = await lines.wait_for(f"quorum connection from {address!r} closed")
                assert line.endswith("not complete within 0.25 s"), line
                writer.close()

    with asyncio.Runner(loop_factory=_CoarseClock) as runner:
        runner.run(main())


@pytest.mark.pure_build  # patches a server's _admit
def test_an_admission_that_ends_after_its_deadline_is_refused(tmp_path, lines, monkeypatch) -> None:
    """Python 3.11's wait_for may swallow the deadline's cancellation when its read completes at that moment
    (gh-86296): an admission that returns after the deadline all the same is refused, one before it is not."""
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT", 0.3)

    async def main():
        async with _server(tmp_path) as server:
            async def admit(accepted, kind, late=True):
                reader, writer = await accepted.open(1.0)
                try:
                    await asyncio.sleep(0.6 if late else 0.05)
                except asyncio.CancelledError:  # lost, as wait_for may lose it
                    await asyncio.sleep(0.05)
                # its stream, the sid, its FOLLOWERINFO, the connection id
                return reader, writer, 2, (wire.decode_quorum_packet(_handshake(2)), 5)

            monkeypatch.setattr(server, "_admit", admit)
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
            address = writer.get_extra_info("sockname")
            assert await _closed(reader) == b""
            line = await lines.wait_for(f"quorum connection from {address!r} closed")
            assert line.endswith("not complete within 0.3 s") and 2 not in server.conns, line
            writer.close()
            monkeypatch.setattr(server, "_admit", lambda *a: admit(*a, late=False))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
            await lines.wait_for("quorum connection from 2 open")
            assert not server.conns[2].closed
            writer.close()

    asyncio.run(main())


@pytest.mark.pure_build  # patches a server's _admit
def test_a_refusal_found_after_the_deadline_is_logged_as_the_deadline(tmp_path, lines, monkeypatch) -> None:
    """A loop busy past the deadline runs the stranger's late bytes, and the refusal they lead to (a wrong proof),
    before the deadline's cancellation (the adversary's slow stranger on a loaded machine): the log line says the
    deadline passed, and what the admission found by then; a refusal before the deadline says only what it found."""
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT", 0.3)

    async def main():
        async with _server(tmp_path) as server:
            async def admit(accepted, kind, busy=0.5):
                time.sleep(busy)  # the loop itself is held: no cancellation can arrive in between
                raise links._Refused("quorum authentication failed: the dialer's proof is wrong")

            for busy, late in ((0.5, True), (0.0, False)):
                monkeypatch.setattr(server, "_admit", lambda *a, busy=busy: admit(*a, busy=busy))
                reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
                address = writer.get_extra_info("sockname")
                assert await _closed(reader) == b""
                line = await lines.wait_for(f"quorum connection from {address!r} closed")
                assert "by then: quorum authentication failed" in line if late else "by then" not in line
                assert ("not complete within 0.3 s" in line) == late and "the dialer's proof is wrong" in line
                assert 2 not in server.conns
                writer.close()

    asyncio.run(main())


def test_a_cut_link_refuses_the_handshake_of_that_server_only(tmp_path, lines) -> None:
    """The fault layer's cut applies at admission: a handshake naming a server whose link is cut is refused, one
    naming another server is admitted."""

    async def main():
        async with _server(tmp_path) as server:
            server.cut_links({2})
            address, _ = await _knock(server.me.quorum_port, _handshake(2))
            await lines.wait_for("quorum connection from 2 refused: link cut by the fault layer")
            assert 2 not in server.conns
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.quorum_port)
            writer.write(_handshake(3))
            await lines.wait_for("quorum connection from 3 open")
            writer.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------ admission, secured

SECURED = """[security]
quorum_tls = true
cert = "{pki}/member.pem"
ca = "{pki}/ca.pem"
quorum_secret = "quorum.secret"
"""


def _guard(pki: Path, cert: str = "member.pem", secret: bytes | None = SECRET) -> Guard:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(pki / cert))
    ctx.load_verify_locations(cafile=str(pki / "ca.pem"))
    return Guard(quorum_client=ctx, secret=secret)


def test_a_secured_acceptor_admits_a_member_with_the_secret_and_refuses_the_rest(tmp_path, pki, lines) -> None:
    """quorum_tls, hostname verification and quorum_secret: a member's certificate and the secret are admitted; plain
    bytes, a certificate of another host and a wrong secret are refused with the reason and the sid named."""

    async def main():
        async with _server(tmp_path, SECURED.format(pki=pki)) as server:
            me = server.me
            for kind, port in (("quorum", me.quorum_port), ("election", me.election_port)):
                address, _ = await _knock(port, _handshake(2))
                assert "TLS handshake failed" in await lines.wait_for(f"{kind} connection from {address!r} closed")
            # a certificate of the CA for another host: refused after the handshake names server 2
            with pytest.raises(OSError):
                await peers.dial(me.host, me.quorum_port, _handshake(2), peer=1, attempts=1, timeout=WAIT,
                                 guard=_guard(pki, "other.pem"))
            line = await lines.wait_for("the dialer's certificate names")
            assert "names ['other.example'], not 127.0.0.1" in line and "(its handshake named server 2)" in line
            # the member's certificate, another secret
            with pytest.raises(AuthError):
                await peers.dial(me.host, me.election_port, _initial(3), peer=1, attempts=1, timeout=WAIT,
                                 guard=_guard(pki, secret=b"another secret, 32 bytes long..."))
            line = await lines.wait_for("the dialer's proof is wrong")
            assert line.startswith("election connection from") and "(its handshake named server 3)" in line
            assert not server.conns
            # the member's certificate and the secret: admitted, and the acceptor's proof satisfied the dialer
            reader, writer = await peers.dial(me.host, me.quorum_port, _handshake(2), peer=1, attempts=1, timeout=WAIT,
                                              guard=_guard(pki))
            await lines.wait_for("quorum connection from 2 open")
            assert not server.conns[2].closed
            writer.close()

    asyncio.run(main())


def test_a_dialer_proves_to_the_server_it_dialed_and_no_other(tmp_path, pki, lines) -> None:
    """The proof names the acceptor's sid: a dialer that thinks it dialed server 2 is refused by server 1."""

    async def main():
        async with _server(tmp_path, SECURED.format(pki=pki)) as server:
            with pytest.raises(AuthError):
                await peers.dial(server.me.host, server.me.quorum_port, _handshake(3), peer=2, attempts=1, timeout=WAIT,
                                 guard=_guard(pki))
            assert "(its handshake named server 3)" in await lines.wait_for("the dialer's proof is wrong")

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------ the control port


async def _control(port: int, *lines_: bytes) -> list[dict]:
    """Send lines to the control port; the answers until it closes or WAIT after the last answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"".join(lines_))
        await writer.drain()
        answers = []
        for _ in lines_:
            try:
                line = await asyncio.wait_for(reader.readline(), WAIT)
            except (ConnectionError, asyncio.TimeoutError):
                break
            if not line:
                break
            answers.append(json.loads(line))
        return answers
    finally:
        writer.close()


def _auth(token: object, pad: int = 0) -> bytes:
    return json.dumps({"op": "auth", "token": token}).encode()[:-1] + b" " * pad + b"}\n"


def test_the_control_port_admits_its_token_and_nothing_else(tmp_path, lines) -> None:
    """The token in the first line is admitted and the connection serves; a wrong token, a token that is not text,
    another op first, a line that is not JSON or longer than MAX_AUTH_LINE are answered once, closed and logged, and
    the next line is never read."""

    async def main():
        async with _server(tmp_path) as server:
            port = server.me.control_port
            ping = b'{"op": "ping"}\n'
            answers = await _control(port, _auth(TOKEN.decode()), ping)
            assert answers[0] == {"ok": True} and answers[1]["sid"] == 1
            # a line of exactly MAX_AUTH_LINE bytes is read; one byte more is not
            exact = _auth(TOKEN.decode(), control.MAX_AUTH_LINE - len(_auth(TOKEN.decode())))
            assert len(exact) == control.MAX_AUTH_LINE
            assert (await _control(port, exact, ping))[0] == {"ok": True}
            refused = 0
            for first in (_auth("not-the-token-0123456789"), _auth(TOKEN.decode() + "x"), _auth(TOKEN.decode()[:-1]),
                          _auth(123), _auth(None), _auth("\ud800" + TOKEN.decode()[1:]), ping,
                          b'{"op": "auth", "token": ' + json.dumps(TOKEN.decode()).encode() + b', "op": "ping"}\n',
                          b'["auth"]\n', b"\xff\n",
                          _auth(TOKEN.decode(), control.MAX_AUTH_LINE + 1 - len(_auth(TOKEN.decode())))):
                answers = await _control(port, first, ping)
                assert len(answers) == 1 and answers[0]["error"].startswith("not authenticated"), (first, answers)
                refused += 1
                await lines.wait_for("a wrong or missing token")
                assert sum("not authenticated: a wrong or missing token" in x for x in lines.lines) == refused

    asyncio.run(main())


def test_the_control_port_closes_a_connection_without_an_auth_line_in_time(tmp_path, lines, monkeypatch) -> None:
    monkeypatch.setattr(control, "AUTH_TIMEOUT", 0.5)

    async def main():
        async with _server(tmp_path) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.control_port)
            address = writer.get_extra_info("sockname")
            writer.write(_auth(TOKEN.decode())[:20])  # no newline
            assert await _closed(reader) == b""
            line = await lines.wait_for(f"control connection from {address!r} closed")
            assert "no auth line (TimeoutError)" in line
            writer.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------ the peer's host


class _Peer:
    """What check_peer_host reads of a TLS connection: the peer's certificate as ssl decodes it."""

    def __init__(self, cert: dict | None) -> None:
        self.cert = cert

    def get_extra_info(self, name: str) -> object:
        assert name == "peercert"
        return self.cert


def _sans(*entries: tuple[str, str]) -> dict:
    return {"subject": ((("commonName", "x"),),), "subjectAltName": entries}


@pytest.mark.parametrize("sans, host, admitted", [
    ((("DNS", "zk1.example.com"),), "zk1.example.com", True),
    ((("DNS", "ZK1.Example.COM."),), "zk1.example.com.", True),  # case and a trailing dot do not matter
    ((("DNS", "zk1.example.com"),), "ZK1.EXAMPLE.COM", True),
    ((("DNS", "zk1.example.com."),), "zk1.example.com", True),
    ((("DNS", "zk1.example.com"),), "zk2.example.com", False),
    ((("DNS", "zk1.example.com"),), "zk1.example.co", False),
    ((("DNS", "*.example.com"),), "zk1.example.com", True),  # a wildcard stands for exactly one label
    ((("DNS", "*.example.com"),), "a.zk1.example.com", False),
    ((("DNS", "*.example.com"),), "example.com", False),
    ((("DNS", "*.example.com"),), "zk1.xexample.com", False),
    ((("DNS", "*.com"),), "com", False),
    ((("DNS", "*.example.com"),), "zk1.example.com.", True),
    ((("DNS", "*.Example.com"),), "ZK1.example.COM", True),
    ((("DNS", "zk1.example.com"), ("DNS", "zk3.example.com")), "zk3.example.com", True),
    ((("IP Address", "10.0.0.3"),), "10.0.0.3", True),
    ((("IP Address", "10.0.0.3\n"),), "10.0.0.3", True),
    ((("IP Address", "2001:DB8:0:0:0:0:0:1"),), "2001:db8::1", True),  # as ssl writes IPv6 entries
    ((("IP Address", "10.0.0.3"),), "10.0.0.4", False),
    ((("DNS", "10.0.0.3"),), "10.0.0.3", False),  # an address matches an IP entry only
    ((("IP Address", "not an address"),), "10.0.0.3", False),
    ((("IP Address", "zk1.example.com"),), "zk1.example.com", False),  # a name matches a DNS entry only
    ((("URI", "zk1.example.com"),), "zk1.example.com", False),
    ((("email", "zk1.example.com"), ("DNS", "zk1.example.com")), "zk1.example.com", True),
    ((), "zk1.example.com", False),
])
def test_the_dialers_certificate_must_name_the_host_of_the_server_it_claims_to_be(sans, host, admitted) -> None:
    """Guard.check_peer_host on a quorum acceptor with hostname verification: the subjectAltName entries against the
    configured host (RFC 6125: DNS names case-insensitively, one label for a leading *., addresses as addresses)."""
    guard = Guard(quorum_server=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), verify_peer_host=True)
    if admitted:
        guard.check_peer_host(_Peer(_sans(*sans)), host)
    else:
        with pytest.raises(AuthError, match=r"^TLS: the dialer's certificate names .*, not "):
            guard.check_peer_host(_Peer(_sans(*sans)), host)


def test_a_certificate_without_names_is_refused_and_nothing_is_checked_without_verification() -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    on = Guard(quorum_server=tls, verify_peer_host=True)
    for cert in ({}, None, {"subject": ()}):
        with pytest.raises(AuthError, match=r"names no host, not 10\.0\.0\.3"):
            on.check_peer_host(_Peer(cert), "10.0.0.3")
    with pytest.raises(AuthError, match=r"names \['zk9.example.com'\], not 10\.0\.0\.3"):
        on.check_peer_host(_Peer(_sans(("DNS", "zk9.example.com"), ("email", "a@b"))), "10.0.0.3")
    # hostname_verification false (quorum TLS on), or no quorum TLS: any certificate of the CA, or none, will do
    for guard in (Guard(quorum_server=tls, verify_peer_host=False), Guard(verify_peer_host=True), Guard()):
        guard.check_peer_host(_Peer(_sans(("DNS", "zk9.example.com"))), "10.0.0.3")
        guard.check_peer_host(_Peer(None), "10.0.0.3")


# ------------------------------------------------------------------------------------------------ the proofs


def test_the_proofs_are_the_documented_hmacs() -> None:
    """Known answers: HMAC-SHA256(secret, label | handshake | acceptor sid as int64 big-endian | a | d), the labels
    DIALER and ACCEPTOR (zabref/net/security.py's docstring): what another implementation must compute."""
    import hashlib
    import hmac

    from zabref.net import security

    secret, handshake, a, d = b"s" * 20, _handshake(2, 77), bytes(range(32)), bytes(range(32, 64))
    for sid, encoded in ((3, b"\0\0\0\0\0\0\0\x03"), ((1 << 31) - 1, b"\0\0\0\0\x7f\xff\xff\xff")):
        for label, proof in ((b"zabref quorum auth v2: dialer", security.dialer_proof),
                             (b"zabref quorum auth v2: acceptor", security.acceptor_proof)):
            expected = hmac.new(secret, label + handshake + encoded + a + d, hashlib.sha256).digest()
            assert proof(secret, handshake, sid, a, d) == expected
    assert security.dialer_proof(secret, handshake, 3, a, d) != security.acceptor_proof(secret, handshake, 3, a, d)


# ------------------------------------------------------------------------------------------------ files and keys


def _secret_file(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, data)
    os.close(fd)
    return path


@pytest.mark.parametrize("data, secret", [
    (b"0123456789abcdef\n", b"0123456789abcdef"),  # exactly MIN_SECRET bytes
    (b"0123456789abcdef\r\n", b"0123456789abcdef"),
    (b"0123456789abcdef  \t\n", b"0123456789abcdef  \t"),  # only the line end goes
    (b"0123456789abcdefXX\n", b"0123456789abcdefXX"),
    (b" 0123456789abcdef", b" 0123456789abcdef"),
])
def test_a_secret_is_the_files_bytes_without_the_line_end(tmp_path, data, secret) -> None:
    from zabref.net.security import MIN_SECRET, read_secret

    assert read_secret(_secret_file(tmp_path / "q", data)) == secret
    with pytest.raises(Exception, match=rf"holds 15 bytes; a quorum secret has at least {MIN_SECRET}"):
        read_secret(_secret_file(tmp_path / "short", b"0123456789abcde\n"))


ZOO = "tickTime=100\ndataDir=/d\nserver.1=127.0.0.1:2888:3888;2181\n"


def test_zoo_cfg_security_defaults_are_zookeepers() -> None:
    """No ssl key: quorum TLS off, hostname verification on (ZooKeeper's defaults), both plain booleans; sslQuorum
    without ssl.quorum.hostnameVerification verifies hosts."""
    from zabref.config import parse_zoo_cfg

    s = parse_zoo_cfg(ZOO, "zoo.cfg", Path("/"))
    assert s.security.quorum_tls is False and s.security.hostname_verification is True
    s = parse_zoo_cfg(ZOO + "sslQuorum=true\nssl.quorum.keyStore.location=/k.pem\n"
                      "ssl.quorum.trustStore.location=/ca.pem\n", "zoo.cfg", Path("/"))
    assert s.security.quorum_tls is True and s.security.hostname_verification is True
    assert s.security.cert == s.security.key == Path("/k.pem") and s.security.ca == Path("/ca.pem")


@pytest.mark.parametrize("key", ["ssl.quorum.keyStore.type", "ssl.quorum.trustStore.type"])
@pytest.mark.parametrize("value, ok", [("PEM", True), ("pem", True), ("Pem", True), ("JKS", False),
                                       ("PKCS12", False), ("", False)])
def test_zoo_cfg_store_types_other_than_pem_are_refused(key, value, ok) -> None:
    from zabref.config import parse_zoo_cfg
    from zabref.errors import ConfigError

    text = ZOO + "sslQuorum=true\nssl.quorum.keyStore.location=/k.pem\nssl.quorum.trustStore.location=/ca.pem\n"
    if ok:
        assert parse_zoo_cfg(text + f"{key}={value}\n", "zoo.cfg", Path("/")).security.quorum_tls
    else:
        with pytest.raises(ConfigError, match=rf"zoo.cfg:7: {re.escape(key)}: zabref reads PEM files only"):
            parse_zoo_cfg(text + f"{key}={value}\n", "zoo.cfg", Path("/"))


# ------------------------------------------------------------------------------------------------ forwarding


def test_a_follower_forwards_to_the_leaders_client_port_with_its_certificate(pki) -> None:
    """With client TLS a follower's forward is TLS with its member certificate, and checks that the leader's names
    the host it dialed; without, it is plain TCP."""
    from types import SimpleNamespace

    from zabref.config import Limits, Security
    from zabref.net import clientport, clientwire

    security = Security(client_tls=True, cert=pki / "member.pem", key=pki / "member.pem", ca=pki / "ca.pem")

    async def forward(listener_tls: ssl.SSLContext | None, guard: Guard) -> tuple[dict, object]:
        seen: asyncio.Future = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            try:
                length = int.from_bytes(await reader.readexactly(4), "big")
                request = json.loads(await reader.readexactly(length))
                seen.set_result((request, writer.get_extra_info("peercert")))
                writer.write(clientwire.encode({"zxid": 5}))
                await writer.drain()
            finally:
                writer.close()

        listener = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=listener_tls)
        port = listener.sockets[0].getsockname()[1]
        try:
            server = SimpleNamespace(config=SimpleNamespace(limits=Limits()), guard=guard)
            port_ = clientport.ClientPort(server)
            answer = await port_._forward(("127.0.0.1", port), {"op": "sync"})
            request, cert = await asyncio.wait_for(seen, WAIT)
            assert request == {"op": "sync"}
            return answer, cert
        finally:
            listener.close()

    async def main():
        leader = Guard.from_config(SimpleNamespace(security=security, path="c.toml")).client_server
        assert leader.verify_mode == ssl.CERT_REQUIRED
        answer, cert = await forward(leader, Guard.from_config(SimpleNamespace(security=security, path="c.toml")))
        assert answer == {"zxid": 5} and ("IP Address", "127.0.0.1") in cert["subjectAltName"]
        answer, cert = await forward(None, Guard())
        assert answer == {"zxid": 5} and cert is None

    asyncio.run(main())


@pytest.mark.parametrize("lines_, message", [
    ("sslQuorum=yes", "zoo.cfg:4: sslQuorum: expected true or false, got 'yes'"),
    ("sslQuorum=true\nssl.quorum.keyStore.location=/k.pem\nssl.quorum.trustStore.location=/ca.pem\n"
     "ssl.quorum.hostnameVerification=yes",
     "zoo.cfg:7: ssl.quorum.hostnameVerification: expected true or false, got 'yes' (ZooKeeper would silently read "
     "it as false)"),
    ("ssl.quorum.clientAuth=want", "zoo.cfg:4: ssl.quorum.clientAuth: 'want' refused: zabref's quorum TLS always needs "
     "the dialer's certificate"),
    ("ssl.quorum.clientAuth=None", "zoo.cfg:4: ssl.quorum.clientAuth: 'None' refused: zabref's quorum TLS always needs "
     "the dialer's certificate"),
    ("ssl.quorum.clientAuth=required", "zoo.cfg:4: ssl.quorum.clientAuth: 'required' refused: ZooKeeper reads need, "
     "want or none"),
    ("sslQuorum=true\nssl.quorum.trustStore.location=/ca.pem", "zoo.cfg: ssl.quorum.keyStore.location: missing "
     "(sslQuorum=true)"),
    ("sslQuorum=true\nssl.quorum.keyStore.location=/k.pem", "zoo.cfg: ssl.quorum.trustStore.location: missing "
     "(sslQuorum=true)"),
])
def test_a_refused_zoo_security_key_is_named_with_what_zookeeper_would_do(lines_, message) -> None:
    """The whole message: the line, the key, and why (for hostnameVerification, that ZooKeeper would turn
    verification off; for clientAuth, whether ZooKeeper knows the value at all)."""
    from zabref.config import parse_zoo_cfg
    from zabref.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_zoo_cfg(ZOO + lines_ + "\n", "zoo.cfg", Path("/"))
    assert str(info.value) == message


# ------------------------------------------------------------------------------------------------ the dialer


async def _listener(handle, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None):
    server = await asyncio.start_server(handle, host, 0, ssl=tls)
    return server, server.sockets[0].getsockname()[1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dialer_sends_its_first_bytes_to_the_host_it_was_given() -> None:
    """The dialer's FOLLOWERINFO names its sid and the connection id given, and reaches the acceptor whole; the host
    is the one given (a listener on 127.0.0.2 alone is reached)."""

    async def main():
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            packet, first, cid = await peers.accept_hello(reader)
            got.set_result((packet.data[:8], first, cid))
            writer.close()

        server, port = await _listener(handle, "127.0.0.2")
        try:
            reader, writer = await peers.dial("127.0.0.2", port, _handshake(7, 77), peer=1, attempts=1, timeout=WAIT)
            assert await asyncio.wait_for(got, WAIT) == ((7).to_bytes(8, "big"), _handshake(7, 77), 77)
            writer.close()
        finally:
            server.close()

    asyncio.run(main())


def test_a_dialer_retries_network_errors_with_bounded_exponential_backoff() -> None:
    """attempts tries, waiting first_delay, then twice as long, at most max_delay; defaults 0.02 s and 1 s; the last
    error raised; one attempt waits nothing; an error that is not the network's is not retried."""

    async def timed(**kwargs) -> tuple[float, BaseException]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(BaseException) as info:
            await asyncio.wait_for(peers.dial("127.0.0.1", _free_port(), _handshake(7), peer=1, timeout=WAIT,
                                              **kwargs), 8)
        return loop.time() - start, info.value

    async def main():
        took, error = await timed(attempts=4, first_delay=0.2, max_delay=0.25)  # waits 0.2, 0.25, 0.25
        assert isinstance(error, ConnectionRefusedError) and 0.65 <= took < 1.25, (took, error)  # no cap: 1.4
        took, error = await timed(attempts=3, first_delay=0.15)  # waits 0.15, 0.3
        assert isinstance(error, ConnectionRefusedError) and 0.4 <= took < 1.5, (took, error)  # multiplier 1: 2 s
        took, error = await timed(attempts=3)  # waits 0.02, 0.04
        assert isinstance(error, ConnectionRefusedError) and took < 1.2, (took, error)  # first_delay 1.02: 2 s
        took, error = await timed(attempts=1, first_delay=1.0)
        assert isinstance(error, ConnectionRefusedError) and took < 0.8, (took, error)
        took, error = await timed(attempts=0, first_delay=1.0)  # at least one try
        assert isinstance(error, ConnectionRefusedError) and took < 0.8, (took, error)
        # first bytes that are not bytes are a bug of the caller: raised at once, not retried
        loop = asyncio.get_running_loop()
        server, port = await _listener(lambda r, w: w.close())
        try:
            start = loop.time()
            with pytest.raises(TypeError):
                await asyncio.wait_for(peers.dial("127.0.0.1", port, "not bytes", peer=1, attempts=3, timeout=WAIT,
                                                  first_delay=1.0), 8)
            assert loop.time() - start < 0.8
        finally:
            server.close()

    asyncio.run(main())


def test_a_dialer_gives_up_on_a_tls_handshake_that_does_not_come_within_its_timeout(pki) -> None:
    async def main():
        server, port = await _listener(lambda r, w: None)  # accepts, says nothing
        loop = asyncio.get_running_loop()
        try:
            start = loop.time()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(peers.dial("127.0.0.1", port, _handshake(7), peer=1, attempts=1, timeout=0.3,
                                                  guard=_guard(pki)), 8)
            assert loop.time() - start < 2.5
        finally:
            server.close()

    asyncio.run(main())


@pytest.mark.parametrize("stall", ["challenge body", "acceptor's proof"])
def test_a_dialer_does_not_wait_forever_for_a_stalling_acceptor(monkeypatch, stall) -> None:
    """Quorum authentication, dialer's side: an acceptor that sends a challenge's length and stalls, or the whole
    challenge and then no proof, is given up after the timeout, named."""
    monkeypatch.setattr(peers, "HANDSHAKE_TIMEOUT", 0.4)

    async def main():
        async def handle(reader, writer):
            await peers.accept_hello(reader)
            if stall == "challenge body":
                writer.write((32).to_bytes(4, "big"))
            else:
                writer.write(wire.frame(b"a" * 32))
                await reader.readexactly(4 + 64)
            await writer.drain()
            await asyncio.sleep(5)
            writer.close()

        server, port = await _listener(handle)
        loop = asyncio.get_running_loop()
        try:
            start = loop.time()
            with pytest.raises(AuthError) as info:
                await asyncio.wait_for(peers.dial("127.0.0.1", port, _handshake(7), peer=1, attempts=1, timeout=WAIT,
                                                  guard=Guard(secret=SECRET)), 4)
            assert loop.time() - start < 2
            what = "challenge" if stall == "challenge body" else "acceptor's proof"
            assert str(info.value) == f"quorum authentication failed: no {what} within 0.4 s"
        finally:
            server.close()

    asyncio.run(main())


def test_cert_and_key_may_be_two_files(tmp_path) -> None:
    """[security] cert and key in separate files: the key is read from `key`."""
    from zabref.config import Security

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    s = Security(quorum_tls=True, cert=tmp_path / "cert.pem", key=tmp_path / "key.pem", ca=tmp_path / "ca.pem")
    assert client_context(s).check_hostname is True


def test_a_client_ports_tls_handshake_has_the_frame_deadline(tmp_path, pki, lines, monkeypatch) -> None:
    """A client that connects to a TLS client port and says nothing is closed at FRAME_TIMEOUT, logged."""
    from zabref.net import clientport

    monkeypatch.setattr(clientport, "FRAME_TIMEOUT", 0.4)
    security = f'[security]\nclient_tls = true\ncert = "{pki}/member.pem"\nca = "{pki}/ca.pem"\n'

    async def main():
        async with _server(tmp_path, security) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.me.client_port)
            address = writer.get_extra_info("sockname")
            loop = asyncio.get_running_loop()
            start = loop.time()
            assert await _closed(reader) == b""
            assert loop.time() - start < 3
            line = await lines.wait_for(f"client connection from {address!r} closed")
            assert "TLS handshake failed" in line and "0.4 s" in line.replace("0.4 seconds", "0.4 s")
            writer.close()

    asyncio.run(main())


# ------------------------------------------------------------------------------------------------ the token file


@pytest.mark.parametrize("token, ok", [
    (b"a" * 16, True), (b"a" * 15, False), (b"a" * 2048, True), (b"a" * 2049, False),
    (b"!" * 16, True), (b"~" * 16, True), (b"a" * 15 + b"\x7f", False), (b"a" * 15 + b"\x80", False),
    (b"aaaaaaa aaaaaaaa", False), (b"aaaaaaa\taaaaaaaa", False), (b"a" * 16 + b" \n", True),  # stripped
])
def test_a_control_token_is_16_to_2048_printable_ascii_bytes(tmp_path, token, ok) -> None:
    from zabref.errors import ConfigError

    path = _secret_file(tmp_path / "token", token)
    if ok:
        assert control.read_token(path) == token.strip()
    else:
        with pytest.raises(ConfigError, match="a control token is"):
            control.read_token(path)


# ------------------------------------------------------------------------------------------------ [security] in TOML


def test_every_key_of_the_security_table_is_read(tmp_path) -> None:
    """Each key as written: key apart from cert, hostname_verification false, client_auth none; relative paths
    against the config's folder, absolute ones as they are."""
    from zabref.config import parse_config

    text = ('[security]\nquorum_tls = true\nclient_tls = true\ncert = "tls/c.pem"\nkey = "/etc/k.pem"\n'
            'ca = "ca.pem"\nclient_auth = "none"\nhostname_verification = false\nquorum_secret = "/q.secret"\n'
            '[[server]]\nid = 1\nhost = "127.0.0.1"\nquorum_port = 2888\nelection_port = 3888\nclient_port = 2181\n'
            'data_dir = "d1"\n')
    s = parse_config(text, "c.toml", base=tmp_path).security
    assert (s.quorum_tls, s.client_tls, s.client_auth, s.hostname_verification) == (True, True, "none", False)
    assert (s.cert, s.key, s.ca, s.quorum_secret) == (tmp_path / "tls/c.pem", Path("/etc/k.pem"), tmp_path / "ca.pem",
                                                       Path("/q.secret"))
    s = parse_config(text.replace('key = "/etc/k.pem"\n', ""), "c.toml", base=tmp_path).security
    assert s.key == s.cert == tmp_path / "tls/c.pem"  # omitted: the cert file holds both


# ------------------------------------------------------------------------------------------------ the contexts


def _other_ca_pem(folder: Path) -> Path:
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(folder / "stranger.pem"))
    return folder / "stranger.pem"


def _tls_listener_ctx(pem: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pem))
    return ctx


@pytest.mark.parametrize("verification", [True, False])
def test_a_dialer_checks_the_listeners_certificate(tmp_path, pki, verification) -> None:
    """client_context: the listener's certificate must be of the CA (hostname verification on or off), and with
    verification on it must name the host dialed."""
    from zabref.config import Security

    s = Security(quorum_tls=True, cert=pki / "member.pem", key=pki / "member.pem", ca=pki / "ca.pem",
                 hostname_verification=verification)

    async def dial(pem: Path) -> object:
        server, port = await _listener(lambda r, w: w.close(), tls=_tls_listener_ctx(pem))
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context(s), server_hostname="127.0.0.1"), WAIT)
            writer.close()
            return True
        except ssl.SSLCertVerificationError as e:
            return e.verify_message
        finally:
            server.close()

    async def main():
        assert await dial(pki / "member.pem") is True
        assert "unable to get local issuer certificate" in await dial(_other_ca_pem(tmp_path))
        other_host = await dial(pki / "other.pem")
        assert other_host is True if not verification else "IP address mismatch" in other_host

    asyncio.run(main())


@pytest.mark.parametrize("client_auth", ["need", "none"])
def test_client_auth_need_asks_a_client_for_a_certificate_of_the_ca(pki, client_auth) -> None:
    """The client port's context: with need, a client without a certificate is refused at the handshake; with
    none it is served (client TLS on in both)."""
    from types import SimpleNamespace

    from zabref.config import Security

    s = Security(client_tls=True, cert=pki / "member.pem", key=pki / "member.pem", ca=pki / "ca.pem",
                 client_auth=client_auth)
    guard = Guard.from_config(SimpleNamespace(security=s, path="c.toml"))
    plain_client = ssl.create_default_context(cafile=str(pki / "ca.pem"))  # trusts the server, has no certificate

    async def main():
        async def handle(connection):
            try:
                _, writer = await connection.open(WAIT)
                writer.write(b"served\n")
                await writer.drain()
            except AuthError:
                pass
            finally:
                connection.close()

        server = await Listener.open("127.0.0.1", 0, handle, tls=guard.client_server)
        port = server.port
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=plain_client,
                                                           server_hostname="127.0.0.1")
            try:
                line = await asyncio.wait_for(reader.readline(), WAIT)
            except (ssl.SSLError, ConnectionError):
                line = b""
            writer.close()
            assert line == (b"served\n" if client_auth == "none" else b"")
        finally:
            server.close()

    asyncio.run(main())
