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

The `ZkSampler` reads, every ``period`` seconds, every server alone (one session each, to that server only): the
children of the root it has not seen there yet and their ``czxid``, as one `conformance.faults.history.Sample`
(``after``: the last zxid seen there). The checker holds each sample against the final sequences, so a server that
delivered a value and later forgot it is caught even if the final read does not show the gap.
"""

from __future__ import annotations

import logging
import threading
import time

from conformance.faults.history import Outcome, Sample, Write
from conformance.zk.delivered import node_value

__all__ = ["ZkWriter", "ZkSampler", "ROOT"]

ROOT = "/zabref-faults"
SESSION_TIMEOUT = 10.0


def _client(hosts: str, timeout: float = SESSION_TIMEOUT):  # noqa: ANN202 (kazoo is an optional dependency)
    from kazoo.client import KazooClient  # noqa: PLC0415

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    return KazooClient(hosts=hosts, timeout=timeout,
                       connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
                       command_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5, "deadline": 60.0})


class ZkWriter(threading.Thread):
    def __init__(self, client: int, hosts: str, stop: threading.Event, hold: threading.Event,
                 timeout: float = 5.0) -> None:
        super().__init__(name=f"zk-writer-{client}", daemon=True)
        self.client_id = client
        self.hosts = hosts
        self.stop = stop
        self.hold = hold
        self.timeout = timeout
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
            while not self.stop.is_set():
                if self.hold.is_set() or not client.connected:
                    self.stop.wait(0.05)
                    continue
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
