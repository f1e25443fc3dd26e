"""Disk faults on real server processes (issue 6): a torn last record, a flipped bit in the middle of the log, an
unwritable data dir, a disk that fills up while the server runs.

The rules under test are docs/wire-and-disk.md's "Recovery rules" (docs/faults.md, "Disk faults", says what each
case shows): damage at the tail is truncated and the record is fetched again from the leader; damage in the middle
stops the server before it serves anything (exit code 1, the record named, the file untouched); a write or fsync that
fails stops a running server (exit code 2) and a restart recovers. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import helpers
import pytest

from zabref.client import ZabClient
from zabref.config import ClusterConfig
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port
from zabref.runtime.control import ControlError
from zabref.storage import LOG_NAME
from zabref.storage.records import Kind, records_of

pytestmark = pytest.mark.slow

TIMING = ClusterConfig(tick_ms=50, init_limit=20, sync_limit=10)


@pytest.fixture
def cluster(tmp_path: Path):
    base = find_free_base_port(3)
    try:
        with LocalCluster(cluster_config(tmp_path, 3, base, TIMING)) as c:
            yield c
    finally:
        release_base_port(base)


def leader(cluster: LocalCluster, sids) -> int | None:
    """The leader in BROADCAST whose live followers are all in BROADCAST, else None."""
    try:
        states = {}
        for s in sids:
            with cluster[s].control(timeout=5.0) as c:
                states[s] = c.request("state")["variables"]
    except (OSError, ControlError):
        return None
    leaders = [s for s, v in states.items() if (v["state"], v["zab_state"]) == ("LEADING", "BROADCAST")]
    ok = len(leaders) == 1 and all(v["zab_state"] == "BROADCAST" for v in states.values())
    return leaders[0] if ok else None


def start(cluster: LocalCluster, sids) -> int:
    for s in sids:
        if not cluster[s].running:
            cluster[s].start()
    for s in sids:
        cluster[s].wait_ready()
    return helpers.wait_for("an established leader", lambda: leader(cluster, sids), 30)


def submit(cluster: LocalCluster, sids, values) -> list[tuple[int, str]]:
    with ZabClient([(cluster[s].me.host, cluster[s].me.client_port) for s in sorted(sids)]) as c:
        return [(c.submit(v), v) for v in values]


def delivered(cluster: LocalCluster, sid: int) -> list[tuple[int, str]]:
    with ZabClient([(cluster[sid].me.host, cluster[sid].me.client_port)], attempts=20) as c:
        c.sync()
        return c.read()


def txn_records(log: Path) -> list[tuple[int, int]]:
    """(start, end) byte offsets of every transaction record of a (sound) log file, in order."""
    return [(start, end) for start, end, kind in records_of(log.read_bytes()) if kind == Kind.TXN]


def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["torn last record", "flipped bit in the last record"])
def test_damaged_tail_is_truncated_and_the_record_comes_back_from_the_leader(cluster: LocalCluster,
                                                                              damage: str) -> None:
    sids = {1, 2, 3}
    start(cluster, sids)
    committed = submit(cluster, sids, [f"v{k}" for k in range(20)])
    cluster.stop()  # SIGTERM: every server has all 20 on disk
    log = cluster[2].me.data_dir / LOG_NAME
    first, last = txn_records(log)[-1]
    if damage == "torn last record":
        os.truncate(log, first + (last - first) // 2)  # a crash in the middle of the last append
    else:
        flip_bit(log, log.stat().st_size - 1)  # the last batch's COMMIT record: the batch (v19) cannot be trusted
    start(cluster, sids)
    assert "torn tail of" in cluster[2].tail(200)  # the recovery report names what it dropped
    more = submit(cluster, sids, ["after"])
    for s in sorted(sids):
        assert delivered(cluster, s) == committed + more  # v19 is back at server 2, and "v18" appears once


def test_flipped_bit_mid_log_stops_the_server_until_an_operator_acts(cluster: LocalCluster) -> None:
    sids = {1, 2, 3}
    start(cluster, sids)
    committed = submit(cluster, sids, [f"v{k}" for k in range(20)])
    cluster.stop()
    log = cluster[3].me.data_dir / LOG_NAME
    begin, end = txn_records(log)[5]
    flip_bit(log, end - 2)  # "v5" becomes "w5" in the sixth transaction's record
    damaged = log.read_bytes()

    server = cluster[3].start()
    assert server.proc.wait(30) == 1  # refuses to start: it never serves or forwards the record
    assert f"at byte {begin}" in server.tail() and "a valid commit record follows" in server.tail()
    assert log.read_bytes() == damaged  # and the file is left as it was, for the operator

    start(cluster, {1, 2})
    more = submit(cluster, {1, 2}, ["while 3 is down"])
    # The operator's way out: move the damaged directory aside; the server starts empty and the leader sends it
    # everything (safe for ONE server: it no longer counts as a copy of what it had acknowledged).
    cluster[3].me.data_dir.rename(cluster[3].me.data_dir.with_name("3.damaged"))
    start(cluster, sids)
    for s in sorted(sids):
        assert delivered(cluster, s) == committed + more
    assert all("w5" not in [v for _, v in delivered(cluster, s)] for s in sids)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only directory")
def test_unwritable_data_dir_stops_the_server_at_start_with_the_path(cluster: LocalCluster) -> None:
    start(cluster, {1, 2, 3})
    cluster.stop()
    data = cluster[1].me.data_dir
    data.chmod(0o500)
    try:
        server = cluster[1].start()
        assert server.proc.wait(30) == 1
        assert f"{data}: data directory is not readable and writable" in server.tail()
    finally:
        data.chmod(0o700)


def test_data_dir_that_takes_no_bytes_stops_the_server_at_start(cluster: LocalCluster) -> None:
    """RLIMIT_FSIZE = 0 (root too is bound by it): the log's header cannot be written."""
    me = cluster[1].me
    me.data_dir.mkdir(parents=True)

    def no_bytes() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    proc = subprocess.run([sys.executable, "-m", "zabref.cli", "serve", "--config", str(cluster.config_path),
                           "--id", "1"], preexec_fn=no_bytes, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"Error: {me.data_dir / LOG_NAME}" in proc.stderr and "File too large" in proc.stderr, proc.stderr
    assert not (me.data_dir / LOG_NAME).exists()


def test_disk_full_while_running_stops_a_follower_and_a_restart_recovers(cluster: LocalCluster) -> None:
    sids = {1, 2, 3}
    lead = start(cluster, sids)
    committed = submit(cluster, sids, [f"v{k}" for k in range(10)])
    victim = min(sids - {lead})
    data = cluster[victim].me.data_dir
    log = data / LOG_NAME
    # The limit binds every file the process writes, its own logs too: leave them 4 KiB to say what happened; the
    # transaction log (a few hundred bytes now) then fails in the middle of a 2 KB record.
    limit = max((data / name).stat().st_size for name in ("stderr.log", "server.log")) + 4096
    resource.prlimit(cluster[victim].proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    big = [f"w{k:02d}" + "x" * 2000 for k in range(limit // 2000 + 4)]
    committed += submit(cluster, sids - {victim}, big)  # the other two are a quorum
    assert cluster[victim].proc.wait(30) == 2  # a storage failure stops the server
    assert "storage failed, stopping" in cluster[victim].tail(50)
    assert "File too large" in cluster[victim].tail(50)
    assert log.read_bytes()[limit:].count(0) == max(log.stat().st_size - limit, 0)  # past the limit: reserved zeros

    start(cluster, sids)  # no limit now: recovery truncates any torn record, the leader sends the rest
    for s in sorted(sids):
        assert delivered(cluster, s) == committed
