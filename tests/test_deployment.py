"""Where zabref runs and who may steer it: any host (host names, IPv4, IPv6; the project's TOML and ZooKeeper's
zoo.cfg), and a control port that exists only with a token, listens on loopback only and refuses strangers.

Everything runs on loopback: other machines are stood in for by other loopback addresses (127.0.0.2, ...), which
Linux routes to this one. Every wait is bounded.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import helpers
import pytest

from zabref.client import ZabClient
from zabref.config import load_config, parse_config, parse_zoo_cfg
from zabref.errors import ConfigError
from zabref.runtime.cluster import LocalCluster, cluster_config, control_token, find_free_base_port, release_base_port
from zabref.runtime.control import ControlError, read_token
from zabref.runtime.control_client import ControlClient

SERVER = """
[[server]]
id = {sid}
host = "{host}"
quorum_port = {q}
election_port = {e}
client_port = {c}
{control}data_dir = "{data}"
"""


def _toml(*servers: dict) -> str:
    return "[cluster]\ntick_ms = 50\n" + "".join(
        SERVER.format(control=f"control_port = {s['control']}\n" if "control" in s else "", **{
            k: v for k, v in s.items() if k != "control"}) for s in servers)


# ------------------------------------------------------------------------------------------------- hosts


def test_hosts_may_be_names_ipv4_or_ipv6_and_ports_repeat_across_machines() -> None:
    config = parse_config(_toml(
        dict(sid=1, host="zk1.example.com", q=2888, e=3888, c=2181, data="/var/lib/zabref"),
        dict(sid=2, host="10.0.0.2", q=2888, e=3888, c=2181, data="/var/lib/zabref"),
        dict(sid=3, host="[2001:db8::3]", q=2888, e=3888, c=2181, data="/var/lib/zabref", control=2999)), "c.toml")
    assert [s.host for s in config.servers] == ["zk1.example.com", "10.0.0.2", "2001:db8::3"]
    assert [s.control_port for s in config.servers] == [None, None, 2999]
    assert config.server(3).control_host == "127.0.0.1"  # never an address other machines reach


def test_one_machine_may_not_hold_two_servers_on_one_port_or_in_one_data_dir() -> None:
    """Every loopback address is this machine, so 127.0.0.2 and 127.0.0.3 share its data dirs; their control
    ports listen on their own loopback address."""
    with pytest.raises(ConfigError, match=r"#2 \(id 2\): data_dir: /d is also the data_dir of server 1 on the same"):
        parse_config(_toml(dict(sid=1, host="127.0.0.2", q=1, e=2, c=3, data="/d"),
                           dict(sid=2, host="127.0.0.3", q=1, e=2, c=3, data="/d")), "c.toml")
    with pytest.raises(ConfigError, match=r"#2 \(id 2\): election_port: port 2 is already the quorum_port of server 1"):
        parse_config(_toml(dict(sid=1, host="10.0.0.1", q=2, e=3, c=4, data="/a"),
                           dict(sid=2, host="10.0.0.1", q=1, e=2, c=5, data="/b")), "c.toml")
    with pytest.raises(ConfigError, match=r"#2 \(id 2\): control_port: port 9 is already the control_port of server 1"):
        parse_config(_toml(dict(sid=1, host="10.0.0.1", q=1, e=2, c=3, data="/a", control=9),
                           dict(sid=2, host="10.0.0.2", q=1, e=2, c=3, data="/b", control=9)), "c.toml")


ZOO = """# a ZooKeeper ensemble's file, as on machine 2
tickTime=2000
initLimit=10
syncLimit=5
dataDir=data
clientPort=2181
autopurge.snapRetainCount=3
server.1=zk1.example.com:2888:3888
server.2=10.0.0.2:2888:3888:participant;2182
server.3=[2001:db8::3]:2888:3888;0.0.0.0:2183
"""


def test_zoo_cfg_is_read_as_zookeeper_writes_it(tmp_path: Path) -> None:
    (tmp_path / "zoo.cfg").write_text(ZOO)
    config = load_config(tmp_path / "zoo.cfg")
    assert (config.cluster.tick_ms, config.cluster.init_limit, config.cluster.sync_limit) == (2000, 10, 5)
    assert [(s.id, s.host, s.quorum_port, s.election_port, s.client_port, s.control_port) for s in config.servers] == [
        (1, "zk1.example.com", 2888, 3888, 2181, None), (2, "10.0.0.2", 2888, 3888, 2182, None),
        (3, "2001:db8::3", 2888, 3888, 2183, None)]
    assert {s.data_dir for s in config.servers} == {tmp_path / "data"}


@pytest.mark.parametrize(("edit", "message"), [
    (("server.2=10.0.0.2:2888:3888:participant;2182", "server.2=10.0.0.2:2888:3888:observer"),
     r"zoo.cfg:9: server.2: observer: zabref has no observers"),
    (("server.2=10.0.0.2:2888:3888:participant;2182", "server.2=10.0.0.2:2888"),
     r"zoo.cfg:9: server.2: expected host:quorumPort:electionPort"),
    (("server.1=zk1.example.com:2888:3888", "server.1=zk1.example.com:http:3888"),
     r"zoo.cfg:8: server.1: quorumPort: expected an integer, got 'http'"),
    (("server.1=zk1.example.com:2888:3888", "server.x=zk1.example.com:2888:3888"),
     r"zoo.cfg:8: server.x: expected an integer, got 'x'"),
    (("dataDir=data\n", ""), r"zoo.cfg: dataDir: missing"),
    (("clientPort=2181\n", ""), r"zoo.cfg:7: server.1: no client port"),
    (("tickTime=2000", "tickTime=2000\ntickTime=3000"), r"zoo.cfg:3: tickTime: given twice \(also line 2\)"),
    (("initLimit=10", "initLimit"), r"zoo.cfg:3: expected key=value, got 'initLimit'"),
    (("syncLimit=5", "syncLimit=0"), r"zoo.cfg:4: syncLimit: 0 is outside"),
])
def test_zoo_cfg_errors_name_the_line(edit, message) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_zoo_cfg(ZOO.replace(*edit), "zoo.cfg")


def _end(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every server started here (they have no control port), SIGKILL one still running after 10 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _zoo_cfgs(folder: Path, hosts: list[str], base: int) -> list[Path]:
    """One zoo.cfg per server, as on three machines: each names every server, and its own dataDir."""
    lines = [f"server.{sid}={host}:{base}:{base + 1};{base + 2}" for sid, host in enumerate(hosts, 1)]
    paths = []
    for sid in range(1, len(hosts) + 1):
        path = folder / f"zoo{sid}.cfg"
        path.write_text(f"tickTime=50\ninitLimit=10\nsyncLimit=5\ndataDir=data{sid}\n" + "\n".join(lines) + "\n")
        paths.append(path)
    return paths


@pytest.mark.slow
def test_three_servers_on_three_addresses_from_zoo_cfg_files_serve_without_control_ports(tmp_path: Path) -> None:
    """Three "machines" (127.0.0.2-4) with the SAME ports, each server started from its own zoo.cfg and no control
    token: they elect a leader and commit, each binds only its own address, and no control port exists."""
    hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    base = find_free_base_port(1)
    procs = []
    try:
        for sid, path in enumerate(_zoo_cfgs(tmp_path, hosts, base), 1):
            with open(tmp_path / f"stderr{sid}", "wb") as err:
                procs.append(subprocess.Popen([sys.executable, "-m", "zabref.cli", "serve", "--config", str(path),
                                               "--id", str(sid)], stdout=subprocess.DEVNULL, stderr=err))
        addresses = [(h, base + 2) for h in hosts]
        with ZabClient(addresses, attempts=120) as c:
            zxids = [c.submit(f"v{k}") for k in range(5)]
        assert zxids == sorted(zxids) and len(set(zxids)) == 5
        for address in addresses:  # every server delivers the five values
            with ZabClient([address], attempts=60) as c:
                helpers.wait_for(f"{address} to deliver", lambda c=c: len(c.read(0)) >= 5, 20)
        with pytest.raises(OSError):  # nothing listens on 127.0.0.1 at those ports: each binds its own address
            socket.create_connection(("127.0.0.1", base + 2), timeout=2).close()
        for p in procs:
            assert p.poll() is None, (tmp_path / "stderr1").read_text()[-2000:]
    finally:
        _end(procs)
        release_base_port(base)


@pytest.mark.slow
def test_ipv6_loopback_serves_where_the_machine_has_it(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("this machine has no ::1")
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, host="::1")
        with LocalCluster(path).start() as cluster:
            assert cluster[1].me.control_host == "::1"
            with ZabClient(cluster.client_addresses(), attempts=120) as c:
                assert c.submit("over ipv6") > 0
            with cluster[1].control(timeout=5) as ctl:
                assert ctl.request("ping")["sid"] == 1
    finally:
        release_base_port(base)


# ------------------------------------------------------------------------------------------------- control port


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """Server 1 of three configured (alone, it stays LOOKING), started with the cluster's control token."""
    folder = tmp_path_factory.mktemp("one")
    base = find_free_base_port(3)
    cluster = LocalCluster(cluster_config(folder, 3, base))
    try:
        cluster[1].start().wait_ready()
        yield cluster[1]
    finally:
        cluster.stop()
        release_base_port(base)


