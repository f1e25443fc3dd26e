"""The `Disk` interface -- the only door from zabref to durable file-system calls -- and `RealDisk`.

Theory of operation
-------------------
Storage (`zabref.storage.store`) never calls ``os`` itself: it asks a `Disk` to create, write, reserve, fsync,
truncate, read, rename and unlink files, to fsync a directory, and to lock a data directory. Three disks implement it:

`RealDisk`
    straight through to the operating system (production). The only class in zabref that makes durable
    file-system calls; `zabref.storage.powerloss.PowerLossDisk` does its real I/O through one.
`zabref.storage.simdisk.SimDisk`
    files in memory with a power-loss model, for a deterministic whole-cluster simulation.
`zabref.storage.powerloss.PowerLossDisk`
    real files with the same power-loss model, for real server processes killed with SIGKILL.

Writes. A file from `Disk.create` or `Disk.open_append` is written by appending (`Disk.write`); a file from
`Disk.open_write` at offsets (`Disk.write_at`, never past its end), as the log is written into the space
`Disk.reserve` gave it: ``reserve`` makes the file at least that long, the new bytes zeros (a preallocation, as
ZooKeeper pads its transaction log: a sync of a write that does not change the file's size need not commit the size
to the file system's journal; measured in docs/performance.md, "Reserved log space"). `RealDisk` syncs a file with
``fdatasync``, as ZooKeeper does: its data and the size if it grew, not its times. A reservation is not a write
of data: crash points count `write` and `write_at` only, and a reservation not synced is lost with the power like
any other change. `Disk.truncate` shortens. Errors are the operating system's `OSError` (with ``filename`` set);
`zabref.storage.store` turns them into `StorageError` naming the file.

Fsync pauses. ``pause_next_fsync`` stops the process (SIGSTOP) at the next fsync, before it takes effect, until
someone sends SIGCONT: the conformance driver checks at that moment that no packet of the step left the server.

Crash points (CrashMonkey's "crash at every fsync boundary"). A disk may be armed with a `CrashPoint`: at the k-th
`write` (after only its first ``tear`` bytes reached the disk) or the k-th fsync (file or directory, before it takes
effect), counted from the moment it was armed, the disk calls `Disk.cut_power`: the process is killed with SIGKILL
(``on_cut="kill"``, the default for real disks) or `PowerCut` is raised (``on_cut="raise"``, for in-process tests and
the simulator). Which outcome survives the cut is the disk's model: `RealDisk` keeps the page cache (a process
crash), the power-loss disks keep only what was made durable. `disk_from_env` builds the disk a server process uses
from ``ZABREF_DISK`` (``real`` or ``powerloss``) and ``ZABREF_CRASH_AT`` (``fsync:K`` or ``write:K:T``).
"""

from __future__ import annotations

import abc
import errno
import fcntl
import os
import signal
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from zabref.errors import StorageError

__all__ = [
    "Disk", "DiskFile", "DiskLock", "DiskCounts", "RealDisk", "CrashPoint", "PowerCut", "disk_from_env",
    "ENV_DISK", "ENV_CRASH_AT",
]

#: Environment variables read by `disk_from_env`.
ENV_DISK = "ZABREF_DISK"
ENV_CRASH_AT = "ZABREF_CRASH_AT"

OnCut = Literal["kill", "raise"]


class PowerCut(BaseException):  # noqa: N818 -- a signal to unwind, like SystemExit, not an error
    """Raised by a disk whose ``on_cut`` is ``"raise"`` when its power is cut. A BaseException, so that no
    ``except Exception`` on the way up mistakes the end of the (simulated) machine for an error it can handle."""


@dataclass(frozen=True)
class CrashPoint:
    """Cut the power at the ``index``-th (1-based) ``write`` or ``fsync`` since the disk was armed.

    For a write, only its first ``tear`` bytes reach the disk (0 = none of it; at least its length = all of it).
    For an fsync (of a file or a directory), the cut comes before the fsync takes effect.
    """

    kind: Literal["write", "fsync"]
    index: int
    tear: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("write", "fsync"):
            raise ValueError(f"crash point kind {self.kind!r}: expected 'write' or 'fsync'")
        if self.index < 1 or self.tear < 0:
            raise ValueError(f"crash point {self}: index counts from 1 and tear is not negative")
        if self.kind == "fsync" and self.tear:
            raise ValueError(f"crash point {self}: an fsync is not torn")

    @classmethod
    def parse(cls, text: str) -> CrashPoint:
        """``fsync:K`` or ``write:K:T`` (the k-th write, of which T bytes survive)."""
        parts = text.strip().split(":")
        try:
            if parts[0] == "fsync" and len(parts) == 2:
                return cls("fsync", int(parts[1]))
            if parts[0] == "write" and len(parts) == 3:
                return cls("write", int(parts[1]), int(parts[2]))
        except ValueError as e:
            raise ValueError(f"crash point {text!r}: {e}") from None
        raise ValueError(f"crash point {text!r}: expected 'fsync:K' or 'write:K:T'")

    def __str__(self) -> str:
        return f"fsync:{self.index}" if self.kind == "fsync" else f"write:{self.index}:{self.tear}"


