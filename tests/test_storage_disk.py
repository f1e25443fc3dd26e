"""The disks of zabref/storage: the power-loss model (zabref/storage/simdisk.py's docstring), on SimDisk and on
PowerLossDisk (in-process cuts, a real SIGKILL of a child process, the crash-point environment variables), the
pass-through RealDisk, and the one atomic-write helper crashed at every boundary.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zabref.errors import ConfigError, StorageError
from zabref.storage import (
    CrashPoint,
    PowerCut,
    PowerLossDisk,
    RealDisk,
    SimDisk,
    atomic_write,
    disk_from_env,
    recover,
)
from zabref.storage.atomic import staged_folder, write_file
from zabref.storage.disk import MIRROR_TEMP_PREFIX

HERE = Path(__file__).resolve().parent


class Machine:
    """A data directory on one disk kind, with a way to cut the power and get the disk the next boot sees."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        if kind == "sim":
            self.disk = SimDisk()
            self.dir = "/data"
            self.disk.mkdir(self.dir)
        else:
            self.disk = PowerLossDisk(on_cut="raise")
            self.dir = str(root)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def crash(self, tear: int | None = None) -> None:
        self.disk.crash(tear)
        if self.kind == "powerloss":
            self.disk = PowerLossDisk(on_cut="raise")  # a new process

    def files(self) -> dict[str, bytes]:
        names = [n for n in self.disk.listdir(self.dir) if n != "LOCK"]
        return {n: self.disk.read(self.path(n)) for n in names}

    def durable_files(self) -> dict[str, bytes]:
        names = [n for n in self.disk.listdir_durable(self.dir) if n != "LOCK"]
        return {n: self.disk.read_durable(self.path(n)) for n in names}


@pytest.fixture(params=["sim", "powerloss"])
def m(request, tmp_path) -> Machine:
    return Machine(request.param, tmp_path)


def durable_file(m: Machine, name: str, data: bytes) -> None:
    f = m.disk.create(m.path(name))
    m.disk.write(f, data)
    m.disk.fsync(f)
    m.disk.close(f)
    m.disk.fsync_dir(m.dir)


# ------------------------------------------------------------------------------------------------- the model


def test_unsynced_data_is_lost_synced_data_survives(m):
    durable_file(m, "f", b"one")
    f = m.disk.open_append(m.path("f"))
    m.disk.write(f, b" two")
    assert m.files() == {"f": b"one two"} and m.durable_files() == {"f": b"one"}
    m.crash()
    assert m.files() == {"f": b"one"}


def test_a_new_name_needs_the_directory_fsync(m):
    f = m.disk.create(m.path("f"))
    m.disk.write(f, b"data")
    m.disk.fsync(f)  # the data is durable, its name is not
    assert m.durable_files() == {}
    m.crash()
    assert m.files() == {}


def test_a_durable_name_without_fsynced_data_is_empty(m):
    f = m.disk.create(m.path("f"))
    m.disk.write(f, b"data")
    m.disk.fsync_dir(m.dir)
    m.crash()
    assert m.files() == {"f": b""}


def test_a_rename_without_the_directory_fsync_is_undone(m):
    durable_file(m, "target", b"old")
    f = m.disk.create(m.path("tmp"))
    m.disk.write(f, b"new")
    m.disk.fsync(f)
    m.disk.rename(m.path("tmp"), m.path("target"))
    assert m.files() == {"target": b"new"} and m.durable_files() == {"target": b"old"}
    m.crash()
    assert m.files() == {"target": b"old"}


def test_a_rename_with_the_directory_fsync_survives(m):
    durable_file(m, "target", b"old")
    durable_file(m, "tmp", b"new")
    m.disk.rename(m.path("tmp"), m.path("target"))
    m.disk.fsync_dir(m.dir)
    m.crash()
    assert m.files() == {"target": b"new"}


def test_an_unlink_without_the_directory_fsync_is_undone(m):
    durable_file(m, "f", b"kept")
    m.disk.unlink(m.path("f"))
    assert m.files() == {}
    m.crash()
    assert m.files() == {"f": b"kept"}