def _first_lines(server, *lines: bytes) -> list[dict]:
    """Open a raw control connection, send ``lines``, read until the server closes it; the answers."""
    me = server.me
    with socket.create_connection((me.control_host, me.control_port), timeout=10) as sock:
        sock.sendall(b"".join(lines))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return [json.loads(x) for x in data.splitlines()]


@pytest.mark.parametrize("first", [
    b'{"op": "partition", "peers": [2]}\n',  # a real request, without auth
    b'{"op": "auth", "token": "0123456789abcdef0123456789abcdef"}\n',  # a wrong token
    b'{"op": "auth"}\n',
    b'{"op": "auth", "token": "\\ud800"}\n',  # a lone surrogate: no UTF-8 form
    b"\xff\xfe not json\n",
])
def test_a_connection_without_the_token_is_answered_once_and_closed_and_nothing_else_is_read(one, first) -> None:
    answers = _first_lines(one, first, b'{"op": "partition", "peers": [2]}\n')
    assert len(answers) == 1 and answers[0]["error"].startswith("not authenticated")
    with one.control(timeout=5) as c:  # the partition after it was never read (healing 3 shows what is cut)
        assert c.request("heal", peers=[3])["cut"] == []
    assert "not authenticated" in (one.me.data_dir / "server.log").read_text()


