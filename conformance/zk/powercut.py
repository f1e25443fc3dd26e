"""A power cut for a server that is not ours: a FUSE file system that forgets what was never fsynced.

Theory of operation
-------------------
zabref's own servers run on a disk that loses unsynced writes when they crash (docs/faults.md). ZooKeeper is not
ours to change, so the same is done below it: `PowerCutFS` is a passthrough FUSE file system (mfusepy, over
libfuse 3) mounted on a server's data directory, with the real files in a backing directory beside it.

* **Data is volatile until fsync.** Every write and every truncate goes through to the backing file at once (so
  reads, the JVM's and ours, see it), but first its *undo* is kept in memory: the bytes it overwrote and the file's
  size before it. ``fsync``/``fdatasync`` of a file fsyncs the backing file and forgets that file's undo: from then
  on the data survives a cut. A ``close`` is not a sync.
* **A cut** (`cut`, or a write of anything to the control file ``/.zabref-powercut`` in the mount) replays every
  undo of every file in reverse order -- the overwritten bytes back, the size back -- and forgets them: the files
  are what the last fsync of each left. The server's process must be dead first (the harness SIGKILLs it), as
  after a real power loss nothing of the process is left either.
* **Writeback.** A kernel writes dirty pages back by itself after a while (Linux: ``vm.dirty_expire_centisecs``,
  3000 by default, checked every 5 s), so a write older than that survives a real power loss without an fsync.
  ``writeback`` (seconds) says so here: a cut keeps the unsynced writes older than that and undoes the younger
  ones. ``None`` is the worst case POSIX allows: nothing unsynced ever survives (ZooKeeper 3.8 then refuses to
  start after a cut, since the snapshot it takes at start is never fsynced: docs/zookeeper.md).
* **Metadata is durable at once**: create, mkdir, unlink, rename (an undo follows its file to the new name; a file
  unlinked or renamed over loses its undo). This is kinder than a real disk, where a rename or a create needs the
  directory's fsync too; ZooKeeper's files that depend on it (``acceptedEpoch``, ``currentEpoch``: written to a
  ``.tmp`` file, fsynced, renamed) are then durable as soon as renamed. Said in docs/zookeeper.md.
* The kernel is told to cache no attributes or entries (timeouts 0; no ``kernel_cache``, so file data is dropped
  at each open), so that after a cut the restarted server reads the backing files as they are.

Run as its own process, one per server: ``python -m conformance.zk.powercut BACKING MOUNT [WRITEBACK]``
(foreground). `PowerCutMount` starts one, waits until the mount is up and unmounts it (``fusermount3 -u``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["CONTROL", "PowerCutFS", "PowerCutMount", "fuse_available"]

#: Writing anything to this file of the mount is a power cut.
CONTROL = "/.zabref-powercut"
MOUNT_TIMEOUT = 10.0


def fuse_available() -> str | None:
    """None when a power-cut mount can work here, else why not (the error, as the machine gives it)."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian's fuse3)"
    try:
        import mfusepy  # noqa: F401, PLC0415
    except (ImportError, OSError) as e:
        return f"mfusepy cannot be loaded: {e}"
    return None