def test_a_truncation_is_durable_only_after_fsync(m):
    durable_file(m, "f", b"abcdef")
    f = m.disk.open_append(m.path("f"))
    m.disk.truncate(f, 2)
    m.disk.write(f, b"XY")
    assert m.files() == {"f": b"abXY"}
    m.crash()
    assert m.files() == {"f": b"abcdef"}
    f = m.disk.open_append(m.path("f"))
    m.disk.truncate(f, 2)
    m.disk.fsync(f)
    m.crash()
    assert m.files() == {"f": b"ab"}


@pytest.mark.parametrize("tear", range(0, 8))
def test_a_torn_write_keeps_a_prefix_of_the_last_write(m, tear):
    durable_file(m, "f", b"base")
    durable_file(m, "g", b"other")
    f = m.disk.open_append(m.path("f"))
    g = m.disk.open_append(m.path("g"))
    m.disk.write(f, b"-first")  # an earlier unsynced write of the same file: written back before the torn one
    m.disk.write(g, b"lost")  # another file's unsynced write: lost
    m.disk.write(f, b"1234567")
    m.crash(tear)
    assert m.files() == {"f": b"base-first" + b"1234567"[:tear], "g": b"other"}


def test_a_reservation_is_zeros_durable_only_after_fsync(m):
    durable_file(m, "f", b"log")
    for synced in (False, True):
        f = m.disk.open_write(m.path("f"))
        writes = m.disk.counts.writes
        m.disk.reserve(f, 8)
        m.disk.reserve(f, 5)  # never shorter
        assert m.disk.counts.writes == writes  # a reservation is not a write: crash points do not count it
        assert m.files() == {"f": b"log" + bytes(5)} and m.durable_files() == {"f": b"log"}
        if synced:
            m.disk.fsync(f)
        m.crash()
        assert m.files() == {"f": b"log" + bytes(5) if synced else b"log"}


@pytest.mark.parametrize("tear", range(0, 8))
def test_a_torn_write_into_reserved_space_keeps_the_space(m, tear):
    """A write at an offset inside the file, torn: its prefix over the durable zeros, the file as long as before
    (a torn append and a torn overwrite are the same rule: the bytes it reached, nothing else changed)."""
    durable_file(m, "f", b"head")
    f = m.disk.open_write(m.path("f"))
    m.disk.reserve(f, 16)
    m.disk.fsync(f)
    m.disk.write_at(f, 4, b"abc")  # an earlier unsynced write of the same file: written back first
    m.disk.write_at(f, 7, b"1234567")
    m.crash(tear)
    assert m.files() == {"f": b"head" + b"abc" + b"1234567"[:tear] + bytes(16 - 7 - tear)}


@pytest.mark.parametrize("tear", range(0, 4))
def test_a_torn_write_over_unsynced_changes_keeps_them_as_they_were(m, tear):
    """Changes not synced before the torn write are kept as they were when made, not as later writes left their
    bytes: the reservation's zeros under the log's next batch, an earlier write under a later one."""
    durable_file(m, "f", b"head")
    f = m.disk.open_write(m.path("f"))
    m.disk.reserve(f, 12)  # not synced: zeros at 4..12
    m.disk.write_at(f, 4, b"abc")
    m.disk.write_at(f, 4, b"XYZ")  # over the earlier write, and torn
    m.crash(tear)
    assert m.files() == {"f": b"head" + b"XYZ"[:tear] + b"abc"[tear:] + bytes(5)}


def test_a_write_at_may_not_leave_a_hole(m):
    durable_file(m, "f", b"abc")
    f = m.disk.open_write(m.path("f"))
    m.disk.write_at(f, 3, b"d")  # at the end: fine
    with pytest.raises(OSError) as e:
        m.disk.write_at(f, 5, b"x")
    assert e.value.errno == errno.EINVAL and m.files() == {"f": b"abcd"}


def test_the_real_disk_reserves_and_writes_in_place(tmp_path):
    disk = RealDisk()
    path = tmp_path / "f"
    path.write_bytes(b"head")
    f = disk.open_write(path)
    disk.reserve(f, 64)
    disk.write_at(f, 4, b"abc")
    disk.write_at(f, 2, b"XY")  # over what is there: not an append
    disk.fsync(f)
    disk.close(f)
    assert path.read_bytes() == b"heXYabc" + bytes(57) and disk.counts.writes == 2


