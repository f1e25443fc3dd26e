----------------------------- MODULE MC_fle_vote -----------------------------
(* ZOOKEEPER-1732's model: MC_fle_ci's servers and fault with VoteUpdates (a decided server's vote takes the
   epoch Zab established: UpdateElectionVote).  The fault is what the step is for: server 3 restarts or starts a
   new round while the others have decided, and joins them on their decided votes.  Figures in spec/FLE.md. *)
EXTENDS FastLeaderElection

MC_Server == 1..3
\* As MC_fle_ci: the vote order is 2 > 3 > 1.
MC_InitZxid == (1 :> <<1, 1>> @@ 2 :> <<1, 1>> @@ 3 :> <<1, 1>>)
MC_InitEpoch == (1 :> 1 @@ 2 :> 2 @@ 3 :> 1)
MC_VoteUpdates == TRUE

MC_Faulty == 3
MC_OnlyFaultyFaults == \A i \in Server : faults'[i] # faults[i] => i = MC_Faulty
=============================================================================
