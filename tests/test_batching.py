"""The runtime's fast paths keep their safety rules (docs/performance.md, "Hot spots fixed").

* one socket write per connection per pump batch, however many packets the batch sends there;
* nothing leaves before the persistence of its batch is durable -- a leader's PROPOSALs and a follower's ACKs
  alike -- so that a power cut loses only steps none of whose packets left (a crash is the spec's Crash);
* liveness is judged by the node in the time of its driver's clock, and a stall of this process (the ticker woke
  late) is not blamed on the peers.

The servers run in process, in control mode, with Storage.sync and the socket writes recording into one list (as
tests/test_runtime.py does).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import decide

from zabref.config import Config, parse_config
from zabref.core import payloads, zktxn
from zabref.core.effects import Effects, Timing
from zabref.core.node import Node
from zabref.core.packets import LearnerInfo, PacketType, QuorumPacket, ServerState
from zabref.core.types import Txn
from zabref.core.zab import Persistent
from zabref.errors import RemoteProtocolError
from zabref.net import wire
from zabref.net.peers import Connection
from zabref.runtime import server as runtime
from zabref.runtime.drivers import ControlDriver, NormalDriver
from zabref.storage import Storage
from zabref.storage.durable import read_durable

E1 = 1 << 32  # epoch 1, counter 0


class _RecordingWriter:
    """A connection's StreamWriter: records each write as 'write A+B+...' (the packet types it carries)."""

    def __init__(self, events: list[str], on_packet=None) -> None:
        self.events = events
        self.transport = self
        self.on_packet = on_packet

    def write(self, data: bytes) -> None:
        packets = wire.PacketDecoder().feed(data)
        self.events.append("write " + "+".join(p.type.name for p in packets))
        for p in packets:
            if self.on_packet is not None:
                self.on_packet(p)

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    async def drain(self) -> None:
        pass


def _config(tmp_path: Path, late: bool = False) -> Config:
    from zabref.runtime.cluster import find_free_base_port

    base = find_free_base_port(3)
    text = "[cluster]\ntick_ms = 50\n" + ("leader_logs_late = true\n" if late else "") + "".join(
        f"[[server]]\nid = {i}\nhost = \"127.0.0.1\"\nquorum_port = {base + 10 * i}\n"
        f"election_port = {base + 10 * i + 1}\nclient_port = {base + 10 * i + 2}\ncontrol_port = {base + 10 * i + 3}\n"
        f"data_dir = \"d{i}\"\n" for i in (1, 2, 3))
    return parse_config(text, "t.toml", tmp_path)


@pytest.fixture
def events(monkeypatch) -> list[str]:
    """Every Storage.sync (as "fsync") and socket write, in order."""
    events: list[str] = []
    real_sync = Storage.sync

    def sync(self: Storage) -> int:
        events.append("fsync")
        return real_sync(self)

    monkeypatch.setattr(Storage, "sync", sync)
    return events


async def _started(tmp_path: Path, late: bool = False) -> tuple[runtime.Server, asyncio.Task[int]]:
    server = runtime.Server(_config(tmp_path, late), 1, ControlDriver())
    task = asyncio.create_task(server.run())
    for _ in range(500):
        if server._tasks and server.node is not None:
            break
        await asyncio.sleep(0.01)
    await server.call(lambda: None)  # the node's start ran
    return server, task


def _take(server: runtime.Server, conn: Connection, packet: QuorumPacket) -> object:
    conn.inbound.append(packet)
    return server.deliver(conn)


async def _leader_in_broadcast(server: runtime.Server, conn: Connection) -> None:
    core = server.core
    info = payloads.encode_followerinfo_data(LearnerInfo(2, 0x10000))
    await server.call(lambda: decide(server.node, 1, 0.0))
    for packet in (QuorumPacket(PacketType.FOLLOWERINFO, 0, info),
                   QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0)),
                   QuorumPacket(PacketType.ACK, E1)):
        await server.call(lambda p=packet: _take(server, conn, p))
    assert core.zab_state == "BROADCAST"


def _submit(server: runtime.Server, value: bytes) -> object:
    return server.node.client_submit(0, value, server.driver.now())


