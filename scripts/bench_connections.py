#!/usr/bin/env python3
"""Does one greedy client host leave a server available to the others? Write latency of a client while another
address holds thousands of connections and sends oversized frames.

Theory of operation: a fresh 3-server cluster (default `[limits]`: 1,024 client connections, 256 per address, 1 MiB
requests). A client on 127.0.0.1 submits W values one at a time to server 1 and its latencies are recorded, first
alone, then while a "stranger" on 127.0.0.2 has opened C connections to the same port (the server keeps its
per-address share and closes the rest at once) and keeps sending frames whose length prefix is over the limit (each
closed when its prefix arrives). Printed: how many of the stranger's connections were kept and closed, the
oversized frames sent and refused, and the client's p50/p99 latency in both phases with their ratio.

    .venv/bin/python scripts/bench_connections.py [--connections 5000] [--writes 300]
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zabref.client import ZabClient  # noqa: E402
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port, release_base_port  # noqa: E402


def latencies(address: tuple[str, int], writes: int, tag: str) -> list[float]:
    out = []
    with ZabClient([address], attempts=120) as c:
        for i in range(writes):
            t = time.perf_counter()
            c.submit(f"{tag}-{i}")
            out.append(time.perf_counter() - t)
    return out


def stranger(address: tuple[str, int], n: int) -> tuple[list[socket.socket], int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))
        s.connect(address)
        socks.append(s)
    kept, closed = set(socks), 0
    with selectors.DefaultSelector() as sel:  # epoll: select() stops at descriptor 1024
        for s in socks:
            sel.register(s, selectors.EVENT_READ)
        for _ in range(6):
            for key, _ in sel.select(0.5):
                s = key.fileobj
                if s.recv(1) == b"":
                    sel.unregister(s)
                    kept.discard(s)
                    s.close()
                    closed += 1
    return list(kept), closed


def oversized(address: tuple[str, int], stop: threading.Event, counts: list[int]) -> None:
    while not stop.is_set():
        with socket.socket() as s:
            s.bind(("127.0.0.2", 0))
            try:
                s.connect(address)
                s.sendall(struct.pack(">i", 64 * 1024 * 1024) + b"{" * 1024)
                counts[0] += 1
                s.settimeout(5)
                if s.recv(1) == b"":
                    counts[1] += 1
            except OSError:
                counts[1] += 1  # refused or reset: also not taken


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--writes", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = find_free_base_port(3)
        try:
            with LocalCluster(cluster_config(tmp, 3, base)).start() as cluster:
                me = cluster[1].me
                address = (me.host, me.client_port)
                latencies(address, 20, "warm")
                alone = latencies(address, args.writes, "alone")
                kept, closed = stranger(address, args.connections)
                stop, counts = threading.Event(), [0, 0]
                flood = threading.Thread(target=oversized, args=(address, stop, counts))
                flood.start()
                try:
                    loaded = latencies(address, args.writes, "loaded")
                finally:
                    stop.set()
                    flood.join()
                    for s in kept:
                        s.close()
                alive = all(s.running for s in cluster.servers.values())
        finally:
            release_base_port(base)
    print(f"stranger: {args.connections} connections from 127.0.0.2: {len(kept)} kept, {closed} closed at once; "
          f"{counts[0]} oversized frames sent, {counts[1]} closed")
    print(f"client on 127.0.0.1, {args.writes} writes each: alone p50 {pct(alone, .5):.1f} ms p99 "
          f"{pct(alone, .99):.1f} ms; beside the stranger p50 {pct(loaded, .5):.1f} ms p99 {pct(loaded, .99):.1f} ms; "
          f"median ratio {statistics.median(loaded) / statistics.median(alone):.2f}x; servers alive: {alive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
