---------------------------- MODULE MC_fiveconfirm ----------------------------
(* fivesync's directed search (its Directed and NoLeaderLeaves) with       *)
(* zabref's leader (ZabSync.tla, SyncConfirms): a sync is answered only    *)
(* once a quorum has confirmed the leader still leads.  Expected to PASS:  *)
(* the deposed leader of fivesync never gathers a quorum, so its           *)
(* follower's sync is never answered.                                      *)
EXTENDS MC_fivesync

ZabrefSyncConfirms == TRUE
=============================================================================
