"""A Zab server's persistent state: the transaction log (``history``), ``acceptedEpoch`` and ``currentEpoch``.

Superseded by `zabref.storage` (docs/wire-and-disk.md) and kept only until the runtime switches to it. What this
module's docstring calls durable was never checked: every test crash is a SIGKILL, which keeps the page cache, so a
missing or misplaced fsync here passes every test; and a NEWLEADER step (the history, then `set_current_epoch`) is
two durable writes that a crash can cut between.

Theory of operation
-------------------
Seed 000 names three things a server keeps on disk: its history (the proposals it accepted), acceptedEpoch and
currentEpoch. A data directory holds them as four files:

``log``
    the history, append-only. Each record is ``uint32 length, uint32 crc32, int64 zxid, value``, big-endian, where
    ``length`` counts the zxid and value bytes (8 + len(value)) and the CRC-32 covers those same bytes. Zxids strictly
    increase and are > 0.
``acceptedEpoch``, ``currentEpoch``
    one checksummed line each, replaced atomically (`zabref.epochs`).
``LOCK``
    held with ``flock`` while a `Storage` is open, so two servers never share a directory.

Fsync discipline ("fsync before ACK"). `Storage.append` writes records to the kernel and returns; nothing is durable
yet. `Storage.sync` makes everything appended so far durable with ONE fsync -- group commit: a follower that receives
many PROPOSALs appends them all, syncs once, and only then sends their ACKs (seed 000, phase 3: "a follower will log
and sync proposals to disk and send ACK(zxid)"). `durable_zxid` is the last zxid a sync covered; never ACK above it.
`truncate` (TRUNC), `replace` (SNAP) and the epoch setters are durable when they return.

Recovery on open. The log is scanned from the start. A record *checks* when its header is complete, its length is
in 8..max_record and inside the file, and its CRC matches. At the first record that does not check (offset ``o``):

* if no record that checks starts anywhere after ``o``, everything from ``o`` on is a *torn tail* -- the remnant of
  an append that a crash interrupted (an incomplete header or record, a last record whose CRC fails, a grown file
  whose new bytes were never written). The file is truncated to ``o`` (ftruncate + fsync) and the `RecoveryReport`
  says how many records were kept, how many bytes were dropped and why;
* if a record that checks does start after ``o``, the damage is in the *middle*: records that were once durable
  would be lost. `LogCorruption` names the file, the record number and its offset, and the file is left untouched.

A record that checks but whose zxid does not exceed its predecessor's is corruption too, wherever it is.

A `Storage` is not thread-safe; the runtime owns it from one thread. After a failed write it refuses further calls
(the on-disk state is then whatever recovery will make of it on the next open).
"""

from __future__ import annotations

import bisect
import fcntl
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from zabref.epochs import (
    ACCEPTED_EPOCH,
    CURRENT_EPOCH,
    atomic_write,
    read_epoch,
    remove_stale_temp,
    write_epoch,
)
from zabref.errors import LogCorruption, StorageError
from zabref.packets import MAX_EPOCH

__all__ = [
    "Storage", "RecoveryReport", "encode_record", "scan_log", "LogScan", "LOG_NAME", "LOCK_NAME", "DEFAULT_MAX_RECORD",
]

LOG_NAME = "log"
LOCK_NAME = "LOCK"
#: Largest record (zxid + value) accepted on append or on recovery.
DEFAULT_MAX_RECORD = 64 * 1024 * 1024

_HEADER = struct.Struct(">IIq")  # length, crc32, zxid
_HEADER_SIZE = _HEADER.size  # 16
_ZXID = struct.Struct(">q")
_ZXID_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class RecoveryReport:
    """What `Storage.open` found and did."""

    data_dir: str
    records_kept: int
    bytes_dropped: int = 0
    dropped_reason: str | None = None
    initialized: bool = False
    temp_files_removed: tuple[str, ...] = field(default=())

    @property
    def repaired(self) -> bool:
        return self.bytes_dropped > 0

    def __str__(self) -> str:
        parts = [f"{self.data_dir}: {self.records_kept} records"]
        if self.initialized:
            parts.append("new data directory initialized")
        if self.bytes_dropped:
            parts.append(f"torn tail of {self.bytes_dropped} bytes truncated ({self.dropped_reason})")
        if self.temp_files_removed:
            parts.append(f"removed stale temp files {', '.join(self.temp_files_removed)}")
        return "; ".join(parts)


