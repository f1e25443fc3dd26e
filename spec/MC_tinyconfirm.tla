---------------------------- MODULE MC_tinyconfirm ----------------------------
(* tinysync with zabref's leader: a sync is answered only once a quorum    *)
(* has confirmed the leader still leads (ZabSync.tla, SyncConfirms).       *)
EXTENDS ZabSync

ZabrefSyncConfirms == TRUE
=============================================================================
