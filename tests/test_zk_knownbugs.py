"""Known ZooKeeper bugs named from the servers' own logs (`conformance.zk.knownbugs`), and the matrix's judgement by
them: the lines below are ZooKeeper's own, as its 3.8.0 (Debian, slf4j-simple) and 3.9.2 (logback) servers wrote
them in fault runs here (docs/zookeeper.md, "Known bugs in ZooKeeper's own logs")."""

from __future__ import annotations

from conformance.faults.history import Verdict
from conformance.faults.zkcommand import MATRIX, Row, judged
from conformance.faults.zkrun import ZkRunResult
from conformance.zk.knownbugs import SIGNATURES, Sighting, at_departure, scan_log, sightings, summarise

#: ZooKeeper 3.9.2's logback format: the warning, then the exception and its frames without a timestamp.
LOGBACK_4394 = """\
2026-11-27 03:55:44.592 [myid:] INFO  [QuorumPeer[myid=3](plain=127.0.0.1:14510)(secure=disabled)] Learner - Sent NEWLEADER ack to leader with zxid 300000000
2026-11-27 03:55:44.592 [myid:] WARN  [QuorumPeer[myid=3](plain=127.0.0.1:14510)(secure=disabled)] Learner - Exception when following the leader
java.lang.NullPointerException: Cannot read field "hdr" because "pif" is null
\tat org.apache.zookeeper.server.quorum.Learner.syncWithLeader(Learner.java:653)
\tat org.apache.zookeeper.server.quorum.Follower.followLeader(Follower.java:108)
\tat org.apache.zookeeper.server.quorum.QuorumPeer.run(QuorumPeer.java:1556)
2026-11-27 03:55:44.595 [myid:] INFO  [QuorumPeer[myid=3](plain=127.0.0.1:14510)(secure=disabled)] Learner - Disconnected from leader (with address: /127.0.0.1:14542). Was connected for 40ms. Sync state: false
"""

#: Debian 3.8.0's slf4j-simple format.
SIMPLE_4394 = """\
2026-11-27 03:54:04.941 [QuorumPeer[myid=3](plain=127.0.0.1:14280)(secure=disabled)] [WARN] Learner - Exception when following the leader
java.lang.NullPointerException: Cannot read field "hdr" because "pif" is null
\tat org.apache.zookeeper.server.quorum.Learner.syncWithLeader(Learner.java:655)
\tat org.apache.zookeeper.server.quorum.Follower.followLeader(Follower.java:108)
"""

#: Another NullPointerException of the same runs, thrown elsewhere (a learner's ACK processor on shutdown): not 4394.
ELSEWHERE = """\
2026-11-27 03:54:05.101 [SyncThread:2] [ERROR] SendAckRequestProcessor - Closing connection to leader, exception during packet send
java.lang.NullPointerException: Cannot invoke "java.io.BufferedOutputStream.flush()" because "this.bufferedOutput" is null
\tat org.apache.zookeeper.server.quorum.SendAckRequestProcessor.flush(SendAckRequestProcessor.java:67)
"""


#: ZooKeeper 3.9.5 (logback), a random mixed run (docs/zookeeper.md, "A mixed ensemble under faults"): server 2,
#: which had led epoch 1 and logged 0x1000000f0 alone, is told to TRUNC to 0x1000000ef and reloads a snapshot that
#: holds 0x1000000f0.
LOGBACK_4837 = """\
2026-12-01 21:19:27.435 [myid:] WARN  [QuorumPeer[myid=2](plain=127.0.0.1:20700)(secure=disabled)] Learner - Truncating log to get in sync with the leader 0x1000000ef
2026-12-01 21:19:27.441 [myid:] INFO  [QuorumPeer[myid=2](plain=127.0.0.1:20700)(secure=disabled)] FileSnap - Reading snapshot /tmp/rand3-3.9.5-1/2/version-2/snapshot.1000000f0
2026-12-01 21:19:27.448 [myid:] INFO  [QuorumPeer[myid=2](plain=127.0.0.1:20700)(secure=disabled)] ZKDatabase - Snapshot loaded in 8 ms, highest zxid is 0x1000000f0, digest is 494463749236
2026-12-01 21:19:27.450 [myid:] INFO  [QuorumPeer[myid=2](plain=127.0.0.1:20700)(secure=disabled)] Learner - DIFF sync got first proposal 0x200000001
"""


def _runs(tmp_path, logs: dict[str, str]):
    for name, text in logs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "server.log").write_text(text, encoding="utf-8")
    return tmp_path


def test_the_mark_of_4394_is_read_in_both_log_formats_and_nothing_else_is(tmp_path):
    folder = _runs(tmp_path, {"1": ELSEWHERE, "2": SIMPLE_4394, "3": LOGBACK_4394 + SIMPLE_4394.split("\n", 1)[1],
                              "data": LOGBACK_4394})
    found = sightings(folder)
    assert [(s.jira, s.sid, s.line) for s in found] == [("ZOOKEEPER-4394", 2, 2), ("ZOOKEEPER-4394", 3, 3),
                                                      ("ZOOKEEPER-4394", 3, 8)]
    assert found[1].when == "2026-11-27 03:55:44.592" and found[1].where().endswith("3/server.log:3 "
                                                                                   "(2026-11-27 03:55:44.592)")
    (line,) = summarise(found)
    assert line.startswith("ZOOKEEPER-4394: 3 times at servers 2, 3; first at ") and "syncWithLeader" in line


