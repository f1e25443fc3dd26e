"""Every step kind, crashed at every write and fsync boundary (CrashMonkey's method), on both power-loss disks.

The property (issue 12, "crashes where they hurt"): whatever the crash point, recovery gives exactly the state after
some prefix of the steps -- never half a step (a NEWLEADER whose history changed but currentEpoch did not, or the
reverse) -- and never less than what the last completed `sync` made durable. Before each cut, `read_durable` must
already show what recovery will give (a missing fsync shows without crashing). Step kinds: tests/storage_steps.py.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from storage_steps import BASE, BASE_STEPS, STEP_GROUPS, states

from zabref.storage import CrashPoint, PowerCut, PowerLossDisk, SimDisk, Storage, read_durable

HERE = Path(__file__).resolve().parent


class Rig:
    """One data directory on a fresh disk of the given kind, brought to BASE."""

    def __init__(self, kind: str, root: Path, n: int, compact_min: int = 1 << 20) -> None:
        self.kind = kind
        self.compact_min = compact_min
        self.dir = str(root / f"d{n}") if kind == "powerloss" else f"/sim/d{n}"
        if kind == "powerloss":
            Path(self.dir).mkdir()
            self.disk = PowerLossDisk(on_cut="raise")
        else:
            self.disk = SimDisk()
            self.disk.mkdir(self.dir)
        self.storage, _ = Storage.open(self.dir, disk=self.disk, compact_min_bytes=self.compact_min)
        for step in BASE_STEPS:
            self.storage.apply(step)
        self.storage.sync()
        assert self.storage.persistent() == BASE

    def run(self, group, crash_at: CrashPoint | None) -> list[int]:
        """Apply the group's steps and sync; returns the byte offsets where each step's batch ends in the write."""
        self.disk.arm(crash_at)
        ends = []
        for step in group:
            self.storage.apply(step)
            ends.append(len(self.storage._pending))
        self.storage.sync()
        return ends

    def durable(self):
        return read_durable(self.dir, self.disk).persistent()

    def recovered(self):
        self.storage.close()
        disk = PowerLossDisk(on_cut="raise") if self.kind == "powerloss" else self.disk
        storage, _ = Storage.open(self.dir, disk=disk, compact_min_bytes=self.compact_min)
        with storage:
            return storage.persistent()


def crash_points(counts) -> list[CrashPoint]:
    points = [CrashPoint("fsync", k) for k in range(1, counts.fsyncs + 1)]
    for k, size in enumerate(counts.write_sizes, 1):
        points.extend(CrashPoint("write", k, t) for t in range(size + 1))
    return points


def check_every_crash_point(kind: str, name: str, root: Path, compact_min: int = 1 << 20) -> bool:
    """Crash the group at every point; returns whether its sync compacted."""
    group = STEP_GROUPS[name]
    expected = states(group)
    clean = Rig(kind, root, 0, compact_min)
    ends = clean.run(group, None)
    counts = clean.disk.counts
    compacted = clean.storage.stats.compactions > 0
    assert clean.durable() == clean.recovered() == expected[-1]
    points = crash_points(counts)
    assert counts.fsyncs >= 1 and counts.writes >= 1
    n = itertools.count(1)
    for cp in points:
        rig = Rig(kind, root, next(n), compact_min)
        with pytest.raises(PowerCut):
            rig.run(group, cp)
        durable, recovered = rig.durable(), rig.recovered()
        assert durable == recovered, f"{name} {cp}: read_durable disagrees with recovery"
        assert recovered in expected, f"{name} {cp}: recovery gave a state that no prefix of the steps gives"
        if cp.kind == "fsync" or compacted:
            # the cut comes before the fsync that makes the group durable: nothing of it may survive
            assert recovered == BASE, f"{name} {cp}: a step survived an fsync that never happened"
        elif len(counts.write_sizes) == 1:
            # one write holding every batch: exactly the batches wholly inside the surviving prefix
            # (a compaction's write goes to a temp file that no durable name reaches before the rename)
            whole = sum(1 for end in ends if end <= cp.tear)
            assert recovered == expected[whole], f"{name} {cp}: expected the state after {whole} steps"
    return compacted


@pytest.mark.parametrize("kind", ["sim", "powerloss"])
@pytest.mark.parametrize("name", sorted(STEP_GROUPS))
def test_every_crash_point_recovers_a_whole_step(kind, name, tmp_path):
    compacted = check_every_crash_point(kind, name, tmp_path)
    assert compacted == (name == "newleader_snap")  # a SNAP rewrites the file; nothing else reaches the threshold


@pytest.mark.parametrize("kind", ["sim", "powerloss"])
def test_every_crash_point_of_a_compaction(kind, tmp_path):
    """The group's truncation leaves dead bytes above the (tiny) threshold: its sync rewrites the file."""
    assert check_every_crash_point(kind, "group", tmp_path, compact_min=64)


