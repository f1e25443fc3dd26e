"""`Storage`: one server's persistent state (history, acceptedEpoch, currentEpoch), one atomic durable write a step.

Theory of operation
-------------------
Seed 000 names what a server keeps across crashes: its history, acceptedEpoch and currentEpoch. The core says how
they change as a sequence of `zabref.core.types.PersistOp` per step (one event's `Output.persist`); some steps change
two of them at once (NEWLEADER: the synced history *and* currentEpoch; a follower whose currentEpoch is ahead of its
history would vote for transactions the new leader skipped). So a step must reach the disk whole or not at all.

`Storage.apply(ops)` turns ONE step into ONE batch of records ending in a COMMIT (`zabref.storage.records`: appends,
truncations, a reset for a SNAP and the epochs are all records of one append-only file, ``zab.log``), updates the
state in memory, and buffers the batch: nothing is written yet. `Storage.sync` writes every buffered batch with ONE
write and makes them durable with ONE fsync (group commit: a follower applies many PROPOSAL steps, syncs once, then
sends their ACKs -- seed 000, phase 3, step 2). A crash leaves a prefix of the batches, each whole: the state after
some step, never half a step. Nothing may be sent on the strength of a step before the `sync` that follows it.

Reserved space. ``zab.log`` is preallocated ahead of its writes (`Disk.reserve`, zeros), as ZooKeeper pads its
transaction log: a sync then writes into space the file already has, and the file system need not commit a new size
with it (docs/performance.md, "Reserved log space"). A sync that would pass the reserved end first reserves as much
again as the log holds, at least `RESERVE_MIN` and at most `RESERVE_MAX` more. The scan reads zeros after the last
committed batch as reserved space (`zabref.storage.records`), so the file's size says nothing about the log's end.

Compaction. Truncated transactions, overwritten epochs and everything before a SNAP's reset stay in the file as dead
bytes. When a sync finds a reset pending, or dead bytes above both the live bytes and ``compact_min_bytes``, it
writes the whole state instead, as one batch in a new file installed by `zabref.storage.atomic.atomic_write`
(temp file, fsync, rename, fsync the directory) -- still one atomic durable change, now with two fsyncs.

Opening. `Storage.open` locks the data directory, lets the disk recover (a `PowerLossDisk` removes its temp files),
removes a stale temp file of an interrupted compaction, creates ``zab.log`` (just its header, atomically) if it is
missing, and scans it: a torn tail (an incomplete last batch) is cut off, fsynced and reported in the
`RecoveryReport`; damage in the middle raises `LogCorruption` (file, record, byte offset) and leaves the file as it was.

A `Storage` belongs to one thread at a time and has none of its own. After a failed write or fsync it refuses every
call: the kernel may have dropped the dirty pages, so a retried fsync could lie; reopening recovers.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

from zabref.core.packets import MAX_EPOCH
from zabref.core.types import (
    AppendTxns,
    Persistent,
    PersistOp,
    ReplaceHistory,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    TruncateHistory,
    Txn,
)
from zabref.errors import StorageError
from zabref.storage import records as rec
from zabref.storage.atomic import atomic_write, remove_stale_temp
from zabref.storage.disk import Disk, DiskFile, DiskLock, RealDisk

__all__ = ["Storage", "RecoveryReport", "StorageStats", "LOG_NAME", "OLD_FORMAT_NAMES", "DEFAULT_COMPACT_MIN",
           "RESERVE_MIN", "RESERVE_MAX"]

LOG_NAME = "zab.log"
#: Files of the format before this package (zabref.disklog, zabref.epochs): not read, not migrated.
OLD_FORMAT_NAMES = ("log", "acceptedEpoch", "currentEpoch")
DEFAULT_COMPACT_MIN = 1 << 20
#: The least and the most a reservation adds to the log (module docstring; ZooKeeper's preAllocSize is 64 MiB).
RESERVE_MIN = 64 << 10
RESERVE_MAX = 64 << 20


@dataclass(frozen=True, init=False)
class RecoveryReport:
    """What `Storage.open` found and did."""

    data_dir: str
    initialized: bool
    batches: int
    records: int
    history_length: int
    torn_bytes: int
    torn_reason: str | None
    removed: tuple[str, ...]  # stale temp files removed

    # The constructor is written out (not made by `dataclasses`) so that the compiled build compiles it.
    def __init__(self, data_dir: str, initialized: bool, batches: int, records: int, history_length: int,
                 torn_bytes: int = 0, torn_reason: str | None = None, removed: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "data_dir", data_dir)
        object.__setattr__(self, "initialized", initialized)
        object.__setattr__(self, "batches", batches)
        object.__setattr__(self, "records", records)
        object.__setattr__(self, "history_length", history_length)
        object.__setattr__(self, "torn_bytes", torn_bytes)
        object.__setattr__(self, "torn_reason", torn_reason)
        object.__setattr__(self, "removed", removed)

    @property
    def repaired(self) -> bool:
        return self.torn_bytes > 0

    def __str__(self) -> str:
        parts = [f"{self.data_dir}: {self.history_length} transactions ({self.batches} batches, {self.records} records)"]
        if self.initialized:
            parts.append("new data directory initialized")
        if self.torn_bytes:
            parts.append(f"torn tail of {self.torn_bytes} bytes cut off ({self.torn_reason})")
        if self.removed:
            parts.append(f"removed stale temp files {', '.join(self.removed)}")
        return "; ".join(parts)


@dataclass(init=False)
class StorageStats:
    """Counters for benchmarks and tests."""

    steps: int
    syncs: int
    compactions: int
    bytes_written: int

    def __init__(self, steps: int = 0, syncs: int = 0, compactions: int = 0, bytes_written: int = 0) -> None:
        self.steps = steps
        self.syncs = syncs
        self.compactions = compactions
        self.bytes_written = bytes_written


@dataclass(slots=True, init=False)
class _Plan:
    """A step applied to a view of the state, before anything changes: ``history[:base] + extra``."""

    base: int
    last: int
    accepted: int
    current: int
    max_record: int
    extra: list[tuple[Txn, int]]  # (transaction, record size)
    reset: bool

    def __init__(self, base: int, last: int, accepted: int, current: int, max_record: int,
                 extra: list[tuple[Txn, int]] | None = None, reset: bool = False) -> None:
        self.base = base
        self.last = last
        self.accepted = accepted
        self.current = current
        self.max_record = max_record
        self.extra = [] if extra is None else extra
        self.reset = reset

    def op(self, zxids: list[int], i: int, op: PersistOp) -> list[bytes]:
        """The records of ``op`` (the step's ``i``-th); ValueError/TypeError naming it if it is not valid here."""
        match op:
            case AppendTxns(txns):
                return self._txns(i, op, txns)
            case TruncateHistory(zxid):
                if not 0 <= zxid <= rec.ZXID_MAX:
                    raise ValueError(f"{_where(i, op)}: zxid {zxid} is outside 0..{rec.ZXID_MAX:#x}")
                self.base = bisect.bisect_right(zxids, zxid, 0, self.base)
                self.extra = [e for e in self.extra if e[0].zxid <= zxid]
                self.last = self.extra[-1][0].zxid if self.extra else (zxids[self.base - 1] if self.base else 0)
                return [rec.encode_truncate(zxid)]
            case ReplaceHistory(history):
                self.base, self.last, self.extra, self.reset = 0, 0, [], True
                return [rec.encode_reset(), *self._txns(i, op, history)]
            case SetAcceptedEpoch(epoch):
                self.accepted = _epoch(i, op, epoch)
                return [rec.encode_epoch(rec.Kind.ACCEPTED_EPOCH, epoch)]
            case SetCurrentEpoch(epoch):
                self.current = _epoch(i, op, epoch)
                return [rec.encode_epoch(rec.Kind.CURRENT_EPOCH, epoch)]
        raise TypeError(f"apply: operation {i}: not a storage operation: {op!r}")

    def _txns(self, i: int, op: PersistOp, txns: tuple[Txn, ...]) -> list[bytes]:
        out = []
        last, extra = self.last, self.extra
        for t in txns:  # Txns: AppendTxns and ReplaceHistory made them (zxids increase, values are bytes)
            zxid, value = t
            if not last < zxid <= rec.ZXID_MAX:
                raise ValueError(f"{_where(i, op)}: zxid {zxid:#x} does not follow {last:#x}")
            if 9 + len(value) > self.max_record:
                raise ValueError(f"{_where(i, op)}: zxid {zxid:#x}: {len(value)} bytes exceed the record limit")
            record = rec.encode_txn(zxid, value)
            out.append(record)
            extra.append((t, len(record)))
            last = zxid
        self.last = last
        return out


def _where(i: int, op: object) -> str:
    return f"apply: operation {i} ({type(op).__name__})"


def _epoch(i: int, op: object, epoch: object) -> int:
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"{_where(i, op)}: epoch {epoch!r} is not an int in 0..{MAX_EPOCH}")
    return epoch