def test_a_log_cut_inside_a_trace_or_not_utf8_gives_the_marks_before_the_cut(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(SIMPLE_4394.encode() + b"\xff\xfe garbage\njava.lang.NullPointerException: cut here\n")
    assert [s.line for s in scan_log(log, 7)] == [2]
    log.write_bytes(b"")
    assert scan_log(log, 7) == []


def test_each_signature_needs_both_its_exception_and_its_frame():
    (s,) = [x for x in SIGNATURES if x.jira == "ZOOKEEPER-4394"]
    frame = "\tat org.apache.zookeeper.server.quorum.Learner.syncWithLeader(Learner.java:653)"
    assert s.exception.search('java.lang.NullPointerException: Cannot read field "hdr"') and s.frame.search(frame)
    assert not s.exception.search("java.io.EOFException")
    assert not s.frame.search("\tat org.apache.zookeeper.server.quorum.Learner.readPacket(Learner.java:228)")


def test_a_database_reloaded_after_a_trunc_with_more_than_it_kept_is_the_mark_of_4837(tmp_path):
    """The mark is the reload's line when its highest zxid is above the TRUNC's; a reload at the TRUNC's zxid or
    below, one at a server's start (no TRUNC before it) or one after the sync went on are not marks."""
    trunc, loaded, diff = LOGBACK_4837.splitlines()[0], LOGBACK_4837.splitlines()[2], LOGBACK_4837.splitlines()[3]
    right = loaded.replace("0x1000000f0", "0x1000000ef")
    folder = _runs(tmp_path, {"1": LOGBACK_4837, "2": "\n".join([trunc, right, diff, loaded]) + "\n",
                              "3": "\n".join([loaded, trunc, diff, loaded]) + "\n"})
    found = sightings(folder)
    assert [(x.jira, x.sid, x.line, x.when) for x in found] == [("ZOOKEEPER-4837", 1, 3, "2026-12-01 21:19:27.448")]
    assert "highest zxid is 0x1000000f0" in found[0].text
    (line,) = summarise(found)
    assert line.startswith("ZOOKEEPER-4837: 1 time at server 1; first at ") and "TRUNC" in line


def test_the_matrix_judges_a_log_row_by_its_mark_and_a_history_row_by_the_checks(tmp_path):
    row = next(r for r in MATRIX if r.judge == "ZOOKEEPER-4394")
    assert row.bug == "zookeeper-4394" and row.expect["3.9.2"] == "caught" and row.expect["3.9.3"] == "pass"
    clean = ZkRunResult("3.9.2", 3, 1, [], Verdict())
    marked = ZkRunResult("3.9.2", 3, 1, [], Verdict(), known=sightings(_runs(tmp_path, {"3": LOGBACK_4394})))
    lossy = ZkRunResult("3.8.0", 3, 1, [], Verdict(lost=3), known=marked.known)
    assert (judged(row, clean), judged(row, marked)) == ("pass", "caught")
    history = Row("zookeeper-4785", 3, {}, 1)
    # a sighting does not make a run fail its checks, nor a loss make a log row caught
    assert (judged(history, marked), judged(history, lossy)) == ("pass", "caught")
    assert marked.ok and marked.to_json()["known_bugs"][0]["jira"] == "ZOOKEEPER-4394"
    broken = ZkRunResult("3.9.3", 3, 1, [], Verdict(), problems=["the ensemble did not settle"])
    assert judged(row, broken) == "error"


def test_a_mark_at_the_departing_sender_just_before_the_departure_is_named_and_no_other():
    """`at_departure`: the mark at the departing observation's sender 14 ms before it (ZooKeeper's log stamps in the
    machine's local time) is named; a mark at another server, one 5 s earlier, and one without a time are not."""
    from datetime import datetime

    def mark(sid: int, when: str) -> Sighting:
        return Sighting("ZOOKEEPER-4394", sid, f"{sid}/server.log", 442, when, "java.lang.NullPointerException")

    wall = datetime.strptime("2026-11-28 15:30:59.782", "%Y-%m-%d %H:%M:%S.%f").timestamp()
    found = [mark(3, "2026-11-28 15:30:59,768"), mark(2, "2026-11-28 15:30:59.770"),
             mark(3, "2026-11-28 15:30:54.768"), mark(3, "")]
    lines = at_departure(found, 3, wall)
    assert len(lines) == 1 and "server 3" in lines[0] and "14 ms before" in lines[0] and "3/server.log:442" in lines[0]
    assert at_departure(found, 1, wall) == []
    assert at_departure(found, 3, wall + 10) == []
