"""What a ZooKeeper server keeps on disk: its epochs and its transaction logs.

Theory of operation
-------------------
In ``<dataDir>/version-2/``:

* ``acceptedEpoch`` and ``currentEpoch``: the epoch as ASCII decimal (``QuorumPeer.writeLongToFile``, through a
  ``.tmp`` file and a rename). `read_epochs` gives None for a file not written yet; any other content is a
  `WireError` naming the file.
* ``log.<zxid hex>`` (``FileTxnLog``): ``FileHeader {int magic "ZKLG"; int version (2); long dbid}``, then records
  ``long checksum (Adler32 of the txn bytes); int length; txn bytes (conformance.zk.txns); byte 'B'``. The file is
  preallocated with zeros (64 MiB blocks, sparse), so a record whose checksum and length are both 0 is the end
  (``Util.readTxnBytes``: "we define EOF to be an empty transaction").

* ``snapshot.<zxid hex>`` (``FileSnap``): the data tree after every transaction up to ``zxid``
  (conformance/zk/snapshot.py). `history_zxids` gives the transactions the files hold: the creation zxids of the
  newest snapshot's nodes, then the logged transactions after its zxid -- a server synchronized by a SNAP holds
  the leader's transactions in a snapshot, not in its log.

`read_txn_log` returns every record with its offset and decoded transaction, and how the log ends: ``zeros`` (the
preallocated tail), ``eof``, or ``truncated`` -- the last record is cut short by the end of the file, or is
incomplete (no 'B', a checksum that fails) with only zeros after it: a write a crash interrupted. A bad record with
anything but zeros after it is a `WireError` with the file and the record's byte offset: a log damaged in the middle
is never read past.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.zk import WireError
from conformance.zk.txns import decode_txn
from zabref.errors import CodecError

__all__ = ["LogRecord", "TxnLog", "history_zxids", "log_files", "read_epochs", "read_txn_log", "snapshot_files"]

MAGIC = b"ZKLG"
HEADER = struct.Struct(">4sIq")
RECORD_HEAD = struct.Struct(">qi")
EOR = 0x42


def read_epochs(data_dir: str | Path) -> dict[str, int | None]:
    """``{"acceptedEpoch": e, "currentEpoch": e}`` from ``<data_dir>/version-2`` (None for a file not there)."""
    out: dict[str, int | None] = {}
    for name in ("acceptedEpoch", "currentEpoch"):
        path = Path(data_dir) / "version-2" / name
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            out[name] = None
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise WireError(str(path), 0, f"cannot read the epoch: {e}") from None
        if not text.strip().lstrip("-").isdigit():
            raise WireError(str(path), 0, f"not a decimal epoch: {text[:40]!r}")
        out[name] = int(text.strip())
    return out


@dataclass(frozen=True, slots=True)
class LogRecord:
    offset: int
    txn: dict[str, Any]


@dataclass
class TxnLog:
    path: Path
    version: int
    dbid: int
    records: list[LogRecord] = field(default_factory=list)
    end: str = "eof"  # zeros | eof | truncated
    end_offset: int = 0
    torn: str = ""  # why the last record is taken for a torn write (end == "truncated")

    @property
    def zxids(self) -> list[int]:
        return [r.txn["zxid"] for r in self.records]


def log_files(data_dir: str | Path) -> list[Path]:
    """The ``log.<zxid>`` files of a data dir, oldest first."""
    folder = Path(data_dir) / "version-2"
    files = [p for p in folder.glob("log.*") if _hex(p.name[4:]) is not None]
    return sorted(files, key=lambda p: _hex(p.name[4:]) or 0)


def snapshot_files(data_dir: str | Path) -> list[Path]:
    """The ``snapshot.<zxid>`` files of a data dir, oldest first."""
    folder = Path(data_dir) / "version-2"
    files = [p for p in folder.glob("snapshot.*") if _hex(p.name[9:]) is not None]
    return sorted(files, key=lambda p: _hex(p.name[9:]) or 0)


def history_zxids(data_dir: str | Path) -> list[int]:
    """The zxids of the transactions a data dir holds, in order: the newest snapshot's (its nodes' creation zxids,
    each transaction a create of a node of its own, as the played leaders and the conformance clients write them),
    then the logged ones after the snapshot's zxid. A `WireError` names a file that cannot be read (one being
    written included: a caller that waits for a server's files reads again)."""
    from conformance.zk.snapshot import read_snapshot_file  # noqa: PLC0415 (snapshot imports the stream codec)

    snaps = snapshot_files(data_dir)
    base, held = 0, []
    if snaps:
        base = _hex(snaps[-1].name[9:]) or 0
        held = sorted(z for z in read_snapshot_file(snaps[-1])["czxids"].values() if 0 < z <= base)
    logged = [z for p in log_files(data_dir) for z in read_txn_log(p).zxids if z > base]
    return held + logged


def _hex(s: str) -> int | None:
    try:
        return int(s, 16)
    except ValueError:
        return None


def read_txn_log(path: str | Path) -> TxnLog:
    path = Path(path)
    data = path.read_bytes()
    where = str(path)
    if len(data) < HEADER.size:
        raise WireError(where, 0, f"{len(data)} bytes: shorter than the {HEADER.size}-byte file header")
    magic, version, dbid = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireError(where, 0, f"magic is {magic!r}, not {MAGIC!r}")
    if version != 2:
        raise WireError(where, 4, f"log format version {version} (this reader knows 2)")
    log = TxnLog(path, version, dbid)
    pos = HEADER.size
    while True:
        if pos == len(data):
            log.end, log.end_offset = "eof", pos
            return log
        if len(data) - pos < RECORD_HEAD.size:
            return _torn(log, data, pos, "the record head is cut by the end of the file")
        checksum, length = RECORD_HEAD.unpack_from(data, pos)
        if checksum == 0 and length == 0:
            log.end, log.end_offset = "zeros", pos
            return log
        if length <= 0:
            if not any(data[pos + RECORD_HEAD.size :]):
                return _torn(log, data, pos, f"record length {length} with only zeros after it")
            raise WireError(where, pos + 8, f"record length {length}")
        body_at = pos + RECORD_HEAD.size
        if body_at + length + 1 > len(data):
            return _torn(log, data, pos, "the record is cut by the end of the file")
        body = data[body_at : body_at + length]
        problem = None
        if data[body_at + length] != EOR:
            problem = f"the record ends with byte 0x{data[body_at + length]:02x}, not 'B'"
        elif zlib.adler32(body) != checksum & 0xFFFFFFFF or checksum >> 32:
            problem = f"Adler32 checksum 0x{zlib.adler32(body):08x} does not match the record's 0x{checksum:x}"
        if problem is not None:
            if not any(data[body_at + length + 1 :]):
                return _torn(log, data, pos, problem)
            raise WireError(where, pos, problem)
        try:
            txn = decode_txn(body, "transaction")
        except CodecError as e:
            raise WireError(where, body_at + e.offset, f"transaction: {e.reason}") from None
        log.records.append(LogRecord(pos, txn))
        pos = body_at + length + 1


def _torn(log: TxnLog, data: bytes, pos: int, why: str) -> TxnLog:
    log.end, log.end_offset, log.torn = "truncated", pos, why
    return log
