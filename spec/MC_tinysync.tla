---------------------------- MODULE MC_tinysync ----------------------------
(* tiny with clients' syncs at followers (ZabSync.tla): REQUEST, SYNC and
   the read guarantees SyncSeesCommitted and SyncFlushesChannel, one sync
   under way at a time. *)
EXTENDS ZabSync
=============================================================================