@pytest.mark.parametrize("kind", ["sim", "powerloss"])
def test_a_completed_sync_survives_every_later_crash(kind, tmp_path):
    rig = Rig(kind, tmp_path, 0)
    group = STEP_GROUPS["group"]
    rig.run(group[:2], None)
    synced = states(group)[2]
    assert rig.durable() == synced
    for step in group[2:]:  # applied, not synced: lost by a plain cut
        rig.storage.apply(step)
    assert rig.durable() == synced
    rig.disk.crash()
    assert rig.recovered() == synced


@pytest.mark.parametrize("kind", ["sim", "powerloss"])
def test_a_step_is_not_durable_before_sync(kind, tmp_path):
    rig = Rig(kind, tmp_path, 0)
    for step in STEP_GROUPS["newleader_trunc"]:
        rig.storage.apply(step)
    assert rig.storage.persistent() != BASE
    assert rig.durable() == BASE
    rig.storage.sync()
    assert rig.durable() == rig.storage.persistent() == states(STEP_GROUPS["newleader_trunc"])[-1]


def child(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / "storage_child.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "ZABREF_DISK": "powerloss", **env}, timeout=60)


@pytest.mark.slow  # about 50 processes
@pytest.mark.parametrize("name", ["newleader_trunc", "group"])
def test_a_server_process_killed_at_its_crash_points_recovers_a_whole_step(tmp_path, name):
    """The same property across a real SIGKILL: a child process (zabref.storage.disk_from_env, as a server) is
    killed by its own crash point -- every fsync, and a write torn at each batch boundary and inside batches."""
    group = STEP_GROUPS[name]
    expected = states(group)
    probe = Rig("sim", tmp_path, 0)
    ends = probe.run(group, None)
    points = [f"fsync:{k}" for k in range(1, probe.disk.counts.fsyncs + 1)]
    tears = sorted({0, 1, *ends, *(e - 1 for e in ends), ends[-1] // 2})
    points += [f"write:1:{t}" for t in tears]
    for n, point in enumerate(points):
        d = tmp_path / f"p{n}"
        d.mkdir()
        assert child("setup", str(d)).returncode == 0
        run = child("step", str(d), name, ZABREF_CRASH_AT=point)
        assert run.returncode == -signal.SIGKILL and run.stdout == "", (point, run.stderr)
        durable = read_durable(d).persistent()  # plain reads: the real files are the durable state
        storage, _ = Storage.open(d, disk=PowerLossDisk())
        with storage:
            assert storage.persistent() == durable, point
        whole = 0 if point.startswith("fsync") else sum(1 for e in ends if e <= int(point.split(":")[2]))
        assert durable == expected[whole], point
    d = tmp_path / "clean"
    d.mkdir()
    assert child("setup", str(d)).returncode == 0
    assert child("step", str(d), name).stdout == "done\n"
    assert read_durable(d).persistent() == expected[-1]


def test_unsynced_steps_die_with_the_server_process(tmp_path):
    assert child("setup", str(tmp_path)).returncode == 0
    p = subprocess.Popen([sys.executable, str(HERE / "storage_child.py"), "hold", str(tmp_path), "group"],
                         stdout=subprocess.PIPE, text=True, env={**os.environ, "ZABREF_DISK": "powerloss"})
    try:
        assert p.stdout.readline() == "ready\n"
    finally:
        p.kill()
        p.wait(10)
    assert read_durable(tmp_path).persistent() == BASE