def test_a_client_with_the_wrong_token_gets_a_control_error(one, tmp_path: Path) -> None:
    with pytest.raises(ControlError, match="not authenticated"):
        with ControlClient(one.me.control_host, one.me.control_port, b"not-the-token-at-all") as c:
            c.request("ping")
    with one.control(timeout=5) as c:
        assert c.request("ping")["sid"] == 1


def test_the_control_port_listens_on_loopback_only(one) -> None:
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{one.me.control_port}"], capture_output=True, text=True)
    if listening.returncode != 0:
        pytest.skip("no ss on this machine")
    assert listening.stdout.split()[3] == f"127.0.0.1:{one.me.control_port}", listening.stdout


def test_token_files_others_may_read_or_too_short_are_refused(tmp_path: Path) -> None:
    path = control_token(tmp_path)
    assert oct(path.stat().st_mode & 0o777) == "0o600" and len(read_token(path)) == 64
    assert control_token(tmp_path) == path and len(read_token(path)) == 64  # kept, not replaced
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=r"control.token: the control token file may be read by others \(mode 640\)"):
        read_token(path)
    short = tmp_path / "short"
    short.write_text("abc\n")
    short.chmod(0o600)
    with pytest.raises(ConfigError, match=r"short: a control token is 16 to 2048 bytes, this one 3"):
        read_token(short)
    with pytest.raises(ConfigError, match="nope: cannot read the control token"):
        read_token(tmp_path / "nope")


