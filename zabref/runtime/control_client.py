"""The client side of the control port: `ControlClient` (JSON Lines over TCP, the token first), and `settle`.

Theory of operation: a `ControlClient` holds one connection to one server's control port, authenticates with the
server's token on every (re)connection and sends one request a line, raising `ControlError` with the server's
answer when it is an error. `settle` asks every server of a cluster for its state until nothing is in flight --
every packet one side sent has been received by the other -- or the timeout passes; `unsettled` says what is still
in flight. The server side is `zabref.runtime.control`.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from typing import Any

from zabref.runtime.control import ControlError

__all__ = ["ControlClient", "settle", "ask_all", "unsettled", "lagging"]


class ControlClient:
    """A blocking client of one server's control socket (JSON Lines over TCP)."""

    def __init__(self, host: str, port: int, token: bytes, timeout: float = 30.0) -> None:
        """``token``: the server's control token (`read_token`), sent first on every connection."""
        self.address = (host, port)
        self.timeout = timeout
        self._token = token
        self._sock: socket.socket | None = None
        self._file: Any = None

    def _connect(self) -> None:
        self._sock = socket.create_connection(self.address, timeout=self.timeout)
        self._file = self._sock.makefile("rwb")
        self._write({"op": "auth", "token": self._token.decode("ascii")})
        answer = self._read()
        if "error" in answer:
            self.close()
            raise ControlError(f"server {self.address[1]}: {answer['error']}")

    def set_timeout(self, timeout: float) -> None:
        """Bound every later request (and a reconnection) by ``timeout`` seconds."""
        self.timeout = timeout
        if self._sock is not None:
            self._sock.settimeout(timeout)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; return the response, or raise ControlError with its error text."""
        self.send(op, **fields)
        return self.receive()

    def send(self, op: str, **fields: Any) -> None:
        """Send one request and return at once: `ready` says when its response has come, `receive` reads it. One
        request at a time: the next `send` or `request` only after `receive`."""
        self._send({"op": op, **fields})

    def ready(self, timeout: float) -> bool:
        """Whether the response to the request sent is there to read (waiting at most ``timeout`` seconds)."""
        if self._sock is None:
            return True  # `receive` says why
        return bool(select.select([self._sock], [], [], timeout)[0])

    def receive(self) -> dict[str, Any]:
        """The response to the request `send` sent, or ControlError with its error text."""
        response = self._read()
        if "error" in response:
            raise ControlError(f"server {self.address[1]}: {response['error']}")
        return response

    def raw(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send one request object and return the response object as it is (OSError if the server is gone)."""
        self._send(request)
        return self._read()

    def _send(self, request: dict[str, Any]) -> None:
        if self._file is None:
            self._connect()
        self._write(request)

    def _write(self, request: dict[str, Any]) -> None:
        try:
            self._file.write(json.dumps(request).encode() + b"\n")
            self._file.flush()
        except OSError:
            self.close()
            raise

    def _read(self) -> dict[str, Any]:
        if self._file is None:
            raise ConnectionError(f"control connection to {self.address} closed")
        try:
            line = self._file.readline()
        except OSError:
            self.close()
            raise
        if not line:
            self.close()
            raise ConnectionError(f"control connection to {self.address} closed")
        return json.loads(line)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
                self._sock.close()
            except OSError:
                pass
        self._file = self._sock = None

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def settle(controls: dict[int, ControlClient], timeout: float = 10.0) -> dict[int, dict[str, Any]]:
    """Wait until every packet and notification one server sent has arrived at its peer (waiting there, in control
    mode), every quorum connection is open or closed at both ends, and no sender still holds a notification; return
    every server's ``state``. ControlError on timeout.

    This is what the conformance driver does after each step, before it compares states. When all that is missing
    is packets or notifications on their way (`lagging`), only their receivers are asked again, each with ``until``
    the count it lacks (the server answers when it has them: no polling from here); otherwise everyone is asked
    again after a short pause. Each round's requests go out together (`ask_all`).
    """
    deadline = time.monotonic() + timeout
    pause = 0.0005
    states = ask_all(controls, {sid: {} for sid in controls})
    while True:
        problem = unsettled(states)
        if problem is None:
            return states
        left = deadline - time.monotonic()
        if left < 0:
            raise ControlError(f"not settled within {timeout} s: {problem}")
        waits = lagging(states)
        if waits:
            states.update(ask_all(controls, {sid: {"until": until, "wait": min(left, 1.0)}
                                             for sid, until in waits.items()}))
            continue
        time.sleep(pause)  # a connection is usually a fraction of a ms from open; a stall backs off to 8 ms
        pause = min(2 * pause, 0.008)
        states = ask_all(controls, {sid: {} for sid in controls})


