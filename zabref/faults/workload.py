"""The write load of a fault run, and the reader that samples what servers deliver while it runs.

Theory of operation
-------------------
Each `Writer` is a thread standing for one client: it submits unique values (``c<client>-<k>``) one at a time, each
in ONE request to one server, never resent -- `zabref.client.ZabClient` retries a request whose connection broke,
which could commit a value twice and hide or fake a duplicate; here the client's view must be exact. The outcome of
each submit is recorded as a `zabref.faults.check.Write`:

* ``ok``: the answer holds the zxid;
* ``fail``: the server answered ``retry: true`` (it did not take the value), or the connection could not even be
  opened (nothing was sent);
* ``unknown``: anything else after the request was sent -- a timeout (a paused server), a connection that broke (a
  killed server), ``retry: false``.

After any outcome but ``ok`` the writer moves to the next server (and pauses `BACKOFF` seconds), as a client would.

The `Sampler` is one thread that reads every server about twice a second, each time asking for what was delivered
after the last zxid it saw there, and records each answer as a `zabref.faults.check.Sample`: the checker holds every
sample against the final sequences, so a server that delivered something it later forgot is caught even if it
recovers before the end.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

from zabref import wire
from zabref.client import recv_exactly
from zabref.faults.check import Outcome, Sample, Write

__all__ = ["Writer", "Sampler", "request_once", "BACKOFF"]

BACKOFF = 0.05
MAX_RESPONSE = 64 * 1024 * 1024


class _NotSent(OSError):
    """The connection could not be opened: the request was never sent."""




def request_once(sock: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    """One request frame, one answer frame on ``sock``; OSError if the answer does not come back whole."""
    sock.sendall(wire.frame(json.dumps(request).encode()))
    length = int.from_bytes(recv_exactly(sock, 4), "big", signed=True)
    if not 0 <= length <= MAX_RESPONSE:
        raise OSError(f"answer length {length} outside 0..{MAX_RESPONSE}")
    try:
        return json.loads(recv_exactly(sock, length))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OSError(f"answer is not JSON: {e}") from None


class Writer(threading.Thread):
    """One client submitting ``c<client>-0``, ``c<client>-1``, ... until ``stop`` is set."""

    def __init__(self, client: int, addresses: list[tuple[str, int]], stop: threading.Event, timeout: float) -> None:
        super().__init__(name=f"writer-{client}", daemon=True)
        self.client = client
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
        self._close()

    def _submit(self, value: str) -> tuple[Outcome, int | None]:
        try:
            if self._sock is None:
                try:
                    self._sock = socket.create_connection(self.addresses[self._current], timeout=self.timeout)
                except OSError as e:
                    raise _NotSent(str(e)) from None
            answer = request_once(self._sock, {"op": "submit", "value": value})
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
                answer = request_once(sock, {"op": "read", "from_zxid": after})
        except OSError:
            return  # down or paused: nothing to sample
        if "error" in answer:
            return
        txns = tuple((int(z), v) for z, v in answer["txns"])
        if txns:
            self.samples.append(Sample(sid, after, txns))
            self.last[sid] = txns[-1][0]
