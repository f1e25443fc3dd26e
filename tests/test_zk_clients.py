"""ZooKeeper's client protocol at zabref servers (`zabref.net.zkclientport`, `zabref.core.zkclients`): kazoo, a
ZooKeeper client unchanged, drives a zabref ensemble as it would drive ZooKeeper's -- its session, creates (plain,
sequential, in a multi), setData, delete and their errors, reads, sync, and a session taken again after its
connection dropped. tests/test_zk_mixed.py has a zabref follower of a real ZooKeeper leader serve kazoo the same way.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from types import SimpleNamespace

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError
from test_zk_mixed import kazoo_at

from conformance.zk.ensemble import four_letter, mode_of
from zabref.config import parse_config
from zabref.core.packets import ServerState
from zabref.core.zab import ZabState
from zabref.net import pipeline, wire, zkclientwire
from zabref.net.zkclientport import ZkClientPort
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.server import Server


def _config(base: int, folder) -> str:
    servers = "".join(f"[[server]]\nid = {i + 1}\nhost = \"127.0.0.1\"\nquorum_port = {base + 10 * i}\n"
                      f"election_port = {base + 10 * i + 1}\nclient_port = {base + 10 * i + 2}\n"
                      f"zk_client_port = {base + 10 * i + 3}\ndata_dir = \"{folder}/{i + 1}\"\n" for i in (0, 1, 2))
    return f"[cluster]\ntick_ms = 100\ninit_limit = 10\nsync_limit = 5\n\n{servers}"


def _raw_connect(port: int, last_zxid_seen: int) -> bytes:
    """A ConnectRequest by hand; the server's first answer (b"" when it closed without one)."""
    body = struct.pack(">iqiq", 0, last_zxid_seen, 10000, 0) + struct.pack(">i", 16) + b"\x00" * 16 + b"\x00"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(wire.frame(body))
        return s.recv(4096)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kazoo_drives_a_zabref_ensemble(tmp_path) -> None:
    base = find_free_base_port(3)
    config = parse_config(_config(base, tmp_path), str(tmp_path / "zk.toml"))
    servers = [Server(config, sid, NormalDriver(0.1)) for sid in config.sids]

    def port(sid: int) -> int:
        return config.server(sid).zk_client_port

    def writes(c: KazooClient) -> tuple:
        c.create("/a", b"x")
        stat = c.set("/a", b"y", version=0)
        seq = [c.create("/a/s-", b"", sequence=True) for _ in range(2)]
        errors = []
        for call in (lambda: c.create("/a", b"again"), lambda: c.delete("/none"),
                     lambda: c.set("/a", b"z", version=7), lambda: c.delete("/a")):
            try:
                call()
            except Exception as e:  # noqa: BLE001 -- the exception's class is what is compared
                errors.append(type(e))
        t = c.transaction()
        t.create("/m", b"1")
        t.create("/m/c", b"2")
        done = t.commit()
        t = c.transaction()
        t.create("/n", b"")
        t.delete("/m")
        failed = [type(r) for r in t.commit()]
        c.delete(seq[0])
        # pipelined: twenty creates sent at once, then a read behind them in the same session sees them all
        creates = [c.create_async(f"/p{k}", b"") for k in range(20)]
        children = c.get_children_async("/")
        assert [x.get(10) for x in creates] == [f"/p{k}" for k in range(20)]
        assert {f"p{k}" for k in range(20)} <= set(children.get(10))
        return stat.version, seq, errors, done, failed

    def reads(c: KazooClient) -> tuple:
        c.sync("/")
        data, stat = c.get("/a")
        return (data, stat.version, stat.numChildren, sorted(c.get_children("/a")), c.exists("/n") is None,
                c.get("/m/c")[0])

    async def run() -> tuple:
        tasks = [asyncio.create_task(s.run()) for s in servers]
        try:
            for _ in range(200):
                if all(s.node is not None and s.node.core.zab_state == ZabState.BROADCAST
                       and s.node.core.state != ServerState.LOOKING for s in servers):
                    break
                await asyncio.sleep(0.05)
            leader = next(s.sid for s in servers if s.node.core.state == ServerState.LEADING)
            follower = next(s.sid for s in servers if s.sid != leader)
            # a follower forwards its client's writes to the leader as REQUEST; the leader's client writes directly
            wrote = await asyncio.to_thread(kazoo_at, port(follower), writes)
            more = await asyncio.to_thread(kazoo_at, port(leader), lambda c: c.create("/b", b"w"))
            # every server keeps its delivered tree current, the one no client has come to yet too: no client waits
            # for a catch-up over the history (zabref.core.zkclients)
            other = next(s for s in servers if s.sid not in (leader, follower))
            for _ in range(200):
                if other.node.core.last_committed == len(other.node.core.history) > 0:
                    break
                await asyncio.sleep(0.02)
            for s in servers:
                assert s.node.zk_clients and s.node.zk_applied.count == s.node.core.last_committed > 0
            read = [await asyncio.to_thread(kazoo_at, port(s.sid), reads) for s in servers]
            # a client that has seen more than a server delivered is refused there (it would read backwards)
            refused = await asyncio.to_thread(_raw_connect, port(follower), 1 << 40)
            fresh = await asyncio.to_thread(_raw_connect, port(follower), 0)
            # ZooKeeper's four-letter words, as a harness asks them: each server's mode, one last zxid at all
            modes = {s.sid: await asyncio.to_thread(mode_of, port(s.sid)) for s in servers}
            zxids = {await asyncio.to_thread(four_letter, port(s.sid)) for s in servers}
            assert modes[leader] == "leader" and sorted(modes.values()) == ["follower", "follower", "leader"]
            assert len({z.split("Zxid: ")[1].split()[0] for z in zxids}) == 1
            assert await asyncio.to_thread(four_letter, port(leader), "ruok") == "imok"
            return wrote, more, read, refused, fresh
        finally:
            for s in servers:
                s.stop()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)

    try:
        (version, seq, errors, done, failed), more, read, refused, fresh = asyncio.run(run())
    finally:
        release_base_port(base)
    assert version == 1 and seq == ["/a/s-0000000000", "/a/s-0000000001"] and more == "/b"
    assert errors == [NodeExistsError, NoNodeError, BadVersionError, NotEmptyError]
    assert done == ["/m", "/m/c"] and failed == [RolledBackError, NotEmptyError]
    assert read == [(b"y", 1, 1, ["s-0000000001"], True, b"2")] * 3
    assert refused == b"" and len(fresh) == 4 + 4 + 4 + 8 + 4 + 16 + 1  # a ConnectResponse with a session


