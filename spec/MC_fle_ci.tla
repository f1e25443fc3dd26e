----------------------------- MODULE MC_fle_ci -----------------------------
(* The CI FLE model: three servers, one fault (a StartElection or a Restart).  Every action is taken; TLC
   dumps the whole graph (-dump dot) in about a minute on two cores.  Figures in spec/FLE.md. *)
EXTENDS FastLeaderElection

MC_Server == 1..3
\* Server 2 is in a later epoch with the same log (it synced in epoch 2 and nothing was proposed since: a real
\* server's last zxid is that of a transaction); servers 1 and 3 share epoch 1 and zxid, so sid decides between
\* them.  The vote order is therefore 2 > 3 > 1.
MC_InitZxid == (1 :> <<1, 1>> @@ 2 :> <<1, 1>> @@ 3 :> <<1, 1>>)
MC_InitEpoch == (1 :> 1 @@ 2 :> 2 @@ 3 :> 1)

\* Only server MC_Faulty suffers the fault (a StartElection or a Restart), at any point.  Server 3 has the middle
\* vote: its fault exercises every action, and a server it left LOOKING with a quorum resends its vote and waits in
\* finalize again (ResendNotifications with a quorum), which a fault of server 1, the worst vote, never gives.
\* Letting any server fault gives 278,225 distinct states (spec/FLE.md).
MC_Faulty == 3
MC_OnlyFaultyFaults == \A i \in Server : faults'[i] # faults[i] => i = MC_Faulty
=============================================================================
