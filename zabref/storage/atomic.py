"""The one atomic replace of a small file, over any `Disk`.

Theory of operation: `atomic_write` writes the new content to ``.<name>.tmp`` beside the target, fsyncs it (so the
data is on disk before any name points to it -- without this, a power cut after the rename can leave the target
empty: the classic ext4 zero-length-file bug), renames it over the target (atomic in POSIX: a reader sees the old
content or the new, never a mix) and fsyncs the directory (so the rename itself survives a power cut; without it
the old content comes back). A crash at any point leaves either the old file or the new one, plus perhaps a stale
temp file that `remove_stale_temp` deletes on the next open. Each of the two fsyncs is shown necessary by a seeded
bug (conformance/bugs_storage_pending/) that tests/test_storage_seeded.py catches.
"""

from __future__ import annotations

import os

from zabref.errors import StorageError
from zabref.storage.disk import Disk

__all__ = ["atomic_write", "temp_path", "remove_stale_temp"]


def temp_path(path: str | os.PathLike[str]) -> str:
    """Where `atomic_write` stages the next content of ``path``."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.tmp")


def atomic_write(disk: Disk, path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync it, rename over ``path``, fsync the directory.

    StorageError naming the path if any step fails (then ``path`` still holds its old content)."""
    path = os.fspath(path)
    tmp = temp_path(path)
    try:
        remove_stale_temp(disk, path)
        f = disk.create(tmp)
        try:
            disk.write(f, data)
            disk.fsync(f)
        finally:
            disk.close(f)
        disk.rename(tmp, path)
        disk.fsync_dir(os.path.dirname(path) or ".")
    except OSError as e:
        raise StorageError(f"{path}: cannot replace atomically: {e.strerror or e}") from e


def remove_stale_temp(disk: Disk, path: str | os.PathLike[str]) -> str | None:
    """Delete the temp file an interrupted `atomic_write` of ``path`` left; return its path if there was one.
    (Not made durable: if the deletion is lost, the next open deletes it again.)"""
    tmp = temp_path(path)
    try:
        disk.unlink(tmp)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"{tmp}: cannot remove stale temp file: {e.strerror}") from e
    return tmp
