"""Clusters kept between replays: a trace that passed leaves its servers for the next trace of the same shape.

Theory of operation
-------------------
Every Zab trace starts at the spec's Init: N servers on empty data directories, LOOKING. Forking N new servers for
each trace cost about as much as a short trace's steps (docs/performance.md), so `replay` hands a cluster whose trace
passed to `keep`, which asks its servers to start again on empty data directories (the control socket's ``reset``:
each process runs a new server, the same start-up as a new process, `zabref.runtime.server.run_server`) and keeps it;
`take` gives it to the next trace of the same key -- the number of servers, the seeded bug and the code root of
its patched copy, exec'd or forked, the work folder -- once its servers answer as their new incarnation. A cluster
whose trace failed or did not run is stopped, never kept (its servers may be paused, stopped at an fsync or halfway
through a step). Traces whose servers start from a given state (`seed`: the FastLeaderElection models) get a new
cluster.

At most `KEPT` clusters wait, all keys together (the one kept longest is stopped first); `close` (at exit) stops
them and removes their folders. Thread-safe (`zabref conform --jobs` runs its jobs in processes, each with its
own pool; a caller may still replay from threads).
"""

from __future__ import annotations

import atexit
import shutil
import threading
from typing import Any

from conformance.replay.harness import Cluster
from zabref.errors import ZabError

__all__ = ["take", "keep", "close", "KEPT"]

#: Clusters kept at most, all keys together (`zabref conform -j` needs one per job).
KEPT = 4

_kept: list[tuple[Any, Cluster]] = []  # (key, cluster), the one kept longest first
_lock = threading.Lock()


def take(key: Any) -> Cluster | None:
    """A kept cluster of ``key``, its servers running their new incarnation; None when none is kept (or the one
    kept did not come back: it is stopped)."""
    with _lock:
        k = next((k for k in range(len(_kept) - 1, -1, -1) if _kept[k][0] == key), None)
        cluster = _kept.pop(k)[1] if k is not None else None
    if cluster is None:
        return None
    try:
        cluster.reset_end()
    except (ZabError, OSError):  # ControlError is a ZabError
        discard(cluster)
        return None
    return cluster


def keep(key: Any, cluster: Cluster) -> None:
    """Reset ``cluster``'s servers and keep it for `take`; stopped instead when a server does not answer the
    reset. With `KEPT` clusters kept already, the one kept longest is stopped (each seeded bug has its own key: the
    clusters of the bugs replayed before wait no more)."""
    try:
        cluster.reset_begin()
    except (ZabError, OSError):
        return discard(cluster)
    _at_exit()
    with _lock:
        _kept.append((key, cluster))
        evicted = _kept.pop(0)[1] if len(_kept) > KEPT else None
    if evicted is not None:
        discard(evicted)


def discard(cluster: Cluster) -> None:
    """Stop the servers and remove the cluster's folder."""
    try:
        cluster.stop()
    except (ZabError, OSError):  # the fork server is gone (at exit): it killed its children as it went
        pass
    shutil.rmtree(cluster.folder, ignore_errors=True)


def close() -> None:
    """Stop every kept cluster (at exit; a test may call it to start from nothing)."""
    with _lock:
        clusters = [c for _, c in _kept]
        _kept.clear()
    for cluster in clusters:
        discard(cluster)


_registered = False


def _at_exit() -> None:
    """Register `close` at exit once, when the first cluster is kept: after the fork server registered its own
    (at its import), so that `close` runs first (LIFO) and stops the servers while the zygote still answers."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(close)
            _registered = True
