---------------------------- MODULE MC_fivesync ----------------------------
(* ZooKeeper's sync with five servers, where no intersection of quorums    *)
(* protects it: a directed search (no crash, no leader gives up, at most   *)
(* two epochs established, the one transaction in the second) that is      *)
(* expected to FAIL SyncSeesCommitted.  A leader left with one follower    *)
(* answers that follower's sync after three other servers elected a new   *)
(* leader that committed (spec/README.md, "Reads": a deposed leader).      *)
EXTENDS ZabSync

Directed ==
    /\ Cardinality(established) <= 2
    /\ \A t \in proposed : t.zxid[1] = 2

NoLeaderLeaves == \A s \in Server : state[s] = LEADING => state'[s] = LEADING
=============================================================================
