#!/usr/bin/env python3
"""How fast is zabref.storage beside the file system's floor? Appends + syncs per second, measured in one run.

Theory of operation: the same workload runs, interleaved round by round, against a baseline that only appends the
bytes to one file and syncs it with fdatasync, as RealDisk does (what any durable log must at least do: no framing,
no checksum, no directory fsync), and the storage (``storage.Storage``: ``apply`` of one step per transaction +
``sync``) on RealDisk, and on PowerLossDisk (the conformance mode); ratios against the baseline are what to read,
since absolute rates depend on the machine's disk and load. Two shapes:

    single   one transaction per sync (a follower ACKing each PROPOSAL alone): the fsync dominates
    group    G transactions per sync (group commit: G steps applied, one write, one fsync)

A third table repeats both shapes with ``os.fsync`` and ``os.fdatasync`` replaced by no-ops in this process
(``--no-cpu`` skips it): what is left is the CPU cost of each layer, which the disk's sync time hides in the first two.
Values are 100 bytes.
The data directory is a temporary folder under --dir (default: the system's temp folder), whose file system decides what
an fsync costs.

    .venv/bin/python scripts/bench_storage.py [--syncs 300] [--group 100] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabref.core.types import AppendTxns, Txn  # noqa: E402
from zabref.storage import PowerLossDisk, RealDisk, Storage  # noqa: E402

VALUE = b"x" * 100


def run_raw(d: Path, syncs: int, group: int) -> tuple[float, int]:
    """The floor: each transaction's zxid and value appended to one file, one fdatasync per sync (RealDisk's)."""
    fd = os.open(d / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    batches = [[(k * group + j + 1).to_bytes(8, "big") + VALUE for j in range(group)] for k in range(syncs)]
    start = time.perf_counter()
    for batch in batches:
        for record in batch:
            os.write(fd, record)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed, syncs


def run_new(d: Path, syncs: int, group: int, disk_kind: str) -> tuple[float, int]:
    disk = RealDisk() if disk_kind == "real" else PowerLossDisk()
    s, _ = Storage.open(d, disk=disk)
    disk.arm(None)
    # the steps are built before the clock starts, as the core builds them (its cost is not the storage's)
    batches = [[(AppendTxns((Txn(k * group + j + 1, VALUE),)),) for j in range(group)] for k in range(syncs)]
    start = time.perf_counter()
    for batch in batches:
        for step in batch:
            s.apply(step)
        s.sync()
    elapsed = time.perf_counter() - start
    s.close()
    return elapsed, disk.counts.fsyncs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--syncs", type=int, default=300, help="syncs per run (default 300)")
    ap.add_argument("--group", type=int, default=100, help="transactions per sync in the group shape (default 100)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each, interleaved; the median is reported")
    ap.add_argument("--dir", default=None, help="where to make the temporary data directories")
    ap.add_argument("--no-cpu", action="store_true", help="skip the runs with fsync replaced by a no-op")
    args = ap.parse_args()
    print(f"{'shape':11} {'system':24} {'txns/s':>10} {'syncs/s':>9} {'fsyncs/sync':>12} {'vs raw':>7}")
    table(args, "")
    if not args.no_cpu:
        with no_fsync():
            table(args, "/cpu")
    print(f"bench_storage: {args.rounds} rounds, median; 'vs raw' = rate / the raw write+fdatasync rate in the same "
          f"run; /cpu = os.fsync and os.fdatasync replaced by no-ops")
    return 0


@contextlib.contextmanager
def no_fsync():
    real = os.fsync, os.fdatasync
    os.fsync = os.fdatasync = lambda fd: None
    try:
        yield
    finally:
        os.fsync, os.fdatasync = real


def table(args: argparse.Namespace, suffix: str) -> None:
    shapes = {"single": (args.syncs, 1), "group": (max(1, args.syncs // 10), args.group)}
    systems = {"raw write+fdatasync": lambda d, n, g: run_raw(d, n, g),
               "storage RealDisk": lambda d, n, g: run_new(d, n, g, "real"),
               "storage PowerLossDisk": lambda d, n, g: run_new(d, n, g, "powerloss")}
    for shape, (syncs, group) in shapes.items():
        shape += suffix
        times: dict[str, list[float]] = {k: [] for k in systems}
        fsyncs: dict[str, int] = {}
        for r in range(args.rounds):
            for name, fn in systems.items():
                with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                    elapsed, n_fsyncs = fn(Path(tmp), syncs, group)
                times[name].append(elapsed)
                fsyncs[name] = n_fsyncs
        base = statistics.median(times["raw write+fdatasync"])
        for name in systems:
            t = statistics.median(times[name])
            print(f"{shape:11} {name:24} {syncs * group / t:10.0f} {syncs / t:9.0f} {fsyncs[name] / syncs:12.2f} "
                  f"{base / t:6.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
