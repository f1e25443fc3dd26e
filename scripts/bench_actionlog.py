#!/usr/bin/env python3
"""What does the action log cost? Writes per second of a 3-server cluster with and without ``--action-log``.

Theory of operation: the same workload -- W writes by C concurrent clients, each a `ZabClient` submitting one value
at a time to the leader -- runs against a fresh 3-server cluster of the benchmark (`ZabrefHarness`: normal mode, the
real disk, the benchmark's timing) without and with the action log, alternating round by round so that the
machine's load drifts over both alike. The ratio of the medians is what to read (absolute rates depend on the
machine's disk and load). Beside the rate, the servers' CPU time per write (user + system, from /proc): where the
servers share their cores with the clients the rate is CPU-bound, and CPU per write is the figure other load on the
machine disturbs least.

    .venv/bin/python scripts/bench_actionlog.py [--writes 2000] [--clients 1,16] [--rounds 3] [--line]

It first prints the CPU time of one typical line (a follower's PROPOSAL step) written to memory (``--line``: only
that).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.bench.systems import ZabrefHarness  # noqa: E402
from zabref.client import ZabClient  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(writes: int, clients: int, logged: bool) -> tuple[float, float]:
    """(writes per second, the three servers' CPU microseconds per write) of one fresh cluster."""
    with tempfile.TemporaryDirectory() as tmp:
        with ZabrefHarness(Path(tmp) / "cluster", action_log=Path(tmp) / "actions" if logged else None) as harness:
            address = [harness.adapter.addresses[harness.leader(timeout=30)]]
            with ZabClient(address) as c:
                c.submit("warm-up")
            per = writes // clients

            def client(k: int) -> None:
                with ZabClient(address) as c:
                    for i in range(per):
                        c.submit(f"c{k}-{i}")

            threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
            pids = [harness.cluster[sid].proc.pid for sid in harness.sids]
            cpu = sum(_cpu_seconds(pid) for pid in pids)
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - start
            cpu = sum(_cpu_seconds(pid) for pid in pids) - cpu
            return per * clients / elapsed, cpu / (per * clients) * 1e6


def line_cost(repeat: int = 40, number: int = 2000) -> float:
    """CPU microseconds of one typical line: a follower's FollowerProcessPROPOSAL (the packet taken, its ACK sent,
    the append, the variables), written to memory; the best of ``repeat`` runs of ``number`` lines."""
    import io  # noqa: PLC0415
    import timeit  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from zabref.core import payloads  # noqa: PLC0415
    from zabref.core.effects import Action, Effects  # noqa: PLC0415
    from zabref.core.packets import PacketType, QuorumPacket  # noqa: PLC0415
    from zabref.core.state import CoreState  # noqa: PLC0415
    from zabref.core.types import AppendTxns, Persistent, Txn  # noqa: PLC0415
    from zabref.runtime.actionlog import ActionLog  # noqa: PLC0415

    epoch = 1 << 32
    history = tuple(Txn(epoch + k, b"v%d" % k) for k in range(1, 2000))
    node = SimpleNamespace(core=CoreState(1, (1, 2, 3), Persistent(history, 1, 1)))
    zxid = epoch + 2000
    proposal = QuorumPacket(PacketType.PROPOSAL, zxid, payloads.encode_proposal_data(zxid, b"c1-1234"))
    effects = Effects(persist=(AppendTxns((Txn(zxid, b"c1-1234"),)),),
                      send=((3, QuorumPacket(PacketType.ACK, zxid, b"")),),
                      actions=(Action("Zab", "FollowerProcessPROPOSAL", (("i", 1), ("j", 3)), proposal, 7),))
    log = ActionLog(io.BytesIO(), 1)  # type: ignore[arg-type]
    best = min(timeit.repeat(lambda: log.step(node, effects, lambda peer: 7), number=number, repeat=repeat,
                             timer=time.process_time))
    return best / number * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--clients", default="1,16", help="concurrent clients, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--line", action="store_true", help="Only measure the CPU time of one typical line.")
    args = ap.parse_args()
    print(f"bench_actionlog: one FollowerProcessPROPOSAL line costs {line_cost():.1f} us of CPU (best of 40 x 2000)")
    if args.line:
        return 0
    print(f"{'clients':>7} {'w/s without':>12} {'w/s with':>9} {'ratio':>6}   "
          f"{'CPU us/write without':>20} {'with':>6} {'ratio':>6}")
    for clients in (int(c) for c in args.clients.split(",")):
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.rounds):
            for logged in (False, True):
                runs[logged].append(run(args.writes, clients, logged))
        off, on = (statistics.median(r[0] for r in runs[x]) for x in (False, True))
        cpu_off, cpu_on = (statistics.median(r[1] for r in runs[x]) for x in (False, True))
        print(f"{clients:>7} {off:>12.0f} {on:>9.0f} {on / off:>5.2f}x   "
              f"{cpu_off:>20.0f} {cpu_on:>6.0f} {cpu_on / cpu_off:>5.2f}x")
    print(f"bench_actionlog: {args.writes} writes per run, {args.rounds} rounds alternated, medians; CPU: the three "
          "servers' user+system time over the writes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