@pytest.mark.pure_build  # patches Storage.sync
def test_one_batch_of_proposals_is_one_socket_write_after_the_fsync(tmp_path: Path, events: list[str]) -> None:
    """Five client requests taken in one pump batch: one fsync, then the five PROPOSALs in ONE write."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        conn = Connection(2, initiated=False)
        conn.attach(_RecordingWriter(events))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        events.clear()
        writes, sent = conn.writes, conn.sent
        for i in range(4):
            server.enqueue(lambda i=i: _submit(server, b"v%d" % i))
        await server.call(lambda: _submit(server, b"v4"))  # the same batch: queued before the pump ran
        assert events == ["fsync", "write " + "+".join(["PROPOSAL"] * 5)]
        assert (conn.writes - writes, conn.sent - sent) == (1, 5)
        server.stop()
        await task

    asyncio.run(scenario())


@pytest.mark.parametrize("inline", [True, False], ids=["inline-sync", "disk-thread"])
@pytest.mark.parametrize("late, expected", [
    (False, ["fsync", "write PROPOSAL", "ACK queued (leader committed 0)", "write COMMIT"]),
    (True, ["write PROPOSAL", "ACK queued (leader committed 0)", "fsync", "write COMMIT"]),
], ids=["logs-first", "logs-late"])
@pytest.mark.pure_build  # patches Storage.sync
def test_the_leaders_proposal_leaves_after_its_own_fsync_unless_it_logs_late(
        tmp_path: Path, events: list[str], inline: bool, late: bool, expected: list[str]) -> None:
    """The leader's log write is durable before its PROPOSAL leaves, so it may count itself in every quorum of ACKs;
    the follower's ACK, taken in a later batch, commits. With [cluster] leader_logs_late (spec/Zab.tla's
    LeaderLogsLate) the PROPOSAL leaves first, the write is synced after it (by the pump after the batch's sends, as
    with the normal driver; under load by the log writer, below), and only then does the leader count itself
    (LeaderOwnACK): the follower's ACK, queued before that sync, commits nothing on its own."""

    async def scenario() -> None:
        server, task = await _started(tmp_path, late=late)
        server.driver.writes_late = True  # as NormalDriver: late writes go to disk after the batch's sends
        core = server.core
        conn = Connection(2, initiated=False)

        def ack_at_once(p: QuorumPacket) -> None:
            if p.type == PacketType.PROPOSAL:
                events.append(f"ACK queued (leader committed {core.last_committed})")
                server.enqueue(lambda: _take(server, conn, QuorumPacket(PacketType.ACK, p.zxid)))

        conn.attach(_RecordingWriter(events, ack_at_once))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        server._last_sync_s = 0.0 if inline else 1.0  # 1 s: "the disk is slow", the sync goes to the disk thread
        events.clear()
        await server.call(lambda: _submit(server, b"v"))
        for _ in range(200):
            if core.last_committed == 1:
                break
            await asyncio.sleep(0.01)
        assert events == expected
        assert core.ack_index[1] == (1 if late else 0) and server.late == []
        server.stop()
        await task

    asyncio.run(scenario())


@pytest.mark.pure_build  # patches Storage.sync
def test_a_late_leaders_writes_wait_in_control_mode_and_a_role_change_makes_them_durable_first(
        tmp_path: Path, events: list[str]) -> None:
    """The control driver holds a late leader's log writes (the conformance driver's LeaderOwnACK releases them);
    a step that changes role makes the held ones durable before anything of it takes effect: the leader that gave
    up leading holds its whole history (the spec's Kept(i) is all of it then)."""

    async def scenario() -> None:
        server, task = await _started(tmp_path, late=True)
        conn = Connection(2, initiated=False)
        conn.attach(_RecordingWriter(events))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        events.clear()
        await server.call(lambda: _submit(server, b"a"))
        await server.call(lambda: _submit(server, b"b"))
        assert events == ["write PROPOSAL", "write PROPOSAL"] and [k for _, (_, k) in server.late] == [1, 2]
        assert len(read_durable(server.me.data_dir).persistent().history) == 0  # nothing on disk yet
        assert await server.write_late(1) == (server.node.role_serial, 1)  # the first, alone
        assert events[-1] == "fsync" and [k for _, (_, k) in server.late] == [2]
        effects = await server.call(lambda: server.tick(1000.0))  # its learner silent for long: LeaderTimeout
        assert "LeaderTimeout" in [a.name for a in effects.actions] and server.core.state == ServerState.LOOKING
        assert events[-1] == "fsync" and server.late == []
        assert len(read_durable(server.me.data_dir).persistent().history) == 2
        server.stop()
        await task

    asyncio.run(scenario())


class _HeldSync:
    """Storage.sync on the disk thread waits until ``go`` is set (the loop's own syncs pass): a slow disk, held."""

    def __init__(self, monkeypatch) -> None:
        import threading

        self.entered, self.go = threading.Event(), threading.Event()
        self.done: list[int] = []  # the history length each sync made durable
        self.where: list[str] = []  # and where it ran
        real_sync = Storage.sync

        def sync(storage: Storage) -> int:
            on_thread = threading.current_thread() is not threading.main_thread()
            if on_thread:
                self.entered.set()
                self.go.wait(10.0)
            out = real_sync(storage)
            self.done.append(len(storage.persistent().history))
            self.where.append("thread" if on_thread else "loop")
            return out

        monkeypatch.setattr(Storage, "sync", sync)

    async def stop(self, server: runtime.Server, task: asyncio.Task[int]) -> None:
        """Let every held sync go and stop ``server`` (bounded: a failing test ends, it does not hang)."""
        self.go.set()
        server.stop()
        await asyncio.wait_for(task, 20.0)

    async def held(self) -> None:
        for _ in range(500):
            if self.entered.is_set():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("no sync reached the disk thread")


