"""The simulated clients of a run: writers that submit values and readers that read, sync and check.

Theory of operation: writers draw everything from the run's random source (which server, when, whether to retry an
unknown outcome: ``client_retry``); readers use a random source of their own, so that readers change no writer's
choice. Every acknowledged write is recorded for the durability check and every answered read for the read check
(`conformance.faults.history.check_reads`: no stale, backward or divergent read). All talk to the servers' real client
ports through `zabref.net.clientwire`. `SimClients` is a part of `conformance.sim.cluster.Simulation` (a mixin).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from conformance.faults.history import Read, Write, check_reads
from zabref.net.clientwire import call_async, request_async

__all__ = ["SimClients"]


class SimClients:
    """The clients of `conformance.sim.cluster.Simulation` (module docstring)."""

    async def _client(self, k: int) -> None:
        n = 0
        retry = "client_retry" in self.faults
        while True:
            await asyncio.sleep(self.rng.uniform(0.005, 0.1))
            if self.recovering:
                return
            value, n = f"c{k}.{n}", n + 1
            invoked = self.loop.now
            for _attempt in range(3 if retry else 1):
                sid = self.rng.choice(self.sids)
                answer = await self._request(sid, {"op": "submit", "value": value})
                self.writes[value] = (invoked, self.loop.now, answer.get("zxid"))
                if "zxid" in answer:
                    self.acked.append((answer["zxid"], value))
                    self._event(f"ack {value} {answer['zxid']:x} via s{sid}")
                    break
                if not retry or not (answer.get("retry") or answer.get("unknown")):
                    break

    async def _reader(self, k: int) -> None:
        """Reads until recovery, from its own random source (so readers change no writer's choices): at a random
        server, a plain ``read`` or a ``sync`` then a ``read``, on a connection kept per server (a new connection is
        a new session); records each answered read as a `Read` for `_check_reads`."""
        rng = random.Random(f"{self.seed}:reader:{k}")
        conns: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter, int]] = {}
        ends: dict[int, int] = {}
        sessions = 0
        while not self.recovering:
            await asyncio.sleep(rng.uniform(0.005, 0.1))
            sid, synced = rng.choice(self.sids), rng.random() < 0.5
            invoked = self.loop.now
            try:
                if sid not in conns:
                    s = self.config.server(sid)
                    r, w = await asyncio.wait_for(asyncio.open_connection(s.host, s.client_port), 5.0)
                    sessions += 1
                    conns[sid], ends[sid] = (r, w, sessions), 0
                r, w, session = conns[sid]
                if synced and "error" in await call_async(r, w, {"op": "sync"}, 5.0, f"s{sid}"):
                    raise OSError("sync refused")
                answer = await call_async(r, w, {"op": "read", "from_zxid": ends[sid], "limit": 1}, 5.0, f"s{sid}")
                if "error" in answer or not isinstance(answer.get("zxid"), int):
                    raise OSError("read refused")
            except (OSError, TimeoutError):
                if sid in conns:
                    conns.pop(sid)[1].close()
                continue
            ends[sid] = answer["zxid"]
            self.reads.append(Read(k, sid, session, invoked, self.loop.now, synced, answer["zxid"]))
        for _, w, _ in conns.values():
            w.close()

    def _check_reads(self, leader: int) -> str | None:
        """The readers' reads against the leader's history (`conformance.faults.history.check_reads`); why they fail."""
        ref = [(t.zxid, t.value.decode("utf-8", "backslashreplace"))
               for t in self.machines[leader].server.node.core.history]
        writes = [Write(v, 0, a, b, "unknown" if z is None else "ok", z) for v, (a, b, z) in self.writes.items()]
        v = check_reads(writes, ref, self.reads)
        if v.stale_reads or v.backward_reads or v.divergent:
            return (f"read check: {len(self.reads)} reads, stale {v.stale_reads}, backward {v.backward_reads}, "
                    f"divergent {v.divergent}: {v.examples[0]}")
        return None

    async def _request(self, sid: int, request: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        s = self.config.server(sid)
        try:
            return await request_async(s.host, s.client_port, request, timeout)
        except (OSError, TimeoutError) as e:
            return {"error": f"{type(e).__name__}: {e}", "unknown": True}