def test_connect_and_replies_are_zookeepers_records() -> None:
    """The records against bytes written by hand from zookeeper.jute."""
    body = struct.pack(">iqiq", 0, 5, 4000, 0x0100000000000007) + struct.pack(">i", 2) + b"pw" + b"\x01"
    c = zkclientwire.decode_connect(body)
    assert (c.last_zxid_seen, c.timeout_ms, c.session, c.passwd, c.read_only) == (5, 4000, 0x0100000000000007, b"pw",
                                                                                 True)
    assert zkclientwire.decode_connect(body[:-1]).read_only is False  # before 3.4: no readOnly
    with pytest.raises(Exception, match="ConnectRequest"):
        zkclientwire.decode_connect(body[:10])
    assert zkclientwire.encode_connect_response(4000, 9, b"p") == struct.pack(">iiqi", 0, 4000, 9, 1) + b"p\x00"
    stat = tuple(range(11))
    assert zkclientwire.encode_result({"op": "getData", "err": 0, "data": b"d", "stat": stat}) == \
        struct.pack(">i", 1) + b"d" + zkclientwire.STAT.pack(*stat)
    assert zkclientwire.encode_result({"op": "exists", "err": -101}) == b""
    multi = zkclientwire.encode_result({"op": "multi", "err": 0, "ops": [{"op": "error", "err": 0},
                                                                            {"op": "error", "err": -111}]})
    assert multi == struct.pack(">i?ii", -1, False, 0, 0) + struct.pack(">i?ii", -1, False, -111, -111) + \
        struct.pack(">i?i", -1, True, -1)
    assert zkclientwire.encode_reply(-2, 7, 0) == struct.pack(">iqi", -2, 7, 0)


