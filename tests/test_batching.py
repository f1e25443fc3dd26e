"""The runtime's fast paths keep their safety rules (docs/performance.md, "Hot spots fixed").

* one socket write per connection per pump batch, however many packets the batch sends there;
* a leader (normal mode) writes its PROPOSALs before the fsync of its own log append, but takes the followers' ACKs
  -- where it counts itself in the quorum -- only after that fsync; a follower's ACK still leaves after its fsync;
* liveness is judged in loop time at the moment the ticker enqueued the tick, and a stall of this process (the ticker
  woke late) is not blamed on the peers.

The servers run in process, in control mode, with Storage.sync and the socket writes recording into one list (as
tests/test_runtime.py does); ``send_before_sync`` is switched on by hand where normal mode would have it.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from zabref import runtime, wire
from zabref.config import Config, parse_config
from zabref.disklog import Storage
from zabref.normal import NormalMode
from zabref.packets import LearnerInfo, PacketType, QuorumPacket, ServerState
from zabref.peers import Connection

E1 = 1 << 32  # epoch 1, counter 0


class _RecordingWriter:
    """A connection's StreamWriter: records each write as 'write A+B+...' (the packet types it carries)."""

    def __init__(self, events: list[str], on_packet=None) -> None:
        self.events = events
        self.transport = self
        self.on_packet = on_packet

    def write(self, data: bytes) -> None:
        packets = [wire.decode_quorum_packet(body) for body in wire.FrameDecoder().feed(data)]
        self.events.append("write " + "+".join(p.type.name for p in packets))
        for p in packets:
            if self.on_packet is not None:
                self.on_packet(p)

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass

    async def drain(self) -> None:
        pass


def _config(tmp_path: Path) -> Config:
    from zabref.cluster import find_free_base_port

    base = find_free_base_port(2)
    text = "[cluster]\ntick_ms = 50\n" + "".join(
        f"[[server]]\nid = {i}\nhost = \"127.0.0.1\"\nquorum_port = {base + 10 * i}\n"
        f"election_port = {base + 10 * i + 1}\nclient_port = {base + 10 * i + 2}\ncontrol_port = {base + 10 * i + 3}\n"
        f"data_dir = \"d{i}\"\n" for i in (1, 2))
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


async def _started(tmp_path: Path) -> tuple[runtime.Server, asyncio.Task[int]]:
    server = runtime.Server(_config(tmp_path), 1, control=True)
    task = asyncio.create_task(server.run())
    for _ in range(500):
        if server._tasks:
            break
        await asyncio.sleep(0.01)
    return server, task


async def _leader_in_broadcast(server: runtime.Server, conn: Connection) -> None:
    core = server.core
    info = wire.encode_followerinfo_data(LearnerInfo(0x10000, 2))
    await server.call(lambda: [core.elect_leader(1, [1, 2])])
    for packet in (QuorumPacket(PacketType.FOLLOWERINFO, 0, info),
                   QuorumPacket(PacketType.ACKEPOCH, 0, wire.encode_ackepoch_data(0)),
                   QuorumPacket(PacketType.ACK, E1)):
        await server.call(lambda p=packet: server.receive(conn, p))
    assert core.zab_state == "BROADCAST"


@pytest.mark.parametrize("early", [False, True], ids=["control-order", "send-before-sync"])
def test_one_batch_of_proposals_is_one_socket_write(tmp_path: Path, events: list[str], early: bool) -> None:
    """Five client requests taken in one pump batch: one fsync, and the five PROPOSALs in ONE write -- after the
    fsync in control mode, before it when the leader sends before its sync (normal mode)."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        conn = Connection(2, initiated=False)
        conn.attach(_RecordingWriter(events))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        server.send_before_sync = early
        events.clear()
        writes, sent = conn.writes, conn.sent
        for i in range(4):
            server.enqueue(lambda i=i: [server.core.client_request(b"v%d" % i)])
        await server.call(lambda: [server.core.client_request(b"v4")])  # the same batch: queued before the pump ran
        proposals = "write " + "+".join(["PROPOSAL"] * 5)
        assert events == ([proposals, "fsync"] if early else ["fsync", proposals])
        assert (conn.writes - writes, conn.sent - sent) == (1, 5)
        server.stop()
        await task

    asyncio.run(scenario())


@pytest.mark.parametrize("inline", [True, False], ids=["inline-sync", "disk-thread"])
def test_leader_counts_itself_only_after_its_fsync(tmp_path: Path, events: list[str], inline: bool) -> None:
    """The follower ACKs at once, while the leader's own append is not durable yet (the ACK is queued from inside
    the PROPOSAL's write): the leader takes that ACK -- and commits -- only after its fsync, in the next batch."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        core = server.core
        conn = Connection(2, initiated=False)

        def ack_at_once(p: QuorumPacket) -> None:
            if p.type == PacketType.PROPOSAL:
                events.append(f"ACK queued (leader committed {core.last_committed})")
                server.enqueue(lambda: server.receive(conn, QuorumPacket(PacketType.ACK, p.zxid)))

        conn.attach(_RecordingWriter(events, ack_at_once))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        server.send_before_sync = True
        server._last_sync_s = 0.0 if inline else 1.0  # 1 s: "the disk is slow", the sync goes to the disk thread
        events.clear()
        zxid = (await server.call(lambda: [core.client_request(b"v")]))[0].send[0][1].zxid
        await server.wait_delivered(zxid, 10)
        assert events == ["write PROPOSAL", "ACK queued (leader committed 0)", "fsync", "write COMMIT"]
        server.stop()
        await task

    asyncio.run(scenario())