async def _late_leader(tmp_path: Path) -> tuple[runtime.Server, asyncio.Task[int], Connection, list[str]]:
    """A late leader in BROADCAST with one follower connection, its late writes made durable after each batch's sends
    (as with the normal driver)."""
    server, task = await _started(tmp_path, late=True)
    server.driver.writes_late = True
    conn, sent = Connection(2, initiated=False), []
    conn.attach(_RecordingWriter(sent))
    server.conns[2] = conn
    await _leader_in_broadcast(server, conn)
    sent.clear()
    return server, task, conn, sent


@pytest.mark.pure_build  # patches Storage.sync
def test_a_late_leaders_pump_goes_on_while_its_log_writer_syncs(tmp_path: Path, monkeypatch) -> None:
    """Under load the log writer syncs a late leader's own write on the disk thread, beside the pump: the next
    request's PROPOSAL leaves while the first one's sync is still held, and the leader counts itself (LeaderOwnACK)
    only once each write is durable."""
    disk = _HeldSync(monkeypatch)
    monkeypatch.setattr(runtime, "LOG_BESIDE_OUTSTANDING", 1)  # one proposal waiting is load enough here

    async def scenario() -> None:
        server, task, _, sent = await _late_leader(tmp_path)
        try:
            disk.done.clear()
            await server.call(lambda: _submit(server, b"a"))
            await disk.held()  # the log writer's sync of "a" waits on the disk thread
            await asyncio.wait_for(server.call(lambda: _submit(server, b"b")), 5.0)  # the pump takes the next one
            assert sent == ["write PROPOSAL", "write PROPOSAL"] and server.core.ack_index[1] == 0 and disk.done == []
            disk.go.set()
            for _ in range(500):
                if server.core.ack_index[1] == 2:
                    break
                await asyncio.sleep(0.01)
            assert server.core.ack_index[1] == 2 and disk.done[-1] == 2 and server.late == []
            assert len(read_durable(server.me.data_dir).persistent().history) == 2
        finally:
            await disk.stop(server, task)

    asyncio.run(scenario())


@pytest.mark.pure_build  # patches Storage.sync
def test_a_role_change_waits_for_the_log_writers_sync_in_flight(tmp_path: Path, monkeypatch) -> None:
    """A step that changes role takes effect only once the late write the log writer is syncing is durable: the
    leader that gives up leading holds its whole history (the spec's Kept(i)), and its disk keeps the order."""
    disk = _HeldSync(monkeypatch)
    monkeypatch.setattr(runtime, "LOG_BESIDE_OUTSTANDING", 1)

    async def scenario() -> None:
        server, task, _, _ = await _late_leader(tmp_path)
        try:
            disk.done.clear()
            await server.call(lambda: _submit(server, b"a"))
            await disk.held()
            step_down = asyncio.ensure_future(server.call(lambda: server.tick(1000.0)))  # LeaderTimeout
            await asyncio.sleep(0.2)
            assert not step_down.done() and disk.done == []  # its effects wait for the write in flight
            disk.go.set()
            effects = await asyncio.wait_for(step_down, 10.0)
            assert "LeaderTimeout" in [a.name for a in effects.actions] and disk.done[0] == 1
            assert len(read_durable(server.me.data_dir).persistent().history) == 1
        finally:
            await disk.stop(server, task)

    asyncio.run(scenario())


@pytest.mark.pure_build  # patches Storage.sync
def test_a_late_leaders_own_write_goes_to_the_disk_thread_only_while_enough_proposals_wait(
        tmp_path: Path, monkeypatch) -> None:
    """`LOG_BESIDE_OUTSTANDING`: with fewer proposals waiting for their commit the pump syncs a late leader's own
    write in the loop's thread (the thread's hand-off would cost more than the wait); with that many, the log writer
    syncs it on the disk thread."""
    disk = _HeldSync(monkeypatch)
    disk.go.set()
    monkeypatch.setattr(runtime, "LOG_BESIDE_OUTSTANDING", 2)

    async def scenario() -> None:
        server, task, _, _ = await _late_leader(tmp_path)
        try:
            server._last_sync_s = 0.0  # the disk has been quick
            disk.where.clear()
            for value, expected in ((b"a", ["loop"]), (b"b", ["loop", "thread"])):  # 1, then 2 uncommitted
                await server.call(lambda v=value: _submit(server, v))
                for _ in range(500):
                    if len(disk.where) == len(expected):
                        break
                    await asyncio.sleep(0.01)
                assert disk.where == expected
        finally:
            await disk.stop(server, task)

    asyncio.run(scenario())


