---------------------------- MODULE MC_cizk39 ----------------------------
(* ci as the follower of ZooKeeper 3.9.3 and later does it: TRUNC         *)
(* truncates at once (Zab.tla, TruncAtOnce), and NEWLEADER may leave the   *)
(* new epoch's proposals for UPTODATE to log (NewLeaderDefers).  Its      *)
(* traces drive real ZooKeeper 3.9.3+ servers                              *)
(* (`zabref conform --system zookeeper@3.9.5`, docs/zookeeper.md).         *)
EXTENDS Zab

ZooKeeperTruncAtOnce == TRUE
ZooKeeperNewLeaderDefers == TRUE
=============================================================================
