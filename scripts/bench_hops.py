#!/usr/bin/env python3
"""Where does a write's time go at one in flight? zabref and ZooKeeper, each write cut into hops by its servers'
system calls (conformance/bench/hops.py), and zabref / ZooKeeper per hop.

Theory of operation: each system of ``--systems`` (``zabref-java``, ``zookeeper-java``: the benchmark's clusters,
both driven by ZkLoad, the same Java client) is started as `zabref bench cluster` starts it, warmed with 500 writes
at 16 in flight, and then written to with ONE write in flight at its leader (``--writes``) while perf records the
reads, writes, sends, receives and syncs of its three server processes, all their threads (``perf record`` of the
system call tracepoints, filtered in the kernel; ``perf trace`` formats them after the row). The leader's calls give
each write's hops (request -> PROPOSAL out -> first ACK in -> reply out, and the leader's syncs), the followers' the
time from a PROPOSAL's read to its ACK's write. Tracing costs each recorded call a little, in both systems; the
write rate under it is printed beside the hops, to be read against the same row without it.

    .venv/bin/python scripts/bench_hops.py [--writes 3000] [--systems zabref-java,zookeeper-java] [--keep DIR]
        [--leader-logs-late] [--zabref-code TREE]

Needs ``perf`` (Debian's linux-perf) with the right to trace other processes (root, or perf_event_paranoid <= 1).
"""

from __future__ import annotations

import argparse
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.bench import hops  # noqa: E402
from conformance.bench.javaclient import build  # noqa: E402
from conformance.bench.runner import start_harness  # noqa: E402
from conformance.zk.versions import find_classpath  # noqa: E402

SYSCALLS = "read,write,recvfrom,sendto,recvmsg,sendmsg,readv,writev,fsync,fdatasync"
#: Their numbers on x86-64: the kernel records these calls alone (a filter on the tracepoints), so that the servers'
#: other calls (epoll_wait, futex, ...) cost nothing more under the trace.
NUMBERS = (0, 1, 44, 45, 47, 46, 19, 20, 74, 75)
SYSTEMS = ("zabref-java", "zookeeper-java")
HOPS = ("request->proposal", "proposal->ack", "ack->reply", "request->reply", "sync")


def ports(h, sid: int) -> tuple[int, set[int], int]:
    """(client port the Java client uses, every quorum port, this server's quorum port)."""
    if h.system == "zabref-java":
        config = h.cluster.config
        return config.server(sid).zk_client_port, {config.server(s).quorum_port for s in h.sids}, \
            config.server(sid).quorum_port
    m = h.ensemble.member(sid)
    return m.client_port, {h.ensemble.member(s).quorum_port for s in h.sids}, m.quorum_port


def _sample_sockets(h, pids: dict[int, int], fds: dict[int, dict[int, str]], stop: threading.Event) -> None:
    """Classify the servers' sockets again and again until ``stop``: the Java client opens its session to the leader
    when the row starts."""
    while True:
        for sid, pid in pids.items():
            fds[pid].update(hops.sockets(pid, *ports(h, sid)))
        if stop.wait(0.2):
            return


