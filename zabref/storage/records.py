"""The storage log's format: records, batches, and the scan that recovery and the durable reader share.

Theory of operation
-------------------
One file, ``zab.log``, holds a server's whole persistent state (seed 000: history, acceptedEpoch, currentEpoch) as
an 8-byte header (``ZABLOG\\0\\1``) and then *records*, big-endian::

    uint32 crc32    CRC-32 (zlib) of every byte after it: the length, the kind and the body (as LevelDB's log)
    uint32 length   bytes after the length: 1 + len(body); 1 .. max_record
    uint8  kind     TXN 1, TRUNCATE 2, RESET 3, ACCEPTED_EPOCH 4, CURRENT_EPOCH 5, COMMIT 6
    body            TXN: int64 zxid, value | TRUNCATE: int64 zxid | RESET: - | *_EPOCH: uint32 epoch |
                    COMMIT: uint64 batch number, uint32 count of the records before it in the batch

Records come in *batches*: the records of one step of the core (one `Storage.apply`), then a COMMIT naming the batch
(numbers increase by one) and counting its records. A batch takes effect only when its COMMIT is read, so a crash
leaves a step's changes all or none: TRUNCATE drops every transaction above its zxid, RESET empties the history (a
SNAP is RESET then TXNs), an epoch record sets that epoch.

The scan (`scan_log`) reads the records in order. At the first record that does not check -- incomplete header or
body, length out of bounds, CRC mismatch -- at byte ``o``:

* if a COMMIT record that checks starts anywhere after ``o``, a batch that was once complete (hence possibly synced
  and acknowledged) would be lost: `LogCorruption` names the file, the record number and ``o``;
* if no record of a batch came before ``o`` and every byte from ``o`` to the end is zero, they are *reserved*
  space, not damage: storage preallocates the log ahead of its writes (`zabref.storage.store`), and a zero byte
  begins no record (a length is at least 1);
* otherwise the bytes from the start of the incomplete batch on are a *torn tail* -- what a crash during the last
  write left (a batch without its COMMIT is torn too, and so is one followed by zeros). The scan reports the byte
  offset to cut at and why.

A record that checks but breaks a rule -- unknown kind, wrong body size, zxid not above the previous one, a COMMIT
whose count or number is wrong -- is corruption wherever it is: a torn write cannot produce a valid CRC.
"""

from __future__ import annotations

import bisect
import enum
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from zabref.core.packets import MAX_EPOCH
from zabref.errors import LogCorruption

__all__ = [
    "MAGIC", "HEADER_SIZE", "DEFAULT_MAX_RECORD", "Kind", "LogScan", "scan_log", "records_of", "encode_txn",
    "encode_truncate",
    "encode_reset", "encode_epoch", "encode_commit", "encode_image", "txn_record_size", "EPOCH_RECORD_SIZE",
    "COMMIT_RECORD_SIZE", "ZXID_MAX",
]

MAGIC = b"ZABLOG\x00\x01"
HEADER_SIZE = len(MAGIC)
#: Largest record body (kind + body) accepted on write and on recovery.
DEFAULT_MAX_RECORD = 64 * 1024 * 1024
ZXID_MAX = (1 << 63) - 1


class Kind(enum.IntEnum):
    TXN = 1
    TRUNCATE = 2
    RESET = 3
    ACCEPTED_EPOCH = 4
    CURRENT_EPOCH = 5
    COMMIT = 6


_PREFIX = struct.Struct(">II")  # crc, length
_LENGTH_KIND = struct.Struct(">IB")
_TXN_HEAD = struct.Struct(">IBq")  # length, kind, zxid
_PREFIX_SIZE = _PREFIX.size
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_COMMIT = struct.Struct(">QI")
_COMMIT_LENGTH = 1 + _COMMIT.size
_COMMIT_MARK = _LENGTH_KIND.pack(_COMMIT_LENGTH, 6)  # the length and kind of every COMMIT record
#: Body sizes of the fixed-size kinds.
_BODY_SIZE = {Kind.TRUNCATE: 8, Kind.RESET: 0, Kind.ACCEPTED_EPOCH: 4, Kind.CURRENT_EPOCH: 4, Kind.COMMIT: 12}


def _record(kind: Kind, body: bytes) -> bytes:
    rest = _LENGTH_KIND.pack(1 + len(body), kind) + body
    return _U32.pack(zlib.crc32(rest)) + rest


