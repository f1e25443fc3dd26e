"""The power cut for servers that are not ours (conformance/zk/powercut.py; docs/zookeeper.md, "The power cut"): a
FUSE file system that forgets every write not fsynced (younger than the writeback delay), first on its own, then
under real ZooKeeper servers, where it tells forceSync=yes from forceSync=no."""

from __future__ import annotations

import os
import time

import pytest

from conformance.zk.powercut import PowerCutMount, fuse_available

pytestmark = pytest.mark.skipif(fuse_available() is not None, reason=f"no FUSE here: {fuse_available()}")


def _write(path, data: bytes, *, sync: bool, mode: int = os.O_WRONLY | os.O_CREAT, at: int | None = None) -> None:
    fd = os.open(path, mode, 0o644)
    try:
        if at is None:
            os.write(fd, data)
        else:
            os.pwrite(fd, data, at)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_cut_keeps_exactly_what_was_fsynced(powercut):
    m = powercut.mount
    _write(m / "log", b"A" * 100, sync=True)
    _write(m / "log", b"B" * 50, sync=False, mode=os.O_WRONLY | os.O_APPEND)        # grows the file, not synced
    _write(m / "log", b"xy", sync=False, at=10)                                      # overwrites synced bytes
    _write(m / "new", b"never synced", sync=False)                                   # a new file's data
    _write(m / "sparse", b"\0", sync=True, at=64 * 1024 * 1024 - 1)                  # preallocated, as FileTxnLog
    _write(m / "sparse", b"rec", sync=False, at=16)
    _write(m / "epoch.tmp", b"7", sync=True)                                         # AtomicFileOutputStream
    os.rename(m / "epoch.tmp", m / "epoch")
    os.truncate(m / "log", 20)                                                       # a TRUNC, not synced
    assert (m / "log").read_bytes() == b"A" * 10 + b"xy" + b"A" * 8
    powercut.cut()
    assert (m / "log").read_bytes() == b"A" * 100
    assert (m / "new").read_bytes() == b""                                           # created (metadata), data gone
    assert (m / "sparse").stat().st_size == 64 * 1024 * 1024 and (m / "sparse").read_bytes()[:20] == bytes(20)
    assert (m / "epoch").read_bytes() == b"7" and not (m / "epoch.tmp").exists()
    # after the cut the file system goes on: a new write, synced, survives the next cut
    _write(m / "log", b"C", sync=True, mode=os.O_WRONLY | os.O_APPEND)
    powercut.cut()
    assert (m / "log").read_bytes() == b"A" * 100 + b"C"
    # what the mount shows is the backing directory's, file by file
    assert (powercut.backing / "log").read_bytes() == b"A" * 100 + b"C"


def test_the_writeback_delay_keeps_old_unsynced_writes(tmp_path):
    m = PowerCutMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fs.log", writeback=2.0)
    m.start()
    try:
        _write(m.mount / "f", b"old", sync=False)
        time.sleep(2.5)  # the young write below is cut at once: 2 s of margin for a loaded machine
        _write(m.mount / "f", b"new", sync=False, mode=os.O_WRONLY | os.O_APPEND)
        m.cut()
        assert (m.mount / "f").read_bytes() == b"old"  # written back before the cut; the young write is gone
    finally:
        m.stop()


def test_a_mount_that_cannot_start_says_why(tmp_path):
    (tmp_path / "mnt").write_text("a file, not a folder")
    m = PowerCutMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fs.log")
    with pytest.raises(RuntimeError, match="cannot mount on .*mnt: .*mnt is not a directory"):
        m.start()
    assert m.proc is None


@pytest.mark.slow
@pytest.mark.parametrize("force_sync", [True, False])
def test_every_server_losing_power_loses_acknowledged_writes_only_without_fsync(tmp_path, force_sync):
    """The check of the check (rule 3): three servers on power-cut file systems, cut together under load. With
    forceSync=yes a quorum fsynced every acknowledged write first: nothing is lost. With forceSync=no ZooKeeper
    acknowledged writes that were only in the page cache: the cut takes them, and the history check says so."""
    from conformance.faults.zkrun import run_zk_faults  # noqa: PLC0415
    from conformance.zk.schedule import parse_schedule  # noqa: PLC0415

    steps = parse_schedule(
        [{"op": "writes", "count": 50}, {"op": "sleep", "seconds": 3}, {"op": "writes", "count": 100}]
        + [{"op": "kill", "server": s} for s in (1, 2, 3)]
        + [{"op": "restart", "server": s, "wait": False} for s in (1, 2, 3)]
        + [{"op": "settle"}, {"op": "writes", "count": 20}], 3)
    r = run_zk_faults(tmp_path / "run", "3.8.0", 3, 1, schedule=steps, power_loss=True, writeback=2.0,
                      force_sync=force_sync, calm=0.5, sample=False, echo=lambda _: None)
    assert not r.problems, r.problems
    if force_sync:
        assert r.ok, r.summary()
    else:
        assert "lost" in r.caught_by and r.verdict.lost >= 50, r.summary()
        assert "missing at servers [1, 2, 3]" in r.verdict.examples[0]
