"""The proxy's recording: every byte each way on every proxied connection, in the order the proxy saw it.

Theory of operation
-------------------
A binary file, written by one thread (the proxy's event loop), so its order is the proxy's order of events::

    file   := MAGIC record*
    MAGIC  := b"ZKREC\\x00\\x01\\n"                         (8 bytes; the last-but-one byte is the format version)
    record := kind:u8  t_ns:u64  conn:u32  length:u32  body[length]      (big-endian; a 17-byte head)

``t_ns`` is ``time.monotonic_ns()`` when the proxy read the bytes or saw the event. ``conn`` numbers the proxied
connections from 1 in the order they were accepted (0: the run itself). The kinds:

====  ===========  ============================================================================================
kind  name         body
====  ===========  ============================================================================================
0     META         JSON: format, servers, ZooKeeper version, wall-clock start, every link (conn 0)
1     OPEN         JSON: the link accepted -- src, dst, kind (quorum/election), listen and target ports
2     CONNECTED    JSON: the proxy's connection to the target is up; bytes flow from here on
3     DATA_C2S     bytes from the connecting server (the link's src) to the accepting one (dst)
4     DATA_S2C     bytes from the accepting server back to the connecting one
5     EOF_C2S      the connecting side half-closed (it will send no more)
6     EOF_S2C      the accepting side half-closed
7     CLOSE        JSON: the connection is gone, and why (a side closed or reset, the target refused, stop)
8     FAULT        JSON: a fault applied or lifted -- cut/heal, the blocked (from, to) pairs after it (conn 0)
====  ===========  ============================================================================================

A DATA record holds what one read returned, so one quorum packet may span records and one record may hold several
packets; `conformance.zk.wire` joins each direction's bytes back into a stream. `read_records` checks every head: an
unknown kind or a length beyond `MAX_BODY` is a `WireError` naming the file and byte offset; a file that ends inside a
record (the writer killed) yields the complete records and reports the torn tail.
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, BinaryIO

from conformance.zk import WireError

__all__ = ["MAGIC", "Kind", "Record", "RecordingWriter", "Recording", "read_records"]

MAGIC = b"ZKREC\x00\x01\n"
HEAD = struct.Struct(">BQII")
MAX_BODY = 64 << 20


class Kind(IntEnum):
    META = 0
    OPEN = 1
    CONNECTED = 2
    DATA_C2S = 3
    DATA_S2C = 4
    EOF_C2S = 5
    EOF_S2C = 6
    CLOSE = 7
    FAULT = 8


JSON_KINDS = {Kind.META, Kind.OPEN, Kind.CONNECTED, Kind.CLOSE, Kind.FAULT}


@dataclass(frozen=True, slots=True)
class Record:
    kind: Kind
    t_ns: int
    conn: int
    body: bytes
    offset: int  # of the record's head in the file

    def json(self) -> dict[str, Any]:
        return json.loads(self.body) if self.body else {}


class RecordingWriter:
    """Appends records to a file; thread-safe, flushed on `flush` and `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 -- closed by close()
        self._file.write(MAGIC)
        self._lock = threading.Lock()
        self.bytes_data = 0

    def write(self, kind: Kind, t_ns: int, conn: int, body: bytes | dict[str, Any] = b"") -> None:
        if isinstance(body, dict):
            body = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        with self._lock:
            if self._file.closed:
                return
            self._file.write(HEAD.pack(kind, t_ns, conn, len(body)))
            self._file.write(body)
            if kind in (Kind.DATA_C2S, Kind.DATA_S2C):
                self.bytes_data += len(body)

    def flush(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()


@dataclass
class Recording:
    """A recording read back: its records, and the torn tail if the file ends inside one."""

    path: Path
    records: list[Record]
    torn_tail: tuple[int, int] | None  # (offset of the incomplete record, bytes present)

    @property
    def meta(self) -> dict[str, Any]:
        first = self.records[0] if self.records else None
        return first.json() if first is not None and first.kind is Kind.META else {}


def read_records(path: str | Path) -> Recording:
    path = Path(path)
    data = path.read_bytes()
    where = str(path)
    if data[: len(MAGIC)] != MAGIC:
        if MAGIC.startswith(data):
            return Recording(path, [], (0, len(data)))
        raise WireError(where, 0, f"not a zabref proxy recording (starts {data[:8]!r}, expected {MAGIC!r})")
    out: list[Record] = []
    pos = len(MAGIC)
    while pos < len(data):
        if len(data) - pos < HEAD.size:
            return Recording(path, out, (pos, len(data) - pos))
        kind, t_ns, conn, length = HEAD.unpack_from(data, pos)
        if kind not in Kind._value2member_map_:
            raise WireError(where, pos, f"unknown record kind {kind}")
        if length > MAX_BODY:
            raise WireError(where, pos, f"record length {length} is beyond {MAX_BODY}")
        end = pos + HEAD.size + length
        if end > len(data):
            return Recording(path, out, (pos, len(data) - pos))
        body = data[pos + HEAD.size : end]
        rec = Record(Kind(kind), t_ns, conn, body, pos)
        if rec.kind in JSON_KINDS and body:
            try:
                rec.json()
            except ValueError as e:
                raise WireError(where, pos, f"{rec.kind.name} record's body is not JSON ({e})") from None
        out.append(rec)
        pos = end
    return Recording(path, out, None)