def encode_record(zxid: int, value: bytes) -> bytes:
    """One log record: ``uint32 length, uint32 crc32, int64 zxid, value``."""
    payload = _ZXID.pack(zxid) + bytes(value)
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


@dataclass(frozen=True)
class LogScan:
    """What `scan_log` found: the valid prefix of a log image, and why the rest (if any) is a torn tail."""

    history: list[tuple[int, bytes]]
    ends: list[int]  # ends[k] = byte offset just past record k
    good_end: int
    dropped_reason: str | None


def _valid_record_at(buf: memoryview, p: int, max_record: int) -> bool:
    """Does a record that passes every check of its own (length, CRC, zxid > 0) start at byte ``p``?"""
    if len(buf) - p < _HEADER_SIZE:
        return False
    length, crc, zxid = _HEADER.unpack_from(buf, p)
    if length < 8 or length > max_record or p + 8 + length > len(buf) or zxid <= 0:
        return False
    return zlib.crc32(buf[p + 8 : p + 8 + length]) == crc


def _damage(buf: memoryview, off: int, max_record: int) -> str | None:
    """Why the record at ``off`` does not check on its own, or None if it does."""
    n = len(buf)
    if n - off < _HEADER_SIZE:
        return f"incomplete header, {n - off} of {_HEADER_SIZE} bytes"
    length, crc, _ = _HEADER.unpack_from(buf, off)
    if length < 8:
        return f"length {length} is below the minimum of 8"
    if length > max_record:
        return f"length {length} is above the maximum record size {max_record}"
    if off + 8 + length > n:
        return f"incomplete record: length {length}, but only {n - off - 8} bytes follow the length and CRC"
    actual = zlib.crc32(buf[off + 8 : off + 8 + length])
    if actual != crc:
        return f"CRC mismatch (stored {crc:08x}, computed {actual:08x})"
    return None


def scan_log(data: bytes, path: str, max_record: int = DEFAULT_MAX_RECORD) -> LogScan:
    """Parse a whole log image; tell a torn tail from corruption by the rules in the module docstring.

    Raises `LogCorruption` for damage in the middle; returns the valid prefix (and why the rest goes) otherwise.
    """
    buf = memoryview(data)
    n = len(buf)
    history: list[tuple[int, bytes]] = []
    ends: list[int] = []
    off = 0
    last = 0
    while off < n:
        damage = _damage(buf, off, max_record)
        if damage is not None:
            tail = buf[off:].tobytes()
            if tail.strip(b"\0"):  # an all-zero tail (file grown, data never written) holds no record
                for p in range(off + 1, n - _HEADER_SIZE + 1):
                    if _valid_record_at(buf, p, max_record):
                        raise LogCorruption(path, len(history), off, f"{damage}; a valid record follows at byte {p}")
            return LogScan(history, ends, off, f"record {len(history)} at byte {off}: {damage}")
        length, _, zxid = _HEADER.unpack_from(buf, off)
        if zxid <= last:
            raise LogCorruption(path, len(history), off, f"zxid {zxid:#x} does not follow the previous zxid {last:#x}")
        end = off + 8 + length
        history.append((zxid, buf[off + _HEADER_SIZE : end].tobytes()))
        ends.append(end)
        last = zxid
        off = end
    return LogScan(history, ends, off, None)


def _check_data_dir(data_dir: Path) -> None:
    if not data_dir.exists():
        raise StorageError(f"{data_dir}: data directory does not exist")
    if not data_dir.is_dir():
        raise StorageError(f"{data_dir}: not a directory")
    if not os.access(data_dir, os.R_OK | os.W_OK | os.X_OK):
        raise StorageError(f"{data_dir}: data directory is not readable and writable")