@pytest.mark.parametrize("sid", [1, 3, 127, 200, 70_000])
def test_session_ids_carry_the_servers_id_in_their_top_byte_and_fit_a_long(sid: int) -> None:
    """ZooKeeper's layout (SessionTrackerImpl.initializeNextSessionId): the low 8 bits of the id, then the clock;
    a signed long whatever the id (zabref's ids go up to 2**31 - 1)."""
    config = parse_config(_config(20000, "/tmp/unused"), "zk.toml")
    port = ZkClientPort(SimpleNamespace(config=config), sid)
    connect = zkclientwire.decode_connect(struct.pack(">iqiq", 0, 0, 4000, 0) + struct.pack(">i", 0))
    first, timeout = port._session(connect)
    second, _ = port._session(connect)
    assert -(1 << 63) <= first < (1 << 63) and second == first + 1 and timeout == 2000  # 20 ticks of 100 ms
    assert (first & (1 << 64) - 1) >> 56 == sid & 0xFF
    zkclientwire.encode_connect_response(timeout, first, port.sessions[first][0])  # fits the wire


# ------------------------------------------------------------------------------------------------ the session's pipe


def _request(xid: int, op: int, record: bytes = b"") -> bytes:
    return wire.frame(struct.pack(">ii", xid, op) + record)


def _path(path: str, watch: bool = False) -> bytes:
    return struct.pack(">i", len(path)) + path.encode() + bytes([watch])


def _replies(data: bytes) -> list[tuple[int, int, int]]:
    """(xid, zxid, err) of each reply frame in ``data``."""
    frames = wire.FrameDecoder(1 << 20, "replies").feed(data)
    return [struct.unpack(">iqi", f[:16]) for f in frames]


