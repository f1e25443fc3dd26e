"""`read_durable`: the persistent state a data directory's files hold, read without opening a `Storage`.

Theory of operation: the conformance driver compares, after every step, what each server's disk holds with the
spec's persistent variables (history, acceptedEpoch, currentEpoch), so that a missing fsync shows without any crash.
This reader takes no lock, writes nothing and keeps no state: it asks the disk for the *durable* bytes of ``zab.log``
(`Disk.read_durable`) and scans them with the recovery rules of `zabref.storage.records` -- a torn tail is ignored
(and reported), damage in the middle raises `LogCorruption`. It shares the format code with `Storage`, not its
memory: a step the server applied but did not make durable does not show here.

Which bytes are durable depends on the disk. Under `PowerLossDisk` the real files ARE the durable state, so any
process reads it with the default `RealDisk` while the server runs (a batch being appended by a sync in progress is
an incomplete batch, ignored). Under `RealDisk` the files show what the kernel holds, synced or not. Under `SimDisk`
pass the server's disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from zabref.core.types import Persistent, Txn
from zabref.errors import StorageError
from zabref.storage.disk import Disk, RealDisk
from zabref.storage.records import DEFAULT_MAX_RECORD, scan_log
from zabref.storage.store import LOG_NAME

__all__ = ["DurableState", "read_durable"]


@dataclass(frozen=True)
class DurableState:
    """The durable persistent variables of one data directory."""

    history: tuple[Txn, ...] = ()
    accepted_epoch: int = 0
    current_epoch: int = 0
    exists: bool = True  # False: no durable log yet (the initial state)
    torn_bytes: int = 0  # bytes of an incomplete last batch, ignored

    def persistent(self) -> Persistent:
        return Persistent(self.history, self.accepted_epoch, self.current_epoch)


def read_durable(data_dir: str | os.PathLike[str], disk: Disk | None = None, *,
                 max_record: int = DEFAULT_MAX_RECORD) -> DurableState:
    """The durable state of ``data_dir`` (module docstring). StorageError if the directory is missing or the log
    unreadable; LogCorruption if it is damaged."""
    disk = RealDisk() if disk is None else disk
    path = os.path.join(os.fspath(data_dir), LOG_NAME)
    try:
        data = disk.read_durable(path)
    except FileNotFoundError:
        try:
            disk.listdir_durable(data_dir)
        except OSError as e:
            raise StorageError(f"{os.fspath(data_dir)}: data directory cannot be read: {e.strerror or e}") from e
        return DurableState(exists=False)
    except OSError as e:
        raise StorageError(f"{path}: cannot read: {e.strerror or e}") from e
    scan = scan_log(data, path, max_record)
    return DurableState(tuple(Txn(z, v) for z, v in scan.history), scan.accepted_epoch, scan.current_epoch,
                        True, scan.torn_bytes)