def test_after_a_cut_old_handles_and_locks_are_dead(m):
    durable_file(m, "f", b"x")
    f = m.disk.open_append(m.path("f"))
    m.disk.lock(m.dir)
    with pytest.raises(StorageError, match="in use"):
        m.disk.lock(m.dir)
    m.crash()
    with pytest.raises(OSError) as e:
        m.disk.write(f, b"y")
        m.disk.fsync(f)
    assert e.value.errno == errno.EBADF
    m.disk.lock(m.dir).release()


def test_errors_are_the_operating_systems(m):
    durable_file(m, "f", b"x")
    with pytest.raises(FileExistsError):
        m.disk.create(m.path("f"))
    with pytest.raises(FileNotFoundError):
        m.disk.open_append(m.path("nope"))
    with pytest.raises(FileNotFoundError):
        m.disk.rename(m.path("nope"), m.path("f"))
    with pytest.raises(FileNotFoundError):
        m.disk.unlink(m.path("nope"))
    with pytest.raises(FileNotFoundError):
        m.disk.listdir(m.path("nodir"))
    f = m.disk.open_append(m.path("f"))
    m.disk.close(f)
    with pytest.raises(OSError, match="closed"):
        m.disk.write(f, b"y")


def test_simdisk_counts_the_time_of_its_fsyncs():
    disk = SimDisk(fsync_delay=0.004)
    disk.mkdir("/d")
    f = disk.create("/d/f")
    disk.fsync(f)
    disk.fsync_dir("/d")
    assert disk.take_delay() == pytest.approx(0.008) and disk.take_delay() == 0.0
    assert (disk.counts.fsyncs, disk.counts.writes) == (2, 0)


# ------------------------------------------------------------------------------------------------- PowerLossDisk


def test_powerloss_real_files_are_the_durable_state(tmp_path):
    disk = PowerLossDisk(on_cut="raise")
    m = Machine("powerloss", tmp_path)
    m.disk = disk
    durable_file(m, "f", b"one")
    f = disk.open_append(m.path("f"))
    disk.write(f, b" two")
    g = disk.create(m.path("g"))
    assert (tmp_path / "f").read_bytes() == b"one" and not (tmp_path / "g").exists()
    disk.fsync(f)
    assert (tmp_path / "f").read_bytes() == b"one two"
    disk.fsync(g)
    disk.fsync_dir(tmp_path)
    assert (tmp_path / "g").read_bytes() == b""


def test_powerloss_recover_removes_what_an_interrupted_replace_left(tmp_path):
    (tmp_path / "f").write_bytes(b"durable")
    (tmp_path / f"{MIRROR_TEMP_PREFIX}f.tmp").write_bytes(b"half")
    assert recover(tmp_path) == (str(tmp_path / f"{MIRROR_TEMP_PREFIX}f.tmp"),)
    assert sorted(os.listdir(tmp_path)) == ["f"]


OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from("abc")),
    st.tuples(st.just("write"), st.sampled_from("abc"), st.binary(min_size=0, max_size=5)),
    st.tuples(st.just("fsync"), st.sampled_from("abc")),
    st.tuples(st.just("truncate"), st.sampled_from("abc"), st.integers(0, 6)),
    st.tuples(st.just("write_at"), st.sampled_from("abc"), st.integers(0, 8), st.binary(min_size=0, max_size=5)),
    st.tuples(st.just("reserve"), st.sampled_from("abc"), st.integers(0, 12)),
    st.tuples(st.just("rename"), st.sampled_from("abc"), st.sampled_from("abc")),
    st.tuples(st.just("unlink"), st.sampled_from("abc")),
    st.tuples(st.just("fsync_dir")),
    st.tuples(st.just("crash"), st.none() | st.integers(0, 6)),
)


