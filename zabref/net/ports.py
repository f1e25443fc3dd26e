"""Loopback port blocks for local clusters, leased across processes so parallel clusters never share a port.

Theory of operation
-------------------
A cluster of N servers takes ``10 * N`` consecutive ports from a base that is a multiple of 10 (see
`zabref.runtime.cluster.cluster_config`). Checking that the ports are free by binding them is not enough when several
clusters start at once (the conformance driver replays traces in parallel, tests may run beside it): between the
check and the servers binding, another cluster may pick the same block, and then one server answers another
cluster's control connection or fails to bind. So each 10-port block is also leased: an exclusive non-blocking
``flock`` on ``<tmp>/zabref-ports/<block>.lock``, held by the process that picked it until `release_base_port` (or
until that process exits -- the kernel drops the lock, so a crashed driver never leaks a block). A block is picked
only when its lock is free *and* its ports bind; ports some unrelated program holds are skipped the same way.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

from zabref.errors import ZabError

__all__ = ["find_free_base_port", "release_base_port", "lock_dir"]

_held: dict[int, list[int]] = {}  # base port -> the lock file descriptors this process holds for it
_guard = threading.Lock()


def lock_dir() -> Path:
    """Where the leases live (asked at use, not at import: ``zabref serve`` imports this module and must start even
    where no temporary directory is usable)."""
    return Path(tempfile.gettempdir()) / "zabref-ports"


def _lock_block(block: int) -> int | None:
    fd = os.open(lock_dir() / f"{block}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _unlock(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)  # closing drops the flock


def _binds(host: str, ports: range) -> bool:
    socks = []
    try:
        for port in ports:
            s = socket.socket()
            socks.append(s)
            s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def find_free_base_port(servers: int, host: str = "127.0.0.1", low: int = 10000, high: int = 32000,
                        tries: int = 200) -> int:
    """Lease a base port whose ``10 * servers`` ports are free now and leased by no other caller.

    The lease lasts until `release_base_port(base)` or the end of this process.
    """
    lock_dir().mkdir(parents=True, exist_ok=True)
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(low, high - 10 * servers) // 10 * 10
        fds: list[int] = []
        for block in range(base // 10, base // 10 + servers):
            fd = _lock_block(block)
            if fd is None:
                break
            fds.append(fd)
        if len(fds) == servers and _binds(host, range(base, base + 10 * servers)):
            with _guard:
                _held.setdefault(base, []).extend(fds)
            return base
        _unlock(fds)
    raise ZabError(f"no {10 * servers} free consecutive ports found in {low}..{high} after {tries} tries "
                   f"(leases in {lock_dir()})")


def release_base_port(base: int) -> None:
    """End this process's lease on the block that `find_free_base_port` returned as ``base`` (idempotent)."""
    with _guard:
        fds = _held.pop(base, [])
    _unlock(fds)