class PowerCutFS:
    """The passthrough with undo (module docstring). Paths are the mount's, rooted at ``/``. mfusepy calls the
    methods it finds by name; an OSError raised in one is the errno FUSE answers."""

    use_ns = True

    def __init__(self, backing: str | os.PathLike[str], writeback: float | None = None) -> None:
        self.root = os.path.realpath(backing)
        self.writeback = writeback
        self._mutex = threading.Lock()
        #: path -> undo records, oldest first: (time, "bytes", offset, old) or (time, "size", old_size)
        self.undo: dict[str, list[tuple[Any, ...]]] = {}

    # ---------------------------------------------------------------------------------------- helpers

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _remember(self, path: str, fd: int, offset: int, length: int) -> None:
        """Keep what [offset, offset + length) of the file held, and its size, before a write there."""
        size, now = os.fstat(fd).st_size, time.monotonic()
        records = self.undo.setdefault(path, [])
        records.append((now, "size", size))
        if offset < size and length > 0:
            records.append((now, "bytes", offset, os.pread(fd, min(length, size - offset), offset)))

    def cut(self) -> int:
        """The power cut: every unsynced write younger than ``writeback`` undone, newest first. Returns how many
        files it changed."""
        with self._mutex:
            changed = 0
            oldest = -1.0 if self.writeback is None else time.monotonic() - self.writeback
            for path, records in self.undo.items():
                real = self._real(path)
                young = [rec for rec in records if rec[0] > oldest]
                if not young or not os.path.exists(real):
                    continue
                fd = os.open(real, os.O_WRONLY)
                try:
                    for rec in reversed(young):
                        if rec[1] == "bytes":
                            os.pwrite(fd, rec[3], rec[2])
                        else:
                            os.ftruncate(fd, rec[2])
                    os.fsync(fd)
                finally:
                    os.close(fd)
                changed += 1
            self.undo.clear()
            return changed

    # ---------------------------------------------------------------------------------------- metadata

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == CONTROL:
            return {"st_mode": 0o100600, "st_nlink": 1, "st_size": 0}
        st = os.lstat(self._real(path))
        return {"st_mode": st.st_mode, "st_nlink": st.st_nlink, "st_size": st.st_size, "st_uid": st.st_uid,
                "st_gid": st.st_gid, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns,
                "st_ctime": st.st_ctime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, amode: int) -> int:
        if path != CONTROL and not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, "access")
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            os.unlink(self._real(path))
            self.undo.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            os.rename(self._real(old), self._real(new))
            self.undo.pop(new, None)
            if old in self.undo:
                self.undo[new] = self.undo.pop(old)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        os.utime(self._real(path), ns=times)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    # ---------------------------------------------------------------------------------------- data

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        if path == CONTROL:
            return 0
        fd = os.open(self._real(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
        with self._mutex:
            self.undo[path] = [(time.monotonic(), "size", 0)]  # a new file's data is volatile until its fsync
        return fd

    def open(self, path: str, flags: int) -> int:
        if path == CONTROL:
            return 0
        # read and write whatever the caller asked (an undo reads what a write overwrites); every write is a pwrite
        # at FUSE's offset, so O_APPEND is FUSE's to resolve, not the backing file's
        return os.open(self._real(path), (flags & ~(os.O_ACCMODE | os.O_APPEND | os.O_TRUNC | os.O_CREAT)) | os.O_RDWR)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if path == CONTROL:
            self.cut()
            return len(data)
        with self._mutex:
            self._remember(path, fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if path == CONTROL:
            return 0
        with self._mutex:
            fd = fh if fh is not None else os.open(self._real(path), os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                self._remember(path, fd, length, max(0, size - length))
                os.ftruncate(fd, length)
            finally:
                if fh is None:
                    os.close(fd)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        if path == CONTROL:
            return 0
        with self._mutex:
            os.fsync(fh)
            self.undo.pop(path, None)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        if path != CONTROL:
            os.close(fh)
        return 0


class PowerCutMount:
    """One mount in a process of its own: ``start()`` (returns once mounted), ``cut()``, ``stop()`` (unmounts)."""

    def __init__(self, backing: str | os.PathLike[str], mount: str | os.PathLike[str], log: str | os.PathLike[str],
                 writeback: float | None = None) -> None:
        self.backing, self.mount, self.log = Path(backing), Path(mount), Path(log)
        self.writeback = writeback
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        why = fuse_available()
        if why is not None:
            raise RuntimeError(f"no power-cut file system on this machine: {why}")
        for folder in (self.backing, self.mount):
            if folder.exists() and not folder.is_dir():
                raise RuntimeError(f"the power-cut file system cannot mount on {self.mount}: {folder} is not a "
                                   "directory")
            folder.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        wb = [] if self.writeback is None else [str(self.writeback)]
        self.proc = subprocess.Popen([sys.executable, "-m", "conformance.zk.powercut", str(self.backing),
                                      str(self.mount), *wb], stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(self.mount):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the power-cut file system did not mount on {self.mount}: "
                                   f"{self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.02)

    def cut(self) -> None:
        """Forget every write not fsynced (the server's process must be dead already)."""
        with open(self.mount / CONTROL.lstrip("/"), "wb") as f:
            f.write(b"cut")

    def stop(self) -> None:
        if os.path.ismount(self.mount):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], check=False, capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None


def main(argv: list[str]) -> int:
    import mfusepy  # noqa: PLC0415

    backing, mount, *wb = argv
    fs = PowerCutFS(backing, float(wb[0]) if wb else None)
    mfusepy.FUSE(fs, mount, foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0,
                 negative_timeout=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