def encode_txn(zxid: int, value: bytes) -> bytes:
    rest = _TXN_HEAD.pack(9 + len(value), Kind.TXN, zxid) + value
    return _U32.pack(zlib.crc32(rest)) + rest


def txn_record_size(value: bytes) -> int:
    return _PREFIX_SIZE + 1 + 8 + len(value)


def encode_truncate(zxid: int) -> bytes:
    return _record(Kind.TRUNCATE, _I64.pack(zxid))


def encode_reset() -> bytes:
    return _record(Kind.RESET, b"")


def encode_epoch(kind: Kind, epoch: int) -> bytes:
    return _record(kind, _U32.pack(epoch))


def encode_commit(seq: int, count: int) -> bytes:
    return _record(Kind.COMMIT, _COMMIT.pack(seq, count))


EPOCH_RECORD_SIZE = len(encode_epoch(Kind.ACCEPTED_EPOCH, 0))
COMMIT_RECORD_SIZE = len(encode_commit(0, 0))


def encode_image(history: Iterable[tuple[int, bytes]], accepted: int, current: int, seq: int) -> bytes:
    """A whole log file holding this state as one batch numbered ``seq`` (compaction), or just the header if the
    state is the initial one and ``seq`` is 0."""
    if seq == 0:
        return MAGIC
    parts = [MAGIC, encode_epoch(Kind.ACCEPTED_EPOCH, accepted), encode_epoch(Kind.CURRENT_EPOCH, current)]
    parts.extend(encode_txn(z, v) for z, v in history)
    parts.append(encode_commit(seq, len(parts) - 1))
    return b"".join(parts)


@dataclass(frozen=True)
class LogScan:
    """The state the committed batches of a log image describe, and where its torn tail (if any) starts."""

    history: list[tuple[int, bytes]]
    accepted_epoch: int
    current_epoch: int
    seq: int  # number of the last committed batch (0: none)
    batches: int
    records: int  # records of the committed batches, COMMITs included
    good_end: int  # byte offset just past the last committed batch
    size: int  # bytes in the image
    torn_reason: str | None
    reserved: int = 0  # zero bytes after ``good_end`` that are reserved space, not a torn tail

    @property
    def torn_bytes(self) -> int:
        return self.size - self.good_end - self.reserved


def _damage(data: bytes, off: int, max_record: int) -> str | None:
    """Why the record at ``off`` does not check on its own, or None if it does."""
    n = len(data)
    if n - off < _PREFIX_SIZE + 1:
        return f"incomplete record header, {n - off} of {_PREFIX_SIZE + 1} bytes"
    crc, length = _PREFIX.unpack_from(data, off)
    if not 1 <= length <= max_record:
        return f"length {length} is outside 1..{max_record}"
    if off + _PREFIX_SIZE + length > n:
        return f"incomplete record: length {length}, but only {n - off - _PREFIX_SIZE} bytes follow the CRC"
    actual = zlib.crc32(memoryview(data)[off + 4 : off + _PREFIX_SIZE + length])
    if actual != crc:
        return f"CRC mismatch (stored {crc:08x}, computed {actual:08x})"
    return None


def _find_commit(data: bytes, start: int) -> int | None:
    """Offset of the first COMMIT record that checks at or after ``start``, or None."""
    p = data.find(_COMMIT_MARK, start + 4)
    while p >= 0:
        if _damage(data, p - 4, _COMMIT_LENGTH) is None:
            return p - 4
        p = data.find(_COMMIT_MARK, p + 1)
    return None


class _State:
    """The persistent variables while the scan applies committed batches."""

    def __init__(self) -> None:
        self.history: list[tuple[int, bytes]] = []
        self.zxids: list[int] = []
        self.accepted = 0
        self.current = 0

    def apply(self, kind: Kind, body: bytes) -> str | None:
        """Apply one record; returns why it breaks a rule, or None."""
        if kind == Kind.TXN:
            (zxid,) = _I64.unpack_from(body)
            last = self.zxids[-1] if self.zxids else 0
            if zxid <= last:
                return f"zxid {zxid:#x} does not follow the previous zxid {last:#x}"
            self.history.append((zxid, bytes(body[8:])))
            self.zxids.append(zxid)
        elif kind == Kind.TRUNCATE:
            (zxid,) = _I64.unpack(body)
            if zxid < 0:
                return f"truncation to a negative zxid {zxid}"
            keep = bisect.bisect_right(self.zxids, zxid)
            del self.history[keep:], self.zxids[keep:]
        elif kind == Kind.RESET:
            self.history.clear()
            self.zxids.clear()
        else:
            (epoch,) = _U32.unpack(body)
            if epoch > MAX_EPOCH:  # a uint32 can: no zxid carries such an epoch
                return f"epoch {epoch} is above {MAX_EPOCH}"
            if kind == Kind.ACCEPTED_EPOCH:
                self.accepted = epoch
            else:
                self.current = epoch
        return None


