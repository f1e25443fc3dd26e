"""The runtime's own rules: config errors name file and key; bad bytes on any port close only that connection;
persistence happens before sending (seed 000, phase 3, step 2: "log and sync proposals to disk and send ACK")."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import time
from pathlib import Path

import helpers
import pytest

from conformance.fuzz.frames import hello
from zabref.config import ClusterConfig, load_config, parse_config
from zabref.core.packets import PacketType, QuorumPacket
from zabref.errors import ConfigError
from zabref.net import wire
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.server import Server

GOOD = """
[cluster]
tick_ms = 50
init_limit = 10
sync_limit = 5

[[server]]
id = 1
host = "127.0.0.1"
quorum_port = 20001
election_port = 20002
client_port = 20003
control_port = 20004
data_dir = "d1"
"""


def test_good_config_resolves_data_dirs_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(GOOD)
    config = load_config(path)
    assert config.cluster == ClusterConfig(50, 10, 5)
    assert config.server(1).data_dir == tmp_path / "d1"
    with pytest.raises(ConfigError, match=r"no \[\[server\]\] has id = 7"):
        config.server(7)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("tick_ms = 50", "tick_ms = 0"), r"\[cluster\]: tick_ms: 0 is outside"),
        (("sync_limit = 5", 'sync_limit = "5"'), r"\[cluster\]: sync_limit: expected an integer"),
        (("init_limit = 10", "init_limit = 10\nretries = 3"), r"\[cluster\]: unknown key 'retries'"),
        (('host = "127.0.0.1"', 'host = "bad host!"'), r"\[\[server\]\] #1 \(id 1\): host: 'bad host!' is neither"),
        (('host = "127.0.0.1"', 'host = "-a.example"'), r"host: '-a.example' is neither a host name"),
        (('host = "127.0.0.1"', 'host = "[example.org]"'), r"host: '\[example.org\]' is neither"),
        (("quorum_port = 20001", "quorum_port = 70000"), r"\(id 1\): quorum_port: 70000 is outside 1..65535"),
        (("client_port = 20003", "client_port = 20001"), r"client_port: port 20001 is already the quorum_port"),
        (('data_dir = "d1"', ""), r"\[\[server\]\] #1 \(id 1\): missing key 'data_dir'"),
        (("id = 1", "id = 0"), r"\[\[server\]\] #1: id: 0 is outside"),
        (("[cluster]", "[cluster"), r"not valid TOML: .*line 2"),
    ],
)
def test_config_errors_name_the_file_and_the_key(tmp_path: Path, edit, message) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*edit))
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(info.value).startswith(str(path))


def test_duplicate_ids_are_named() -> None:
    text = GOOD + GOOD.split("[cluster]")[1].split("sync_limit = 5")[1].replace("2000", "2100").replace("d1", "d2")
    with pytest.raises(ConfigError, match=r"x.toml: \[\[server\]\] #2 \(id 1\): id: 1 is also the id of"):
        parse_config(text, "x.toml")


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.toml: cannot read"):
        load_config(tmp_path / "nope.toml")


# ------------------------------------------------------------------------------------------ persist before send


class _RecordingWriter:
    """Stands in for a connection's StreamWriter: records each write in the shared event list."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.transport = self

    def write(self, data: bytes) -> None:  # one write carries every packet of a pump batch to this peer
        for packet in wire.PacketDecoder().feed(data):
            self.events.append(f"write {packet.type.name}")

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    async def drain(self) -> None:
        pass


@pytest.fixture(scope="module")
def lone_server(tmp_path_factory):
    """Three configured servers, one running in normal mode (the others never start: it stays LOOKING)."""
    from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port

    folder = tmp_path_factory.mktemp("lone")
    path = cluster_config(folder, 3, find_free_base_port(3))
    cluster = LocalCluster(path)
    cluster[1].start().wait_ready()
    yield cluster[1]
    cluster.stop()


def _packet(ptype: PacketType, zxid: int = 0) -> bytes:
    return wire.encode_quorum_packet(QuorumPacket(ptype, zxid))


