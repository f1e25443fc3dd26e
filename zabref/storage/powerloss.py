"""`PowerLossDisk`: real files that lose what was not made durable when the process dies, as on a power cut.

Theory of operation
-------------------
A SIGKILL keeps the page cache, so on a plain disk a missing fsync never shows. `PowerLossDisk` turns the page cache
into process memory: it is the power-loss model of `zabref.storage.simdisk.ModelDisk` (read that module's docstring
for what is modelled and what is not) whose *durable* state is the real directory. Every write, truncation, creation,
rename and unlink is held in the process's memory; the real files change only when the model's durable state does:

* `fsync` of a file whose name is durable writes the file's new durable bytes to the real file (in place, the ranges
  its writes and reservations touched, when nothing was truncated; else an atomic replace through a hidden
  ``.powerloss-<name>.tmp`` and a rename);
* `fsync_dir` makes the directory's durable names real: a name that now refers to another inode gets that inode's
  durable content (atomic replace), a name that went away is unlinked;
* a file whose name is not durable keeps its durable content in memory only: a power cut would lose it.

So the real directory is, at every moment, exactly what a power cut would leave. A SIGKILL of the process -- from the
conformance driver, the fault runner, or a crash point of this disk -- therefore needs no rollback: the unsynced state
dies with the process. `recover` (run by `Storage.open`) only removes hidden temp files a SIGKILL may have left in
the middle of an atomic replace. Another process reads the durable state with plain reads, while the server runs
(`zabref.storage.durable.read_durable` with any disk).

Torn writes. A crash point ``write:K:T`` (or `crash` with ``tear``) writes, before the process dies, the file of the
K-th write as the model's torn outcome: its durable content, its earlier unsynced changes, and the first T bytes of
that write -- on the real file if its name is durable (else the file is lost anyway).

The real files are not fsynced (``real_fsync=False``): the model is about what this process's death loses, and the
host is not expected to lose power in tests. Pass ``real_fsync=True`` to fsync them as well.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping

from zabref.errors import ConfigError
from zabref.storage.disk import ENV_CRASH_AT, ENV_DISK, MIRROR_TEMP_PREFIX, CrashPoint, Disk, DiskLock, OnCut, RealDisk
from zabref.storage.simdisk import ModelDisk, _Inode

__all__ = ["PowerLossDisk", "recover", "disk_from_env"]


class PowerLossDisk(ModelDisk):
    """Real files with the power-loss model (module docstring)."""

    def __init__(self, *, crash_at: CrashPoint | None = None, on_cut: OnCut = "kill",
                 real_fsync: bool = False) -> None:
        self._real = RealDisk(on_cut="raise")
        self._real_fsync = real_fsync
        self._real_locks: list[DiskLock] = []
        super().__init__(crash_at=crash_at, on_cut=on_cut)

    # ------------------------------------------------------------------------------------------ backing: real files

    def _backing_dir(self, directory: str) -> bool:
        return self._real.is_dir(directory)

    def _backing_names(self, directory: str) -> list[str]:
        return [n for n in self._real._listdir(directory) if not n.startswith(MIRROR_TEMP_PREFIX)]

    def _backing_read(self, directory: str, name: str) -> bytes | None:
        try:
            return self._real._read(os.path.join(directory, name))
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise
        except OSError as e:
            if e.errno == errno.ENOENT:
                return None
            raise

    def _durable_file(self, inode: _Inode, old_len: int, ranges: list[tuple[int, int]] | None) -> None:
        for path in self._durable_paths(inode):
            if ranges is not None and self._real.size(path) == old_len:
                self._real.write_file_at(path, [(a, bytes(inode.durable[a : a + n])) for a, n in ranges],
                                         fsync=self._real_fsync)
            else:
                self._real.replace_file(path, bytes(inode.durable), fsync=self._real_fsync)

    def _durable_names(self, directory: str, changes: list[tuple[str, _Inode | None]]) -> None:
        # New names first, removals last: a SIGKILL in between leaves an extra name, never a missing one.
        for name, inode in changes:
            if inode is not None:
                self._real.replace_file(os.path.join(directory, name), bytes(inode.durable), fsync=self._real_fsync)
        for name, inode in changes:
            path = os.path.join(directory, name)
            if inode is None and self._real.exists(path):
                self._real._unlink(path)
        if self._real_fsync:
            self._real._fsync_dir(directory)

    def _lock(self, path: str) -> DiskLock:
        lock = self._real.lock(path)  # flock: shared with other processes, ended by the process's death
        self._real_locks.append(lock)
        return lock

    # ------------------------------------------------------------------------------------------ power

    def _after_crash(self) -> None:
        """The real directory already is the durable state: forget the rest, as a dead process would."""
        for lock in self._real_locks:
            lock.release()
        self._real_locks.clear()
        self._reset()

    def recover(self, data_dir: str | os.PathLike[str]) -> tuple[str, ...]:
        return recover(data_dir)


def recover(data_dir: str | os.PathLike[str]) -> tuple[str, ...]:
    """Remove the hidden temp files a SIGKILL left in the middle of a `PowerLossDisk` atomic replace (their target
    still holds the durable content). Returns their paths."""
    removed = []
    real = RealDisk()
    for name in sorted(real._listdir(os.fspath(data_dir))):
        if name.startswith(MIRROR_TEMP_PREFIX):
            path = os.path.join(os.fspath(data_dir), name)
            real._unlink(path)
            removed.append(path)
    return tuple(removed)


def disk_from_env(environ: Mapping[str, str] | None = None) -> Disk:
    """The disk a server process uses: ``ZABREF_DISK`` = ``real`` (default) or ``powerloss``; ``ZABREF_CRASH_AT`` =
    ``fsync:K`` or ``write:K:T`` arms a crash point that SIGKILLs the process. ConfigError naming the variable."""
    env = os.environ if environ is None else environ
    kind = env.get(ENV_DISK, "real") or "real"
    text = env.get(ENV_CRASH_AT, "")
    try:
        crash_at = CrashPoint.parse(text) if text else None
    except ValueError as e:
        raise ConfigError(f"{ENV_CRASH_AT}: {e}") from None
    if kind == "real":
        return RealDisk(crash_at=crash_at)
    if kind == "powerloss":
        return PowerLossDisk(crash_at=crash_at)
    raise ConfigError(f"{ENV_DISK}={kind!r}: expected 'real' or 'powerloss'")
