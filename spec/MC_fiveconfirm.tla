---------------------------- MODULE MC_fiveconfirm ----------------------------
(* fivesync's directed search with zabref's leader (ZabSync.tla,           *)
(* SyncConfirms): a sync is answered only once a quorum has confirmed the  *)
(* leader still leads.  Expected to PASS: the deposed leader of fivesync  *)
(* never gathers a quorum, so its follower's sync is never answered.      *)
EXTENDS ZabSync

Directed ==
    /\ Cardinality(established) <= 2
    /\ \A t \in proposed : t.zxid[1] = 2

NoLeaderLeaves == \A s \in Server : state[s] = LEADING => state'[s] = LEADING
ZabrefSyncConfirms == TRUE
=============================================================================