#: Bad bytes for every server port; on the quorum port a learner's FOLLOWERINFO (`hello`) opens the bad part.
GARBAGE = {
    "not a first packet": b"GET / HTTP/1.1\r\n\r\n",
    "huge length prefix": struct.pack(">i", 0x7FFFFFF0) + b"xx",
    "negative length prefix": struct.pack(">i", -5),
    "unknown sid": hello(99),
    "unknown packet type": hello(2) + struct.pack(">iqii", 99, 0, -1, -1),
    "truncated packet": hello(2) + struct.pack(">iqi", 3, 0, 8) + b"\x00",
    "packet of another protocol": hello(2) + _packet(PacketType.INFORM),  # an observer's: zabref has none
    "a first packet other than FOLLOWERINFO": _packet(PacketType.ACK, 1 << 32),
    "huge data after the first packet": hello(2) + struct.pack(">iqi", 2, 1, 0x7FFFFFF0),
}


def _auth(server) -> bytes:
    """The auth line of ``server``'s control port."""
    return json.dumps({"op": "auth", "token": server.token.decode()}).encode() + b"\n"



@pytest.mark.slow
@pytest.mark.parametrize("port_name", ["quorum_port", "election_port", "client_port"])
@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_closes_that_connection_and_the_server_keeps_serving(lone_server, port_name, garbage) -> None:
    me = lone_server.me
    log = me.data_dir / "server.log"
    seen = len(log.read_text())
    with socket.create_connection((me.host, getattr(me, port_name)), timeout=10) as sock:
        sock.sendall(GARBAGE[garbage])
        if port_name == "client_port":
            # well-framed bytes on the client port get an error answer and the connection stays open: end it
            sock.shutdown(socket.SHUT_WR)
        assert helpers.closed_by_peer(sock)
    with lone_server.control() as c:
        state = c.request("state")
    assert state["variables"]["state"] == "LOOKING"
    assert state["connections"] == []
    assert "Traceback" not in lone_server.stderr_path.read_text()
    if port_name != "client_port":  # a server-to-server port logs why it closed the connection
        for _ in range(100):
            new_lines = log.read_text()[seen:]
            if "closed" in new_lines:
                break
            time.sleep(0.02)
        assert "connection from" in new_lines and "closed" in new_lines


@pytest.mark.slow
def test_bad_control_lines_get_an_error_and_the_connection_keeps_working(lone_server) -> None:
    me = lone_server.me
    with socket.create_connection((me.control_host, me.control_port), timeout=10) as sock:
        f = sock.makefile("rwb")
        for line in (_auth(lone_server), b"not json\n", b"[1, 2]\n", b'{"op": "state"}\n'):
            f.write(line)
            f.flush()
            answer = json.loads(f.readline())
        assert answer["ok"] is True and answer["sid"] == 1
        f.write(b"x" * (2 * 1024 * 1024) + b"\n")  # longer than MAX_LINE
        f.flush()
        assert "longer than" in json.loads(f.readline())["error"]
    with lone_server.control() as c:
        assert c.request("ping")["sid"] == 1


def test_a_configuration_too_long_for_a_notification_is_refused_before_anything_opens(tmp_path: Path) -> None:
    """Every notification carries the configuration's text, as ZooKeeper's do (`zabref.net.wire`); one longer than an
    election frame may be would be refused by every peer, so the server refuses to start, before it opens a file."""
    servers = []
    for sid in range(1, 34):
        host = ".".join([f"h{sid:02d}" + "a" * 57] * 4)  # 243 characters: each line of the text is about 280
        servers.append(f'[[server]]\nid = {sid}\nhost = "{host}"\nquorum_port = 20001\nelection_port = 20002\n'
                       f'client_port = 20003\ndata_dir = "d{sid}"\n')
    config = parse_config(GOOD.split("[[server]]")[0] + "\n".join(servers), str(tmp_path / "long.toml"))
    with pytest.raises(ConfigError, match=r"long.toml: the servers' addresses make a notification longer than 8192"):
        asyncio.run(Server(config, 1, NormalDriver(0.05)).run())
    assert not (tmp_path / "d1").exists()