@pytest.mark.parametrize(("waiting", "steps", "where"), [
    (0, 1, "loop"),     # nobody waits: a follower's PROPOSAL of the leader's row
    (1, 1, "loop"),     # a lone request (one in flight): the thread's hand-off would only add latency
    (5, 1, "thread"),   # more requests wait than the batch holds: sync on the thread, read the sockets meanwhile
    (20, 8, "loop"),    # a full batch syncs inline however many wait
], ids=["none-waiting", "lone-request", "more-waiting", "full-batch"])
@pytest.mark.pure_build  # patches Storage.sync
def test_a_small_batch_syncs_on_the_disk_thread_while_more_requests_wait(
        tmp_path: Path, monkeypatch, waiting: int, steps: int, where: str) -> None:
    """`_persist`'s choice (docs/performance.md, "Fewer, fuller syncs"): the disk quick, a batch of fewer than
    INLINE_SYNC_MIN_STEPS persisting steps syncs on the disk thread only while this server's clients wait on more
    requests than it holds."""
    import threading

    where_synced: list[str] = []
    real_sync = Storage.sync

    def sync(self: Storage) -> int:
        where_synced.append("loop" if threading.current_thread() is threading.main_thread() else "thread")
        return real_sync(self)

    monkeypatch.setattr(Storage, "sync", sync)
    assert runtime.INLINE_SYNC_MIN_STEPS == 8

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        conn = Connection(2, initiated=False)
        conn.attach(_RecordingWriter([]))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        server._last_sync_s = 0.0  # the disk has been quick
        loop = asyncio.get_running_loop()
        waiters = {-k: loop.create_future() for k in range(1, waiting + 1)}  # clients' requests not answered yet
        server.client_waiters.update(waiters)
        where_synced.clear()
        for i in range(steps - 1):
            server.enqueue(lambda i=i: _submit(server, b"v%d" % i))
        await server.call(lambda: _submit(server, b"last"))  # the same batch: queued before the pump ran
        assert where_synced == [where]
        for k in waiters:
            server.client_waiters.pop(k)
        server.stop()
        await task

    asyncio.run(scenario())


@pytest.mark.pure_build  # patches Storage.sync
def test_a_follower_acks_only_after_its_fsync(tmp_path: Path, events: list[str]) -> None:
    """Seed 000, phase 3, step 2: 'log and sync proposals to disk and send ACK(zxid)'."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        core = server.core
        await server.call(lambda: decide(server.node, 2, 0.0))
        conn = server.conns[2]
        conn.attach(_RecordingWriter(events))
        for packet in (QuorumPacket(PacketType.LEADERINFO, E1, payloads.encode_leaderinfo_data(0x10000)),
                       QuorumPacket(PacketType.DIFF, 0), QuorumPacket(PacketType.NEWLEADER, E1),
                       QuorumPacket(PacketType.UPTODATE, 0)):
            await server.call(lambda p=packet: _take(server, conn, p))
        assert core.state == ServerState.FOLLOWING and core.zab_state == "BROADCAST"
        events.clear()
        proposal = QuorumPacket(PacketType.PROPOSAL, E1 + 1, payloads.encode_proposal_data(E1 + 1, b"v"))
        await server.call(lambda: _take(server, conn, proposal))
        assert events == ["fsync", "write ACK"]
        server.stop()
        await task

    asyncio.run(scenario())


# ------------------------------------------------------------------------------------------ liveness in clock time


def _follower(tmp_path: Path) -> Node:
    """A node following leader 2 in BROADCAST (tick 50 ms, syncLimit 5 ticks)."""
    node = Node(1, (1, 2, 3), Persistent(), Timing(tick_s=0.05, init_limit=10, sync_limit=5))
    node.start(0.0)
    decide(node, 2, 0.0)
    core = node.core
    core.receive(2, QuorumPacket(PacketType.LEADERINFO, E1, payloads.encode_leaderinfo_data(0x10000)))
    core.receive(2, QuorumPacket(PacketType.DIFF, 0))
    core.receive(2, QuorumPacket(PacketType.NEWLEADER, E1))
    assert core.zab_state == "BROADCAST"
    return node


def _timed_out(node: Node, now: float) -> bool:
    return any(a.name == "FollowerTimeout" for a in node.tick(now).actions)


def test_silence_is_measured_in_clock_time_from_the_last_packet(tmp_path: Path) -> None:
    node = _follower(tmp_path)
    limit = node.timing.sync_limit * node.timing.tick_s  # 0.25 s
    node.packet(2, QuorumPacket(PacketType.PING, 0), 1.0)
    for _ in range(1000):  # however many ticks run meanwhile (a tick count would say "silent"), only time counts
        assert not _timed_out(node, 1.0 + limit - 0.01)
    assert _timed_out(node, 1.0 + limit + 0.01)


def test_a_stall_of_this_process_is_not_blamed_on_the_leader(tmp_path: Path) -> None:
    """The loop blocked for several ticks (a long pump batch): the ticker wakes late, tells the node, and the
    leader's silence is counted from the end of the stall."""

    async def scenario() -> None:
        node = _follower(tmp_path)
        loop = asyncio.get_running_loop()
        node.packet(2, QuorumPacket(PacketType.PING, 0), loop.time())
        t = loop.time()
        driver = NormalDriver(node.timing.tick_s)
        events: list = []
        server = SimpleNamespace(node=node, enqueue=events.append, tick=node.tick)  # Server.tick: no senders here
        ticker = asyncio.create_task(driver._ticker(server))
        await asyncio.sleep(0)  # the ticker starts its first sleep
        limit = node.timing.sync_limit * node.timing.tick_s
        time.sleep(3 * limit)  # the loop is blocked: nothing is read, no tick runs
        for _ in range(100):
            await asyncio.sleep(node.timing.tick_s / 5)
            if events:
                break
        ticker.cancel()
        effects = events[0]()  # the late tick: it marks the stall
        assert node.stalled_until > t + 2 * limit
        assert not any(a.name == "FollowerTimeout" for a in effects.actions)
        assert not _timed_out(node, node.stalled_until + limit - 0.01)
        assert _timed_out(node, node.stalled_until + limit + 0.01)

    asyncio.run(scenario())


