----------------------------- MODULE ZabrefData -----------------------------
(***************************************************************************)
(* Values a generated module reads from a file (conformance/tla/datafile.py). *)
(* Datum(file, k) is the value on line k of file; TLC evaluates it with the   *)
(* Java class ZabrefData (ZabrefData.java beside this module). Without the   *)
(* class on TLC's classpath the definition below stops the check.            *)
(***************************************************************************)
EXTENDS TLC

Datum(file, k) == Assert(FALSE, "ZabrefData.class is not on TLC's classpath (conformance/tla/overrides.py)")
=============================================================================
