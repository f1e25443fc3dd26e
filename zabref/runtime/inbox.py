"""The pump's queue of events (`zabref.runtime.server.Server`): what `asyncio.Queue` does for one reader, without
asking for the running loop at every wait.

`asyncio.Queue.get` makes its waiter on the loop its mixin looks up each time, and on Python 3.11 every lookup of the
running loop calls ``getpid()`` (a system call: the check that the loop belongs to this process, after a fork). The
pump waits once a batch, so a follower made two such calls a write (the other was the storage chain's future): 6 % of
its samples at one write in flight (docs/performance.md). An `Inbox` keeps the loop it was first awaited on. Its
callbacks are asyncio.Queue's: a put resolves the waiting reader's future, which wakes the pump in the loop's next
turn, so the simulator's schedules are unchanged.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Inbox"]

T = TypeVar("T")


class Inbox(Generic[T]):
    """A FIFO queue with one reader that awaits `take`; `put` never blocks."""

    __slots__ = ("_items", "_waiter", "_loop")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def put(self, item: T) -> None:
        self._items.append(item)
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self, limit: int) -> list[T]:
        """The items waiting, at most ``limit`` of them, oldest first; waits while there are none."""
        items = self._items
        while not items:
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._waiter = self._loop.create_future()
            await self._waiter
        if len(items) <= limit:
            batch = list(items)
            items.clear()
            return batch
        return [items.popleft() for _ in range(limit)]

    def __len__(self) -> int:
        return len(self._items)
