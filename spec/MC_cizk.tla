---------------------------- MODULE MC_cizk ----------------------------
(* ci as ZooKeeper's follower does it: TRUNC truncates at once (Zab.tla,  *)
(* TruncAtOnce).  Its traces drive real ZooKeeper servers                 *)
(* (`zabref conform --system zookeeper`, docs/zookeeper.md).              *)
EXTENDS Zab

ZooKeeperTruncAtOnce == TRUE
=============================================================================