@pytest.mark.slow
def test_servers_started_without_a_token_have_no_control_port_and_control_mode_needs_one(tmp_path: Path) -> None:
    base = find_free_base_port(3)
    procs = []
    try:
        path = cluster_config(tmp_path, 3, base)
        config = load_config(path)
        refused = subprocess.run([sys.executable, "-m", "zabref.cli", "serve", "--config", str(path), "--id", "1",
                                  "--control"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1 and "give --control-token" in refused.stderr
        for sid in config.sids:
            config.server(sid).data_dir.mkdir(parents=True, exist_ok=True)
            procs.append(subprocess.Popen([sys.executable, "-m", "zabref.cli", "serve", "--config", str(path),
                                           "--id", str(sid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with ZabClient([(s.host, s.client_port) for s in config.servers], attempts=120) as c:
            assert c.submit("served") > 0
        for me in config.servers:
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((me.control_host, me.control_port), timeout=2).close()
            assert "control none" in (me.data_dir / "server.log").read_text()
    finally:
        _end(procs)
        release_base_port(base)


# ------------------------------------------------------------------------------------------------- client limits


def _open_from(source: str, address: tuple[str, int], n: int) -> tuple[list[socket.socket], int]:
    """Open ``n`` client connections from ``source`` and ask a question on each; (the connections the server answers
    on, how many it closed instead). Every connection gets one or the other, so no timing decides which."""
    import selectors

    from zabref.net import wire

    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(address)
        socks.append(s)
    kept, closed = [], 0
    with selectors.DefaultSelector() as sel:
        for s in socks:
            try:
                s.sendall(wire.frame(json.dumps({"op": "read", "from_zxid": 0, "limit": 1}).encode()))
            except OSError:  # closed by the server already
                s.close()
                closed += 1
                continue
            sel.register(s, selectors.EVENT_READ)
        waiting = len(sel.get_map())
        deadline = 30.0
        while waiting and deadline > 0:
            for key, _ in sel.select(0.5):
                s = key.fileobj
                sel.unregister(s)
                waiting -= 1
                try:
                    answered = s.recv(1) != b""
                except OSError:
                    answered = False
                if answered:
                    kept.append(s)
                else:
                    s.close()
                    closed += 1
            deadline -= 0.5
        assert not waiting, f"{waiting} connections neither answered nor closed within 30 s"
    return kept, closed


@pytest.mark.slow
def test_one_address_takes_its_share_of_client_connections_and_the_others_are_served(tmp_path: Path) -> None:
    base = find_free_base_port(3)
    held: list[socket.socket] = []
    try:
        path = cluster_config(tmp_path, 3, base)
        with open(path, "a") as f:
            f.write("\n[limits]\nclient_connections = 12\nclient_connections_per_address = 8\n")
        with LocalCluster(path).start() as cluster:
            me = cluster[1].me
            address = (me.host, me.client_port)
            kept, closed = _open_from("127.0.0.2", address, 20)
            held += kept
            assert (len(kept), closed) == (8, 12)  # the per-address limit
            with ZabClient([address], attempts=120) as c:  # another address is still served
                assert c.submit("still served") > 0
            kept, closed = _open_from("127.0.0.3", address, 10)
            held += kept
            assert (len(kept), closed) == (4, 6)  # the limit of all together: 8 + 4 = 12
            log = (me.data_dir / "server.log").read_text()
            assert "client_connections_per_address" in log and "(limits.client_connections)" in log
            for s in held:
                s.close()
            held.clear()
            with ZabClient([address], attempts=120) as c:
                assert c.submit("served again") > 0
    finally:
        for s in held:
            s.close()
        release_base_port(base)


def test_limits_are_read_and_checked() -> None:
    text = _toml(dict(sid=1, host="127.0.0.1", q=1, e=2, c=3, data="d"))
    assert parse_config(text + "[limits]\nclient_frame_bytes = 4096\n", "c.toml").limits.client_frame_bytes == 4096
    with pytest.raises(ConfigError, match=r"c.toml: \[limits\]: client_connections: 0 is outside 1..100000"):
        parse_config(text + "[limits]\nclient_connections = 0\n", "c.toml")
    with pytest.raises(ConfigError, match=r"c.toml: \[limits\]: unknown key 'max_clients'"):
        parse_config(text + "[limits]\nmax_clients = 3\n", "c.toml")
    zoo = parse_zoo_cfg(ZOO + "maxClientCnxns=60\njute.maxbuffer=2048\n", "zoo.cfg")
    assert (zoo.limits.client_connections_per_address, zoo.limits.client_frame_bytes) == (60, 2048)
