"""Small helpers shared by the tests that run real server processes (imported as `helpers`: tests/ is on sys.path)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Iterator


def load_script(name: str):
    """``scripts/<name>.py`` as a module (the scripts are files to run, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def established_leader(cluster, sids) -> int | None:
    """The sid of the one leader in BROADCAST whose servers ``sids`` all follow it in BROADCAST, else None (also
    while a server's control port does not answer: it is starting or stopped)."""
    from zabref.runtime.control import ControlError

    states = {}
    for s in sids:
        try:
            with cluster[s].control(timeout=5.0) as c:
                states[s] = c.request("state")["variables"]
        except (OSError, ControlError):
            return None
    leaders = [s for s, v in states.items() if v["state"] == "LEADING" and v["zab_state"] == "BROADCAST"]
    if len(leaders) == 1 and all(v["zab_state"] == "BROADCAST" and (s == leaders[0] or v["leader"] == leaders[0])
                                 for s, v in states.items()):
        return leaders[0]
    return None


def decide(node, leader: int, now: float):
    """Make ``node``'s FastLeaderElection decide for ``leader`` (itself: LEADING), through the node's election entry
    point: the notifications the conformance driver would send on its election port (conformance/replay/steer.py).
    Returns the Effects of the last one (the decision's)."""
    from conformance.replay.steer import plan

    core = node.core
    state = {"sid": node.sid, "fle": node.fle_variables(),
             "variables": {"current_epoch": core.current_epoch, "history": [[t.zxid, ""] for t in core.history]}}
    steps = plan(state, leader, len(core.servers))
    if steps is None:  # finalizing on its own vote: the wait runs out
        return node.tick(now + node.timing.finalize_ticks * node.timing.tick_s)
    effects = None
    for sender, n in steps:
        effects = node.notification(sender, n, now)
        if core.state.name != "LOOKING":
            return effects
    raise AssertionError(f"server {node.sid} did not decide for {leader}")


def run_tests(root, tests: list[str], probe: str = "zabref", env: dict[str, str] | None = None) -> dict[str, str]:
    """Run ``tests`` (node ids under the repo) in a child pytest with the package in ``root`` first on the path
    (a seeded bug's patched copy): node id -> PASSED / FAILED / ERROR. ``probe``: a module that must come from
    ``root``; ``env``: more environment for the child."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    # the patched copy is source only (`patched_package`): the child runs the pure build whichever this one runs
    env = {**{k: v for k, v in os.environ.items() if k != "ZABREF_EXPECT_BUILD"}, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    which = subprocess.run([sys.executable, "-c", f"import {probe}; print({probe}.__file__)"], cwd=root, env=env,
                           capture_output=True, text=True, check=True)
    assert which.stdout.startswith(str(root)), which.stdout  # the child runs the patched copy
    args = [str(repo / t) for t in tests]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "--tb=no", "-p", "no:cacheprovider",
                           "--rootdir", str(repo), *args], cwd=root, env=env, capture_output=True, text=True)
    outcomes = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"(PASSED|FAILED|ERROR) \S*?(tests/test_\S+)", line)  # node ids are relative to the cwd
        if m:
            outcomes[m[2]] = m[1]
    assert outcomes, proc.stdout + proc.stderr
    return outcomes


def closed_by_peer(sock: socket.socket) -> bool:
    """Read until the other end closes ``sock`` (EOF or reset); an AssertionError-worthy timeout after 10 s."""
    sock.settimeout(10)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


class Lines(logging.Handler):
    """Every line the "zabref" logger writes at INFO or above, in order (the in-process servers' log)."""

    def __init__(self, wait: float = 10.0) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.wait = wait

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    async def wait_for(self, text: str) -> str:
        """The last line containing ``text``, waited for up to ``wait`` seconds; AssertionError naming the lines."""
        for _ in range(int(self.wait / 0.02)):
            found = [line for line in self.lines if text in line]
            if found:
                return found[-1]
            await asyncio.sleep(0.02)
        raise AssertionError(f"no log line containing {text!r} in {self.lines}")


@contextlib.contextmanager
def capture(handler: logging.Handler) -> Iterator[logging.Handler]:
    """``handler`` on the "zabref" logger, set to INFO, for the ``with`` block; level and handlers restored after."""
    logger = logging.getLogger("zabref")
    old = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
