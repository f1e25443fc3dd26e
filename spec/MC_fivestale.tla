---------------------------- MODULE MC_fivestale ----------------------------
(* zabref's leader (SyncConfirms) with five servers, where a learner that  *)
(* holds a later epoch comes back to follow a deposed leader.  fivesync's  *)
(* directed search (its Directed and NoLeaderLeaves), with two faults and  *)
(* roles pinned: 3 leads epoch 1 with 1 and 4; 4 times out and leads epoch *)
(* 2 with 2 and 5, which commits; 5 times out and follows 3 again, and     *)
(* server 1, still following 3, issues a sync after that commit.  Expected *)
(* to PASS: 3 PINGs only learners whose sync it sent (ZabSync.tla,         *)
(* Pinged), so 5, which will refuse epoch 1, is never PINGed and confirms  *)
(* nothing; PINGed and counted, its answers let 3 answer 1's sync without  *)
(* the commit of epoch 2 (spec/mutations/PingBeforeSyncCounts.toml).       *)
EXTENDS MC_fivesync

ZabrefSyncConfirms == TRUE

Roles ==
    /\ \A s \in Server : state[s] = LEADING => s \in {3, 4}
    /\ ~(state[1] = FOLLOWING /\ leader[1] = 4)
    /\ ~(state[2] = FOLLOWING /\ leader[2] = 3)
    /\ state[4] = FOLLOWING => leader[4] = 3
    /\ (state[5] = FOLLOWING /\ leader[5] = 3) => acceptedEpoch[5] = 2
    \* only server 1 syncs, and only after the new leader's commit (its REQUEST's mark counts it)
    /\ \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
          msgs[a][b][k].type = "REQUEST" => a = 1 /\ msgs[a][b][k].data > 0
=============================================================================
