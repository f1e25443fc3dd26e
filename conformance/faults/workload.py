"""The load of a fault run -- writers and readers -- and the sampler of what servers deliver while it runs.

Theory of operation
-------------------
Each `Writer` is a thread standing for one client: it submits unique values (``c<client>-<k>``) one at a time, each
in ONE request to one server, never resent -- `zabref.client.ZabClient` retries a request whose connection broke,
which could commit a value twice and hide or fake a duplicate; here the client's view must be exact. The outcome of
each submit is recorded as a `conformance.faults.history.Write`:

* ``ok``: the answer holds the zxid;
* ``fail``: the server answered ``retry: true`` (it did not take the value), or the connection could not even be
  opened (nothing was sent);
* ``unknown``: anything else after the request was sent -- a timeout (a paused server), a connection that broke (a
  killed server), ``retry: false``.

After any outcome but ``ok`` the writer moves to the next server (and pauses `BACKOFF` seconds), as a client would.

Each `Reader` is a thread standing for a client that reads: it asks, at random, for a plain ``read``, a ``sync``
followed by a ``read``, or writes a value of its own and then syncs and reads at another server, and records each
read as a `conformance.faults.history.Read`: the interval and the last zxid the server says it delivered (the read
answer's
``zxid``). The checker holds synced reads to linearizability and plain ones to monotonic reads on one connection.

The `Sampler` is one thread that reads every server about twice a second, each time asking for what was delivered
after the last zxid it saw there, and records each answer as a `conformance.faults.history.Sample`: the checker holds
every sample against the final sequences, so a server that delivered something it later forgot is caught even if it
recovers before the end.
"""

from __future__ import annotations

import random
import socket
import threading
import time

from conformance.faults.history import Outcome, Read, Sample, Write
from zabref.net import clientwire

__all__ = ["Writer", "Reader", "Sampler", "BACKOFF", "READ_PAUSE"]

BACKOFF = 0.05
#: Seconds a reader waits between two reads.
READ_PAUSE = 0.02


class _NotSent(OSError):
    """The connection could not be opened: the request was never sent."""




