"""The client load of a fault run on real ZooKeeper: kazoo writers and a sampler, recorded for the history checker.

Theory of operation
-------------------
Each `ZkWriter` is a thread with its own kazoo session (ZooKeeper's Python client) to the whole ensemble. It writes
unique values ``c<client>-<k>``, each as ONE sequential create ``<root>/<value>-`` (`conformance.zk.delivered`),
one at a time, never retried -- a retried create could commit one value twice and hide or fake a duplicate -- and
records each as a `conformance.faults.history.Write`:

* ``ok``: ZooKeeper answered with the node's stat: the zxid is its ``czxid`` (``create2``, kazoo's
  ``include_data``);
* ``fail``: nothing was sent -- kazoo refused at once because the client is closed (``ConnectionClosedError``);
  while the session is not connected the writer does not submit at all, it waits;
* ``unknown``: anything else after the request was handed to kazoo: no answer within ``timeout`` (a paused or
  partitioned server; kazoo may still send a request it queued while reconnecting), a connection loss, an expired
  session.

``hold`` (an Event) holds the load: the writer finishes the write under way and waits -- a schedule's
``{"op": "load", "on": false}``, used where a scripted scenario needs the servers quiet.

Each `ZkReader` is a thread with its own kazoo session to ONE server: every ``period`` seconds, unless held, a
``sync`` of the root and then a read of it there (ZooKeeper's guarantee, the programmer's guide: a read after sync
sees every write that completed before the sync began), recorded as a synced `conformance.faults.history.Read`
whose ``end`` is the zxid the read's reply header carries (ZooKeeper's lastProcessedZxid there: every transaction up
to it applied, in zxid order). That zxid counts every transaction (sessions too), so `reads_at_writes` maps it to
the last write at or below it before the checker holds the reads to the reference. At a follower the sync crosses
the quorum connection as REQUEST and SYNC, which the validation holds to spec/ZabSync.tla.

The `ZkSampler` reads, every ``period`` seconds, every server alone (one session each, to that server only): the
children of the root it has not seen there yet and their ``czxid``, as one `conformance.faults.history.Sample`
(``after``: the last zxid seen there). The checker holds each sample against the final sequences, so a server that
delivered a value and later forgot it is caught even if the final read does not show the gap.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from conformance.faults.history import Outcome, Read, Sample, Write
from conformance.zk.delivered import node_value

__all__ = ["ZkWriter", "ZkReader", "ZkSampler", "ROOT", "reads_at_writes"]

ROOT = "/zabref-faults"
SESSION_TIMEOUT = 10.0


def _client(hosts: str, timeout: float = SESSION_TIMEOUT):  # noqa: ANN202 (kazoo is an optional dependency)
    from kazoo.client import KazooClient  # noqa: PLC0415

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    return KazooClient(hosts=hosts, timeout=timeout,
                       connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
                       command_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5, "deadline": 60.0})


def next_due(due: float, now: float, rate: float) -> float:
    """When a writer paced at ``rate`` writes a second starts its next write, the last one having been due at ``due``
    and started at ``now``: one period after ``due``, or at once when the writer fell behind by more than a period
    (a hold, a slow answer), so that it never catches up in a burst."""
    return max(due, now - 1.0 / rate) + 1.0 / rate


class ZkWriter(threading.Thread):
    """One client's sequential creates through kazoo, as fast as they are answered, or at most ``rate`` a second
    (0: unpaced): each write starts 1 / ``rate`` s after the one before started, or when it ended if later."""

    def __init__(self, client: int, hosts: str, stop: threading.Event, hold: threading.Event,
                 timeout: float = 5.0, rate: float = 0.0) -> None:
        super().__init__(name=f"zk-writer-{client}", daemon=True)
        self.client_id = client
        self.hosts = hosts
        self.stop = stop
        self.hold = hold
        self.timeout = timeout
        self.rate = rate
        self.writes: list[Write] = []
        self.error: str = ""

    def acked(self) -> int:
        return sum(w.outcome == "ok" for w in self.writes)

    def run(self) -> None:
        from kazoo.exceptions import ConnectionClosedError, KazooException  # noqa: PLC0415

        client = _client(self.hosts)
        try:
            client.start(timeout=60)
            # retried: a schedule may kill the server this writer is connected to before the writer's first call
            # (another writer's acknowledgements can end a schedule's first step before this one is under way)
            client.retry(client.ensure_path, ROOT)
            k = 0
            due = time.monotonic()
            while not self.stop.is_set():
                if self.hold.is_set() or not client.connected:
                    self.stop.wait(0.05)
                    continue
                if self.rate > 0:
                    if self.stop.wait(max(0.0, due - time.monotonic())):
                        break
                    due = next_due(due, time.monotonic(), self.rate)
                value = f"c{self.client_id}-{k}"
                k += 1
                invoked = time.monotonic()
                outcome: Outcome = "unknown"
                zxid = None
                try:
                    _, stat = client.create_async(f"{ROOT}/{value}-", b"", sequence=True,
                                                  include_data=True).get(timeout=self.timeout)
                    outcome, zxid = "ok", stat.czxid
                except ConnectionClosedError:
                    outcome = "fail"
                except (KazooException, Exception):  # noqa: BLE001 -- a timeout, a lost connection: unknown
                    outcome = "unknown"
                self.writes.append(Write(value, self.client_id, invoked, time.monotonic(), outcome, zxid))
        except Exception as e:  # noqa: BLE001 -- the runner reports it
            self.error = f"writer {self.client_id}: {type(e).__name__}: {e}"
        finally:
            client.stop()
            client.close()


class ZkReader(threading.Thread):
    """A sync and a read at server ``sid`` alone, every ``period`` s (module docstring); ``reads`` in the order made,
    ``end`` as the reply said (`reads_at_writes` maps it)."""

    def __init__(self, reader: int, sid: int, port: int, stop: threading.Event, hold: threading.Event,
                 period: float = 0.1, timeout: float = 5.0) -> None:
        super().__init__(name=f"zk-reader-{reader}", daemon=True)
        self.reader, self.sid, self.port = reader, sid, port
        self.stop, self.hold = stop, hold
        self.period, self.timeout = period, timeout
        self.reads: list[Read] = []

    def run(self) -> None:
        client = _client(f"127.0.0.1:{self.port}", timeout=4.0)
        try:
            client.start_async()  # the server may be down now: kazoo keeps trying
            while not self.stop.wait(self.period):
                if self.hold.is_set() or not client.connected:
                    continue
                invoked = time.monotonic()
                try:
                    client.sync_async(ROOT).get(timeout=self.timeout)
                    client.exists_async(ROOT).get(timeout=self.timeout)
                except Exception:  # noqa: BLE001 -- a timeout, a lost connection: no read this time
                    continue
                end, session = client.last_zxid, client.client_id
                if session is not None:  # a session's reads never go back (kazoo sends the last zxid it saw)
                    self.reads.append(Read(self.reader, self.sid, session[0], invoked, time.monotonic(), True, end))
        finally:
            client.stop()
            client.close()


def reads_at_writes(reads: Iterable[Read], finals: Mapping[int, Sequence[tuple[int, str]]]) -> list[Read]:
    """Each read's ``end`` (a reply header's zxid, which counts every transaction) as the last write any server
    delivered at or below it (0: none): the checker's reference holds writes only. ZooKeeper applies in zxid order,
    so a server at zxid z has applied every write below it."""
    zxids = sorted({z for seq in finals.values() for z, _ in seq})
    out = []
    for r in reads:
        k = bisect.bisect_right(zxids, r.end)
        out.append(Read(r.reader, r.server, r.session, r.invoked, r.completed, r.synced, zxids[k - 1] if k else 0))
    return out


class ZkSampler(threading.Thread):
    def __init__(self, ports: dict[int, int], stop: threading.Event, period: float = 1.0) -> None:
        super().__init__(name="zk-sampler", daemon=True)
        self.ports = ports
        self.stop = stop
        self.period = period
        self.samples: list[Sample] = []
        self.last: dict[int, int] = dict.fromkeys(ports, 0)
        self.seen: dict[int, set[str]] = {sid: set() for sid in ports}

    def run(self) -> None:
        clients = {}
        try:
            for sid, port in self.ports.items():
                clients[sid] = _client(f"127.0.0.1:{port}", timeout=4.0)
                clients[sid].start_async()
            while not self.stop.wait(self.period):
                for sid, c in clients.items():
                    if c.connected:
                        self._sample(sid, c)
        finally:
            for c in clients.values():
                c.stop()
                c.close()

    def _sample(self, sid: int, c) -> None:  # noqa: ANN001
        try:
            names = [n for n in c.get_children(ROOT) if n not in self.seen[sid]] if c.exists(ROOT) else []
            pending = [(n, c.exists_async(f"{ROOT}/{n}")) for n in names]
            new = []
            for n, result in pending:
                stat = result.get(timeout=4.0)
                value = node_value(n)
                if stat is not None and value is not None:
                    new.append((stat.czxid, value))
        except Exception:  # noqa: BLE001 -- a server that went away mid-sample: nothing sampled this time
            return
        self.seen[sid].update(names)
        if new:
            new.sort()
            self.samples.append(Sample(sid, self.last[sid], tuple(new)))
            self.last[sid] = new[-1][0]