def test_a_large_burst_is_written_in_chunks_in_order() -> None:
    """A catch-up burst larger than WRITE_CHUNK leaves in a few writes of at most WRITE_CHUNK bytes (a single frame
    above it alone), every packet once, in order."""
    from zabref.net import peers

    async def scenario() -> None:
        sizes: list[int] = []
        zxids: list[int] = []

        class Writer(_RecordingWriter):
            def write(self, data: bytes) -> None:
                sizes.append(len(data))
                zxids.extend(p.zxid for p in wire.PacketDecoder(1 << 30).feed(data))

        conn = Connection(2, initiated=False)
        conn.attach(Writer([]))
        values = [b"x" * 1000] * 600 + [b"y" * (peers.WRITE_CHUNK + 1)] + [b"z"] * 3
        for i, value in enumerate(values, 1):
            data = payloads.encode_proposal_data(E1 + i, value)
            conn.send(QuorumPacket(PacketType.PROPOSAL, E1 + i, data), flush=False)
        assert sizes == []
        conn.flush()
        assert zxids == [E1 + i for i in range(1, len(values) + 1)] and conn.sent == len(values)
        assert conn.writes == len(sizes) and 3 <= len(sizes) <= 5
        assert all(size <= peers.WRITE_CHUNK for size in sizes[:-2]) and max(sizes) > peers.WRITE_CHUNK

    asyncio.run(scenario())


def _leader_timed_out(node: Node, now: float) -> bool:
    return any(a.name == "LeaderTimeout" for a in node.tick(now).actions)


def _new_leader() -> Node:
    """Server 1 of three, just elected leader (initLimit 0.5 s, syncLimit 0.25 s)."""
    node = Node(1, (1, 2, 3), Persistent(), Timing(tick_s=0.05, init_limit=10, sync_limit=5))
    node.start(0.0)
    decide(node, 1, 0.0)
    return node


def info(sid: int) -> bytes:
    """FOLLOWERINFO's data from learner ``sid`` (protocol version 0x10000)."""
    return payloads.encode_followerinfo_data(LearnerInfo(sid, 0x10000))


@pytest.mark.parametrize("syncing", [False, True])
def test_a_learner_that_rejects_the_epoch_does_not_keep_the_leader_alive(tmp_path: Path, syncing: bool) -> None:
    """A leader established with 2 (in SYNCHRONIZATION) loses 2; 3 keeps connecting but has not acknowledged the epoch
    (phase LEADERINFO: it rejects it when it accepted a greater one, and comes back). However recently 3 spoke, it
    is not `counted`, so the leader gives up after initLimit; once 3 acknowledges the epoch (syncing) it counts."""
    node = _new_leader()
    node.packet(2, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(2)), 0.0)
    node.packet(2, QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0)), 0.0)
    assert node.core.zab_state == "SYNCHRONIZATION"
    node.connection_closed(2, 0.1, inbound=True)
    node.packet(3, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(3)), 0.1)
    assert node.core.learner_phase == {1: "NONE", 2: "NONE", 3: "LEADERINFO"}
    if syncing:
        node.packet(3, QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0)), 0.1)
        assert node.core.learner_phase[3] == "NEWLEADER"
    limit = node.timing.init_limit * node.timing.tick_s  # 0.5 s
    for k in range(1, 20):  # 3 speaks every 50 ms
        now = 0.1 + 0.05 * k
        node.packet(3, QuorumPacket(PacketType.PING, 0), now)
        if _leader_timed_out(node, now):
            break
    assert node.core.state.name == ("LEADING" if syncing else "LOOKING"), (now, node.core.learner_phase)
    assert syncing or limit < now <= limit + 0.1  # lacking a counted quorum since its role began