class Writer(threading.Thread):
    """One client submitting ``c<client>-0``, ``c<client>-1``, ... until ``stop`` is set; ``pause``: seconds it waits
    after each submit (0: none -- as fast as the cluster answers)."""

    def __init__(self, client: int, addresses: list[tuple[str, int]], stop: threading.Event, timeout: float,
                 pause: float = 0.0) -> None:
        super().__init__(name=f"writer-{client}", daemon=True)
        self.client = client
        self.pause = pause
        self.addresses = addresses
        self.stop = stop
        self.timeout = timeout
        self.writes: list[Write] = []
        self._current = client % len(addresses)
        self._sock: socket.socket | None = None

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            value = f"c{self.client}-{k}"
            k += 1
            invoked = time.monotonic()
            outcome, zxid = self._submit(value)
            self.writes.append(Write(value, self.client, invoked, time.monotonic(), outcome, zxid))
            if outcome != "ok":
                self._close()
                self._current = (self._current + 1) % len(self.addresses)
                self.stop.wait(BACKOFF)
            elif self.pause:
                self.stop.wait(self.pause)
        self._close()

    def _submit(self, value: str) -> tuple[Outcome, int | None]:
        try:
            if self._sock is None:
                try:
                    self._sock = socket.create_connection(self.addresses[self._current], timeout=self.timeout)
                except OSError as e:
                    raise _NotSent(str(e)) from None
            answer = clientwire.call(self._sock, {"op": "submit", "value": value})
        except _NotSent:
            return "fail", None
        except OSError:  # includes timeouts: the request may have reached the server
            return "unknown", None
        if "zxid" in answer and "error" not in answer:
            return "ok", int(answer["zxid"])
        return ("fail" if answer.get("retry") else "unknown"), None

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class Reader(threading.Thread):
    """One client reading until ``stop`` is set. Each turn, at random (from ``seed``): a plain read, a sync and a
    read, or a write (``r<reader>-<k>``, recorded like a writer's) followed by a sync and a read at ANOTHER server --
    the read of one's own write through another server, which is what sync is for. One connection per server; a
    server that fails or refuses is dropped and its connection closed (a new one is a new session)."""

    def __init__(self, reader: int, addresses: dict[int, tuple[str, int]], stop: threading.Event, timeout: float,
                 seed: int) -> None:
        super().__init__(name=f"reader-{reader}", daemon=True)
        self.reader = reader
        self.addresses = dict(addresses)
        self.sids = sorted(addresses)
        self.stop = stop
        self.timeout = timeout
        self.rng = random.Random(f"{seed}:reader:{reader}")
        self.reads: list[Read] = []
        self.writes: list[Write] = []
        self._socks: dict[int, socket.socket] = {}
        self._sessions = 0
        self._session: dict[int, int] = {}  # server -> session number of its open connection
        self._end: dict[int, int] = {}  # server -> last end seen on its open connection

    def run(self) -> None:
        k = 0
        current = self.sids[self.reader % len(self.sids)]
        while not self.stop.is_set():
            op = self.rng.choice(("read", "sync", "write"))
            invoked = time.monotonic()
            target = current
            if op == "write":
                value = f"r{self.reader}-{k}"
                k += 1
                outcome, zxid = self._submit(current, value)
                self.writes.append(Write(value, -1 - self.reader, invoked, time.monotonic(), outcome, zxid))
                if outcome != "ok":
                    current = self._drop(current)
                    continue
                target = self.sids[(self.sids.index(current) + 1) % len(self.sids)]
                invoked = time.monotonic()
            end = self._read(target, synced=op != "read")
            if end is None:
                current = self._drop(target)
                continue
            self.reads.append(Read(self.reader, target, self._session[target], invoked, time.monotonic(),
                                   op != "read", end))
            self._end[target] = end
            self.stop.wait(READ_PAUSE)
        for sid in list(self._socks):
            self._drop(sid)

    def _sock(self, sid: int) -> socket.socket:
        if sid not in self._socks:
            self._socks[sid] = socket.create_connection(self.addresses[sid], timeout=self.timeout)
            self._sessions += 1
            self._session[sid], self._end[sid] = self._sessions, 0
        return self._socks[sid]

    def _drop(self, sid: int) -> int:
        """Close the connection to ``sid``; the next server to use."""
        sock = self._socks.pop(sid, None)
        if sock is not None:
            sock.close()
        self.stop.wait(BACKOFF)
        return self.sids[(self.sids.index(sid) + 1) % len(self.sids)]

    def _submit(self, sid: int, value: str) -> tuple[Outcome, int | None]:
        try:
            sock = self._sock(sid)
        except OSError:
            return "fail", None
        try:
            answer = clientwire.call(sock, {"op": "submit", "value": value})
        except OSError:
            return "unknown", None
        if "zxid" in answer and "error" not in answer:
            return "ok", int(answer["zxid"])
        return ("fail" if answer.get("retry") else "unknown"), None

    def _read(self, sid: int, synced: bool) -> int | None:
        """The server's last delivered zxid after an optional sync; None if the server could not answer."""
        try:
            sock = self._sock(sid)
            if synced and "error" in clientwire.call(sock, {"op": "sync"}):
                return None
            answer = clientwire.call(sock, {"op": "read", "from_zxid": self._end[sid], "limit": 1})
        except OSError:
            return None
        end = answer.get("zxid")
        return end if isinstance(end, int) and "error" not in answer else None


class Sampler(threading.Thread):
    """Reads every server's newly delivered transactions every ``period`` seconds until ``stop`` is set."""

    def __init__(self, addresses: dict[int, tuple[str, int]], stop: threading.Event, period: float = 0.5,
                 timeout: float = 2.0) -> None:
        super().__init__(name="sampler", daemon=True)
        self.addresses = addresses
        self.stop = stop
        self.period = period
        self.timeout = timeout
        self.samples: list[Sample] = []
        self.last: dict[int, int] = dict.fromkeys(addresses, 0)

    def run(self) -> None:
        while not self.stop.wait(self.period):
            for sid in self.addresses:
                self.sample(sid)

    def sample(self, sid: int) -> None:
        after = self.last[sid]
        try:
            with socket.create_connection(self.addresses[sid], timeout=self.timeout) as sock:
                answer = clientwire.call(sock, {"op": "read", "from_zxid": after})
        except OSError:
            return  # down or paused: nothing to sample
        if "error" in answer:
            return
        txns = tuple((int(z), v) for z, v in answer["txns"])
        if txns:
            self.samples.append(Sample(sid, after, txns))
            self.last[sid] = txns[-1][0]
