---------------------------- MODULE MC_free ----------------------------
EXTENDS Zab
\* Every election decision is free: whatever FastLeaderElection decides, however stale its ballots.
FreeElectionFault(plausible) == UNCHANGED faults
=============================================================================
