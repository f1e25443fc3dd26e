"""conformance/bench/hops.py: perf trace's lines read into calls, sockets classified from /proc, writes cut into
hops."""

from __future__ import annotations

import pytest

from conformance.bench import hops

CLIENT, Q1, Q2, LOG = 10, 11, 12, 20
FDS = {CLIENT: "client", Q1: "quorum", Q2: "quorum"}


def line(t: float, d: float, name: str, fd: int, ret: int, tid: int = 100) -> str:
    return f"{t:>10.3f} ({d:>6.3f} ms): python3/{tid} {name}(fd: {fd}, buf: 0x7f, count: 65536)   = {ret}"


def leader_trace() -> list[str]:
    """Two writes one after the other (the second read in two calls, its sync printed in two as perf trace prints a
    call another thread's line interrupted, its ACK by another thread of the same process), a client's PING answered
    between them, a write the trace ends in, and lines that are no call."""
    return [
        line(1.000, 0.010, "recvfrom", CLIENT, 120),           # request 1 read, ends at 1.010
        line(1.050, 0.005, "write", LOG, 200),
        line(1.060, 0.150, "fdatasync", LOG, 0),                 # the leader syncs first
        line(1.300, 0.020, "sendto", Q1, 130),                   # PROPOSAL out at 1.300
        line(1.310, 0.020, "sendto", Q2, 130),
        line(1.900, 0.010, "recvfrom", Q1, 20),                  # first ACK in, ends at 1.910
        line(1.950, 0.010, "recvfrom", Q2, 20),
        line(2.100, 0.010, "sendto", CLIENT, 40),                # reply out at 2.100
        line(2.500, 0.010, "read", CLIENT, 12),                  # a PING
        line(2.600, 0.010, "write", CLIENT, 16),                 # its answer: no write
        line(3.000, 0.010, "read", CLIENT, 4),                   # request 2's length, ends at 3.010
        line(3.020, 0.010, "read", CLIENT, 116),                 # its body
        line(3.100, 0.020, "write", Q1, 130),                    # PROPOSAL out before the sync (ZooKeeper's order)
        "     3.120 (         ): python3/100 fdatasync(fd: 20)                    ...",  # the sync, interrupted
        line(3.400, 0.000, "read", Q2, -1, tid=101),             # EAGAIN: no data, not the ACK
        "     3.120 ( 0.200 ms): python3/100  ... [continued]: fdatasync())      = 0",  # ... and its end
        line(3.500, 0.010, "read", Q2, 20, tid=101),             # first ACK in, ends at 3.510
        "     3.450 ( 0.030 ms): python3/101  ... [continued]: read())           = 20",  # an end without its start
        line(3.600, 0.010, "write", CLIENT, 40),                 # reply out at 3.600
        line(5.000, 0.010, "read", CLIENT, 120),                 # a write the trace ends in
        line(5.100, 0.010, "write", Q1, 130),
        "perf: some other message",
    ]


def test_perf_trace_lines_become_calls_of_their_process_and_the_rest_is_passed_over():
    calls = hops.parse(leader_trace(), {100: 7, 101: 7})
    assert list(calls) == [7] and len(calls[7]) == 19
    c = calls[7][0]
    assert (c.t, c.d, c.tid, c.name, c.fd, c.ret) == (1.0, 0.01, 100, "recvfrom", CLIENT, 120)
    assert c.end == pytest.approx(1.01)
    joined = [c for c in calls[7] if c.t == 3.12]  # printed in two, another thread's line between: one call
    assert [(c.d, c.tid, c.name, c.fd, c.ret) for c in joined] == [(0.2, 100, "fdatasync", LOG, 0)]
    assert hops.parse(leader_trace(), {100: 7})[7][-1].tid == 100  # a thread of no traced process: left out


def test_a_leaders_writes_are_cut_into_request_proposal_ack_and_reply():
    h = hops.leader_hops(hops.parse(leader_trace(), {100: 7, 101: 7})[7], FDS)
    assert h.hops["request->proposal"] == pytest.approx([0.29, 0.09])
    assert h.hops["proposal->ack"] == pytest.approx([0.61, 0.41])
    assert h.hops["ack->reply"] == pytest.approx([0.19, 0.09])
    assert h.hops["request->reply"] == pytest.approx([1.09, 0.59])
    assert h.hops["sync"] == pytest.approx([0.15, 0.2])
    assert h.sync_first == 1 and h.skipped == 1  # the PING is no write; the last write has no end
    assert h.median("ack->reply") == pytest.approx(0.14) and h.median("nothing") is None


def test_a_followers_proposal_is_timed_from_its_read_to_the_ack_after_its_sync():
    lines = [
        line(1.000, 0.010, "read", Q1, 20),     # a COMMIT
        line(2.000, 0.010, "read", Q1, 130),    # the PROPOSAL, ends at 2.010
        line(2.050, 0.005, "write", LOG, 130),
        line(2.060, 0.150, "fsync", LOG, 0),
        line(2.300, 0.010, "write", Q1, 20),    # its ACK at 2.300
        line(2.400, 0.010, "write", Q1, 20),    # a PING: no sync before it, not timed
    ]
    h = hops.follower_hops(hops.parse(lines, {100: 3})[3], {Q1: "quorum"})
    assert h.hops == {"proposal->ack (inside)": pytest.approx([0.29]), "sync": pytest.approx([0.15])}


def test_sockets_are_classified_by_the_ports_they_join(tmp_path):
    pid = 42
    (tmp_path / str(pid) / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    rows = [("0100007F:0FA0", "0100007F:C350", 501),   # local 4000 (client port), remote 50000
            ("0100007F:C351", "0100007F:1388", 502),   # remote 5000: a peer's quorum port
            ("0100007F:1389", "0100007F:C352", 503),   # local 5001: its own quorum port
            ("0100007F:1770", "0100007F:C353", 504)]   # local 6000: an election port, left out
    (tmp_path / str(pid) / "net" / "tcp").write_text(header + "".join(
        f"   0: {a} {b} 01 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n" for a, b, inode in rows))
    fd = tmp_path / str(pid) / "fd"
    fd.mkdir()
    for n, inode in ((7, 501), (8, 502), (9, 503), (10, 504), (11, 999)):
        (fd / str(n)).symlink_to(f"socket:[{inode}]")
    (fd / "3").symlink_to("/tmp/some-log")
    assert hops.sockets(pid, 4000, {5000, 5001}, 5001, proc=tmp_path) == {7: "client", 8: "quorum", 9: "quorum"}
