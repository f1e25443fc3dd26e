------------------------------ MODULE ZabrefSeq ------------------------------
(***************************************************************************)
(* IsSuffix(s, t): s is a suffix of t.  The Java class ZabrefSeq           *)
(* (ZabrefSeq.java beside this module) computes the same faster; without   *)
(* it on TLC's classpath TLC evaluates this definition.                    *)
(***************************************************************************)
EXTENDS Naturals, Sequences

IsSuffix(s, t) == Len(s) <= Len(t) /\ s = SubSeq(t, Len(t) - Len(s) + 1, Len(t))
=============================================================================
