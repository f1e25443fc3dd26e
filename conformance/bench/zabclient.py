"""An asyncio client of zabref's client port, for keeping many requests in flight.

Theory of operation
-------------------
zabref's client port answers the requests of one connection in order, one after the other
(`zabref.net.clientport`), so N requests in flight take N connections: `ZabConnection` is one of them (a frame of JSON
out, a frame of JSON back: `zabref.net.clientwire`), and the workload opens one per request
in flight. Errors come back as the server's ``{"error", "retry"}`` objects (`ZabAnswerError`), a broken connection as
OSError, so the caller decides whether to retry.
"""

from __future__ import annotations

import asyncio
from typing import Any

from zabref.net import clientwire

__all__ = ["ZabConnection", "ZabAnswerError"]


class ZabAnswerError(Exception):
    """The server answered ``{"error": ..., "retry": ...}``."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class ZabConnection:
    """``await ZabConnection.open(host, port)``; ``await c.submit(text)``, ``await c.read_one(zxid)``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int, timeout: float = 10.0) -> ZabConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer)

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = await clientwire.call_async(self.reader, self.writer, request, None, "the server")
        if "error" in answer:
            raise ZabAnswerError(answer["error"], bool(answer.get("retry")))
        return answer

    async def submit(self, value: str) -> int:
        return int((await self.call({"op": "submit", "value": value}))["zxid"])

    async def read_one(self, zxid: int) -> tuple[int, str]:
        """The delivered transaction ``zxid`` (read from just below it, at most one transaction)."""
        txns = (await self.call({"op": "read", "from_zxid": zxid - 1, "limit": 1}))["txns"]
        if not txns or int(txns[0][0]) != zxid:
            raise ZabAnswerError(f"transaction {zxid:#x} not delivered at this server", True)
        return int(txns[0][0]), txns[0][1]

    def close(self) -> None:
        self.writer.close()