@dataclass
class DiskCounts:
    """What a disk was asked to do since it was created or armed (tests enumerate crash points from it)."""

    writes: int = 0
    fsyncs: int = 0  # of files and of directories
    bytes_written: int = 0
    write_sizes: list[int] = field(default_factory=list)  # only after `Disk.arm` (a server runs for long)


class DiskFile:
    """An open file of a disk (opaque to callers)."""

    __slots__ = ("path", "handle", "closed")

    def __init__(self, path: str, handle: object) -> None:
        self.path = path
        self.handle = handle
        self.closed = False

    def __repr__(self) -> str:
        return f"DiskFile({self.path!r}{', closed' if self.closed else ''})"


class DiskLock:
    """An exclusive lock on a data directory; `release` ends it (a power cut ends it too)."""

    def __init__(self, path: str, release: object) -> None:
        self.path = path
        self._release = release

    def release(self) -> None:
        release, self._release = self._release, None
        if callable(release):
            release()


class Disk(abc.ABC):
    """What storage may do to durable files. Public methods count and honour the crash point; subclasses
    implement the underscored ones."""

    def __init__(self, *, crash_at: CrashPoint | None = None, on_cut: OnCut = "kill") -> None:
        if on_cut not in ("kill", "raise"):
            raise ValueError(f"on_cut {on_cut!r}: expected 'kill' or 'raise'")
        self.on_cut: OnCut = on_cut
        self.counts = DiskCounts()
        self.crash_at = crash_at
        self._record_sizes = False
        #: Stop this process (SIGSTOP) at the next fsync, before it takes effect: the conformance driver looks, from
        #: outside, at what the server already sent (nothing of the step may have left) and then resumes it.
        self.pause_next_fsync = False

    def arm(self, crash_at: CrashPoint | None) -> None:
        """Set (or clear) the crash point, count from zero again and record the size of every write from now on
        (``counts.write_sizes``: a test enumerates the torn-write points of a workload from them)."""
        self.crash_at = crash_at
        self.counts = DiskCounts()
        self._record_sizes = True

    # ------------------------------------------------------------------------------------------ counted, crashable

    def write(self, f: DiskFile, data: bytes) -> None:
        """Append ``data`` to the open file ``f`` (from `create` or `open_append`; not durable until `fsync`)."""
        self._check_open(f)
        tear = self._count_write(data)
        if tear is not None:
            self._write(f, bytes(data[:tear]))
            self.cut_power(torn=True)
        self._write(f, data)

    def write_at(self, f: DiskFile, offset: int, data: bytes) -> None:
        """Write ``data`` at byte ``offset`` of ``f`` (from `open_write`; at most its size: no holes), over what is
        there and past its end as needed; not durable until `fsync`."""
        self._check_open(f)
        tear = self._count_write(data)
        if tear is not None:
            self._write_at(f, offset, bytes(data[:tear]))
            self.cut_power(torn=True)
        self._write_at(f, offset, data)

    def _count_write(self, data: bytes) -> int | None:
        """Count a write of ``data``; the bytes of it that reach the disk before the power is cut here, or None."""
        c = self.counts
        c.writes += 1
        c.bytes_written += len(data)
        if self._record_sizes:
            c.write_sizes.append(len(data))
        cp = self.crash_at
        return cp.tear if cp is not None and cp.kind == "write" and cp.index == c.writes else None

    def fsync(self, f: DiskFile) -> None:
        """Make the content of ``f`` durable (not its name: that is `fsync_dir`'s)."""
        self._check_open(f)
        self._count_fsync()
        self._fsync(f)

    def fsync_dir(self, path: str | os.PathLike[str]) -> None:
        """Make the creations, renames and unlinks inside directory ``path`` durable."""
        self._count_fsync()
        self._fsync_dir(os.fspath(path))

    def _count_fsync(self) -> None:
        if self.pause_next_fsync:
            self.pause_next_fsync = False
            os.kill(os.getpid(), signal.SIGSTOP)  # until the driver sends SIGCONT; then the fsync goes on
        self.counts.fsyncs += 1
        cp = self.crash_at
        if cp is not None and cp.kind == "fsync" and cp.index == self.counts.fsyncs:
            self.cut_power()

    @staticmethod
    def _check_open(f: DiskFile) -> None:
        if f.closed:
            raise OSError(errno.EBADF, "file is closed", f.path)

    # ------------------------------------------------------------------------------------------ the rest

    def create(self, path: str | os.PathLike[str]) -> DiskFile:
        """A new, empty file opened for appending; FileExistsError if ``path`` exists."""
        return self._create(os.fspath(path))

    def open_append(self, path: str | os.PathLike[str]) -> DiskFile:
        """An existing file opened for appending (`write`); FileNotFoundError if it does not exist."""
        return self._open_append(os.fspath(path))

    def open_write(self, path: str | os.PathLike[str]) -> DiskFile:
        """An existing file opened for `write_at` and `reserve`; FileNotFoundError if it does not exist."""
        return self._open_write(os.fspath(path))

    def reserve(self, f: DiskFile, size: int) -> None:
        """Make ``f`` (from `open_write`) at least ``size`` bytes long, the new bytes zeros (not durable until
        `fsync`; module docstring). Where the file system cannot preallocate, nothing is reserved and `write_at`
        extends the file as it writes."""
        self._check_open(f)
        self._reserve(f, size)

    def truncate(self, f: DiskFile, size: int) -> None:
        """Shorten ``f`` to ``size`` bytes (not durable until `fsync`)."""
        self._check_open(f)
        self._truncate(f, size)

    def close(self, f: DiskFile) -> None:
        if not f.closed:
            f.closed = True
            self._close(f)

    def read(self, path: str | os.PathLike[str]) -> bytes:
        """The whole content of a file as this process sees it (durable or not)."""
        return self._read(os.fspath(path))

    def read_durable(self, path: str | os.PathLike[str]) -> bytes:
        """The content a power cut would leave (for `RealDisk`, what the OS shows: it cannot tell)."""
        return self._read(os.fspath(path))

    def listdir(self, path: str | os.PathLike[str]) -> list[str]:
        return sorted(self._listdir(os.fspath(path)))

    def listdir_durable(self, path: str | os.PathLike[str]) -> list[str]:
        return self.listdir(path)

    def rename(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Rename ``src`` over ``dst`` (atomic; durable after `fsync_dir`)."""
        self._rename(os.fspath(src), os.fspath(dst))

    def unlink(self, path: str | os.PathLike[str]) -> None:
        self._unlink(os.fspath(path))

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Create the directory ``path`` and its parents (an existing one is fine): a server's data directory."""
        os.makedirs(os.fspath(path), exist_ok=True)

    def lock(self, path: str | os.PathLike[str]) -> DiskLock:
        """Lock ``path`` (a data directory) for this process; StorageError if someone else holds it."""
        return self._lock(os.fspath(path))

    def recover(self, data_dir: str | os.PathLike[str]) -> tuple[str, ...]:
        """Bring ``data_dir`` to its state after a power cut, before storage reads it; returns what was removed."""
        return ()

    def cut_power(self, *, torn: bool = False) -> NoReturn:
        """The machine loses power now (see the module docstring). ``torn``: the last write was cut short."""
        if self.on_cut == "raise":
            raise PowerCut(f"power cut ({self.crash_at or 'by request'})")
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable: SIGKILL returned")  # pragma: no cover

    @abc.abstractmethod
    def _create(self, path: str) -> DiskFile: ...
    @abc.abstractmethod
    def _open_append(self, path: str) -> DiskFile: ...
    @abc.abstractmethod
    def _open_write(self, path: str) -> DiskFile: ...
    @abc.abstractmethod
    def _reserve(self, f: DiskFile, size: int) -> None: ...
    @abc.abstractmethod
    def _write(self, f: DiskFile, data: bytes) -> None: ...
    @abc.abstractmethod
    def _write_at(self, f: DiskFile, offset: int, data: bytes) -> None: ...
    @abc.abstractmethod
    def _fsync(self, f: DiskFile) -> None: ...
    @abc.abstractmethod
    def _fsync_dir(self, path: str) -> None: ...
    @abc.abstractmethod
    def _truncate(self, f: DiskFile, size: int) -> None: ...
    @abc.abstractmethod
    def _close(self, f: DiskFile) -> None: ...
    @abc.abstractmethod
    def _read(self, path: str) -> bytes: ...
    @abc.abstractmethod
    def _listdir(self, path: str) -> list[str]: ...
    @abc.abstractmethod
    def _rename(self, src: str, dst: str) -> None: ...
    @abc.abstractmethod
    def _unlink(self, path: str) -> None: ...
    @abc.abstractmethod
    def _lock(self, path: str) -> DiskLock: ...


LOCK_NAME = "LOCK"


class RealDisk(Disk):
    """The operating system, unchanged: what was written survives a SIGKILL (page cache), what was fsynced a power
    cut. A crash point kills the process (``on_cut="kill"``); a torn write really writes only its prefix."""

    def _create(self, path: str) -> DiskFile:
        return DiskFile(path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644))

    def _open_append(self, path: str) -> DiskFile:
        return DiskFile(path, os.open(path, os.O_WRONLY | os.O_APPEND))

    def _open_write(self, path: str) -> DiskFile:
        return DiskFile(path, os.open(path, os.O_WRONLY))  # not O_APPEND: Linux's pwrite appends on such a file

    def _reserve(self, f: DiskFile, size: int) -> None:
        # A file system without fallocate gets none: the reservation only spares syncs a size to commit. EBADF too:
        # there glibc emulates posix_fallocate by reading each block, which a write-only descriptor refuses (a FUSE
        # file system, tests/test_storage_powercut.py); a descriptor really bad fails at the write that follows.
        try:
            os.posix_fallocate(f.handle, 0, size)  # type: ignore[arg-type]
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF):
                raise

    def _write(self, f: DiskFile, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(f.handle, view) :]  # type: ignore[arg-type]

    def _write_at(self, f: DiskFile, offset: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            done = os.pwrite(f.handle, view, offset)  # type: ignore[arg-type]
            view, offset = view[done:], offset + done

    def _fsync(self, f: DiskFile) -> None:
        # fdatasync, as ZooKeeper's FileTxnLog (FileChannel.force(false)): the data and what reading it back needs (a
        # size that grew), not the modification time, whose inode write a sync into reserved space would otherwise
        # carry (docs/performance.md, "fdatasync"); a directory's changes take `_fsync_dir`'s fsync
        os.fdatasync(f.handle)  # type: ignore[arg-type]

    def _fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _truncate(self, f: DiskFile, size: int) -> None:
        os.ftruncate(f.handle, size)  # type: ignore[arg-type]

    def _close(self, f: DiskFile) -> None:
        os.close(f.handle)  # type: ignore[arg-type]

    def _read(self, path: str) -> bytes:
        with open(path, "rb") as fh:
            return fh.read()

    def _listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def _rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def _unlink(self, path: str) -> None:
        os.unlink(path)

    def _lock(self, path: str) -> DiskLock:
        lock_path = os.path.join(path, LOCK_NAME)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StorageError(f"{lock_path}: cannot create lock file: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            raise StorageError(f"{path}: data directory is in use by another Storage ({lock_path} is locked)") from e
        return DiskLock(path, lambda: os.close(fd))

    # -------------------------------------------------------------------------------- for PowerLossDisk's mirror

    def replace_file(self, path: str, data: bytes, *, fsync: bool) -> None:
        """Make ``path`` hold exactly ``data``, atomically even against SIGKILL (hidden temp file, rename)."""
        head, name = os.path.split(path)
        tmp = os.path.join(head, f"{MIRROR_TEMP_PREFIX}{name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            f = DiskFile(tmp, fd)
            self._write(f, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if fsync:
            self._fsync_dir(head or ".")

    def write_file_at(self, path: str, ranges: list[tuple[int, bytes]], *, fsync: bool) -> None:
        """Write each (offset, bytes) of ``ranges`` into ``path``, in order (none past the end of the file)."""
        fd = os.open(path, os.O_WRONLY)
        try:
            f = DiskFile(path, fd)
            for offset, data in ranges:
                self._write_at(f, offset, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def size(self, path: str) -> int:
        return os.stat(path).st_size

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)


#: Hidden temp files of `RealDisk.replace_file`; `PowerLossDisk.recover` removes the ones a SIGKILL left.
MIRROR_TEMP_PREFIX = ".powerloss-"