def _lock(data_dir: Path) -> int:
    path = data_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StorageError(f"{path}: cannot create lock file: {e.strerror}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise StorageError(f"{data_dir}: data directory is in use by another Storage ({path} is locked)") from e
    return fd


class Storage:
    """The persistent state of one Zab server. Open with `Storage.open`; see the module docstring for the rules."""

    def __init__(self, data_dir: Path, lock_fd: int, log_fd: int, scan: LogScan, epochs: tuple[int, int],
                 max_record: int) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir / LOG_NAME
        self.max_record = max_record
        self._lock_fd: int | None = lock_fd
        self._fd: int | None = log_fd
        self._history = list(scan.history)
        self._ends = list(scan.ends)
        self._zxids = [z for z, _ in self._history]
        self._accepted_epoch, self._current_epoch = epochs
        self._durable_zxid = self.last_zxid
        self._broken: str | None = None

    # ---------------------------------------------------------------------------------------------- opening

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], *,
             max_record: int = DEFAULT_MAX_RECORD) -> tuple[Storage, RecoveryReport]:
        """Open (or initialize) the data directory, recover the log, and lock the directory until `close`."""
        data_dir = Path(data_dir)
        _check_data_dir(data_dir)
        lock_fd = _lock(data_dir)
        try:
            return cls._open_locked(data_dir, lock_fd, max_record)
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def _open_locked(cls, data_dir: Path, lock_fd: int, max_record: int) -> tuple[Storage, RecoveryReport]:
        log_path = data_dir / LOG_NAME
        removed = [str(t) for name in (LOG_NAME, ACCEPTED_EPOCH, CURRENT_EPOCH)
                   if (t := remove_stale_temp(data_dir / name)) is not None]
        accepted = read_epoch(data_dir, ACCEPTED_EPOCH)
        current = read_epoch(data_dir, CURRENT_EPOCH)
        initialized = not log_path.exists()
        if initialized:
            # A fresh directory, or a crash during initialization (which writes the epoch files first, the log last).
            for name, value in ((ACCEPTED_EPOCH, accepted), (CURRENT_EPOCH, current)):
                if value:
                    raise StorageError(f"{log_path}: missing, while {data_dir / name} holds epoch {value}")
                if value is None:
                    write_epoch(data_dir, name, 0)
            accepted = current = 0
            atomic_write(log_path, b"")
        for name, value in ((ACCEPTED_EPOCH, accepted), (CURRENT_EPOCH, current)):
            if value is None:
                raise StorageError(f"{data_dir / name}: missing, while the log {log_path} exists")
        assert accepted is not None and current is not None
        try:
            data = log_path.read_bytes()
        except OSError as e:
            raise StorageError(f"{log_path}: cannot read: {e.strerror}") from e
        scan = scan_log(data, str(log_path), max_record)
        try:
            fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            raise StorageError(f"{log_path}: cannot open for writing: {e.strerror}") from e
        try:
            if scan.good_end < len(data):
                os.ftruncate(fd, scan.good_end)
                os.fsync(fd)
        except OSError as e:
            os.close(fd)
            raise StorageError(f"{log_path}: cannot truncate torn tail: {e.strerror}") from e
        report = RecoveryReport(
            data_dir=str(data_dir),
            records_kept=len(scan.history),
            bytes_dropped=len(data) - scan.good_end,
            dropped_reason=scan.dropped_reason,
            initialized=initialized,
            temp_files_removed=tuple(removed),
        )
        return cls(data_dir, lock_fd, fd, scan, (accepted, current), max_record), report

    # ---------------------------------------------------------------------------------------------- reading

    @property
    def history(self) -> list[tuple[int, bytes]]:
        """Every record appended and not truncated, durable or not (a copy)."""
        return list(self._history)

    @property
    def last_zxid(self) -> int:
        """Zxid of the last record in the history; 0 if it is empty (seed 000's lastZxid)."""
        return self._zxids[-1] if self._zxids else 0

    @property
    def durable_zxid(self) -> int:
        """The last zxid known to be on disk: never ACK a proposal above it."""
        return self._durable_zxid

    @property
    def accepted_epoch(self) -> int:
        return self._accepted_epoch

    @property
    def current_epoch(self) -> int:
        return self._current_epoch

    # ---------------------------------------------------------------------------------------------- writing

    def _live_fd(self) -> int:
        if self._fd is None:
            raise StorageError(f"{self.data_dir}: storage is closed")
        if self._broken is not None:
            raise StorageError(f"{self.data_dir}: storage failed earlier ({self._broken}); reopen to recover")
        return self._fd

    def _fail(self, what: str, e: OSError) -> StorageError:
        self._broken = f"{what}: {e.strerror or e}"
        return StorageError(f"{self.log_path}: {self._broken}")

    def _validated(self, txns: Iterable[tuple[int, bytes]], last: int) -> list[tuple[int, bytes]]:
        out = []
        for i, (zxid, value) in enumerate(txns):
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise TypeError(f"transaction {i} (zxid {zxid:#x}): value must be bytes")
            if not last < zxid <= _ZXID_MAX:
                raise ValueError(f"transaction {i}: zxid {zxid:#x} does not follow {last:#x}")
            if 8 + len(value) > self.max_record:
                raise ValueError(f"transaction {i} (zxid {zxid:#x}): {len(value)} bytes exceed the record limit")
            out.append((zxid, bytes(value)))
            last = zxid
        return out

    def _write_all(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def append(self, txns: Iterable[tuple[int, bytes]]) -> int:
        """Write records after the history; NOT durable until `sync`. Returns the new last zxid.

        Zxids must strictly increase from `last_zxid`; a bad batch raises before anything is written.
        """
        fd = self._live_fd()
        batch = self._validated(txns, self.last_zxid)
        if not batch:
            return self.last_zxid
        records = [encode_record(z, v) for z, v in batch]
        try:
            self._write_all(fd, b"".join(records))
        except OSError as e:
            raise self._fail("append failed", e) from e
        end = self._ends[-1] if self._ends else 0
        for (zxid, value), rec in zip(batch, records):
            end += len(rec)
            self._history.append((zxid, value))
            self._zxids.append(zxid)
            self._ends.append(end)
        return self.last_zxid

    def sync(self) -> int:
        """Make every appended record durable with one fsync (none if nothing is pending). Returns `durable_zxid`."""
        fd = self._live_fd()
        if self._durable_zxid != self.last_zxid:
            try:
                os.fsync(fd)
            except OSError as e:
                raise self._fail("fsync failed", e) from e
            self._durable_zxid = self.last_zxid
        return self._durable_zxid

    def truncate(self, zxid: int) -> None:
        """TRUNC(zxid): drop every record whose zxid is above ``zxid``, durably (ftruncate + fsync)."""
        fd = self._live_fd()
        if zxid < 0:
            raise ValueError(f"truncate to zxid {zxid}: zxids are not negative")
        keep = bisect.bisect_right(self._zxids, zxid)
        size = self._ends[keep - 1] if keep else 0
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as e:
            raise self._fail("truncate failed", e) from e
        del self._history[keep:], self._zxids[keep:], self._ends[keep:]
        self._durable_zxid = self.last_zxid

    def replace(self, history: Iterable[tuple[int, bytes]]) -> None:
        """SNAP: make ``history`` the whole log atomically (temp file, fsync, rename, fsync directory)."""
        old_fd = self._live_fd()
        batch = self._validated(history, 0)
        records = [encode_record(z, v) for z, v in batch]
        atomic_write(self.log_path, b"".join(records))
        try:
            new_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            raise self._fail("cannot reopen the replaced log", e) from e
        os.close(old_fd)
        self._fd = new_fd
        self._history = batch
        self._zxids = [z for z, _ in batch]
        self._ends = []
        end = 0
        for rec in records:
            end += len(rec)
            self._ends.append(end)
        self._durable_zxid = self.last_zxid

    def set_accepted_epoch(self, epoch: int) -> None:
        """Durably store acceptedEpoch (seed 000, phase 1: the follower sets f.acceptedEpoch = e)."""
        self._set_epoch(ACCEPTED_EPOCH, epoch)
        self._accepted_epoch = epoch

    def set_current_epoch(self, epoch: int) -> None:
        """Durably store currentEpoch (seed 000, phase 2: on NEWLEADER(e) the follower sets f.currentEpoch = e)."""
        self._set_epoch(CURRENT_EPOCH, epoch)
        self._current_epoch = epoch

    def _set_epoch(self, name: str, epoch: int) -> None:
        self._live_fd()
        if not 0 <= epoch <= MAX_EPOCH:
            raise ValueError(f"{name} = {epoch} is outside 0..{MAX_EPOCH}")
        write_epoch(self.data_dir, name, epoch)

    # ---------------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Release the log and the directory lock. Unsynced appends are NOT synced: call `sync` first."""
        for attr in ("_fd", "_lock_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                setattr(self, attr, None)
                os.close(fd)

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Storage({str(self.data_dir)!r}, records={len(self._history)}, last_zxid={self.last_zxid:#x}, "
                f"acceptedEpoch={self._accepted_epoch}, currentEpoch={self._current_epoch})")
