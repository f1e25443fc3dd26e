"""Where a write's time goes at one in flight: the servers' system calls, traced from outside, cut into hops.

Theory of operation
-------------------
At one request in flight a write is a chain -- the client's request read by the leader, the leader's PROPOSAL out,
the first ACK back, the reply out -- and its rate is the inverse of that chain's length, not of any CPU sum. The
servers are observed from outside as they run, with ``perf trace`` (kernel tracepoints, no ptrace stop per call):
every read, write, send, receive and sync of their processes and threads, with its start and duration on one clock.
`parse` reads perf trace's lines. A call that another thread's line interrupted is printed in two: its start
(``fsync(fd: 14) ...``, no duration) and later its end (``... [continued]: fsync()) = 0``, with the start's time and
the whole duration); the two are joined into one call by thread, so a long call -- a sync, nearly always -- is not
lost. An end whose start is not in the trace, and any line that is not a system call, are passed over. `sockets`
classifies each process's socket file descriptors from /proc by the ports they join: ``client`` (the server's client
port), ``quorum`` (its own quorum port, or a peer's). `leader_hops` walks the leader's calls in time order and cuts
each write into:

* ``request->proposal``: the request's read on a client socket (its end) to the first write on a quorum socket;
* ``proposal->ack``: that write (its start) to the end of the first quorum read with data after it;
* ``ack->reply``: that read (its end) to the start of the first write on a client socket;
* ``sync``: the durations of the leader's syncs (fsync, fdatasync) within the write, and ``sync_before_proposal``:
  whether one ended before the PROPOSAL left.

`follower_hops` does the same at a follower: the last quorum read before a sync to the first quorum write after that
sync (``proposal->ack``, inside the follower), and the sync. A write the trace ends in the middle of is left out and
counted; the medians are over the rest.
The same code reads ZooKeeper's JVMs (many threads; the calls of one process are merged by time) and zabref's
processes, so the hops compare like for like. Run by `scripts/bench_hops.py`.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Call", "Hops", "follower_hops", "leader_hops", "parse", "sockets"]

READS = frozenset({"read", "recvfrom", "recvmsg", "readv"})
WRITES = frozenset({"write", "sendto", "sendmsg", "writev"})
SYNCS = frozenset({"fsync", "fdatasync"})
_LINE = re.compile(r"^\s*(?P<t>\d+\.\d+) \(\s*(?P<d>\d+\.\d+) ms\): (?P<comm>.+?)/(?P<tid>\d+) "
                   r"(?P<name>\w+)\((?P<args>.*)\)\s+= (?P<ret>-?\d+)")
_START = re.compile(r"^\s*(?P<t>\d+\.\d+) \(\s*\): (?P<comm>.+?)/(?P<tid>\d+) "
                    r"(?P<name>\w+)\((?P<args>.*)\)\s+\.\.\.\s*$")
_END = re.compile(r"^\s*(?P<t>\d+\.\d+) \(\s*(?P<d>\d+\.\d+) ms\): (?P<comm>.+?)/(?P<tid>\d+)\s+\.\.\. "
                  r"\[continued\]: (?P<name>\w+)\(\)\)\s+= (?P<ret>-?\d+)")
_FD = re.compile(r"\bfd: (\d+)")


@dataclass(frozen=True)
class Call:
    """One whole system call: start and duration in ms on perf trace's clock."""

    t: float
    d: float
    tid: int
    name: str
    fd: int | None
    ret: int

    @property
    def end(self) -> float:
        return self.t + self.d


def parse(lines: list[str], tids: dict[int, int]) -> dict[int, list[Call]]:
    """The whole calls of ``lines`` by process: ``tids`` maps each thread id to its process id (a thread not in it
    is passed over); each list sorted by start."""
    out: dict[int, list[Call]] = {}
    started: dict[int, tuple[str, str, str]] = {}  # tid -> (time, name, args) of its interrupted call
    for line in lines:
        if (m := _START.match(line)) is not None:
            started[int(m["tid"])] = (m["t"], m["name"], m["args"])
            continue
        if (m := _END.match(line)) is not None:
            start = started.pop(int(m["tid"]), None)
            if start is None or start[:2] != (m["t"], m["name"]):
                continue  # its start is not in the trace
            args = start[2]
        elif (m := _LINE.match(line)) is not None and "[continued]" not in line:
            args = m["args"]
        else:
            continue
        tid = int(m["tid"])
        if tid not in tids:
            continue
        fd = _FD.search(args)
        out.setdefault(tids[tid], []).append(Call(float(m["t"]), float(m["d"]), tid, m["name"],
                                                  int(fd[1]) if fd else None, int(m["ret"])))
    for calls in out.values():
        calls.sort(key=lambda c: c.t)
    return out


