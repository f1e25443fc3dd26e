"""Does a process that waits in epoll wake later than one blocked in read? Round trips between two processes.

A question of issue 38's one-write-in-flight rows: a zabref server waits for its packets in ``epoll_wait`` (its event
loop), ZooKeeper's quorum threads block in ``read`` on their sockets, and a wake-up with the kernel's "sync" hint may
run the woken task on the waker's processor instead of waking an idle one. This measures the round trip between two
processes over loopback TCP, each waiting one way or the other, with a pause between round trips (the processors may
go idle, as between writes at one in flight), and with the answering side writing 1 KiB and calling fdatasync before
it answers (a follower's ACK) or not. Printed: each way's median and 90th percentile, and epoll's median over
block's, from one run (the ways alternate, rounds times).

    .venv/bin/python scripts/bench_wakeup.py [--trips 3000] [--rounds 2] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import statistics
import tempfile
import time
from collections.abc import Callable


def _waiter(sock: socket.socket, how: str) -> Callable[[], bytes]:
    """What waits for the next bytes on ``sock``: a blocking recv, or epoll_wait then a non-blocking recv."""
    if how == "block":
        return lambda: sock.recv(64)
    ep = select.epoll()
    sock.setblocking(False)
    ep.register(sock.fileno(), select.EPOLLIN)

    def wait() -> bytes:
        while True:
            ep.poll(-1)
            try:
                return sock.recv(64)
            except BlockingIOError:
                continue
    return wait


def _answer(port: int, how: str, trips: int, log: str | None) -> None:
    """The answering process: each byte read is answered with one (after a 1 KiB write and fdatasync to ``log``)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    wait = _waiter(sock, how)
    fd = -1
    if log is not None:
        fd = os.open(log, os.O_WRONLY)
        os.posix_fallocate(fd, 0, trips * 1024)
    for k in range(trips):
        wait()
        if fd >= 0:
            os.pwrite(fd, b"z" * 1024, k * 1024)
            os.fdatasync(fd)
        sock.send(b"y")


def round_trips(how: str, trips: int, sync_dir: str | None) -> list[float]:
    """Seconds of each round trip, both processes waiting ``how``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    log = None
    if sync_dir is not None:
        fd, log = tempfile.mkstemp(dir=sync_dir, prefix="wakeup-")
        os.close(fd)
    pid = os.fork()
    if pid == 0:
        try:
            _answer(listener.getsockname()[1], how, trips, log)
        finally:
            os._exit(0)
    try:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        wait = _waiter(sock, how)
        times = []
        for _ in range(trips):
            started = time.perf_counter()
            sock.send(b"x")
            wait()
            times.append(time.perf_counter() - started)
            time.sleep(0.0003)
        return times
    finally:
        os.waitpid(pid, 0)
        listener.close()
        if log is not None and os.path.exists(log):
            os.unlink(log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the answering side's log is synced")
    args = parser.parse_args()
    for sync_dir in (None, args.dir):
        medians: dict[str, list[float]] = {"block": [], "epoll": []}
        p90: dict[str, list[float]] = {"block": [], "epoll": []}
        for r in range(args.rounds):
            for how in (("block", "epoll") if r % 2 == 0 else ("epoll", "block")):
                times = sorted(round_trips(how, args.trips, sync_dir))
                medians[how].append(statistics.median(times))
                p90[how].append(times[int(len(times) * 0.9)])
        what = "with fdatasync" if sync_dir else "no sync"
        for how in ("block", "epoll"):
            print(f"{what:15} {how:6} median {statistics.median(medians[how]) * 1e6:8.1f} us   "
                  f"p90 {statistics.median(p90[how]) * 1e6:8.1f} us")
        ratio = statistics.median(medians["epoll"]) / statistics.median(medians["block"])
        print(f"{what:15} epoll/block median {ratio:.2f}")


if __name__ == "__main__":
    main()
