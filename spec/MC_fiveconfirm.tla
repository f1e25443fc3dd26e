---------------------------- MODULE MC_fiveconfirm ----------------------------
(* fivesync's directed search (its Directed and NoLeaderLeaves) with       *)
(* zabref's leader (ZabSync.tla, SyncConfirms): a sync is answered only    *)
(* once a quorum has confirmed the leader still leads.  The roles are      *)
(* pinned to fivesync's counterexample: 3 and 4 are the only leaders,      *)
(* server 1 never follows 4, and only 1 syncs, after the one commit, so a  *)
(* leader of epoch 1 kept by 1 alone is deposed by 4's epoch 2.  Expected  *)
(* to PASS: the deposed leader never gathers a quorum, so 1's sync is      *)
(* never answered; with SyncConfirms FALSE (ZooKeeper) the same search     *)
(* fails SyncSeesCommitted (tests/test_spec.py).                           *)
EXTENDS MC_fivesync

ZabrefSyncConfirms == TRUE

Roles ==
    /\ \A s \in Server : state[s] = LEADING => s \in {3, 4}
    /\ ~(state[1] = FOLLOWING /\ leader[1] = 4)
    /\ \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
          msgs[a][b][k].type = "REQUEST" => a = 1 /\ msgs[a][b][k].data > 0
=============================================================================