@pytest.mark.parametrize("established", [False, True])
def test_an_ackepoch_of_minus_one_waits_and_does_not_keep_the_leader_alive(established: bool) -> None:
    """Learner 2 answers the leader's LEADERINFO with ACKEPOCH(-1) (it had accepted the epoch before): the node
    defers it (the carrier keeps it at the head of 2's connection) and, however often 2 speaks, 2 does not keep the
    leader alive, which gives up after initLimit. When 3's real ACKEPOCH establishes the epoch, the effects say to
    unblock, and the held packet is taken: 2 is synced."""
    node = _new_leader()
    node.packet(2, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(2)), 0.0)
    assert node.core.learner_phase[2] == "LEADERINFO"  # a quorum with the leader: the epoch is chosen
    minus_one = QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(-1))
    assert node.packet(2, minus_one, 0.0).deferred and node.held == {2: minus_one}
    assert node.core.learner_phase[2] == "LEADERINFO" and node.core.zab_state == "DISCOVERY"
    if established:
        node.packet(3, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(3)), 0.05)
        effects = node.packet(3, QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0)), 0.05)
        assert effects.unblock and node.core.zab_state == "SYNCHRONIZATION"
        effects = node.packet(2, minus_one, 0.1)
        assert not effects.deferred and node.held == {}
        assert [p.type for _, p in effects.send] == [PacketType.DIFF, PacketType.NEWLEADER]
        assert node.core.learner_phase[2] == "NEWLEADER"
        return
    limit = node.timing.init_limit * node.timing.tick_s  # 0.5 s
    for k in range(1, 20):  # 2 speaks every 50 ms
        now = 0.05 * k
        node.packet(2, QuorumPacket(PacketType.PING, 0), now)
        if _leader_timed_out(node, now):
            break
    assert node.core.state.name == "LOOKING" and limit < now <= limit + 0.1


def test_a_zookeeper_learners_ack_of_uptodate_changes_nothing_at_its_leader() -> None:
    """ZooKeeper's learner answers UPTODATE with ACK(e << 32) (Learner.syncWithLeader) and ZooKeeper's leader ignores
    it (Leader.processAck); the node drops it likewise, with no effect and no error. The same ACK before UPTODATE
    (the ACK of NEWLEADER) still goes to the core, and from a learner that has not synced it is still refused."""
    node = _new_leader()
    node.packet(2, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(2)), 0.0)
    node.packet(2, QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0)), 0.0)
    e = node.core.current_epoch  # established: DIFF and NEWLEADER went to 2
    node.packet(3, QuorumPacket(PacketType.FOLLOWERINFO, 0, info(3)), 0.0)  # 3 stays in LEADERINFO
    ack = QuorumPacket(PacketType.ACK, e << 32)
    effects = node.packet(2, ack, 0.1)  # the ACK of NEWLEADER: a quorum with the leader, UPTODATE to 2
    assert [p.type for _, p in effects.send] == [PacketType.UPTODATE] and node.core.learner_phase[2] == "UPTODATE"
    before = node.core.variables()
    assert node.packet(2, ack, 0.2) == Effects() and node.heard[2] == 0.2  # after UPTODATE: dropped
    assert node.core.variables() == before and node.core.state == ServerState.LEADING
    with pytest.raises(RemoteProtocolError):  # 3 owes an ACKEPOCH: an ACK is no spec step there
        node.packet(3, ack, 0.2)


def _syncing_from_zookeeper() -> Node:
    """Server 1 of three, following leader 2 of epoch 1 after LEADERINFO, with an empty history."""
    node = Node(1, (1, 2, 3), Persistent(), Timing(tick_s=0.05, init_limit=10, sync_limit=5))
    node.start(0.0)
    decide(node, 2, 0.0)
    node.packet(2, QuorumPacket(PacketType.LEADERINFO, E1, payloads.encode_leaderinfo_data(0x10000)), 0.0)
    return node


def _zk_txn(zxid: int, path: str) -> bytes:
    """A ZooKeeper client's create of ``path``: a transaction of ZooKeeper's, not zabref's."""
    return zktxn.encode_create(zxid, path, b"v", session=0x10000a)


