"""Writing to a stream that may already be closing. asyncio only.

A connection closed by this end (a refusal, a timeout, a shutdown) can still be written to by a task that has not
seen the close yet. asyncio's own loop drops such a write; uvloop raises RuntimeError ("the handler is closed") once
the transport has closed, which no writer here expects (a server once exited with code 3 for it). `write` drops it on
both loops: what was queued before the close is still written first, and nothing after it is sent.
"""

from __future__ import annotations

import asyncio

__all__ = ["write"]


def write(writer: asyncio.StreamWriter, data: bytes) -> None:
    """``writer.write(data)``, unless the stream is closing (module docstring)."""
    if not writer.is_closing():
        writer.write(data)
