---------------------------- MODULE MC_fle_tiny ----------------------------
(* The tiny FLE model: three servers, no fault (one round).  TLC checks it in seconds; tests/test_fle_spec.py
   asserts its exact distinct-state count (recorded in spec/FLE.md).  Server 3 has the oldest data, so the
   greatest sid is not the winner: the election must go by (epoch, zxid) first. *)
EXTENDS FastLeaderElection

MC_Server == 1..3
\* Server 1 logged up to <<1, 2>>, server 2 up to <<1, 1>>, server 3 up to <<1, 1>>; all are in epoch 1.
MC_InitZxid == (1 :> <<1, 2>> @@ 2 :> <<1, 1>> @@ 3 :> <<1, 1>>)
MC_InitEpoch == (1 :> 1 @@ 2 :> 1 @@ 3 :> 1)
=============================================================================
