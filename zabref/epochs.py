"""acceptedEpoch and currentEpoch on disk, and the atomic-replace discipline every small file in a data dir follows.

Superseded by `zabref.storage` (the epochs are records of its log; `zabref.storage.atomic_write` is the one atomic
replace) and kept only until the runtime switches. The crash claims below follow from POSIX; no test here ever cut
the power (a SIGKILL keeps the page cache), so none of them was checked.

Theory of operation
-------------------
Seed 000 lists two epochs among a server's persistent state: ``acceptedEpoch`` (the epoch of the last LEADERINFO --
the paper's NEWEPOCH -- accepted) and ``currentEpoch`` (the epoch of the last NEWLEADER accepted). Each lives in its
own file in the data directory, named exactly so, holding one line::

    acceptedEpoch 7 3a1c55e2

the file's own name, the epoch in decimal (no sign, no leading zeros), and the CRC-32 of ``"acceptedEpoch 7"`` in
eight lower-case hex digits. The format is strict: any other content -- a torn file, a flipped bit, a file copied
under the wrong name -- raises `CorruptEpochFile` naming the path and what is wrong. The line is readable with
``cat``, which matters to whoever inspects a data directory after a failure.

A file is never rewritten in place. `atomic_write` writes the new content to ``.<name>.tmp`` in the same directory,
fsyncs it, renames it over ``<name>`` (rename is atomic in POSIX), then fsyncs the directory so that the rename itself
survives a crash. A crash at any point leaves either the old file or the new one, plus perhaps a stale ``.tmp`` that
the next open removes (`remove_stale_temp`). Failed system calls become `StorageError` naming the path.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

from zabref.errors import StorageError
from zabref.packets import MAX_EPOCH

__all__ = [
    "ACCEPTED_EPOCH",
    "CURRENT_EPOCH",
    "CorruptEpochFile",
    "atomic_write",
    "fsync_directory",
    "temp_path",
    "remove_stale_temp",
    "encode_epoch",
    "decode_epoch",
    "read_epoch",
    "write_epoch",
]

#: File names, equal to seed 000's (and ZooKeeper's) names for the two variables.
ACCEPTED_EPOCH = "acceptedEpoch"
CURRENT_EPOCH = "currentEpoch"

_LINE = re.compile(rb"(acceptedEpoch|currentEpoch) (0|[1-9][0-9]{0,9}) ([0-9a-f]{8})\n")


class CorruptEpochFile(StorageError):
    """An epoch file whose content is not exactly one well-formed, checksummed line."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def temp_path(path: Path) -> Path:
    """Where `atomic_write` stages the next content of ``path``."""
    return path.with_name(f".{path.name}.tmp")


def fsync_directory(directory: Path) -> None:
    """Make renames and creations inside ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise StorageError(f"{directory}: cannot open directory to fsync it: {e.strerror}") from e
    try:
        os.fsync(fd)
    except OSError as e:
        raise StorageError(f"{directory}: fsync of directory failed: {e.strerror}") from e
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temp file, fsync it, rename it over ``path``, fsync the directory."""
    tmp = temp_path(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise StorageError(f"{path}: cannot write: {e.strerror or e}") from e
    fsync_directory(path.parent)


def remove_stale_temp(path: Path) -> Path | None:
    """Delete the temp file a crash inside `atomic_write` may have left beside ``path``; return it if there was one."""
    tmp = temp_path(path)
    try:
        tmp.unlink()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"{tmp}: cannot remove stale temp file: {e.strerror}") from e
    return tmp


def _check_epoch(name: str, epoch: int) -> None:
    if name not in (ACCEPTED_EPOCH, CURRENT_EPOCH):
        raise ValueError(f"unknown epoch file name {name!r}")
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"{name} = {epoch} is outside 0..{MAX_EPOCH}")


def encode_epoch(name: str, epoch: int) -> bytes:
    _check_epoch(name, epoch)
    body = f"{name} {epoch}".encode("ascii")
    return body + b" %08x\n" % zlib.crc32(body)


def decode_epoch(name: str, raw: bytes, path: str) -> int:
    """The epoch in ``raw``, the content of the file ``path`` that must be named ``name``."""
    m = _LINE.fullmatch(raw)
    if m is None:
        shown = raw[:60].decode("ascii", "backslashreplace")
        raise CorruptEpochFile(path, f"not one line '<name> <epoch> <crc32>' (content: {shown!r})")
    if m[1].decode() != name:
        raise CorruptEpochFile(path, f"holds {m[1].decode()}, expected {name}")
    body = raw[: m.end(2)]
    if int(m[3], 16) != zlib.crc32(body):
        raise CorruptEpochFile(path, f"checksum {m[3].decode()} does not match {zlib.crc32(body):08x}")
    epoch = int(m[2])
    if epoch > MAX_EPOCH:
        raise CorruptEpochFile(path, f"epoch {epoch} is above {MAX_EPOCH}")
    return epoch


def read_epoch(data_dir: Path, name: str) -> int | None:
    """The epoch stored in ``data_dir/name``, or None if the file does not exist."""
    path = data_dir / name
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"{path}: cannot read: {e.strerror}") from e
    return decode_epoch(name, raw, str(path))


def write_epoch(data_dir: Path, name: str, epoch: int) -> None:
    """Store ``epoch`` in ``data_dir/name`` atomically and durably (two fsyncs: the file, then the directory)."""
    atomic_write(data_dir / name, encode_epoch(name, epoch))