def ask_all(controls: dict[int, ControlClient], fields: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """``state`` with ``fields[sid]`` asked of every server in ``fields`` at once: all requests are sent before
    any answer is read, so the servers answer side by side. When one fails, the connections whose answers were not
    read are closed (a later request must not read an earlier one's answer) and the error raised."""
    sent: list[int] = []
    answers: dict[int, dict[str, Any]] = {}
    try:
        for sid in sorted(fields):
            controls[sid].send("state", **fields[sid])
            sent.append(sid)
        for sid in sent:
            answers[sid] = controls[sid].receive()
        return answers
    except BaseException:
        for sid in sent:
            if sid not in answers:
                controls[sid].close()
        raise


def lagging(states: dict[int, dict[str, Any]]) -> dict[int, dict[str, dict[str, int]]]:
    """When the only reason these states are not settled is packets or notifications on their way: {server:
    ``until`` it must reach (the ``state`` request's): a receiver its counts, a sender an empty queue}; else {} (a
    quorum connection not open at both ends, counts that waiting cannot mend)."""
    waits: dict[int, dict[str, dict[str, int]]] = {}
    for i, j, c, other in _quorum_ends(states):
        if c["state"] != "open" or other is None or other["state"] != "open":
            return {}
        if c["sent"] > other["received"]:
            waits.setdefault(j, {}).setdefault("received", {})[str(i)] = c["sent"]
    for i, s in states.items():
        for sender in s.get("senders", ()):
            j = sender["peer"]
            if j not in states or not (sender["connected"] or sender["queued"]):
                continue
            if sender["queued"]:
                waits.setdefault(i, {}).setdefault("flushed", {})[str(j)] = 0
                continue
            received = [v["received"] for v in states[j].get("votes", ()) if v["peer"] == i]
            if sender["sent"] and sender["sent"] not in received:
                if not received or sender["sent"] < max(received):
                    return {}  # no connection from i seen at j yet, or an older one: not a count to wait for
                waits.setdefault(j, {}).setdefault("votes", {})[str(i)] = sender["sent"]
    return waits


def _quorum_ends(states: dict[int, dict[str, Any]]) -> Iterator[tuple[int, int, dict[str, Any], dict | None]]:
    """(i, j, i's end, j's end or None) for every quorum connection end i holds with a server j of ``states``."""
    ends = {(sid, c["peer"]): c for sid, s in states.items() for c in s["connections"]}
    for (i, j), c in ends.items():
        if j in states:
            yield i, j, c, ends.get((j, i))


def unsettled(states: dict[int, dict[str, Any]]) -> str | None:
    """Why these states are not settled (see `settle`), or None when they are."""
    for i, j, c, other in _quorum_ends(states):
        if c["state"] != "open" or other is None or other["state"] != "open":
            return f"quorum connection {i}-{j} is {c['state']} at {i}, {other and other['state']} at {j}"
        if c["sent"] != other["received"]:
            return f"quorum connection {i}-{j}: {c['sent']} sent by {i}, {other['received']} received by {j}"
    for i, s in states.items():
        for sender in s.get("senders", ()):
            j = sender["peer"]
            if j not in states:
                continue
            if sender["queued"]:
                return f"election sender {i}->{j} still holds {sender['queued']} notification(s)"
            if not sender["connected"]:
                continue
            received = [v["received"] for v in states[j].get("votes", ()) if v["peer"] == i]
            if sender["sent"] and sender["sent"] not in received:  # nothing written yet: nothing on its way
                return f"election connection {i}->{j}: {sender['sent']} sent, received {received}"
    return None