def test_a_follower_acks_only_after_its_fsync_even_when_sending_before_sync(tmp_path: Path,
                                                                            events: list[str]) -> None:
    """Sending before the sync is for a leader's PROPOSALs only: a follower's ACK still waits for its fsync."""

    async def scenario() -> None:
        server, task = await _started(tmp_path)
        server.send_before_sync = True
        core = server.core
        conn = Connection(2, initiated=True)
        conn.attach(_RecordingWriter(events))
        server.conns[2] = conn
        await server.call(lambda: [core.join_leader(2)])
        for packet in (QuorumPacket(PacketType.LEADERINFO, E1, wire.encode_leaderinfo_data(0x10000)),
                       QuorumPacket(PacketType.DIFF, 0), QuorumPacket(PacketType.NEWLEADER, E1),
                       QuorumPacket(PacketType.UPTODATE, 0)):
            await server.call(lambda p=packet: server.receive(conn, p))
        assert core.state == ServerState.FOLLOWING and core.zab_state == "BROADCAST"
        events.clear()
        proposal = QuorumPacket(PacketType.PROPOSAL, E1 + 1, wire.encode_proposal_data(b"v"))
        await server.call(lambda: server.receive(conn, proposal))
        assert events == ["fsync", "write ACK"]
        server.stop()
        await task

    asyncio.run(scenario())


# ------------------------------------------------------------------------------------------ liveness in loop time


def _follower_mode(tmp_path: Path, timeouts: list[str]) -> NormalMode:
    """A NormalMode over a stub server whose core follows leader 2 in BROADCAST (tick 50 ms, syncLimit 5 ticks)."""
    core = SimpleNamespace(state=ServerState.FOLLOWING, zab_state="BROADCAST", leader=2,
                           follower_timeout=lambda: timeouts.append("FollowerTimeout") or "timeout")
    server = SimpleNamespace(config=_config(tmp_path), sid=1, core=core, conns={})
    return NormalMode(server)


def test_silence_is_measured_in_loop_time_from_the_last_frame(tmp_path: Path) -> None:
    async def scenario() -> None:
        timeouts: list[str] = []
        mode = _follower_mode(tmp_path, timeouts)
        limit = mode.sync_limit * mode.tick_s  # 0.25 s
        mode.heard(2)
        t = mode.last_heard[2]
        assert mode._on_tick(t + limit - 0.01) == [] and timeouts == []
        # However many ticks ran meanwhile (a tick count would have said "silent"), only the time counts.
        mode.tick += 1000
        assert mode._on_tick(t + limit - 0.01) == [] and timeouts == []
        assert mode._on_tick(t + limit + 0.01) == ["timeout"] and timeouts == ["FollowerTimeout"]

    asyncio.run(scenario())


def test_a_stall_of_this_process_is_not_blamed_on_the_leader(tmp_path: Path) -> None:
    """The loop blocked for several ticks (a long pump batch): the ticker wakes late, and the leader's silence is
    counted from the end of the stall."""

    async def scenario() -> None:
        timeouts: list[str] = []
        mode = _follower_mode(tmp_path, timeouts)
        mode.server.enqueue = lambda event: None  # the ticks' events are judged by hand below
        mode.heard(2)
        t = mode.last_heard[2]
        ticker = asyncio.create_task(mode._ticker())
        await asyncio.sleep(0)  # the ticker starts its first sleep
        time.sleep(3 * mode.sync_limit * mode.tick_s)  # the loop is blocked: nothing is read, no tick runs
        for _ in range(100):
            await asyncio.sleep(mode.tick_s / 5)
            if mode.stalled_until:
                break
        ticker.cancel()
        assert mode.stalled_until > t + 2 * mode.sync_limit * mode.tick_s
        assert mode._on_tick(mode.stalled_until + 0.01) == [] and timeouts == []
        limit = mode.sync_limit * mode.tick_s
        assert mode._on_tick(mode.stalled_until + limit + 0.01) == ["timeout"]

    asyncio.run(scenario())


def test_a_large_burst_is_written_in_chunks_in_order() -> None:
    """A catch-up burst larger than WRITE_CHUNK leaves in a few writes of at most WRITE_CHUNK bytes (a single frame
    above it alone), every packet once, in order."""
    from zabref import peers

    async def scenario() -> None:
        sizes: list[int] = []
        zxids: list[int] = []

        class Writer(_RecordingWriter):
            def write(self, data: bytes) -> None:
                sizes.append(len(data))
                zxids.extend(wire.decode_quorum_packet(b).zxid for b in wire.FrameDecoder(1 << 30).feed(data))

        conn = Connection(2, initiated=False)
        conn.attach(Writer([]))
        values = [b"x" * 1000] * 600 + [b"y" * (peers.WRITE_CHUNK + 1)] + [b"z"] * 3
        for i, value in enumerate(values, 1):
            conn.send(QuorumPacket(PacketType.PROPOSAL, E1 + i, wire.encode_proposal_data(value)), flush=False)
        assert sizes == []
        conn.flush()
        assert zxids == [E1 + i for i in range(1, len(values) + 1)] and conn.sent == len(values)
        assert conn.writes == len(sizes) and 3 <= len(sizes) <= 5
        assert all(size <= peers.WRITE_CHUNK for size in sizes[:-2]) and max(sizes) > peers.WRITE_CHUNK

    asyncio.run(scenario())
