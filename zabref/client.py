"""A small blocking client of zabref's client port: submit, read, sync.

Theory of operation
-------------------
`ZabClient` holds a list of server addresses (``(host, client_port)``) and one TCP connection to the server it is
currently using. Every request is one frame (`zabref.net.wire` framing) holding a JSON object, answered by one frame
(protocol: `zabref.net.clientport`). When the server cannot be reached, or answers with an error that says
``retry: true`` (no leader yet, leader still syncing), the client moves on to the next server, and after a full turn
waits with exponential backoff (bounded: `ZabClient.attempts` requests in all). An error with ``retry: false`` --
for instance a submit whose outcome is unknown -- is raised at once as `ClientError`: resending might commit the
value twice.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable
from typing import Any

from zabref.config import load_config
from zabref.errors import ConfigError, ZabError
from zabref.net import clientwire
from zabref.net.security import client_context

__all__ = ["ZabClient", "ClientError", "addresses_from_config", "tls_from_config"]



class ClientError(ZabError):
    """A request failed on every server tried, or failed in a way that must not be retried."""


def addresses_from_config(path: str) -> list[tuple[str, int]]:
    """The client ports of every server in a zabref config file."""

    return [(s.host, s.client_port) for s in load_config(path).servers]


def tls_from_config(path: str) -> ssl.SSLContext | None:
    """The TLS context for a cluster's client ports (its ``[security]`` cert, key and ca), or None when its client
    ports are plain."""

    config = load_config(path)
    if not config.security.client_tls:
        return None
    try:
        return client_context(config.security)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None


class ZabClient:
    """``ZabClient([("127.0.0.1", 21003), ...])``; ``submit(value) -> zxid``, ``read(from_zxid)``, ``sync()``."""

    def __init__(self, addresses: Iterable[tuple[str, int]], *, timeout: float = 40.0, attempts: int = 40,
                 max_backoff: float = 1.0, tls: ssl.SSLContext | None = None) -> None:
        """``tls``: connect with TLS (a client port with ``[security] client_tls``; `tls_from_config`)."""
        self.tls = tls
        self.addresses = list(addresses)
        if not self.addresses:
            raise ValueError("ZabClient needs at least one server address")
        self.timeout = timeout
        self.attempts = attempts
        self.max_backoff = max_backoff
        self._current = 0
        self._sock: socket.socket | None = None

    # ------------------------------------------------------------------------------------------ API

    def submit(self, value: str) -> int:
        """Commit ``value``; returns its zxid once the server answering has delivered it."""
        return int(self._call({"op": "submit", "value": value})["zxid"])

    def read(self, from_zxid: int = 0) -> list[tuple[int, Any]]:
        """The delivered sequence after ``from_zxid`` at the current server, as (zxid, value) pairs: a value is its
        text, or a dict of a ZooKeeper transaction's fields (a ZooKeeper leader's, in a mixed ensemble)."""
        out: list[tuple[int, Any]] = []
        while True:
            answer = self._call({"op": "read", "from_zxid": from_zxid})
            out += [(int(z), v) for z, v in answer["txns"]]
            if not answer.get("more") or not answer["txns"]:
                return out
            from_zxid = out[-1][0]

    def sync(self) -> int:
        """Wait until the current server has delivered what its leader had committed when the sync reached it;
        returns the last zxid delivered there then."""
        return int(self._call({"op": "sync"})["zxid"])

    def use(self, index: int) -> ZabClient:
        """Talk to ``addresses[index]`` first (e.g. to read one particular server)."""
        self.close()
        self._current = index % len(self.addresses)
        return self

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ZabClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ transport

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        delay = 0.05
        last = "no server tried"
        for attempt in range(self.attempts):
            host, port = self.addresses[self._current]
            try:
                answer = self._roundtrip(request)
            except OSError as e:
                last = f"{host}:{port}: {e}"
                answer = None
            if answer is not None:
                if "error" not in answer:
                    return answer
                last = f"{host}:{port}: {answer['error']}"
                if not answer.get("retry"):
                    raise ClientError(last)
            self.close()
            self._current = (self._current + 1) % len(self.addresses)
            if self._current == 0 or len(self.addresses) == 1:
                time.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
        raise ClientError(f"{request['op']} failed after {self.attempts} attempts; last: {last}")

    def _roundtrip(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._sock is None:
            address = self.addresses[self._current]
            sock = socket.create_connection(address, timeout=self.timeout)
            if self.tls is not None:
                try:
                    sock = self.tls.wrap_socket(sock, server_hostname=address[0])
                except OSError:
                    sock.close()
                    raise
            self._sock = sock
        return clientwire.call(self._sock, request)