def _do(m: Machine, handles: dict, op) -> str:
    name, *args = op
    try:
        if name == "create":
            handles[args[0]] = m.disk.create(m.path(args[0]))
        elif name in ("write_at", "reserve"):
            f = m.disk.open_write(m.path(args[0]))
            if name == "write_at":
                m.disk.write_at(f, args[1], args[2])
            else:
                m.disk.reserve(f, args[1])
        elif name in ("write", "fsync", "truncate"):
            f = m.disk.open_append(m.path(args[0]))
            if name == "write":
                m.disk.write(f, args[1])
            elif name == "fsync":
                m.disk.fsync(f)
            else:
                m.disk.truncate(f, args[1])
        elif name == "rename":
            m.disk.rename(m.path(args[0]), m.path(args[1]))
        elif name == "unlink":
            m.disk.unlink(m.path(args[0]))
        elif name == "fsync_dir":
            m.disk.fsync_dir(m.dir)
        else:
            m.crash(args[0])
    except OSError as e:
        return type(e).__name__
    return "ok"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=25))
def test_powerloss_disk_behaves_as_the_simulated_one(ops):
    """SimDisk is the model; PowerLossDisk must agree with it after every operation, and its real directory must
    hold exactly the model's durable state."""
    with tempfile.TemporaryDirectory() as root:
        sim, real = Machine("sim", Path(root)), Machine("powerloss", Path(root))
        for op in ops:
            assert _do(sim, {}, op) == _do(real, {}, op), op
            assert sim.files() == real.files(), op
            assert sim.durable_files() == real.durable_files(), op
            on_disk = {n: (Path(root) / n).read_bytes() for n in os.listdir(root)}
            assert on_disk == sim.durable_files(), op


# ------------------------------------------------------------------------------------------------- real processes


def child(*args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE / "storage_child.py"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, **env}, text=True)


@pytest.mark.parametrize(("disk", "survives"), [("powerloss", b"durable"), ("real", b"durable volatile")])
def test_sigkill_loses_what_a_power_cut_loses_only_on_the_powerloss_disk(tmp_path, disk, survives):
    p = child("disk", str(tmp_path), ZABREF_DISK=disk)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(10)
    assert (tmp_path / "file").read_bytes() == survives
    # the page cache keeps the created file on a real disk; a power cut would not (its name was never fsynced)
    assert (tmp_path / "new").exists() == (disk == "real")


@pytest.mark.parametrize(("crash_at", "left"), [
    ("fsync:2", {}),  # fsync 2 is the directory's: the name "file" never became durable
    ("fsync:3", {"file": b"durable"}),  # before the fsync of "new": " volatile" was never fsynced
    ("write:2:4", {"file": b"durable vol"}),  # the second write, torn after 4 bytes
])
def test_a_crash_point_kills_the_process_there(tmp_path, crash_at, left):
    p = child("disk", str(tmp_path), ZABREF_DISK="powerloss", ZABREF_CRASH_AT=crash_at)
    out, err = p.communicate(timeout=30)
    assert p.returncode == -signal.SIGKILL, err
    assert out == ""  # it never reached "ready"
    assert {n: (tmp_path / n).read_bytes() for n in os.listdir(tmp_path)} == left


def test_disk_from_env():
    assert type(disk_from_env({})) is RealDisk
    d = disk_from_env({"ZABREF_DISK": "powerloss", "ZABREF_CRASH_AT": "write:3:7"})
    assert type(d) is PowerLossDisk and d.crash_at == CrashPoint("write", 3, 7) and d.on_cut == "kill"
    with pytest.raises(ConfigError, match="ZABREF_DISK='ssd'"):
        disk_from_env({"ZABREF_DISK": "ssd"})
    with pytest.raises(ConfigError, match="ZABREF_CRASH_AT: crash point 'fsync': expected 'fsync:K' or 'write:K:T'"):
        disk_from_env({"ZABREF_CRASH_AT": "fsync"})


@pytest.mark.parametrize("text", ["fsync:0", "write:1", "write:1:-1", "sync:1", "fsync:x"])
def test_bad_crash_points_are_named(text):
    with pytest.raises(ValueError, match="crash point"):
        CrashPoint.parse(text)


def test_crash_point_round_trip():
    for text in ("fsync:4", "write:2:0", "write:1:99"):
        assert str(CrashPoint.parse(text)) == text


