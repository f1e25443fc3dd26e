------------------------- MODULE MC_ciconfirmfault -------------------------
(* ciconfirm with one fault: a learner's connection may close, or a       *)
(* server crash, while a sync waits, so that the PING round starts again  *)
(* (LeaderSendPING) and SyncsDropped drops or re-arms what waits.  Its    *)
(* graph is for the edge check (zabref edges --config ciconfirmfault), a  *)
(* documented run: 254,778 states, too many for the test command.         *)
EXTENDS ZabSync

ZabrefSyncConfirms == TRUE
=============================================================================
