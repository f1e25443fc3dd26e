---------------------------- MODULE MC_ciconfirm ----------------------------
(* Conformance's model of zabref's sync: tinyconfirm (SyncConfirms) with  *)
(* no faults and the model rule SyncAnsweredAtOnce (ZabSync.tla): a       *)
(* leader answers a sync in the step that makes it answerable, as         *)
(* zabref's does in the same input.                                       *)
EXTENDS ZabSync

ZabrefSyncConfirms == TRUE
=============================================================================
