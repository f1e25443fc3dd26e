"""A paused simulated process (SIGSTOP on `conformance.sim.loop.SimLoop`): nothing of it runs until it is resumed, what
arrives for it meanwhile waits, and on resuming it runs what came due in that order -- a task woken by data before a
task whose timer fired meanwhile, as asyncio does after a real SIGCONT; and the simulator's ``pause`` fault."""

from __future__ import annotations

import asyncio

from conformance.sim import Options
from conformance.sim.loop import Process, SimLoop
from conformance.sim.seeds import run_seed


def test_a_paused_process_runs_nothing_until_resumed_then_data_before_timers() -> None:
    loop = SimLoop()
    order: list[str] = []
    sleeper, other = Process("s1"), Process("s2")
    inbox: asyncio.Queue[str] = asyncio.Queue()

    async def ticker() -> None:
        await asyncio.sleep(0.1)
        order.append(f"tick at {loop.time():.1f}")

    async def handler() -> None:
        order.append(f"got {await inbox.get()} at {loop.time():.1f}")

    async def bystander() -> None:
        await asyncio.sleep(0.2)
        order.append(f"bystander at {loop.time():.1f}")

    async def main() -> None:
        sleeper.spawn(loop, ticker(), "ticker")
        sleeper.spawn(loop, handler(), "handler")
        other.spawn(loop, bystander(), "bystander")
        await asyncio.sleep(0)
        loop.pause(sleeper)
        await asyncio.sleep(0.5)
        inbox.put_nowait("sync")  # data arrives for the paused process after its timer came due
        await asyncio.sleep(0.5)
        assert order == ["bystander at 0.2"]  # only the other process ran
        loop.resume(sleeper)
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    loop.close()
    assert order == ["bystander at 0.2", "got sync at 1.0", "tick at 1.0"]


def test_without_the_pause_the_timer_runs_when_it_is_due() -> None:
    loop = SimLoop()
    order: list[str] = []
    p = Process("s1")

    async def ticker() -> None:
        await asyncio.sleep(0.1)
        order.append(f"tick at {loop.time():.1f}")

    async def main() -> None:
        p.spawn(loop, ticker(), "ticker")
        await asyncio.sleep(1.0)

    loop.run_until_complete(main())
    loop.close()
    assert order == ["tick at 0.1"]


def test_a_paused_leader_is_replaced_and_the_run_still_passes_its_checks() -> None:
    r = run_seed(3, Options(steps=300, faults=("pause",), readers=2))
    assert r.ok, r.failure
    log = "\n".join(r.events)
    assert r.injected.get("pause", 0) >= 1 and " pause s" in log and " continue s" in log
    paused = log.split(" pause s", 1)[1].split()[0]
    after = log.split(" pause s", 1)[1]
    # while it slept, the others elected a leader among themselves
    assert any(f"BecomeLeader(i={s})" in after.split(" continue s", 1)[0] for s in "123" if s != paused)
