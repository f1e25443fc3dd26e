"""Election connections as ZooKeeper's QuorumCnxManager keeps them (`zabref.net.votes`): one connection a pair of
servers, the one the larger id dialed, carrying both directions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from zabref.config import load_config
from zabref.core.packets import Notification, ServerState
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.cluster import cluster_config
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.machine import Machine
from zabref.runtime.server import Server


def _one_connection_a_pair(servers: dict[int, Server]) -> str | None:
    """None when every pair holds exactly one election connection, dialed by its larger id; else what is not so."""
    for i, server in servers.items():
        for j, sender in server.senders.items():
            d = sender.describe()
            if not d["connected"] or d["dialed"] != (i > j):
                return f"server {i}'s connection with {j}: {d}"
        peers = sorted(v.peer for v in server.votes.values() if not v.closed)
        if peers != sorted(server.senders):
            return f"server {i} reads election connections from {peers}"
    return None


def test_each_pair_holds_one_election_connection_the_larger_id_dialed(tmp_path: Path) -> None:
    base = find_free_base_port(3)
    config = load_config(cluster_config(tmp_path, 3, base))
    servers = {sid: Server(config, sid, NormalDriver(0.05), machine=Machine(signals=False)) for sid in config.sids}

    async def main() -> None:
        tasks = [asyncio.create_task(s.run()) for s in servers.values()]
        try:
            loop = asyncio.get_running_loop()
            end, problem = loop.time() + 30, "not started"
            while loop.time() < end:
                leading = [s for s in servers.values() if s.node is not None and s.core.state.name == "LEADING"]
                problem = "no leader yet" if not leading else _one_connection_a_pair(servers)
                if problem is None:
                    break
                await asyncio.sleep(0.05)
            assert problem is None, problem
            # the pair's connection gone, the smaller id's dial only asks: 3 closes it and dials back, and server 1's
            # notification goes out on 3's connection
            old = servers[1].senders[3]._writer
            old.close()
            vote = Notification(ServerState.LOOKING, 1, 0, 99, 0)
            end = loop.time() + 10
            while loop.time() < end and servers[1].senders[3]._writer is old:
                await asyncio.sleep(0.01)
            servers[1].senders[3].send(vote)
            while loop.time() < end:
                got = [v for v in servers[3].votes.values() if v.peer == 1 and v.received]
                d = servers[1].senders[3].describe()
                if got and d["sent"] == 1 and d["connected"] and not d["dialed"]:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"server 1's vote did not reach 3 on 3's connection: {d}")
        finally:
            for s in servers.values():
                s.stop()
            await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run(main())
    finally:
        release_base_port(base)


def _resends(effects) -> int:
    return sum(a.name == "ResendNotifications" for a in effects.actions)


def test_a_looking_server_resends_its_vote_only_when_its_senders_hold_nothing() -> None:
    """The spec's ResendNotifications needs ``Quiet`` (every channel of the server empty). A notification still queued
    for a peer that is not connected yet is in the spec's channel: resending then queued a second copy behind it, and
    a mixed run's election check refused the two round-1 votes that reached a ZooKeeper server in one write."""
    from zabref.core.effects import Timing
    from zabref.core.node import Node
    from zabref.core.zab import Persistent

    timing = Timing(tick_s=0.05, init_limit=10, sync_limit=5)
    due = timing.limit(timing.resend_ticks)
    node = Node(1, (1, 2, 3), Persistent(), timing)
    assert node.start(0.0).notify  # round 1's vote to 2 and 3
    assert _resends(node.tick(due, votes_held=True)) == 0  # still queued: no copy
    assert _resends(node.tick(due + timing.tick_s, votes_held=False)) == 0  # the wait started again when it was held
    resent = node.tick(2 * due, votes_held=False)
    assert _resends(resent) == 1 and sorted(s.to for s in resent.notify) == [2, 3]


def test_an_election_sender_to_a_peer_that_is_down_keeps_its_newest_notification_and_holds_nothing() -> None:
    """What waits for a peer counts against the node's resend (`holds`), except for a peer that refuses the dial: its
    sender keeps only the newest notification (ZooKeeper's send queue of one) and holds nothing, so that a peer that
    is down holds up no resend to the others (docs/runtime.md)."""
    from zabref.net import votes

    a, b, c = (Notification(ServerState.LOOKING, 2, 0, r, 0) for r in (1, 2, 3))

    async def scenario() -> tuple[bool, bool, list[Notification], list[Notification]]:
        base = find_free_base_port(1)  # nothing listens there: every dial is refused
        try:
            sender = votes.ElectionSender(2, 1, "127.0.0.1", base, address="127.0.0.1:1")
            try:
                sender.send(a)
                sender.send(b)
                held = sender.holds()
                loop = asyncio.get_running_loop()
                end = loop.time() + 10
                while sender.holds() and loop.time() < end:
                    await asyncio.sleep(0.01)
                after_dial = list(sender.queue)
                sender.send(c)
                return held, sender.holds(), after_dial, list(sender.queue)
            finally:
                sender.close()
        finally:
            release_base_port(base)

    assert asyncio.run(scenario()) == (True, False, [b], [c])