@pytest.mark.parametrize("head", ["DIFF", "TRUNC"])
def test_a_follower_of_a_zookeeper_leader_delivers_at_uptodate_what_its_sync_committed(head: str) -> None:
    """ZooKeeper's LearnerHandler sends a COMMIT after each committed PROPOSAL of a DIFF or TRUNC and UPTODATE with
    zxid -1; the spec's sync does the same (SyncPackets) and its UPTODATE names the commit point those COMMITs said.
    Each COMMIT right after its PROPOSAL is FollowerProcessCOMMITInSync (nothing changes, nothing is logged), the node
    notes its zxid, and takes UPTODATE(-1) as FollowerProcessUPTODATE of that point:
    the committed transactions are delivered, the outstanding one (sent without a COMMIT) is not, and the follower
    ACKs it as the spec's does (each transaction after the point)."""
    node = _syncing_from_zookeeper()
    z = [E1 | k for k in (1, 2, 3)]
    sync = [QuorumPacket(PacketType[head], z[1] if head == "DIFF" else 0)]
    for k, zxid in enumerate(z):
        sync.append(QuorumPacket(PacketType.PROPOSAL, zxid, _zk_txn(zxid, f"/n{k}")))
        if k < 2:
            sync.append(QuorumPacket(PacketType.COMMIT, zxid))
    for packet in sync:
        effects = node.packet(2, packet, 0.1)
        assert not effects.send and node.core.zab_state == "SYNCHRONIZATION", packet
        names = [a.name for a in effects.actions]
        assert names == (["FollowerProcessCOMMITInSync"] if packet.type == PacketType.COMMIT else names), names
        assert not effects.persist and not effects.deliver
    assert node.sync_commit == z[1]
    node.packet(2, QuorumPacket(PacketType.NEWLEADER, E1, b"server.1=..."), 0.2)
    effects = node.packet(2, QuorumPacket(PacketType.UPTODATE, -1), 0.3)
    assert [a.name for a in effects.actions] == ["FollowerProcessUPTODATE"]
    assert [t.zxid for t in effects.deliver] == z[:2] and node.core.last_committed == 2
    assert [(peer, p.type, p.zxid) for peer, p in effects.send] == [(2, PacketType.ACK, z[2])]
    node.packet(2, QuorumPacket(PacketType.COMMIT, z[2]), 0.4)  # in broadcast: the spec's FollowerProcessCOMMIT
    assert node.core.last_committed == 3


def test_a_zookeeper_leaders_trunc_names_a_committed_point_and_each_outstanding_proposal_is_acked() -> None:
    """ZooKeeper truncates a learner only to a zxid of its committed log (LearnerHandler.syncFollower: maxCommittedLog
    or a committed proposal's), so a TRUNC to a zxid the follower holds is the point UPTODATE(-1) stands for; the
    proposals after it, sent without COMMITs, are outstanding, and the follower ACKs each, in order: a ZooKeeper
    leader counts an ACK for its own proposal only and commits in order (docs/zookeeper.md, "A zabref server in a
    ZooKeeper ensemble", 4). Before: no point (nothing delivered) and one ACK of the last."""
    e2 = 2 << 32
    history = tuple(Txn(E1 | k, _zk_txn(E1 | k, f"/o{k}")) for k in (1, 2))
    node = Node(1, (1, 2, 3), Persistent(history, 1, 1), Timing(tick_s=0.05, init_limit=10, sync_limit=5))
    node.start(0.0)
    decide(node, 2, 0.0)
    node.packet(2, QuorumPacket(PacketType.LEADERINFO, e2, payloads.encode_leaderinfo_data(0x10000)), 0.0)
    node.packet(2, QuorumPacket(PacketType.TRUNC, E1 | 1), 0.1)
    assert node.sync_commit == E1 | 1
    for k in (1, 2):
        node.packet(2, QuorumPacket(PacketType.PROPOSAL, e2 | k, _zk_txn(e2 | k, f"/n{k}")), 0.1)
    node.packet(2, QuorumPacket(PacketType.NEWLEADER, e2, b"server.1=..."), 0.2)
    effects = node.packet(2, QuorumPacket(PacketType.UPTODATE, -1), 0.3)
    assert [t.zxid for t in effects.deliver] == [E1 | 1] and node.core.last_committed == 1
    assert [(peer, p.type, p.zxid) for peer, p in effects.send] == [(2, PacketType.ACK, e2 | k) for k in (1, 2)]


