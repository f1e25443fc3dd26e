---------------------------- MODULE MC_tinylate ----------------------------
(* tiny with a leader that logs late (Zab.tla, LeaderLogsLate): it sends  *)
(* a PROPOSAL before its own log write of it is durable and counts itself *)
(* once it is (LeaderOwnACK); its crash may lose what it had not logged.  *)
(* zabref runs it with [cluster] leader_logs_late = true.                 *)
EXTENDS Zab

TinyLeaderLogsLate == TRUE
=============================================================================