def test_a_vote_queued_for_a_peer_that_has_not_dialed_back_is_not_resent_behind_itself(tmp_path: Path) -> None:
    """The mixed run's shape, with a stand-in for the ZooKeeper server: server 1 (zabref) starts; peer 3 takes 1's dials
    (a smaller id's dial only asks) and dials back a second later, as a ZooKeeper server did; peer 2 is down. Every
    notification 1 queued for 3 crosses in one burst when 3's connection comes. Before the resend waited for the
    senders, 1's resends of its round-1 vote queued behind the first copy, and the burst held the same vote several
    times (three at once with the wait taken out of `_election_tick`). Now the burst holds one; the timer may resend
    at the next tick, once (the test once asked for no copy within 0.1 s, which held only while the resend waited 4
    ticks of 0.05 s and the burst came just after the timer's restart)."""
    from zabref.net import peers, wire
    from zabref.net.zkwire import PROTOCOL_V1, Initial, encode_initial

    base = find_free_base_port(3)
    config = load_config(cluster_config(tmp_path, 3, base))
    three = config.server(3)
    server = Server(config, 1, NormalDriver(0.05), machine=Machine(signals=False))  # resend after 0.1 s, 0.2 s, ...

    async def main() -> list[tuple[float, Notification]]:
        loop = asyncio.get_running_loop()
        got: list[tuple[float, Notification]] = []

        async def take_the_ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await peers.accept_initial(reader)  # 1's ask for a dial back: dropped, as ZooKeeper drops it
            writer.close()

        listener = await asyncio.start_server(take_the_ask, three.host, three.election_port)
        task = asyncio.create_task(server.run())
        try:
            await asyncio.sleep(1.0)  # 1 asks, and its resend timer comes round several times
            me = config.server(1)
            hello = encode_initial(Initial(3, PROTOCOL_V1, (f"{three.host}:{three.election_port}",)))
            reader, writer = await peers.dial(me.host, me.election_port, hello, peer=1, attempts=3, timeout=2.0)

            def on_body(body: bytes) -> None:
                got.append((loop.time(), wire.decode_notification(body)))

            reading = asyncio.create_task(
                peers.read_stream(reader, writer, wire.FrameDecoder(peers.MAX_ELECTION_FRAME, "test"), on_body))
            await asyncio.sleep(0.6)
            reading.cancel()
            writer.close()
            return got
        finally:
            server.stop()
            await asyncio.wait_for(task, 10)
            listener.close()

    try:
        got = asyncio.run(main())
    finally:
        release_base_port(base)
    assert got, "server 1 sent 3 nothing on 3's connection"
    assert got[0][1].state is ServerState.LOOKING and got[0][1].leader == 1
    t0, first = got[0]
    burst = [round(t - t0, 3) for t, n in got if n == first and t - t0 < server.driver.tick_s]
    assert len(burst) <= 2, burst


@pytest.mark.pure_build  # patches a server's listen
def test_a_peer_dialing_while_the_later_ports_still_open_finds_its_sender(tmp_path: Path, caplog) -> None:
    """Server 3 dials 1's election port the moment it listens, and 1's handler runs before 1 opens its next port
    (uvloop runs an accept at once: a replay's servers started together did this): the handler finds 1's sender for
    3 and hands it the connection, with no handler failing."""
    from zabref.net import peers
    from zabref.net.zkwire import PROTOCOL_V1, Initial, encode_initial

    base = find_free_base_port(3)
    config = load_config(cluster_config(tmp_path, 3, base))
    me, three = config.server(1), config.server(3)
    server = Server(config, 1, NormalDriver(0.05), machine=Machine(signals=False))
    opened = server.listen
    dialed: list[asyncio.StreamWriter] = []

    async def listen(key, handler, *args, **kwargs):  # 3 dials as soon as the election port listens
        await opened(key, handler, *args, **kwargs)
        if key == "election_port":
            hello = encode_initial(Initial(3, PROTOCOL_V1, (f"{three.host}:{three.election_port}",)))
            _, writer = await peers.dial(me.host, me.election_port, hello, peer=1, attempts=3, timeout=2.0)
            dialed.append(writer)
            end = asyncio.get_running_loop().time() + 2.0  # until 1's handler has taken the connection, or failed
            while not any(v.peer == 3 for v in server.votes.values()) and "handler failed" not in caplog.text \
                    and asyncio.get_running_loop().time() < end:
                await asyncio.sleep(0.01)

    server.listen = listen

    async def main() -> dict:
        task = asyncio.create_task(server.run())
        try:
            end = asyncio.get_running_loop().time() + 10
            while server.node is None or not dialed or "ready" not in caplog.text:
                assert asyncio.get_running_loop().time() < end, "server 1 did not start"
                await asyncio.sleep(0.01)
            return server.senders[3].describe()
        finally:
            server.stop()
            await asyncio.wait_for(task, 10)
            for writer in dialed:
                writer.close()

    caplog.set_level("INFO", logger="zabref")
    try:
        sender = asyncio.run(main())
    finally:
        release_base_port(base)
    assert "handler failed" not in caplog.text, caplog.text
    assert sender["connected"] and not sender["dialed"], sender