def test_a_zookeeper_leaders_snap_is_committed_state_and_a_stray_commit_is_still_refused() -> None:
    """A ZooKeeper leader's SNAP is its applied tree: UPTODATE(-1) delivers all of it. A COMMIT in sync that is not
    right after its PROPOSAL (a seeded bug's COMMIT to an unsynced learner looks so) is no FollowerProcessCOMMITInSync,
    and UPTODATE(-1) before NEWLEADER no step at all: both refused."""
    node = _syncing_from_zookeeper()
    snap = payloads.encode_snap_data([(E1 | 1, b"a"), (E1 | 2, b"b")])
    node.packet(2, QuorumPacket(PacketType.SNAP, E1 | 3, snap), 0.1)  # its last processed zxid: a setData, say
    with pytest.raises(RemoteProtocolError, match="follows the PROPOSAL it names; the last staged is 0x100000002"):
        node.packet(2, QuorumPacket(PacketType.COMMIT, E1 | 3), 0.1)
    node = _syncing_from_zookeeper()  # ZooKeeper COMMITs a PROPOSAL right after it; any other COMMIT is no step
    for packet in (QuorumPacket(PacketType.DIFF, 0), QuorumPacket(PacketType.PROPOSAL, E1 | 1, _zk_txn(E1 | 1, "/a")),
                   QuorumPacket(PacketType.PROPOSAL, E1 | 2, _zk_txn(E1 | 2, "/b"))):
        node.packet(2, packet, 0.1)
    with pytest.raises(RemoteProtocolError, match="follows the PROPOSAL it names; the last staged is 0x100000002"):
        node.packet(2, QuorumPacket(PacketType.COMMIT, E1 | 1), 0.1)
    node = _syncing_from_zookeeper()
    node.packet(2, QuorumPacket(PacketType.SNAP, E1 | 3, snap), 0.1)
    with pytest.raises(RemoteProtocolError, match="never negative"):
        node.packet(2, QuorumPacket(PacketType.UPTODATE, -1), 0.1)
    node = _syncing_from_zookeeper()
    node.packet(2, QuorumPacket(PacketType.SNAP, E1 | 3, snap), 0.1)
    node.packet(2, QuorumPacket(PacketType.NEWLEADER, E1), 0.2)
    effects = node.packet(2, QuorumPacket(PacketType.UPTODATE, -1), 0.3)
    assert [t.value for t in effects.deliver] == [b"a", b"b"] and not effects.send


def test_a_followers_ping_answer_carries_data_as_zookeepers_leader_reads_it() -> None:
    """ZooKeeper's LearnerHandler reads a learner's PING data as its sessions (a null buffer is a
    NullPointerException that closes the learner): the answer carries an empty buffer."""
    node = _syncing_from_zookeeper()
    (peer, answer), = node.packet(2, QuorumPacket(PacketType.PING, E1), 0.1).send
    assert peer == 2 and answer.type == PacketType.PING and answer.data == b""


@pytest.mark.pure_build  # patches Storage.sync
def test_a_held_ackepoch_is_offered_again_once_the_epoch_is_established(tmp_path: Path, events: list[str]) -> None:
    """The carrier's side of the deferral: the ACKEPOCH(-1) the node deferred stays at the head of 2's connection,
    which is blocked; when 3's ACKEPOCH establishes the epoch the runtime unblocks exactly that connection and asks
    its driver to offer it again, and the packet is then taken (2 is synced)."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        offered: list[list[int]] = []
        server.driver.unblocked = lambda _server, conns: offered.append([c.peer for c in conns])  # type: ignore
        conns = {}
        for peer in (2, 3):
            conns[peer] = conn = Connection(peer, initiated=False)
            conn.attach(_RecordingWriter(events))
            server.conns[peer] = conn
        await server.call(lambda: decide(server.node, 1, 0.0))
        minus_one = QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(-1))
        for packet in (QuorumPacket(PacketType.FOLLOWERINFO, 0, info(2)), minus_one):
            await server.call(lambda p=packet: _take(server, conns[2], p))
        assert conns[2].blocked and list(conns[2].inbound) == [minus_one] and offered == []
        for packet in (QuorumPacket(PacketType.FOLLOWERINFO, 0, info(3)),
                       QuorumPacket(PacketType.ACKEPOCH, 0, payloads.encode_ackepoch_data(0))):
            await server.call(lambda p=packet: _take(server, conns[3], p))
        assert server.core.zab_state == "SYNCHRONIZATION" and offered == [[2]] and not conns[2].blocked
        await server.call(lambda: server.deliver(conns[2]))
        assert server.core.learner_phase[2] == "NEWLEADER" and not conns[2].inbound
        server.stop()
        await task

    asyncio.run(scenario())


def test_the_pumps_inbox_gives_what_waits_in_order_at_most_a_batch_at_a_time_and_wakes_on_a_put() -> None:
    """`zabref.runtime.inbox.Inbox`, the pump's queue: FIFO, a batch holds at most ``limit`` events (the rest are
    the next batch's), and a pump waiting on an empty inbox wakes on the next put."""
    from zabref.runtime.inbox import Inbox

    async def scenario() -> list[list[int]]:
        inbox: Inbox[int] = Inbox()
        for k in range(5):
            inbox.put(k)
        batches = [await inbox.take(3), await inbox.take(3)]
        waiting = asyncio.ensure_future(inbox.take(3))
        await asyncio.sleep(0)
        assert not waiting.done() and len(inbox) == 0
        inbox.put(5)
        inbox.put(6)
        batches.append(await asyncio.wait_for(waiting, 1))
        return batches

    assert asyncio.run(scenario()) == [[0, 1, 2], [3, 4], [5, 6]]
