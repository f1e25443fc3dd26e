"""The workload, run the same way on both systems: N requests in flight, each one's latency recorded.

Theory of operation
-------------------
A *system adapter* knows how to reach one server of its system with that system's own Python client and how to do
one write and one read there:

* `ZabrefAdapter`: `conformance.bench.zabclient` on asyncio, ONE connection to the server with N requests outstanding
  (zabref's client port pipelines a connection's requests and answers them in order, as ZooKeeper does a session's).
  Write = ``submit`` of the value; read = ``read`` of one transaction written before (by zxid).
* `ZooKeeperAdapter`: kazoo, ONE session to the server, N ``create_async``/``get_async`` calls outstanding (ZooKeeper
  pipelines the requests of a session and answers them in order). Write = ``create`` of a new znode
  ``/zabref-bench/<row>/<i>`` holding the value; read = ``get`` of a znode written before.

A third adapter, `conformance.bench.javaclient.JavaZooKeeperAdapter`, drives ZooKeeper with its own Java client.

`run_row` keeps exactly ``in_flight`` requests outstanding until ``count`` have completed (a new one is issued when
one completes), and returns a `conformance.bench.stats.Row`, with the client's CPU time over the row
(`time.process_time` of this process: the client is this process's event loop or kazoo's threads, the servers are other
processes). A failed request is counted in ``errors`` and not retried (none is expected while nothing is killed).
`run_load` is the open-ended version used during failover: workers keep issuing writes until told to stop, retrying
after failures, and every attempt is recorded as
``(t_issue, t_done, ok)`` on `time.monotonic`.

A value is 100 bytes of ASCII (its index, padded), the same on both systems.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from conformance.bench.stats import Row, make_row
from conformance.bench.zabclient import ZabAnswerError, ZabConnection

__all__ = ["VALUE_BYTES", "value", "ZabrefAdapter", "ZooKeeperAdapter", "Attempt"]

VALUE_BYTES = 100
ROOT = "/zabref-bench"
Attempt = tuple[float, float, bool]


def value(i: int, size: int = VALUE_BYTES) -> str:
    """The ``i``-th value written: ``size`` ASCII characters."""
    head = f"v{i:09d}-"
    return (head + "x" * size)[:size]


class ZabrefAdapter:
    """zabref through its client port; ``addresses[sid]`` = (host, client_port)."""

    system = "zabref"

    def __init__(self, addresses: dict[int, tuple[str, int]]) -> None:
        self.addresses = addresses
        self.written: list[int] = []  # zxids of every value written, for the reads
        self.last_error: str | None = None
        self.completed = 0  # requests of the current row answered (for progress)

    def run_row(self, op: str, target: str, sid: int, in_flight: int, count: int) -> Row:
        self.completed = 0
        lat, seconds, cpu, errors = asyncio.run(self._row(op, sid, in_flight, count))
        return make_row(self.system, op, target, in_flight, lat, seconds, errors, client_cpu_s=cpu)

    def close(self) -> None:
        """Nothing outlives a row."""

    async def _row(self, op: str, sid: int, in_flight: int, count: int) -> tuple[list[float], float, float, int]:
        host, port = self.addresses[sid]
        if op == "read" and not self.written:
            raise ValueError("reads need writes first")
        conn = await ZabConnection.open(host, port)
        lat: list[float] = []
        errors = 0
        nxt = 0
        pool = self.written

        async def worker(c: ZabConnection) -> None:
            nonlocal nxt, errors
            while nxt < count:
                i = nxt
                nxt += 1
                t0 = time.perf_counter()
                try:
                    if op == "write":
                        pool.append(await c.submit(value(i)))
                    else:
                        await c.read_one(pool[i % len(pool)])
                except (ZabAnswerError, OSError) as e:
                    errors += 1
                    self.last_error = f"{type(e).__name__}: {e}"
                    continue
                finally:
                    self.completed += 1
                lat.append(time.perf_counter() - t0)

        t, cpu = time.perf_counter(), time.process_time()
        try:
            await asyncio.gather(*(worker(conn) for _ in range(in_flight)))
        finally:
            conn.close()
        return lat, time.perf_counter() - t, time.process_time() - cpu, errors

    def run_load(self, sid: int, in_flight: int, stop: threading.Event, out: list[Attempt]) -> None:
        """Write to server ``sid`` until ``stop`` is set, retrying after failures; appends to ``out``."""
        asyncio.run(self._load(sid, in_flight, stop, out))

    async def _load(self, sid: int, in_flight: int, stop: threading.Event, out: list[Attempt]) -> None:
        host, port = self.addresses[sid]

        async def worker(w: int) -> None:
            c: ZabConnection | None = None
            i = w
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    if c is None:
                        c = await ZabConnection.open(host, port, timeout=1.0)
                    await asyncio.wait_for(c.submit(value(i)), 10.0)
                    out.append((t0, time.monotonic(), True))
                    i += in_flight
                    continue
                except (ZabAnswerError, OSError, TimeoutError) as e:
                    out.append((t0, time.monotonic(), False))
                    if not isinstance(e, ZabAnswerError) and c is not None:
                        c.close()
                        c = None
                await asyncio.sleep(0.005)
            if c is not None:
                c.close()

        await asyncio.gather(*(worker(w) for w in range(in_flight)))


class ZooKeeperAdapter:
    """ZooKeeper through kazoo; ``ports[sid]`` = client port on 127.0.0.1."""

    system = "zookeeper"

    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports
        self.written: list[str] = []  # paths of every znode written, for the reads
        self.last_error: str | None = None
        self.completed = 0  # requests of the current row answered (for progress)
        self._rows = 0

    def client(self, sid: int, fast_reconnect: bool = False) -> Any:
        from kazoo.client import KazooClient  # noqa: PLC0415 (optional dependency: the `bench` extra)

        retry = {"max_tries": -1, "delay": 0.02, "backoff": 1, "max_jitter": 0.01, "max_delay": 0.05} \
            if fast_reconnect else None
        zk = KazooClient(hosts=f"127.0.0.1:{self.ports[sid]}", timeout=10.0, connection_retry=retry)
        zk.start(timeout=30)
        return zk

    def run_row(self, op: str, target: str, sid: int, in_flight: int, count: int) -> Row:
        zk = self.client(sid)
        try:
            self._rows += 1
            parent = f"{ROOT}/r{self._rows}"
            if op == "write":
                zk.ensure_path(parent)
            elif not self.written:
                raise ValueError("reads need writes first")
            pool = self.written

            def issue(i: int) -> Any:
                if op == "write":
                    path = f"{parent}/{i:08d}"
                    pool.append(path)
                    return zk.create_async(path, value(i).encode())
                return zk.get_async(pool[i % len(pool)])

            self.completed = 0
            lat, seconds, cpu, errors, self.last_error = _pipelined(issue, in_flight, count, self)
        finally:
            zk.stop()
            zk.close()
        return make_row(self.system, op, target, in_flight, lat, seconds, errors, client_cpu_s=cpu)

    def close(self) -> None:
        """Nothing outlives a row."""

    def run_load(self, sid: int, in_flight: int, stop: threading.Event, out: list[Attempt]) -> None:
        zk = self.client(sid, fast_reconnect=True)
        parent = f"{ROOT}/load"
        zk.ensure_path(parent)
        counter = iter(range(10**12))
        lock = threading.Lock()
        try:
            def worker() -> None:
                while not stop.is_set():
                    with lock:
                        i = next(counter)
                    t0 = time.monotonic()
                    try:
                        zk.create_async(f"{parent}/{i:012d}", value(i).encode()).get(timeout=10)
                        out.append((t0, time.monotonic(), True))
                    except Exception:  # noqa: BLE001 -- kazoo raises ConnectionLoss, SessionExpired, timeouts...
                        out.append((t0, time.monotonic(), False))
                        time.sleep(0.005)

            threads = [threading.Thread(target=worker, daemon=True) for _ in range(in_flight)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            zk.stop()
            zk.close()


def _pipelined(issue: Callable[[int], Any], in_flight: int, count: int, counter: Any
               ) -> tuple[list[float], float, float, int, str | None]:
    """Keep ``in_flight`` kazoo async results outstanding until ``count`` completed (``counter.completed`` counts)."""
    slots = threading.Semaphore(in_flight)
    done = threading.Event()
    lat: list[float] = []
    errors = [0]
    last: list[str | None] = [None]
    finished = [0]
    lock = threading.Lock()

    def on_done(result: Any, t0: float) -> None:
        elapsed = time.perf_counter() - t0
        ok = result.successful()
        with lock:
            if ok:
                lat.append(elapsed)
            else:
                errors[0] += 1
                last[0] = f"{type(result.exception).__name__}: {result.exception}"
            finished[0] += 1
            counter.completed = finished[0]
            if finished[0] == count:
                done.set()
        slots.release()

    t, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        slots.acquire()
        t0 = time.perf_counter()
        issue(i).rawlink(lambda r, t0=t0: on_done(r, t0))
    if not done.wait(300):
        raise TimeoutError(f"ZooKeeper row did not finish within 300 s ({finished[0]} of {count})")
    return lat, time.perf_counter() - t, time.process_time() - cpu, errors[0], last[0]
