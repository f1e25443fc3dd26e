"""Small helpers shared by the tests that run real server processes (imported as `helpers`: tests/ is on sys.path)."""

from __future__ import annotations

import time


def wait_for(what: str, predicate, timeout: float):
    """Poll `predicate` every 50 ms until it returns something true (returned), or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
