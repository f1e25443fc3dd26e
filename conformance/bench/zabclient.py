"""An asyncio client of zabref's client port, for keeping many requests in flight on one connection.

Theory of operation
-------------------
zabref's client port reads a connection's requests as they come and answers them in the order they were sent
(`zabref.net.pipeline`), as ZooKeeper answers a session's. So one `ZabConnection` carries any number of requests in
flight: `call` writes its request's frame (a frame of JSON: `zabref.net.clientwire`) and waits for its answer, and one
reading task hands each answer that arrives to the oldest request still waiting. Errors come back as the server's
``{"error", "retry"}`` objects (`ZabAnswerError`, for that request alone); a connection that breaks or sends what is
not an answer fails every request still waiting, and every later call, with the OSError, so the caller decides
whether to open another and retry.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from zabref.net import clientwire

__all__ = ["ZabConnection", "ZabAnswerError"]


class ZabAnswerError(Exception):
    """The server answered ``{"error": ..., "retry": ...}``."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class ZabConnection:
    """``await ZabConnection.open(host, port)``; ``await c.submit(text)``, ``await c.read_one(zxid)``, from as many
    tasks at once as requests should be in flight."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str = "the server") -> None:
        self.reader = reader
        self.writer = writer
        self.where = where
        self._waiting: collections.deque[asyncio.Future[dict[str, Any]]] = collections.deque()
        self._broken: OSError | None = None
        self._reading = asyncio.get_running_loop().create_task(self._read_answers())

    @classmethod
    async def open(cls, host: str, port: int, timeout: float = 10.0) -> ZabConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer, f"{host}:{port}")

    async def _read_answers(self) -> None:
        try:
            while True:
                answer = await clientwire.read_answer_async(self.reader, None, self.where)
                if not self._waiting:
                    raise OSError(f"{self.where} sent an answer to no request")
                fut = self._waiting.popleft()
                if not fut.done():
                    fut.set_result(answer)
        except OSError as e:
            self._fail(e)

    def _fail(self, error: OSError) -> None:
        self._broken = self._broken or error
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(self._broken)
        self.writer.close()

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._broken is not None:
            raise self._broken
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        self.writer.write(clientwire.encode(request))
        answer = await fut
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
        self._reading.cancel()
        self._fail(ConnectionError(f"the connection to {self.where} was closed by this client"))
