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

\* Only server MC_Faulty suffers the fault (a StartElection or a Restart), at any point.  Server 1 has the worst
\* vote, so it follows in the first election and its fault exercises every action.  Letting any server fault
\* gives 278,225 distinct states (spec/FLE.md).
MC_Faulty == 1
MC_OnlyFaultyFaults == \A i \in Server : faults'[i] # faults[i] => i = MC_Faulty
=============================================================================
