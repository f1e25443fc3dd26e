"""zabref's storage layer: one server's persistent state on a `Disk` that may model power loss.

Modules, in the order a reader meets them: `disk` (the Disk interface, `RealDisk`, crash points), `simdisk` (the
power-loss model, `SimDisk`), `powerloss` (`PowerLossDisk`: the model over real files), `atomic` (the one atomic
file replace), `records` (the log format and its scan), `store` (`Storage`), `durable` (`read_durable`).
docs/wire-and-disk.md describes the format and what the power-loss model does and does not model.
"""

from zabref.storage.atomic import atomic_write
from zabref.storage.disk import (
    ENV_CRASH_AT,
    ENV_DISK,
    CrashPoint,
    Disk,
    DiskCounts,
    PowerCut,
    RealDisk,
)
from zabref.storage.durable import DurableState, read_durable
from zabref.storage.powerloss import PowerLossDisk, disk_from_env, recover
from zabref.storage.simdisk import SimDisk
from zabref.storage.store import LOG_NAME, RecoveryReport, Storage, StorageStats

__all__ = [
    "Disk", "RealDisk", "SimDisk", "PowerLossDisk", "CrashPoint", "PowerCut", "DiskCounts", "disk_from_env",
    "ENV_DISK", "ENV_CRASH_AT", "recover", "atomic_write", "Storage", "RecoveryReport", "StorageStats", "LOG_NAME",
    "DurableState", "read_durable",
]
