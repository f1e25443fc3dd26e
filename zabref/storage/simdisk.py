"""The power-loss model (`ModelDisk`) and `SimDisk`, a disk that lives in memory for a deterministic simulation.

Theory of operation
-------------------
The model is Jepsen's LazyFS made small. A file is an *inode* with two contents: ``data``, what this process sees,
and ``durable``, what the disk holds -- ``durable`` catches up with ``data`` only at `Disk.fsync` of that file. A
directory maps names to inodes twice as well: ``current`` (what `listdir` and `read` see) and ``durable`` --
creations, renames and unlinks reach ``durable`` only at `Disk.fsync_dir` of that directory (POSIX's strict reading,
which ext4 with ``data=ordered`` is kinder than; we model the strict one). A power cut (`ModelDisk.crash`) keeps, of
every directory, its durable names, and of every inode its durable content; an inode no durable name reaches is gone.
Handles and locks opened before the cut are dead (their calls fail with EBADF).

Torn writes. ``crash(tear=t)`` keeps in addition the first ``t`` bytes of the last unsynced write (and the unsynced
writes, reservations and truncations of that same file before it, each as it was made, though a later write covered
its bytes: the page cache wrote the file back in order and power failed during the last one). That is the outcome LazyFS's "torn-op" fault produces and the one a log's recovery must
survive; with t = 0 it is the plain cut.

What the model does not do: reorder writes inside a file or across files beyond the rule above, tear a write at
anything but a byte prefix (no lost middle sector, no sector-sized granularity), corrupt bits (rot is tested apart,
by flipping bytes in files), lose a directory itself (directories are created durably), hard links, or fail a call
(ENOSPC, EIO: those faults are tested on real disks, tests/test_disk_faults.py).

`SimDisk` holds everything in memory, has no clock and no threads: for the simulator it adds `SimDisk.fsync_delay`
(seconds each fsync would take), summed in `SimDisk.pending_delay` for the simulator to read and reset with
`SimDisk.take_delay`, and in `SimDisk.busy_s`, which only grows (`conformance.sim` times syncs by it). One SimDisk is
one machine's disk: crash it when that machine loses power.
"""

from __future__ import annotations

import errno
import itertools
import os
from dataclasses import dataclass, field
from typing import cast

from zabref.errors import StorageError
from zabref.storage.disk import CrashPoint, Disk, DiskFile, DiskLock, OnCut

__all__ = ["ModelDisk", "SimDisk"]


@dataclass(eq=False)
class _Inode:
    data: bytearray = field(default_factory=bytearray)
    durable: bytearray = field(default_factory=bytearray)
    # unsynced changes since the last fsync, in order: ("w", offset, length, the bytes written), ("z", offset,
    # length, None) -- a reservation's zeros --, or ("t", size, 0, None). A write's bytes are kept because a later
    # write may cover them (the log's batches cover its reserved zeros): a torn outcome takes each change as it was
    ops: list[tuple[str, int, int, bytes | None]] = field(default_factory=list)


_GENERATIONS = itertools.count(1)


def _split(path: str) -> tuple[str, str]:
    head, name = os.path.split(os.path.normpath(path))
    if not name or name in (".", ".."):
        raise OSError(errno.EINVAL, "not a file name", path)
    return head or ".", name


