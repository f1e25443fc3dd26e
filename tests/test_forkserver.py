"""The fork server replay starts its servers from (conformance/replay/forkserver.py): the children are real, separate
``zabref serve`` processes; a kill is a power cut; the zygote reaps only when asked and takes its children with it.
Loopback only; every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conformance.replay.forkserver import ForkedServer, ForkServer, fork_server
from conformance.replay.harness import POWER_LOSS, TIMING
from zabref.config import load_config
from zabref.errors import ZabError
from zabref.runtime.cluster import cluster_config, find_free_base_port, release_base_port
from zabref.runtime.control_client import settle
from zabref.storage import ENV_CRASH_AT, ENV_DISK


@pytest.fixture
def config(tmp_path: Path):
    base = find_free_base_port(3)
    try:
        path = cluster_config(tmp_path, 3, base, TIMING).resolve()
        yield path, load_config(path)
    finally:
        release_base_port(base)


def _servers(config, **kw) -> dict[int, ForkedServer]:
    path, cfg = config
    return {sid: ForkedServer(path, cfg, sid, env=POWER_LOSS, **kw) for sid in cfg.sids}


def test_forked_servers_are_separate_processes_that_serve_and_elect(config) -> None:
    servers = _servers(config)
    try:
        for s in servers.values():
            s.start(control=True)
        for s in servers.values():
            s.wait_ready(30.0)  # the control port answers with the child's own pid
        pids = {s.proc.pid for s in servers.values()}
        assert len(pids) == 3 and os.getpid() not in pids
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
        controls = {sid: s.control(timeout=10.0) for sid, s in servers.items()}
        states = settle(controls, 10.0)
        assert {st["variables"]["state"] for st in states.values()} == {"LOOKING"}
        for c in controls.values():
            c.close()
    finally:
        for s in servers.values():
            s.kill()
    assert all(s.proc.returncode == -signal.SIGKILL for s in servers.values())
    assert not any(s.running for s in servers.values())


@pytest.mark.parametrize("disk, left", [("powerloss", []), ("real", [".zab.log.tmp"])])
def test_a_kill_is_a_power_cut_for_a_forked_server(config, disk: str, left: list[str]) -> None:
    """The environment reaches the child: a crash point kills it at its first fsync (while it creates its log), and
    under ZABREF_DISK=powerloss the file it wrote and did not fsync is gone, as after a power cut; on the real disk
    the operating system keeps it. (The replay's durable check and the seeded bugs *_without_fsync rely on this.)"""
    path, cfg = config
    s = ForkedServer(path, cfg, 1, env={**POWER_LOSS, ENV_DISK: disk, ENV_CRASH_AT: "fsync:1"})
    s.start()
    assert s.proc.wait(30) == -signal.SIGKILL
    names = sorted(p.name for p in s.me.data_dir.iterdir() if p.name not in ("LOCK", "server.log", "stderr.log"))
    assert names == left


def test_a_server_that_cannot_start_exits_with_its_error_in_its_stderr_log(tmp_path: Path, config) -> None:
    path, cfg = config
    bad = ForkedServer(path, cfg, 1, args=("--action-log",))  # an option without its value: click refuses it
    bad.start()
    assert bad.proc.wait(30) == 2
    assert "--action-log" in bad.stderr_path.read_text()
    with pytest.raises(ZabError, match="exited with code 2"):
        bad.wait_ready(5.0)


def test_the_zygote_refuses_bad_requests_and_kills_its_children_when_closed(config) -> None:
    zygote = ForkServer()
    try:
        with pytest.raises(ZabError, match="unknown op"):
            zygote.request("launch")
        with pytest.raises(ZabError, match="not a child"):
            zygote.request("poll", pid=os.getpid())
        path, cfg = config
        s = ForkedServer(path, cfg, 2)
        s.me.data_dir.mkdir(parents=True, exist_ok=True)  # as ServerProcess.start does before it launches
        pid = zygote.request("spawn", args=["serve", "--config", str(path), "--id", "2"],
                             env={}, stderr=str(s.stderr_path))["pid"]
        assert zygote.request("poll", pid=pid)["returncode"] is None
    finally:
        zygote.close()
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped: not even a zombie is left


def test_one_zygote_per_code_root_and_a_dead_one_is_replaced(tmp_path: Path) -> None:
    first = fork_server()
    assert fork_server() is first
    first._proc.kill()
    first._proc.wait(10)
    second = fork_server()
    assert second is not first and second.alive
    with pytest.raises(subprocess.TimeoutExpired):
        second._proc.wait(0.05)


def test_poll_reads_proc_while_the_child_lives_and_asks_the_zygote_once_it_is_gone(config, monkeypatch) -> None:
    """`ForkedProcess.poll` (what `running` and wait_ready ask every few milliseconds) reads /proc while the child
    runs or is stopped, without a round trip to the zygote; once the child is a zombie the zygote reaps it and the
    return code is the kill's."""
    path, cfg = config
    s = ForkedServer(path, cfg, 1, env=POWER_LOSS)
    s.start(control=True)
    asked: list[str] = []
    zygote = s.proc.zygote
    real = zygote.request
    monkeypatch.setattr(zygote, "request", lambda op, **kw: asked.append(op) or real(op, **kw))
    try:
        s.wait_ready(30.0)
        os.kill(s.proc.pid, signal.SIGSTOP)
        assert s.proc.poll() is None and s.running
        os.kill(s.proc.pid, signal.SIGCONT)
        assert asked == []
        os.kill(s.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while s.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        s.kill()
    assert s.proc.returncode == -signal.SIGKILL and "poll" in asked
    assert not Path(f"/proc/{s.proc.pid}").exists()  # reaped by the zygote's poll
