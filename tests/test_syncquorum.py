"""ZOOKEEPER-1675 named from a stale read and the recording (conformance/faults/syncquorum.py): the read's server
still served in an older epoch than the missed write's when it answered, and it is a ZooKeeper server. No JVM: the
recording's NEWLEADER packets and the reads are built by hand, in the shape of a real mixed run (3.9.5, seed 2,
2026-12-03: server 2 led epoch 5, servers 3 and 1 formed epoch 6 at 21.7 s, 2 joined it at 22.3 s)."""

from __future__ import annotations

from conformance.faults.history import Read, Write, check
from conformance.faults.syncquorum import JIRA, explain, joined_epochs
from conformance.zk.wire import Decoded, Message

S = 1_000_000_000  # ns a second


def newleader(t: float, leader: int, learner: int, epoch: int) -> Message:
    return Message(int(t * S), 1, "quorum", leader, learner, "s2c", 0, "NEWLEADER", epoch << 32, {})


RUN = Decoded(None, [  # type: ignore[arg-type]  # the recording's records are not read
    newleader(1.1, 3, 2, 1), newleader(1.4, 3, 1, 1),
    Message(int(2 * S), 1, "quorum", 3, 2, "s2c", 0, "COMMIT", 0x100000001, {}),  # not a NEWLEADER: not counted
    newleader(17.0, 2, 1, 5), newleader(19.0, 2, 3, 5),
    newleader(21.7, 3, 1, 6), newleader(22.3, 3, 2, 6)])


def stale(server: int, answered: float, end: int = 0x50000001C) -> Read:
    return Read(1, server, 1, answered - 0.05, answered, True, end)


def test_each_server_joins_the_epochs_of_the_newleaders_on_its_links() -> None:
    joined = joined_epochs(RUN)
    assert joined[2] == ([int(1.1 * S), int(17.0 * S), int(22.3 * S)], [1, 5, 6])  # led 5, then followed 6
    assert joined[1] == ([int(1.4 * S), int(17.0 * S), int(21.7 * S)], [1, 5, 6])


def test_a_stale_read_at_a_deposed_zookeeper_leader_is_1675_and_no_other_is() -> None:
    missed = 0x600000001
    [named] = explain([(stale(2, 22.0), missed)], RUN, zabref=[1])
    assert (named.read.server, named.zxid, named.joined) == (2, missed, 5)
    assert named.line().startswith(f"{JIRA}: reader 1's sync+read at server 2 saw up to 0x50000001c, missing "
                                   "0x600000001: server 2 had joined epoch 5 at most, epoch 6 had committed")
    # answered after server 2 took epoch 6's NEWLEADER: its sync went to epoch 6's leader; some other bug
    assert explain([(stale(2, 22.4), missed)], RUN, zabref=[1]) == []
    # at a zabref server: its leader asks a quorum before it answers a sync, so the stale read is zabref's own
    assert explain([(stale(2, 22.0), missed)], RUN, zabref=[2]) == []
    # the read saw epoch 6 already, and missed a later write of it: not an older epoch's answer
    assert explain([(stale(2, 22.0, end=0x600000001), 0x600000002)], RUN, zabref=[]) == []
    # a server no NEWLEADER names (never joined an epoch) answering with an older epoch's state: named
    assert [a.joined for a in explain([(stale(3, 30.0, end=0), missed)], Decoded(None, []), zabref=[])] == [0]


def test_the_history_checks_stale_read_reaches_the_rule() -> None:
    """End to end from the checker: the acknowledged write's zxid and the read come out of `check` as they go in."""
    writes = [Write("a", 0, 15.0, 15.5, "ok", 0x50000001C), Write("b", 0, 21.8, 21.9, "ok", 0x600000001)]
    seq = [(0x50000001C, "a"), (0x600000001, "b")]
    v = check(writes, {1: seq, 2: seq, 3: seq}, reads=[stale(2, 22.0)])
    assert v.stale_reads == 1
    assert [(a.read.server, a.zxid) for a in explain(v.missed, RUN, zabref=[1])] == [(2, 0x600000001)]