# ------------------------------------------------------------------------------------------------- atomic write


@pytest.mark.parametrize("kind", ["sim", "powerloss"])
def test_atomic_write_at_every_crash_point_leaves_old_or_new(kind, tmp_path):
    def machine(n: object) -> Machine:
        root = tmp_path / f"m{n}"
        root.mkdir()
        m = Machine(kind, root)
        durable_file(m, "f", b"old content")
        m.disk.arm(None)
        return m

    probe = machine("probe")
    atomic_write(probe.disk, probe.path("f"), b"new content")
    assert (probe.disk.counts.writes, probe.disk.counts.fsyncs) == (1, 2)
    probe.crash()
    assert probe.files() == {"f": b"new content"}
    points = [CrashPoint("fsync", k) for k in (1, 2)] + [CrashPoint("write", 1, t) for t in range(12)]
    for n, cp in enumerate(points):
        m = machine(n)
        m.disk.arm(cp)
        with pytest.raises(PowerCut):
            atomic_write(m.disk, m.path("f"), b"new content")
        m.crash()
        assert m.files() == {"f": b"old content"}, cp


def test_atomic_write_names_the_file_on_failure(tmp_path):
    with pytest.raises(StorageError, match=str(tmp_path / "nodir" / "f")):
        atomic_write(RealDisk(), tmp_path / "nodir" / "f", b"x")


def test_write_file_replaces_creates_the_folder_and_leaves_no_temp(tmp_path):
    target = tmp_path / "new" / "out.json"
    assert write_file(target, "first") == target
    write_file(target, b"second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_staged_folder_replaces_the_folder_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out" / "report"
    with staged_folder(target) as tmp:
        (tmp / "a.txt").write_text("first")
    assert [p.name for p in target.iterdir()] == ["a.txt"]
    with pytest.raises(RuntimeError):
        with staged_folder(target) as tmp:
            (tmp / "b.txt").write_text("half")
            raise RuntimeError("the writer failed")
    assert [p.name for p in target.iterdir()] == ["a.txt"]  # untouched: the failed run left nothing
    with staged_folder(target) as tmp:
        (tmp / "c.txt").write_text("second")
    assert [p.name for p in target.iterdir()] == ["c.txt"]  # replaced whole, not merged
    assert [p.name for p in target.parent.iterdir()] == ["report"]  # no temp or old folder left


def test_write_file_failing_keeps_the_old_content_and_removes_its_temp(tmp_path, monkeypatch):
    """A rename that fails (here: refused by the disk) leaves the old file and no temp file of this process."""
    target = tmp_path / "out.json"
    write_file(target, "old")

    def refuse(self, src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RealDisk, "_rename", refuse)
    with pytest.raises(StorageError, match=f"{target}: cannot replace atomically: No space left on device"):
        write_file(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_write_file_uses_a_temp_name_of_its_process(tmp_path):
    """Another process's temp file of the same path (mid-write) is neither reused nor removed."""
    target = tmp_path / "out.json"
    theirs = tmp_path / ".out.json.999999999.tmp"
    theirs.write_text("half")
    write_file(target, "mine")
    assert theirs.read_text() == "half" and target.read_text() == "mine"


def test_realdisk_passes_through(tmp_path):
    disk = RealDisk()
    f = disk.create(tmp_path / "f")
    disk.write(f, b"abc")
    disk.truncate(f, 2)
    disk.fsync(f)
    disk.close(f)
    disk.fsync_dir(tmp_path)
    disk.rename(tmp_path / "f", tmp_path / "g")
    assert disk.read(tmp_path / "g") == disk.read_durable(tmp_path / "g") == b"ab"
    assert disk.listdir(tmp_path) == ["g"]
    disk.unlink(tmp_path / "g")
    assert disk.recover(tmp_path) == ()
    lock = disk.lock(tmp_path)
    with pytest.raises(StorageError, match="in use"):
        disk.lock(tmp_path)
    lock.release()
    assert (disk.counts.writes, disk.counts.fsyncs, disk.counts.bytes_written) == (1, 2, 3)