class ModelDisk(Disk):
    """Files with the power-loss model of the module docstring. Subclasses say where durable state is kept: the
    ``_backing_*`` methods give files the model has not touched yet, the ``_durable_*`` hooks hear of new durable
    state (`SimDisk` has no backing; `zabref.storage.powerloss.PowerLossDisk` backs it with real files)."""

    def __init__(self, *, crash_at: CrashPoint | None = None, on_cut: OnCut = "raise") -> None:
        super().__init__(crash_at=crash_at, on_cut=on_cut)
        self._reset()

    def _reset(self) -> None:
        self._generation = next(_GENERATIONS)  # unique across disks: a handle never outlives its power cycle
        # directory -> name -> inode (None: absent). Only names the model touched; others are the backing's.
        self._current: dict[str, dict[str, _Inode | None]] = {}
        self._durable: dict[str, dict[str, _Inode | None]] = {}
        self._last_write: _Inode | None = None
        self._locks: dict[str, DiskLock] = {}

    # ------------------------------------------------------------------------------------------ backing (overridden)

    def _backing_dir(self, directory: str) -> bool:
        return False

    def _backing_names(self, directory: str) -> list[str]:
        return []

    def _backing_read(self, directory: str, name: str) -> bytes | None:
        return None

    def _durable_file(self, inode: _Inode, old_len: int, ranges: list[tuple[int, int]] | None) -> None:
        """``inode``'s durable content changed (fsync) from ``old_len`` bytes: only in ``ranges`` (offset, length),
        each starting at most at the content's length at that point, if given; else anywhere (a truncation)."""

    def _durable_names(self, directory: str, changes: list[tuple[str, _Inode | None]]) -> None:
        """These names of ``directory`` became durable (fsync_dir): (name, inode or None for absent)."""

    # ------------------------------------------------------------------------------------------ lookups

    def _dir(self, directory: str) -> dict[str, _Inode | None]:
        cur = self._current.get(directory)
        if cur is None:
            if not self._backing_dir(directory):
                raise FileNotFoundError(errno.ENOENT, "no such directory", directory)
            cur = self._current[directory] = {}
            self._durable[directory] = {}
        return cur

    def _touch(self, directory: str, name: str) -> _Inode | None:
        """The inode ``name`` refers to now, loading it from the backing on first use."""
        cur = self._dir(directory)
        if name not in cur:
            raw = self._backing_read(directory, name)
            inode: _Inode | None = None if raw is None else _Inode(bytearray(raw), bytearray(raw))
            cur[name] = self._durable[directory][name] = inode
        return cur[name]

    def _lookup(self, path: str) -> _Inode:
        inode = self._touch(*_split(path))
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        return inode

    def _inode(self, f: DiskFile) -> _Inode:
        inode, generation = cast(tuple[_Inode, int], f.handle)
        if generation != self._generation:
            raise OSError(errno.EBADF, "the disk lost power since this file was opened", f.path)
        return inode

    def _durable_paths(self, inode: _Inode) -> list[str]:
        return [os.path.join(d, n) for d, names in self._durable.items() for n, i in names.items() if i is inode]

    # ------------------------------------------------------------------------------------------ Disk

    def _create(self, path: str) -> DiskFile:
        directory, name = _split(path)
        if self._touch(directory, name) is not None:
            raise FileExistsError(errno.EEXIST, "file exists", path)
        inode = _Inode()
        self._current[directory][name] = inode
        return DiskFile(path, (inode, self._generation))

    def _open_append(self, path: str) -> DiskFile:
        return DiskFile(path, (self._lookup(path), self._generation))

    _open_write = _open_append  # the model keeps no file position: a handle is its inode either way

    def _reserve(self, f: DiskFile, size: int) -> None:
        inode = self._inode(f)
        if size > len(inode.data):  # zeros, held as any unsynced change (not the last write: a cut does not tear it)
            inode.ops.append(("z", len(inode.data), size - len(inode.data), None))
            inode.data += bytes(size - len(inode.data))

    def _write(self, f: DiskFile, data: bytes) -> None:
        self._write_at(f, len(self._inode(f).data), data)

    def _write_at(self, f: DiskFile, offset: int, data: bytes) -> None:
        inode = self._inode(f)
        if not 0 <= offset <= len(inode.data):
            raise OSError(errno.EINVAL, f"write at byte {offset}: the file has {len(inode.data)}", f.path)
        inode.ops.append(("w", offset, len(data), bytes(data)))
        inode.data[offset : offset + len(data)] = data
        self._last_write = inode

    def _truncate(self, f: DiskFile, size: int) -> None:
        inode = self._inode(f)
        if not 0 <= size <= len(inode.data):
            raise OSError(errno.EINVAL, f"truncate to {size} bytes: the file has {len(inode.data)}", f.path)
        inode.ops.append(("t", size, 0, None))
        del inode.data[size:]

    def _fsync(self, f: DiskFile) -> None:
        inode = self._inode(f)
        if not inode.ops:
            return
        old_len = len(inode.durable)
        ranges: list[tuple[int, int]] | None = None
        if all(op[0] != "t" for op in inode.ops):  # writes and zeros only: copy what they touched
            ranges = [(a, n) for _, a, n, _ in inode.ops]
            for a, n in ranges:
                inode.durable[a : a + n] = inode.data[a : a + n]
        else:
            inode.durable = bytearray(inode.data)
        inode.ops.clear()
        if self._last_write is inode:
            self._last_write = None
        self._durable_file(inode, old_len, ranges)

    def _fsync_dir(self, path: str) -> None:
        directory = os.path.normpath(path)
        cur = self._dir(directory)
        dur = self._durable[directory]
        changes = [(name, inode) for name, inode in cur.items() if dur.get(name) is not inode]
        for name, inode in changes:
            dur[name] = inode
        if changes:
            self._durable_names(directory, changes)

    def _close(self, f: DiskFile) -> None:
        pass

    def _read(self, path: str) -> bytes:
        return bytes(self._lookup(path).data)

    def read_durable(self, path: str | os.PathLike[str]) -> bytes:
        directory, name = _split(os.fspath(path))
        self._dir(directory)
        dur = self._durable[directory]
        inode = dur[name] if name in dur else self._touch(directory, name)
        if inode is None:
            raise FileNotFoundError(errno.ENOENT, "no such file (durably)", os.fspath(path))
        return bytes(inode.durable)

    def _names(self, table: dict[str, _Inode | None], directory: str) -> list[str]:
        names = {n for n in self._backing_names(directory) if n not in table}
        return sorted(names | {n for n, i in table.items() if i is not None})

    def _listdir(self, path: str) -> list[str]:
        directory = os.path.normpath(path)
        return self._names(self._dir(directory), directory)

    def listdir_durable(self, path: str | os.PathLike[str]) -> list[str]:
        directory = os.path.normpath(os.fspath(path))
        self._dir(directory)
        return self._names(self._durable[directory], directory)

    def _rename(self, src: str, dst: str) -> None:
        inode = self._lookup(src)
        s_dir, s_name = _split(src)
        d_dir, d_name = _split(dst)
        self._touch(d_dir, d_name)
        self._current[s_dir][s_name] = None
        self._current[d_dir][d_name] = inode

    def _unlink(self, path: str) -> None:
        self._lookup(path)
        directory, name = _split(path)
        self._current[directory][name] = None

    def _lock(self, path: str) -> DiskLock:
        directory = os.path.normpath(path)
        self._dir(directory)
        if directory in self._locks:
            raise StorageError(f"{path}: data directory is in use by another Storage (locked on this disk)")
        generation = self._generation

        def release() -> None:
            if self._generation == generation:
                self._locks.pop(directory, None)

        lock = self._locks[directory] = DiskLock(path, release)
        return lock

    # ------------------------------------------------------------------------------------------ power

    def crash(self, tear: int | None = None) -> None:
        """Power cut: keep only durable state, plus (``tear`` given) a ``tear``-byte prefix of the last unsynced
        write, after the earlier unsynced changes of the same file. Every handle and lock dies."""
        inode = self._last_write
        if tear is not None and inode is not None and inode.ops:
            torn = bytearray(inode.durable)
            last = max(k for k, op in enumerate(inode.ops) if op[0] == "w")  # changes after it were not reached
            for kind, a, n, written in inode.ops[:last]:
                if kind == "t":
                    del torn[a:]
                else:
                    torn[a : a + n] = bytes(n) if written is None else written  # zeros, or what was written
            _, a, n, written = inode.ops[last]
            torn[a : a + min(n, tear)] = (written or b"")[:tear]
            old_len = len(inode.durable)
            inode.durable = torn
            self._durable_file(inode, old_len, None)
        self._after_crash()

    def _after_crash(self) -> None:
        """Forget everything that was not durable."""
        live: dict[int, _Inode] = {}
        for directory, dur in self._durable.items():
            self._current[directory] = dict(dur)
            live.update((id(i), i) for i in dur.values() if i is not None)
        for inode in live.values():
            inode.data = bytearray(inode.durable)
            inode.ops.clear()
        self._last_write = None
        self._locks.clear()
        self._generation = next(_GENERATIONS)

    def cut_power(self, *, torn: bool = False):  # type: ignore[override]
        last = self._last_write
        writes = [op for op in last.ops if op[0] == "w"] if torn and last is not None else []
        self.crash(tear=writes[-1][2] if writes else None)  # the write that was cut holds only what reached the disk
        return super().cut_power(torn=torn)


class SimDisk(ModelDisk):
    """All in memory (see the module docstring). Paths are plain strings; `mkdir` makes a directory first."""

    def __init__(self, *, crash_at: CrashPoint | None = None, fsync_delay: float = 0.0) -> None:
        self._dirs: set[str] = set()
        super().__init__(crash_at=crash_at, on_cut="raise")
        self.fsync_delay = fsync_delay
        self.pending_delay = 0.0
        self.busy_s = 0.0  # every fsync's delay so far (a simulated clock of the time this disk was busy)

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Create a directory (and its parents), durably at once; an existing one is fine."""
        directory = os.path.normpath(os.fspath(path))
        while directory not in self._dirs and directory not in ("", ".", os.sep):
            self._dirs.add(directory)
            directory = os.path.dirname(directory)

    def _backing_dir(self, directory: str) -> bool:
        return directory in self._dirs

    def _count_fsync(self) -> None:
        self.pending_delay += self.fsync_delay
        self.busy_s += self.fsync_delay
        super()._count_fsync()

    def take_delay(self) -> float:
        """The seconds of fsync the simulated machine spent since the last call (the simulator advances its clock)."""
        delay, self.pending_delay = self.pending_delay, 0.0
        return delay
