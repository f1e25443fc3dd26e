#!/usr/bin/env python3
"""What does the action log cost? Writes per second of a 3-server cluster with and without ``--action-log``.

Theory of operation: the same workload -- W writes by C concurrent clients, each a `ZabClient` submitting one value
at a time to the leader -- runs against a fresh 3-server `LocalCluster` (normal mode, the real disk) without and
with the action log, alternating round by round so that the machine's load drifts over both alike. The ratio of the
medians is what to read (absolute rates depend on the machine's disk and load).

    .venv/bin/python scripts/bench_actionlog.py [--writes 2000] [--clients 1,16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabref.client import ZabClient  # noqa: E402
from zabref.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port  # noqa: E402
from zabref.control import ControlError  # noqa: E402


def _leader(cluster: LocalCluster) -> int | None:
    for sid, s in cluster.servers.items():
        try:
            with s.control(timeout=5) as c:
                v = c.request("state")["variables"]
        except (OSError, ControlError):
            continue
        if v["state"] == "LEADING" and v["zab_state"] == "BROADCAST":
            return sid
    return None


def run(writes: int, clients: int, logged: bool) -> float:
    """Writes per second of one fresh cluster."""
    with tempfile.TemporaryDirectory() as tmp:
        base = find_free_base_port(3)
        try:
            path = cluster_config(tmp, 3, base)
            with LocalCluster(path, action_log=Path(tmp) / "actions" if logged else None).start() as cluster:
                deadline = time.monotonic() + 30
                leader = _leader(cluster)
                while leader is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                    leader = _leader(cluster)
                if leader is None:
                    raise SystemExit("no leader within 30 s")
                address = [cluster.client_addresses()[leader - 1]]
                with ZabClient(address) as c:
                    c.submit("warm-up")
                per = writes // clients

                def client(k: int) -> None:
                    with ZabClient(address) as c:
                        for i in range(per):
                            c.submit(f"c{k}-{i}")

                threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
                start = time.perf_counter()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                return per * clients / (time.perf_counter() - start)
        finally:
            release_base_port(base)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--writes", type=int, default=2000)
    ap.add_argument("--clients", default="1,16", help="concurrent clients, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'clients':>7} {'without log w/s':>16} {'with log w/s':>13} {'with / without':>15}")
    for clients in (int(c) for c in args.clients.split(",")):
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for logged in (False, True):
                rates[logged].append(run(args.writes, clients, logged))
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        print(f"{clients:>7} {off:>16.0f} {on:>13.0f} {on / off:>14.2f}x")
    print(f"bench_actionlog: {args.writes} writes per run, {args.rounds} rounds alternated, medians")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
