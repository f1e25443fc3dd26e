"""The one atomic replace of a small file, over any `Disk`.

Theory of operation: `atomic_write` writes the new content to ``.<name>.tmp`` beside the target, fsyncs it (so the
data is on disk before any name points to it -- without this, a power cut after the rename can leave the target
empty: the classic ext4 zero-length-file bug), renames it over the target (atomic in POSIX: a reader sees the old
content or the new, never a mix) and fsyncs the directory (so the rename itself survives a power cut; without it
the old content comes back). A crash at any point leaves either the old file or the new one, plus perhaps a stale
temp file that `remove_stale_temp` deletes on the next open. Each of the two fsyncs is shown necessary by a seeded
bug (conformance/bugs_storage_pending/) that tests/test_storage_seeded.py catches.

`write_file` is the same replace for files outside a server's data directory (a cluster's config, a report, a fault
run's summary, conformance's outputs): on the real disk, the folder created, and a temp name of this process, so two
processes writing one path never take each other's temp file; a failed write removes its temp file.

`staged_folder` is the same for a whole folder of outputs (a report, a site, a folder of traces): the caller writes
into a temp folder beside the target; on a clean exit the old target is renamed aside, the new one renamed into
place and the old one removed, so a reader sees the old folder or the new one, never a mix; on an exception the temp
folder is removed and the target is untouched.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zabref.errors import StorageError
from zabref.storage.disk import Disk, RealDisk

__all__ = ["atomic_write", "temp_path", "remove_stale_temp", "write_file", "staged_folder"]


def temp_path(path: str | os.PathLike[str]) -> str:
    """Where `atomic_write` stages the next content of ``path``."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.tmp")


def atomic_write(disk: Disk, path: str | os.PathLike[str], data: bytes, *, tmp: str | None = None) -> None:
    """Replace ``path`` with ``data``: temp file, fsync it, rename over ``path``, fsync the directory.

    ``tmp``: the temp file's name (default `temp_path`, whose stale copy is removed first; a name of the caller's
    is removed if the replace fails). StorageError naming the path if any step fails (then ``path`` still holds
    its old content)."""
    path = os.fspath(path)
    own = tmp is not None
    tmp = tmp if tmp is not None else temp_path(path)
    try:
        if not own:
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
        if own:
            try:
                disk.unlink(tmp)
            except OSError:
                pass
        raise StorageError(f"{path}: cannot replace atomically: {e.strerror or e}") from e


def write_file(path: str | os.PathLike[str], data: bytes | str) -> Path:
    """`atomic_write` of ``data`` (text as UTF-8) to ``path`` on the real disk, its folder created first; returns
    the path. StorageError naming the path if it cannot be written (then it still holds its old content)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(f"{target.parent}: cannot create the folder: {e.strerror or e}") from e
    payload = data.encode("utf-8") if isinstance(data, str) else data
    atomic_write(RealDisk(), target, payload, tmp=str(target.with_name(f".{target.name}.{os.getpid()}.tmp")))
    return target


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


@contextmanager
def staged_folder(target: str | os.PathLike[str]) -> Iterator[Path]:
    """``with staged_folder(target) as tmp:`` write into ``tmp``; on a clean exit ``tmp`` replaces ``target`` whole
    (its folder created first); on an exception ``tmp`` is removed and ``target`` is left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        old = None
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