def _inodes(table: str) -> dict[int, tuple[int, int]]:
    """/proc/net/tcp's rows: inode -> (local port, remote port)."""
    out = {}
    for row in table.splitlines()[1:]:
        cols = row.split()
        if len(cols) > 9:
            out[int(cols[9])] = (int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16))
    return out


def sockets(pid: int, client_port: int, quorum_ports: set[int], own_quorum: int,
            proc: Path = Path("/proc")) -> dict[int, str]:
    """``pid``'s socket descriptors: fd -> ``client`` or ``quorum`` (others left out)."""
    ports: dict[int, tuple[int, int]] = {}
    for name in ("tcp", "tcp6"):
        path = proc / str(pid) / "net" / name
        if path.is_file():
            ports.update(_inodes(path.read_text()))
    out = {}
    for link in (proc / str(pid) / "fd").iterdir():
        try:
            target = link.readlink().name
        except OSError:  # closed meanwhile
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m is None or int(m[1]) not in ports:
            continue
        local, remote = ports[int(m[1])]
        if local == client_port:
            out[int(link.name)] = "client"
        elif local == own_quorum or remote in quorum_ports:
            out[int(link.name)] = "quorum"
    return out


@dataclass
class Hops:
    """Per hop, its durations in ms; ``skipped``: a write the trace ended in the middle of."""

    hops: dict[str, list[float]] = field(default_factory=dict)
    skipped: int = 0
    sync_first: int = 0  # writes whose leader synced before its PROPOSAL left

    def add(self, name: str, ms: float) -> None:
        self.hops.setdefault(name, []).append(ms)

    def median(self, name: str) -> float | None:
        values = self.hops.get(name)
        return statistics.median(values) if values else None


def _kind(c: Call, fds: dict[int, str]) -> str | None:
    return fds.get(c.fd) if c.fd is not None else None


def leader_hops(calls: list[Call], fds: dict[int, str]) -> Hops:
    """The leader's writes (module docstring). A request may take several reads (ZooKeeper's server reads its length,
    then its body): it begins at the end of the first. A client write before any PROPOSAL answered something that
    was no write (the client's PING): no write is counted. Calls on the client socket while a write waits for its
    ACK (a PING and its answer) are passed over."""
    out = Hops()
    start: float | None = None
    proposal: Call | None = None
    ack: Call | None = None
    syncs: list[Call] = []
    for c in calls:
        kind = _kind(c, fds)
        if c.name in SYNCS and start is not None:
            syncs.append(c)
        elif kind == "client" and c.name in READS and c.ret > 0 and start is None:
            start, syncs = c.end, []
        elif kind == "client" and c.name in WRITES and start is not None and proposal is None:
            start = None  # a PING answered, not a write
        elif kind == "quorum" and c.name in WRITES and start is not None and proposal is None:
            proposal = c
        elif kind == "quorum" and c.name in READS and c.ret > 0 and proposal is not None and ack is None:
            ack = c
        elif kind == "client" and c.name in WRITES and start is not None and ack is not None:
            assert proposal is not None
            out.add("request->proposal", proposal.t - start)
            out.add("proposal->ack", ack.end - proposal.t)
            out.add("ack->reply", c.t - ack.end)
            out.add("request->reply", c.t - start)
            out.add("sync", sum(s.d for s in syncs))
            out.sync_first += any(s.end <= proposal.t for s in syncs)
            start, proposal, ack = None, None, None
    out.skipped += start is not None
    return out


def follower_hops(calls: list[Call], fds: dict[int, str]) -> Hops:
    """A follower's PROPOSALs: the last quorum read before a sync to the first quorum write after it."""
    out = Hops()
    last_read: Call | None = None
    sync: Call | None = None
    for c in calls:
        kind = _kind(c, fds)
        if kind == "quorum" and c.name in READS and c.ret > 0 and sync is None:
            last_read = c
        elif c.name in SYNCS and last_read is not None:
            sync = c if sync is None else sync
        elif kind == "quorum" and c.name in WRITES and sync is not None and last_read is not None:
            out.add("proposal->ack (inside)", c.t - last_read.end)
            out.add("sync", sync.d)
            last_read, sync = None, None
    return out