async def _until(condition, what: str) -> None:
    """Wait until ``condition()`` holds, at most 5 s."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"not within 5 s: {what}")


def _piped(requests: bytes, answers: list[dict], timeout_ms: int = 4000, eof: bool = True, waits: int = 1,
           data: bytes = b"v", client=None) -> tuple[list[bytes], list, list[asyncio.Future], BaseException | None]:
    """A session's requests through `zabref.net.pipeline.serve` and `ZkClientPort._request` over a loopback
    connection, with a stand-in server: the client writes ``requests`` (and, with ``eof``, closes its end); each
    write's future is answered from ``answers`` in turn once it was submitted, after ``waits`` checks of how many
    writes the port made before it. A read's answer carries ``data``. With ``client``, the client's reader, the
    events and the submitted futures are handed to it meanwhile (it may read the replies, answer writes); else the
    client reads nothing until the session ended. Returns the port's writes (each write call's bytes), the events,
    the submitted futures and the error the session ended with."""
    events: list = []
    config = parse_config(_config(20000, "/tmp/unused"), "zk.toml")

    def zk_read(op: int, path: str) -> dict:
        events.append(("read", path))
        return {"zk": {"err": 0, "zxid": 5, "op": "getData", "data": data, "stat": tuple(range(11))}}

    async def run() -> tuple:
        submitted: list[asyncio.Future] = []
        writes: list[bytes] = []
        ended: asyncio.Future = asyncio.get_running_loop().create_future()

        def submit(make):
            submitted.append(asyncio.get_running_loop().create_future())
            return submitted[-1]

        host = SimpleNamespace(config=config, node=SimpleNamespace(committed_zxid=5, zk_read=zk_read), submit=submit)
        port = ZkClientPort(host, 1)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            write = writer.write

            def kept(chunk: bytes) -> None:
                writes.append(bytes(chunk))
                write(chunk)

            writer.write = kept  # type: ignore[method-assign]
            try:
                await pipeline.serve(reader, writer, wire.FrameDecoder(1 << 20, "t"),
                                     lambda body: port._request(7, body, "client"), idle_timeout=timeout_ms / 1000)
                ended.set_result(None)
            except Exception as e:  # noqa: BLE001 -- the reason the session closed is what is compared
                ended.set_result(e)
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            writer.write(requests)
            if eof:
                writer.write_eof()
            reading = asyncio.ensure_future(client(reader, events, submitted) if client else asyncio.sleep(0))
            for answer in answers:
                await _until(lambda: any(not f.done() for f in submitted), "a write submitted")
                for _ in range(waits):
                    await asyncio.sleep(0.01)
                    events.append(("written", len(writes)))
                next(f for f in submitted if not f.done()).set_result(answer)
            error = await asyncio.wait_for(ended, 5)
            await asyncio.wait_for(reading, 5)
        finally:
            writer.close()
            server.close()
        return writes, events, submitted, error

    return asyncio.run(run())


CREATED = {"zk": {"err": 0, "zxid": 9, "op": "create", "path": "/a"}}


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_replies_leave_in_request_order_and_together_once_their_answers_are_in() -> None:
    """A PING and a read behind a write wait for it (the read made at its turn: it sees the write); then the three
    replies leave in one write."""
    writes, events, submitted, error = _piped(_request(1, 1, b"record") + _request(-2, zkclientwire.OP_PING)
                                              + _request(2, 4, _path("/a")), [CREATED], waits=3)
    assert error is None and len(submitted) == 1
    assert events == [("written", 0)] * 3 + [("read", "/a")]
    assert len(writes) == 1 and _replies(writes[0]) == [(1, 9, 0), (-2, 5, 0), (2, 5, 0)]


def test_a_reply_leaves_in_its_answers_callback_with_the_ready_ones_behind_it() -> None:
    """With the reply task waiting for the head request's answer, the answer's own callback writes its reply and
    the reply of the read behind it (made then, at its turn): on the socket one turn of the loop after the answer
    is in, where waking the task took two. A later answer, with the task waiting again, leaves the same way."""

    async def run() -> None:
        listening = socket.create_server(("127.0.0.1", 0))
        reader, writer = await asyncio.open_connection(*listening.getsockname())
        client, _ = listening.accept()
        client.setblocking(False)
        piped = pipeline.Pipeline(writer)
        replying = asyncio.ensure_future(pipeline._reply_in_order(writer, piped))
        loop = asyncio.get_running_loop()
        try:
            made: list[str] = []
            for round_ in (1, 2):
                write: asyncio.Future = loop.create_future()
                piped.put((write, lambda answer: made.append(f"write {answer}") or f"w{answer};".encode()))
                piped.put((None, lambda _: made.append("read") or b"r;"))
                for _ in range(3):
                    await asyncio.sleep(0)
                assert made == ["write 1", "read"] * (round_ - 1)  # nothing is made before its turn
                write.set_result(round_)
                await asyncio.sleep(0)  # the answer's callbacks run in this turn
                assert client.recv(100) == f"w{round_};r;".encode()
            piped.end()
            await asyncio.wait_for(replying, 5)
        finally:
            replying.cancel()
            writer.close()
            client.close()
            listening.close()

    asyncio.run(run())


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_a_write_the_node_refused_closes_the_session_after_the_replies_before_it() -> None:
    """The answer before it leaves; the request after it is no longer waited for (its future cancelled)."""
    writes, _, submitted, error = _piped(_request(-2, zkclientwire.OP_PING) + _request(1, 1, b"r")
                                         + _request(2, 1, b"r"), [{"error": "no leader", "retry": True}])
    assert isinstance(error, pipeline.Close) and str(error) == "no leader"
    assert [r for w in writes for r in _replies(w)] == [(-2, 5, 0)]
    assert len(submitted) == 2 and submitted[1].cancelled()


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_a_session_with_no_whole_request_within_its_timeout_is_closed() -> None:
    writes, _, _, error = _piped(_request(-2, zkclientwire.OP_PING) + _request(3, 4, _path("/a"))[:7], [],
                                 timeout_ms=100, eof=False)
    assert str(error) == "nothing from the client within 0.1 s"
    assert [r for w in writes for r in _replies(w)] == [(-2, 5, 0)]


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_close_session_is_answered_after_the_requests_before_it_and_nothing_after_it_is_read() -> None:
    writes, _, submitted, error = _piped(_request(1, 1, b"r") + _request(2, zkclientwire.OP_CLOSE)
                                         + _request(3, 1, b"r"), [CREATED], eof=False)
    assert error is None and len(submitted) == 1
    assert [r for w in writes for r in _replies(w)] == [(1, 9, 0), (2, 5, 0)]


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_requests_that_wait_for_nothing_are_answered_together_as_they_are_read() -> None:
    writes, events, submitted, error = _piped(_request(-2, zkclientwire.OP_PING) + _request(2, 4, _path("/a"))
                                              + _request(3, 4, _path("/b")), [])
    assert error is None and not submitted and events == [("read", "/a"), ("read", "/b")]
    assert len(writes) == 1 and _replies(writes[0]) == [(-2, 5, 0), (2, 5, 0), (3, 5, 0)]


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_a_session_reads_no_more_while_its_pipeline_is_full_and_on_once_replies_leave() -> None:
    """4,000 writes (850 KB, more than three reads of asyncio's loop: 256 KiB each) that the node does not answer:
    the port stops reading once `MAX_PIPELINED` wait (a read's worth past it at most), reads on once they are
    answered, and every reply leaves in request order."""
    count = 4000
    requests = b"".join(_request(x, 1, bytes(200)) for x in range(count))
    per_read = 256 * 1024 // len(_request(0, 1, bytes(200)))  # the most whole frames one read holds

    async def client(reader: asyncio.StreamReader, events: list, submitted: list[asyncio.Future]) -> None:
        await asyncio.sleep(0.2)
        events.append(("submitted", len(submitted)))
        for _ in range(5000):  # answer every write as it comes
            for f in submitted:
                if not f.done():
                    f.set_result(CREATED)
            if len(submitted) == count:
                return
            await asyncio.sleep(0.001)

    writes, events, submitted, error = _piped(requests, [], client=client)
    assert error is None and len(submitted) == count
    waiting = next(n for e, n in events if e == "submitted")
    assert pipeline.MAX_PIPELINED <= waiting <= pipeline.MAX_PIPELINED + per_read, waiting
    assert [r[0] for w in writes for r in _replies(w)] == list(range(count))


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_replies_the_client_does_not_read_stop_the_reading_and_close_the_session(monkeypatch) -> None:
    """Reads (1 KB each) whose replies (64 KiB each) the client never reads: past `REPLY_BUFFER` unsent bytes the port
    reads no more requests, and closes the session after `WRITE_TIMEOUT`."""
    monkeypatch.setattr(pipeline, "WRITE_TIMEOUT", 0.5)
    requests = b"".join(_request(x, 4, _path("/" + "a" * 1000)) for x in range(2000))  # 2 MB: many reads
    writes, events, _, error = _piped(requests, [], eof=False, data=bytes(65536))
    assert str(error) == "the client did not read its answer within 0.5 s"
    assert len(events) < 1000, len(events)  # the kernel's buffers and one read's worth; the rest was never made


@pytest.mark.pure_build  # a stand-in server (`_piped`)
def test_replies_the_client_reads_late_all_leave_in_order() -> None:
    """The same reads, with a client that starts reading 0.3 s late: the port reads on once it has, and every reply
    arrives, in order."""
    count = 2000
    requests = b"".join(_request(x, 4, _path("/" + "a" * 1000)) for x in range(count))
    got: list[int] = []

    async def client(reader: asyncio.StreamReader, events: list, submitted: list[asyncio.Future]) -> None:
        await asyncio.sleep(0.3)
        events.append(("late", sum(e == "read" for e, _ in events)))
        decoder = wire.FrameDecoder(1 << 20, "replies")
        while len(got) < count:
            chunk = await reader.read(1 << 20)
            assert chunk, f"the server closed after {len(got)} replies"
            got.extend(struct.unpack(">i", f[:4])[0] for f in decoder.feed(chunk))

    _, events, _, error = _piped(requests, [], data=bytes(65536), client=client)
    assert error is None and got == list(range(count))
    assert next(n for e, n in events if e == "late") < 1000