def scan_log(data: bytes, path: str, max_record: int = DEFAULT_MAX_RECORD) -> LogScan:
    """Parse a whole log image by the rules of the module docstring. LogCorruption for damage in the middle or a
    record that breaks a rule; otherwise the committed state and where the torn tail starts."""
    if data[:HEADER_SIZE] != MAGIC:
        shown = data[:HEADER_SIZE]
        raise LogCorruption(path, 0, 0, f"file header is {shown!r}, not {MAGIC!r}: not a zabref storage log, or its "
                                        f"header is damaged (a log is created whole, so it cannot be torn)")
    n = len(data)
    state = _State()
    seq = batches = records = 0
    batch: list[tuple[Kind, bytes, int, int]] = []  # kind, body, offset, record number
    off = start = HEADER_SIZE
    rec = 0
    while off < n:
        damage = _damage(data, off, max_record)
        if damage is not None:
            after = _find_commit(data, off + 1)
            if after is not None:
                raise LogCorruption(path, rec, off, f"{damage}; a valid commit record follows at byte {after}")
            if not batch and data.count(0, off) == n - off:
                return LogScan(state.history, state.accepted, state.current, seq, batches, records, start, n, None,
                               n - off)
            reason = f"record {rec} at byte {off}: {damage}"
            if batch:
                reason += f"; the incomplete batch from byte {start} ({len(batch)} records) is dropped"
            return LogScan(state.history, state.accepted, state.current, seq, batches, records, start, n, reason)
        _, length = _PREFIX.unpack_from(data, off)
        end = off + _PREFIX_SIZE + length
        kind_byte = data[off + _PREFIX_SIZE]
        body = data[off + _PREFIX_SIZE + 1 : end]
        if kind_byte not in Kind._value2member_map_:
            raise LogCorruption(path, rec, off, f"unknown record kind {kind_byte}")
        kind = Kind(kind_byte)
        if len(body) != _BODY_SIZE[kind] if kind in _BODY_SIZE else len(body) < 8:
            raise LogCorruption(path, rec, off, f"{kind.name} record with a body of {len(body)} bytes")
        if kind != Kind.COMMIT:
            batch.append((kind, body, off, rec))
        else:
            number, count = _COMMIT.unpack(body)
            if count != len(batch):
                raise LogCorruption(path, rec, off, f"COMMIT of batch {number} counts {count} records, "
                                                    f"but {len(batch)} precede it")
            if number != seq + 1 and not (batches == 0 and number > seq):
                raise LogCorruption(path, rec, off, f"batch number {number} does not follow {seq}")
            for b_kind, b_body, b_off, b_rec in batch:
                broken = state.apply(b_kind, b_body)
                if broken is not None:
                    raise LogCorruption(path, b_rec, b_off, f"{b_kind.name} record: {broken}")
            seq, batches, records = number, batches + 1, records + len(batch) + 1
            batch.clear()
            start = end
        rec += 1
        off = end
    unfinished = None if not batch else f"the batch from byte {start} has {len(batch)} records and no COMMIT"
    return LogScan(state.history, state.accepted, state.current, seq, batches, records, start, n, unfinished)


def records_of(data: bytes) -> list[tuple[int, int, Kind]]:
    """(start, end, kind) of every record of a sound log image, in order -- for tools and tests that point at one
    record (its offsets) without parsing the format themselves. Stops at the first record that does not check."""
    out = []
    off = HEADER_SIZE
    while off < len(data) and _damage(data, off, DEFAULT_MAX_RECORD) is None:
        _, length = _PREFIX.unpack_from(data, off)
        end = off + _PREFIX_SIZE + length
        out.append((off, end, Kind(data[off + _PREFIX_SIZE])))
        off = end
    return out