def measure(system: str, writes: int, folder: Path, java, late: bool = False, code: Path | None = None) -> dict:
    h = start_harness(system, folder / system, find_classpath(), code, java_client=java, late=late)
    try:
        leader = h.leader()
        h.adapter.run_row("write", "leader", leader, 16, 500)
        pids = h.pids()
        tids = {int(t.name): pid for pid in pids.values() for t in Path(f"/proc/{pid}/task").iterdir()}
        fds: dict[int, dict[int, str]] = {pid: {} for pid in pids.values()}
        data, text = folder / f"{system}.perf.data", folder / f"{system}.trace"
        # recorded to a buffer as the calls happen (little cost to the servers), formatted after the row
        only = " || ".join(f"id == {n}" for n in NUMBERS)
        perf = subprocess.Popen(["perf", "record", "-o", str(data), "-e", "raw_syscalls:sys_enter", "--filter", only,
                                 "-e", "raw_syscalls:sys_exit", "--filter", only,
                                 "-p", ",".join(map(str, pids.values()))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_sockets, args=(h, pids, fds, stop), daemon=True)
        time.sleep(2.0)  # attached
        if perf.poll() is not None:
            sys.exit(f"bench_hops: perf record ended at once (exit {perf.returncode}): {perf.communicate()[1][-500:]}")
        sampler.start()
        try:
            row = h.adapter.run_row("write", "leader", leader, 1, writes)
        finally:
            stop.set()
            sampler.join()
            perf.send_signal(signal.SIGINT)
            try:
                perf.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                perf.kill()
                perf.communicate()
        with open(text, "w") as out:
            subprocess.run(["perf", "trace", "-i", str(data), "-e", SYSCALLS], stdout=out,
                           stderr=subprocess.STDOUT, check=False, timeout=600)
        calls = hops.parse(text.read_text(errors="replace").splitlines(), tids)
        lead = hops.leader_hops(calls.get(pids[leader], []), fds[pids[leader]])
        follows = [hops.follower_hops(calls.get(pids[s], []), fds[pids[s]]) for s in h.sids if s != leader]
        return {"row": row, "leader": lead, "followers": follows}
    finally:
        h.close()


def faster(followers: list[hops.Hops], name: str) -> float | None:
    """The smaller of the followers' medians of hop ``name`` (the first ACK makes the quorum), or None."""
    medians = [m for m in (f.median(name) for f in followers) if m is not None]
    return min(medians) if medians else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--writes", type=int, default=3000)
    ap.add_argument("--systems", default="zabref-java,zookeeper-java")
    ap.add_argument("--keep", type=Path, default=None, help="keep the traces and data folders here")
    ap.add_argument("--leader-logs-late", action="store_true",
                    help="zabref's servers with [cluster] leader_logs_late (a leader's PROPOSAL before its own sync)")
    ap.add_argument("--zabref-code", type=Path, default=None,
                    help="run zabref's servers from this tree (scripts/build_compiled.py prints the compiled one)")
    args = ap.parse_args()
    systems = args.systems.split(",")
    if not systems or set(systems) - set(SYSTEMS):
        sys.exit(f"bench_hops: --systems takes {', '.join(SYSTEMS)}, not {args.systems!r}")
    if shutil.which("perf") is None:
        sys.exit("bench_hops: needs perf (Debian's linux-perf)")
    if platform.machine() != "x86_64":
        sys.exit(f"bench_hops: knows the system call numbers of x86_64 only, not {platform.machine()}'s")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="zabref-hops-"))
    folder.mkdir(parents=True, exist_ok=True)
    java = build(print)
    out = {}
    for system in systems:
        print(f"{system}: {args.writes} writes, one in flight, traced", flush=True)
        out[system] = measure(system, args.writes, folder, java, args.leader_logs_late, args.zabref_code)
    print(f"\n{'hop (median ms)':<28}" + "".join(f"{s:>16}" for s in out) + ("    ratio" if len(out) == 2 else ""))
    names = list(out)
    rows = [(f"leader {name}", [out[s]["leader"].median(name) for s in names]) for name in HOPS]
    rows += [(f"follower {name}", [faster(out[s]["followers"], name) for s in names])
             for name in ("proposal->ack (inside)", "sync")]
    for label, values in rows:
        cells = "".join(f"{v:>16.3f}" if v is not None else f"{'-':>16}" for v in values)
        ratio = f"{values[0] / values[1]:>9.2f}" if len(values) == 2 and all(values) else ""
        print(f"{label:<28}{cells}{ratio}")
    for s in names:
        lead = out[s]["leader"]
        print(f"{s}: {out[s]['row'].ops_per_s:,.1f} writes/s under the trace, p50 {out[s]['row'].p50_ms:.3f} ms; "
              f"{len(lead.hops.get('request->reply', []))} writes cut into hops, {lead.skipped} left out; the leader "
              f"synced before its PROPOSAL left in {lead.sync_first}")
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