class Storage:
    """The persistent state of one Zab server; see the module docstring. Open with `Storage.open`."""

    def __init__(self, disk: Disk, data_dir: str, lock: DiskLock, file: DiskFile, scan: rec.LogScan,
                 max_record: int, compact_min_bytes: int) -> None:
        self.disk = disk
        self.data_dir = data_dir
        self.log_path = os.path.join(data_dir, LOG_NAME)
        self.max_record = max_record
        self.compact_min_bytes = compact_min_bytes
        self.stats = StorageStats()
        self._lock: DiskLock | None = lock
        self._file: DiskFile | None = file
        self._history = [Txn(z, v) for z, v in scan.history]
        self._zxids = [t.zxid for t in self._history]
        self._live = [0]  # _live[k]: bytes of the records of the first k transactions
        for _, v in scan.history:
            self._live.append(self._live[-1] + rec.txn_record_size(v))
        self._accepted, self._current = scan.accepted_epoch, scan.current_epoch
        self._seq = scan.seq
        self._file_size = scan.good_end  # where the next batch is written
        self._reserved_end = scan.good_end + scan.reserved  # the file's size as far as this Storage knows
        self._pending = bytearray()
        self._pending_reset = False
        self._durable_zxid = self.last_zxid
        self._broken: str | None = None

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    def open(cls, data_dir: str | os.PathLike[str], *, disk: Disk | None = None,
             max_record: int = rec.DEFAULT_MAX_RECORD,
             compact_min_bytes: int = DEFAULT_COMPACT_MIN) -> tuple[Storage, RecoveryReport]:
        """Lock, recover (or initialize) and open the data directory, which must exist. The lock lasts until
        `close`. StorageError naming the path if the directory is unusable; LogCorruption if the log is damaged."""
        disk = RealDisk() if disk is None else disk
        data_dir = os.fspath(data_dir)
        try:
            names = disk.listdir(data_dir)
        except FileNotFoundError:
            raise StorageError(f"{data_dir}: data directory does not exist") from None
        except NotADirectoryError:
            raise StorageError(f"{data_dir}: not a directory") from None
        except OSError as e:
            raise StorageError(f"{data_dir}: cannot list the data directory: {e.strerror}") from e
        lock = disk.lock(data_dir)
        try:
            return cls._open_locked(disk, data_dir, names, lock, max_record, compact_min_bytes)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _open_locked(cls, disk: Disk, data_dir: str, names: list[str], lock: DiskLock, max_record: int,
                     compact_min_bytes: int) -> tuple[Storage, RecoveryReport]:
        log_path = os.path.join(data_dir, LOG_NAME)
        try:
            removed = list(disk.recover(data_dir))
        except OSError as e:
            raise StorageError(f"{data_dir}: cannot recover the data directory: {e.strerror or e}") from e
        if (tmp := remove_stale_temp(disk, log_path)) is not None:
            removed.append(tmp)
        initialized = LOG_NAME not in disk.listdir(data_dir)
        if initialized:
            old = [n for n in OLD_FORMAT_NAMES if n in names]
            if old:
                raise StorageError(f"{data_dir}: holds {', '.join(old)} of the older zabref.disklog format and no "
                                   f"{LOG_NAME}; this format is not migrated (start from an empty directory)")
            atomic_write(disk, log_path, rec.MAGIC)
        try:
            data = disk.read(log_path)
        except OSError as e:
            raise StorageError(f"{log_path}: cannot read: {e.strerror}") from e
        scan = rec.scan_log(data, log_path, max_record)
        try:
            file = disk.open_write(log_path)
        except OSError as e:
            raise StorageError(f"{log_path}: cannot open for writing: {e.strerror}") from e
        try:
            if scan.torn_bytes:
                disk.truncate(file, scan.good_end)
                disk.fsync(file)
        except OSError as e:
            disk.close(file)
            raise StorageError(f"{log_path}: cannot cut off the torn tail: {e.strerror}") from e
        report = RecoveryReport(data_dir, initialized, scan.batches, scan.records, len(scan.history),
                                scan.torn_bytes, scan.torn_reason, tuple(removed))
        return cls(disk, data_dir, lock, file, scan, max_record, compact_min_bytes), report

    # ------------------------------------------------------------------------------------------ reading

    @property
    def history(self) -> list[Txn]:
        """Every transaction applied and not truncated, synced or not (a copy)."""
        return list(self._history)

    @property
    def last_zxid(self) -> int:
        """Zxid of the last transaction; 0 if the history is empty (seed 000's lastZxid)."""
        return self._zxids[-1] if self._zxids else 0

    @property
    def accepted_epoch(self) -> int:
        return self._accepted

    @property
    def current_epoch(self) -> int:
        return self._current

    @property
    def pending(self) -> bool:
        """Whether steps were applied since the last `sync` (they are not durable: send nothing they allow)."""
        return bool(self._pending)

    @property
    def durable_zxid(self) -> int:
        """`last_zxid` as of the last `sync`."""
        return self._durable_zxid

    def persistent(self) -> Persistent:
        """The three persistent variables, as the core takes them (`zabref.core.types.Persistent`)."""
        return Persistent(tuple(self._history), self._accepted, self._current)

    # ------------------------------------------------------------------------------------------ writing

    def apply(self, ops: tuple[PersistOp, ...] | list[PersistOp]) -> None:
        """Apply the storage operations of ONE step, in order, as one batch: in memory now, on disk at the next
        `sync`, whole or not at all. ValueError/TypeError naming the operation if one is invalid (nothing changes)."""
        self._writable()
        plan = _Plan(len(self._history), self.last_zxid, self._accepted, self._current, self.max_record)
        parts: list[bytes] = []
        for i, op in enumerate(ops):
            parts.extend(plan.op(self._zxids, i, op))
        if not parts:
            return
        self._seq += 1
        parts.append(rec.encode_commit(self._seq, len(parts)))
        self._pending += b"".join(parts)
        del self._history[plan.base :], self._zxids[plan.base :], self._live[plan.base + 1 :]
        for txn, size in plan.extra:
            self._history.append(txn)
            self._zxids.append(txn.zxid)
            self._live.append(self._live[-1] + size)
        self._accepted, self._current = plan.accepted, plan.current
        self._pending_reset |= plan.reset
        self.stats.steps += 1

    def sync(self) -> None:
        """Make every step applied so far durable: one write and one fsync (two fsyncs when it compacts)."""
        file = self._writable()
        if not self._pending:
            return
        try:
            if self._pending_reset or self._dead_bytes() > max(self._live_bytes(), self.compact_min_bytes):
                self._compact()
            else:
                data = bytes(self._pending)
                end = self._file_size + len(data)
                if end > self._reserved_end:
                    self._reserved_end = end + min(max(end, RESERVE_MIN), RESERVE_MAX)
                    self.disk.reserve(file, self._reserved_end)
                self.disk.write_at(file, self._file_size, data)
                self.disk.fsync(file)
                self._file_size += len(data)
                self.stats.bytes_written += len(data)
        except (OSError, StorageError) as e:
            self._broken = f"sync failed: {getattr(e, 'strerror', None) or e}"
            raise StorageError(f"{self.log_path}: {self._broken}") from e
        self._pending.clear()
        self._pending_reset = False
        self._durable_zxid = self.last_zxid
        self.stats.syncs += 1

    def _live_bytes(self) -> int:
        """Bytes of a compacted file holding the current state."""
        return rec.HEADER_SIZE + self._live[-1] + 2 * rec.EPOCH_RECORD_SIZE + rec.COMMIT_RECORD_SIZE

    def _dead_bytes(self) -> int:
        return self._file_size + len(self._pending) - self._live_bytes()

    def _compact(self) -> None:
        """Write the whole state as one batch in a new file, installed atomically (module docstring)."""
        image = rec.encode_image(self._history, self._accepted, self._current, self._seq)
        atomic_write(self.disk, self.log_path, image)
        new = self.disk.open_write(self.log_path)
        old, self._file = self._file, new
        if old is not None:
            self.disk.close(old)
        self._file_size = self._reserved_end = len(image)
        self.stats.compactions += 1
        self.stats.bytes_written += len(image)

    def _writable(self) -> DiskFile:
        if self._file is None:
            raise StorageError(f"{self.log_path}: storage is closed")
        if self._broken is not None:
            raise StorageError(f"{self.log_path}: storage failed earlier ({self._broken}); reopen to recover")
        return self._file

    # ------------------------------------------------------------------------------------------ closing

    def close(self) -> None:
        """Release the log and the directory lock. Steps applied since the last `sync` are dropped: sync first."""
        file, self._file = self._file, None
        if file is not None:
            try:
                self.disk.close(file)
            except OSError:
                pass
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Storage({self.data_dir!r}, transactions={len(self._history)}, last_zxid={self.last_zxid:#x}, "
                f"acceptedEpoch={self._accepted}, currentEpoch={self._current})")
