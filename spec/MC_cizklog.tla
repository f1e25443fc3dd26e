---------------------------- MODULE MC_cizklog ----------------------------
(* cizk with ZooKeeper's leader too: it proposes before it logs, so its    *)
(* crash may lose its uncommitted tail (Zab.tla, LeaderLogsLate; the       *)
(* validation of ZooKeeper runs checks them against this, docs/            *)
(* zookeeper.md).                                                          *)
EXTENDS Zab

ZooKeeperTruncAtOnce == TRUE
ZooKeeperLeaderLogsLate == TRUE
=============================================================================
