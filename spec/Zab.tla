-------------------------------- MODULE Zab --------------------------------
(***************************************************************************)
(* Zab as ZooKeeper implements it: the "Zab 1.0" design page (seed 000),   *)
(* with the requirements of Reed & Junqueira (seed 004) and the properties *)
(* of Junqueira et al., DSN 2011 (seed 001).                               *)
(*                                                                         *)
(* Granularity: one action is one server handling one event -- one packet *)
(* of seed 000's table taken from the head of a FIFO channel, a timeout, a *)
(* client request, a crash.  Packet names, numbers and phase steps follow  *)
(* seed 000; spec/README.md maps every action to its seed step and lists   *)
(* each deliberate departure.                                              *)
(*                                                                         *)
(* Leader election is abstract here: each server's decision (lead, or     *)
(* follow some server) is one step, BecomeLeader / BecomeFollower; which   *)
(* decisions are plausible and which count as faults is stated below.     *)
(* FastLeaderElection itself, notification by notification, is the module *)
(* FastLeaderElection.tla.  This "multi-grained" split keeps discovery,    *)
(* synchronization and broadcast small enough to explore.                  *)
(*                                                                         *)
(* Channels are TCP connections: msgs[i][j] is the FIFO sequence of        *)
(* packets sent by i to j and not yet processed by j.  Closing a           *)
(* connection (a timeout, a crash, going back to election) drops the       *)
(* packets in flight both ways, and the leader forgets that learner.       *)
(***************************************************************************)
EXTENDS Naturals, Integers, Sequences, FiniteSets

CONSTANTS
    N,          \* the number of servers; the servers are the sids 1..N
    MaxEpoch,   \* bound: no election starts once an acceptedEpoch reached MaxEpoch
    MaxTxns,    \* bound: ClientRequest is enabled while fewer than MaxTxns were broadcast
    MaxFaults   \* bound: at most MaxFaults faults (crashes, timeouts of live connections, stale elections)

ASSUME N \in Nat \ {0} /\ MaxEpoch \in Nat \ {0} /\ MaxTxns \in Nat /\ MaxFaults \in Nat

Server == 1 .. N
NoServer == 0

\* ServerState (seed 002)
LOOKING == "LOOKING"
FOLLOWING == "FOLLOWING"
LEADING == "LEADING"

\* The phases of seed 000 (ZooKeeper's ZabState)
ELECTION == "ELECTION"
DISCOVERY == "DISCOVERY"
SYNCHRONIZATION == "SYNCHRONIZATION"
BROADCAST == "BROADCAST"

(***************************************************************************)
(* What a leader knows of one learner connection (ZooKeeper's              *)
(* LearnerHandler), named after the last packet exchanged on it:           *)
(*   NONE          no connection                                           *)
(*   FOLLOWERINFO  FOLLOWERINFO received; LEADERINFO waits for a quorum    *)
(*   LEADERINFO    LEADERINFO sent; waiting for ACKEPOCH                   *)
(*   ACKEPOCH      ACKEPOCH received; sync waits for a quorum of ACKEPOCH  *)
(*   NEWLEADER     sync packets and NEWLEADER sent; waiting for its ACK    *)
(*   ACKNEWLEADER  ACK of NEWLEADER received; UPTODATE waits for a quorum  *)
(*   UPTODATE      UPTODATE sent: the learner is in broadcast              *)
(***************************************************************************)
LearnerPhases == {"NONE", "FOLLOWERINFO", "LEADERINFO", "ACKEPOCH",
                  "NEWLEADER", "ACKNEWLEADER", "UPTODATE"}

\* Learners on the leader's forwarding list: sync was queued to them, so new PROPOSALs and COMMITs
\* are queued behind it (seed 000, phase 2, step 1).
ForwardingPhases == {"NEWLEADER", "ACKNEWLEADER", "UPTODATE"}

IsQuorum(S) == 2 * Cardinality(S) > N
Quorums == {Q \in SUBSET Server : IsQuorum(Q)}

Max(a, b) == IF a >= b THEN a ELSE b

(***************************************************************************)
(* A zxid is the pair <<epoch, counter>> (seed 004: epoch in the high 32   *)
(* bits, counter in the low 32).  A transaction is [zxid, value].          *)
(***************************************************************************)
ZxidLT(a, b) == a[1] < b[1] \/ (a[1] = b[1] /\ a[2] < b[2])
ZxidLE(a, b) == ~ZxidLT(b, a)
LastZxid(h) == IF h = <<>> THEN <<0, 0>> ELSE h[Len(h)].zxid

\* The position of zxid z in history h, 0 when absent.
IndexOf(h, z) == IF \E k \in 1 .. Len(h) : h[k].zxid = z
                 THEN CHOOSE k \in 1 .. Len(h) : h[k].zxid = z
                 ELSE 0

Range(s) == {s[k] : k \in DOMAIN s}
IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(t, 1, Len(s)) = s

(***************************************************************************)
(* Packets: seed 000's QuorumPacket {type, zxid, data}.  NoData stands for *)
(* the table's "n/a".                                                      *)
(***************************************************************************)
NoData == "n/a"
Packet(type, zxid, data) == [type |-> type, zxid |-> zxid, data |-> data]

-----------------------------------------------------------------------------
VARIABLES
    \* ---- every server, persistent (on disk; survive a crash) ----
    history,          \* the log of accepted transactions: <<[zxid, value], ...>>
    acceptedEpoch,    \* the epoch of the last LEADERINFO (NEWEPOCH) accepted
    currentEpoch,     \* the epoch of the last NEWLEADER accepted
    \* ---- every server, volatile (lost in a crash) ----
    state,            \* LOOKING, FOLLOWING or LEADING
    zabState,         \* ELECTION, DISCOVERY, SYNCHRONIZATION or BROADCAST
    leader,           \* whom a FOLLOWING server follows; the leader itself when LEADING; else NoServer
    lastCommitted,    \* history[i][1..lastCommitted[i]] is what i has delivered
    \* ---- follower, volatile ----
    stagedHistory,    \* the history a syncing follower builds; applied atomically on NEWLEADER
    \* ---- leader, volatile ----
    newEpoch,         \* the epoch the leader proposes (ZooKeeper's Leader.epoch)
    learnerPhase,     \* learnerPhase[l][f]: what leader l knows of learner f's connection
    learnerLastZxid,  \* learnerLastZxid[l][f]: the lastZxid f reported in ACKEPOCH
    ackIndex,         \* ackIndex[l][f]: the longest prefix of l's history f has ACKed
    \* ---- network ----
    msgs,             \* msgs[i][j]: packets from i to j in flight, FIFO (one TCP connection)
    \* ---- checking only: no protocol action reads them ----
    proposed,         \* every transaction ever broadcast (the paper's "broadcast" events)
    committed,        \* the transactions delivered by any server, in first-delivery order
    established,      \* every <<epoch, leader>> that ever established an epoch (discovery done)
    \* ---- bound only ----
    faults            \* faults so far (bounded by MaxFaults)

persistentVars == <<history, acceptedEpoch, currentEpoch>>
serverVars == <<state, zabState, leader, lastCommitted>>
leaderVars == <<newEpoch, learnerPhase, learnerLastZxid, ackIndex>>
checkVars == <<proposed, committed, established>>
vars == <<persistentVars, serverVars, stagedHistory, leaderVars, msgs, checkVars, faults>>

-----------------------------------------------------------------------------
(* Helpers over channels; each returns a new value of msgs. *)
Send(ch, from, to, m) == [ch EXCEPT ![from][to] = Append(@, m)]
SendSeq(ch, from, to, s) == [ch EXCEPT ![from][to] = @ \o s]
SendAll(ch, from, tos, m) ==
    [ch EXCEPT ![from] = [b \in Server |-> IF b \in tos THEN Append(ch[from][b], m) ELSE ch[from][b]]]
SendAllSeq(ch, from, tos, s) ==
    [ch EXCEPT ![from] = [b \in Server |-> IF b \in tos THEN ch[from][b] \o s ELSE ch[from][b]]]
Discard(ch, from, to) == [ch EXCEPT ![from][to] = Tail(@)]

HasPacket(from, to, type) == msgs[from][to] /= <<>> /\ Head(msgs[from][to]).type = type

\* The vote a server casts in election: (currentEpoch, lastZxid, sid), compared in that order (seed 002).
Vote(s) == <<currentEpoch[s], LastZxid(history[s]), s>>
VoteLT(a, b) ==
    \/ a[1] < b[1]
    \/ a[1] = b[1] /\ ZxidLT(a[2], b[2])
    \/ a[1] = b[1] /\ a[2] = b[2] /\ a[3] < b[3]

\* What server s has delivered, and the commit point of its history as a zxid.
\* (TypeOK states lastCommitted <= Len(history); the Min keeps the other invariants defined when it fails.)
Delivered(s) == SubSeq(history[s], 1, IF lastCommitted[s] <= Len(history[s]) THEN lastCommitted[s] ELSE Len(history[s]))
CommittedZxid(h, k) == IF k = 0 THEN <<0, 0>> ELSE h[k].zxid

(***************************************************************************)
(* Delivery: server s delivers the prefix h[1..k] of its history h.  The   *)
(* checking variable `committed` records the first order in which any      *)
(* server delivered anything; the invariants compare deliveries with it.   *)
(***************************************************************************)
Deliver(s, h, k) ==
    /\ lastCommitted' = [lastCommitted EXCEPT ![s] = k]
    /\ committed' = IF k > Len(committed) /\ IsPrefix(committed, SubSeq(h, 1, k))
                    THEN SubSeq(h, 1, k)
                    ELSE committed

(***************************************************************************)
(* Server s goes back to leader election (seed 000: "any failures or       *)
(* timeouts will cause the server to go back to leader election").  Its    *)
(* connections close: packets in flight to and from s are lost, and any    *)
(* leader forgets s as a learner.  Persistent state and lastCommitted are  *)
(* untouched here; Crash also drops lastCommitted.                         *)
(***************************************************************************)
GoLooking(s) ==
    /\ state' = [state EXCEPT ![s] = LOOKING]
    /\ zabState' = [zabState EXCEPT ![s] = ELECTION]
    /\ leader' = [leader EXCEPT ![s] = NoServer]
    /\ stagedHistory' = [stagedHistory EXCEPT ![s] = <<>>]
    /\ newEpoch' = [newEpoch EXCEPT ![s] = 0]
    /\ learnerPhase' = [l \in Server |-> IF l = s THEN [f \in Server |-> "NONE"]
                                         ELSE [learnerPhase[l] EXCEPT ![s] = "NONE"]]
    /\ learnerLastZxid' = [l \in Server |-> IF l = s THEN [f \in Server |-> <<0, 0>>]
                                            ELSE [learnerLastZxid[l] EXCEPT ![s] = <<0, 0>>]]
    /\ ackIndex' = [l \in Server |-> IF l = s THEN [f \in Server |-> 0]
                                     ELSE [ackIndex[l] EXCEPT ![s] = 0]]
    /\ msgs' = [a \in Server |-> [b \in Server |-> IF a = s \/ b = s THEN <<>> ELSE msgs[a][b]]]

(***************************************************************************)
(* The packets a leader with history h and commit point c sends to a       *)
(* learner whose last zxid is z (seed 000, phase 2), before NEWLEADER,     *)
(* when the first s transactions of h are ones it has committed or commits *)
(* at its NEWLEADER quorum:                                                *)
(*   DIFF(lastCommittedZxid), then the PROPOSALs the learner misses, when z *)
(*     is the leader's last zxid or appears in h (and is not above h[s]);  *)
(*   SNAP carrying h, when z precedes everything in h (ZooKeeper sends a   *)
(*     snapshot when the learner is older than the leader's log, here the  *)
(*     whole history);                                                     *)
(*   TRUNC(t), then the PROPOSALs after t, when the learner has            *)
(*     transactions the leader skipped: t is the last zxid of h below z;    *)
(*   TRUNC(h[s]), then the PROPOSALs after it, when z is above h's first s *)
(*     and not below h[1] (a leader in BROADCAST, the learner holding a    *)
(*     proposal it has not committed): whatever the learner has not        *)
(*     committed comes again on this connection, as ZooKeeper's leader     *)
(*     does it (LearnerHandler.syncFollower's TRUNC to maxCommittedLog,    *)
(*     Leader.startForwarding's outstanding proposals); a ZooKeeper        *)
(*     follower commits only what came on its connection                   *)
(*     (SyncKeepsCommitted; docs/zookeeper.md, item 8).                    *)
(* Each PROPOSAL of one of the first s transactions is followed by its     *)
(* COMMIT, as ZooKeeper's LearnerHandler sends its committedLog (the seed's *)
(* "missing messages"; a ZooKeeper follower keeps a PROPOSAL of its sync   *)
(* that no COMMIT follows pending, and exits when a later COMMIT names     *)
(* another transaction).  The follower takes such a COMMIT without a      *)
(* change (FollowerProcessCOMMITInSync): UPTODATE carries the commit point *)
(* (spec/README.md, departure 17).                                        *)
(***************************************************************************)
SyncPackets(h, c, z, s) ==
    LET n == Len(h)
        last == LastZxid(h)
        diff == Packet("DIFF", CommittedZxid(h, c), NoData)
        P(k) == Packet("PROPOSAL", h[k].zxid, h[k].value)
        \* the PROPOSALs of h[from + 1 ..], each of the first s followed by its COMMIT
        Proposals(from) ==
            LET m == IF s > from THEN s - from ELSE 0
            IN  [k \in 1 .. 2 * m |-> IF k % 2 = 1 THEN P(from + (k + 1) \div 2)
                                      ELSE Packet("COMMIT", h[from + k \div 2].zxid, NoData)]
                \o [k \in 1 .. (n - from - m) |-> P(from + m + k)]
        pos == IndexOf(h, z)
        below == {k \in 1 .. n : ZxidLT(h[k].zxid, z)} \cup {0}
    IN  IF n > 0 /\ ZxidLT(z, h[1].zxid) THEN <<Packet("SNAP", last, h)>>
        ELSE IF s < n /\ ZxidLT(CommittedZxid(h, s), z)
        THEN <<Packet("TRUNC", CommittedZxid(h, s), NoData)>> \o Proposals(s)
        ELSE IF z = last THEN <<diff>>
        ELSE IF pos > 0 THEN <<diff>> \o Proposals(pos)
        ELSE LET t == CHOOSE k \in below : \A k2 \in below : k2 <= k
             IN  <<Packet("TRUNC", CommittedZxid(h, t), NoData)>> \o Proposals(t)

FollowerInfo(f) == Packet("FOLLOWERINFO", <<acceptedEpoch[f], 0>>, f)

(***************************************************************************)
(* LeaderLogsLate: whether a leader proposes before its own log has the    *)
(* proposal.  ZooKeeper's leader sends a PROPOSAL first                    *)
(* (ProposalRequestProcessor: Leader.propose) and logs it after, in its    *)
(* SyncRequestProcessor, which gives the leader's own ACK (its             *)
(* AckRequestProcessor: Leader.processAck for itself) once the batch is on *)
(* disk: until then the leader does not count itself in a quorum for it,   *)
(* and a kill -9 in between leaves its log without what its followers      *)
(* logged.  With LeaderLogsLate, ackIndex[l][l] is how much of l's history *)
(* l has logged for good in its role (all of it when it starts to lead),   *)
(* LeaderOwnACK raises it, and a quorum counts l only up to it.  The       *)
(* seed's leader (and zabref's) logs before it proposes: FALSE, and the    *)
(* leader counts itself at once.  The validation of ZooKeeper runs         *)
(* overrides it with TRUE (spec/README.md, departure 13).                  *)
(***************************************************************************)
LeaderLogsLate == FALSE

\* Whether leader i counts itself in a quorum for history[i][k]: at once, or with LeaderLogsLate once it has logged
\* it (`acks` is its row of ackIndex, as a step is about to leave it).
CountsSelf(i, acks, k) == ~LeaderLogsLate \/ acks[i] >= k

\* The commit point a leader i reaches with learners' acks (ackIndex): the largest k <= top above i's commit point
\* such that i (when it counts itself, CountsSelf) and the learners whose ack reaches k are a quorum; when there is
\* none, a k no greater than i's commit point (CommitTo then commits nothing). Counting down from top stops at the
\* commit point: it costs one step a proposal not yet committed, not one a transaction of the history (which
\* matters when `zabref validate` checks a long run: a leader that logs late counts itself up to its whole history
\* when it starts to lead, before any learner ACKs, and the count down to 0 from there overflowed TLC's stack on a
\* validated fault run of 33,547 transactions, 2026-12-04).
RECURSIVE QuorumPoint(_, _, _)
QuorumPoint(i, acks, top) ==
    IF top <= lastCommitted[i] \/ IsQuorum({f \in Server : IF f = i THEN CountsSelf(i, acks, top) ELSE acks[f] >= top})
    THEN top ELSE QuorumPoint(i, acks, top - 1)
MaxAck(acks) == LET m == {acks[f] : f \in Server} IN CHOOSE k \in m : \A k2 \in m : k2 <= k

-----------------------------------------------------------------------------
Init ==
    /\ history = [s \in Server |-> <<>>]
    /\ acceptedEpoch = [s \in Server |-> 0]
    /\ currentEpoch = [s \in Server |-> 0]
    /\ state = [s \in Server |-> LOOKING]
    /\ zabState = [s \in Server |-> ELECTION]
    /\ leader = [s \in Server |-> NoServer]
    /\ lastCommitted = [s \in Server |-> 0]
    /\ stagedHistory = [s \in Server |-> <<>>]
    /\ newEpoch = [s \in Server |-> 0]
    /\ learnerPhase = [l \in Server |-> [f \in Server |-> "NONE"]]
    /\ learnerLastZxid = [l \in Server |-> [f \in Server |-> <<0, 0>>]]
    /\ ackIndex = [l \in Server |-> [f \in Server |-> 0]]
    /\ msgs = [a \in Server |-> [b \in Server |-> <<>>]]
    /\ proposed = {}
    /\ committed = <<>>
    /\ established = {}
    /\ faults = 0

-----------------------------------------------------------------------------
(***************************************************************************)
(* Election: each server's own decision.  FastLeaderElection ends at ONE  *)
(* server at a time -- it decides LEADING, or FOLLOWING some server --    *)
(* and servers of one round need not agree (spec/FLE.md: RoundAgreement   *)
(* and LeaderGreatestInQuorum are false).  So the election is two actions *)
(* per server, as the implementation takes them (zabref/core/node.py turns a    *)
(* FastLeaderElection Decision into the core's become_leader or            *)
(* become_follower), and Zab's discovery phase keeps safety whatever was   *)
(* decided (seed 000: "a best-effort leader election").                   *)
(*                                                                         *)
(* A decision FLE takes with every ballot current and every notification  *)
(* delivered is "plausible": a leader whose vote is the greatest of a      *)
(* quorum of LOOKING servers (or of servers still following it), a         *)
(* follower of a server that leads or whose vote beats its own.  Any other *)
(* decision needs stale ballots (crashes, lost notifications, a finalize   *)
(* wait shorter than the network's delay) and counts against MaxFaults,   *)
(* like every other fault: the spec allows it, the models bound how often. *)
(***************************************************************************)
PlausibleLeader(i) ==
    \E Q \in Quorums : i \in Q /\ \A s \in Q \ {i} :
        \/ state[s] = LOOKING /\ VoteLT(Vote(s), Vote(i))
        \/ state[s] = FOLLOWING /\ leader[s] = i
PlausibleFollower(i, j) == state[j] = LEADING \/ (state[j] = LOOKING /\ VoteLT(Vote(i), Vote(j)))

\* A decision that is not plausible is a fault (bounded by MaxFaults).
ElectionFault(plausible) == IF plausible THEN UNCHANGED faults ELSE faults < MaxFaults /\ faults' = faults + 1

\* LOOKING server i decides to lead (seed 000, phase 1, step 1): it proposes an epoch above its acceptedEpoch and
\* waits for FOLLOWERINFO.
BecomeLeader(i) ==
    /\ state[i] = LOOKING
    /\ \A s \in Server : acceptedEpoch[s] < MaxEpoch
    /\ ElectionFault(PlausibleLeader(i))
    /\ state' = [state EXCEPT ![i] = LEADING]
    /\ zabState' = [zabState EXCEPT ![i] = DISCOVERY]
    /\ leader' = [leader EXCEPT ![i] = i]
    /\ newEpoch' = [newEpoch EXCEPT ![i] = acceptedEpoch[i] + 1]
    /\ ackIndex' = IF LeaderLogsLate THEN [ackIndex EXCEPT ![i][i] = Len(history[i])] ELSE ackIndex
    /\ UNCHANGED <<persistentVars, lastCommitted, stagedHistory, learnerPhase, learnerLastZxid, msgs, checkVars>>

(***************************************************************************)
(* LOOKING server i decides to follow j (seed 000, phase 1, step 2): it    *)
(* connects to j and sends FOLLOWERINFO(acceptedEpoch) at once, whatever  *)
(* j is doing.  If j is not leading yet, the packet waits in the channel   *)
(* (j takes FOLLOWERINFO only when LEADING); if j never leads, i gives up  *)
(* (FollowerTimeout).  When j already leads an established epoch this is   *)
(* a follower joining it (seed 000: "the follower follows the phases").    *)
(***************************************************************************)
BecomeFollower(i, j) ==
    /\ i /= j
    /\ state[i] = LOOKING
    /\ ElectionFault(PlausibleFollower(i, j))
    /\ state' = [state EXCEPT ![i] = FOLLOWING]
    /\ zabState' = [zabState EXCEPT ![i] = DISCOVERY]
    /\ leader' = [leader EXCEPT ![i] = j]
    /\ msgs' = Send(msgs, i, j, FollowerInfo(i))
    /\ UNCHANGED <<persistentVars, lastCommitted, stagedHistory, leaderVars, checkVars>>

-----------------------------------------------------------------------------
(* Phase 1: establish an epoch (seed 000). *)

(***************************************************************************)
(* Leader i takes FOLLOWERINFO(acceptedEpoch) from j.  Until a quorum has  *)
(* connected, the proposed epoch grows above every acceptedEpoch seen; with *)
(* the quorum, i accepts that epoch and sends LEADERINFO(e) to all waiting *)
(* learners (step 3).  Once the epoch is chosen (acceptedEpoch[i] =         *)
(* newEpoch[i]) a late learner gets LEADERINFO at once.                    *)
(***************************************************************************)
LeaderProcessFOLLOWERINFO(i, j) ==
    /\ state[i] = LEADING
    /\ HasPacket(j, i, "FOLLOWERINFO")
    /\ LET m == Head(msgs[j][i])
           waiting == {f \in Server : learnerPhase[i][f] = "FOLLOWERINFO"} \cup {j}
           e == Max(newEpoch[i], m.zxid[1] + 1)
       IN  IF acceptedEpoch[i] = newEpoch[i]
           THEN /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "LEADERINFO"]
                /\ msgs' = Send(Discard(msgs, j, i), i, j, Packet("LEADERINFO", <<newEpoch[i], 0>>, NoData))
                /\ UNCHANGED <<newEpoch, acceptedEpoch>>
           ELSE IF IsQuorum(waiting \cup {i})
           THEN /\ newEpoch' = [newEpoch EXCEPT ![i] = e]
                /\ acceptedEpoch' = [acceptedEpoch EXCEPT ![i] = e]
                /\ learnerPhase' = [learnerPhase EXCEPT ![i] =
                                      [f \in Server |-> IF f \in waiting THEN "LEADERINFO" ELSE @[f]]]
                /\ msgs' = SendAll(Discard(msgs, j, i), i, waiting, Packet("LEADERINFO", <<e, 0>>, NoData))
           ELSE /\ newEpoch' = [newEpoch EXCEPT ![i] = e]
                /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "FOLLOWERINFO"]
                /\ msgs' = Discard(msgs, j, i)
                /\ UNCHANGED acceptedEpoch
    /\ UNCHANGED <<history, currentEpoch, serverVars, stagedHistory, learnerLastZxid, ackIndex, checkVars, faults>>

(***************************************************************************)
(* Follower i takes LEADERINFO(e) from its leader j (step 4): if e >       *)
(* acceptedEpoch it accepts e and sends ACKEPOCH(lastZxid, currentEpoch);   *)
(* if e = acceptedEpoch it sends ACKEPOCH(lastZxid, -1) (the packet table: *)
(* "already acknowledged"; the leader still needs lastZxid to sync); if    *)
(* e < acceptedEpoch it goes back to leader election.                      *)
(***************************************************************************)
FollowerProcessLEADERINFO(i, j) ==
    /\ state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = DISCOVERY
    /\ HasPacket(j, i, "LEADERINFO")
    /\ LET e == Head(msgs[j][i]).zxid[1]
       IN  IF e >= acceptedEpoch[i]
           THEN /\ acceptedEpoch' = [acceptedEpoch EXCEPT ![i] = e]
                /\ zabState' = [zabState EXCEPT ![i] = SYNCHRONIZATION]
                /\ msgs' = Send(Discard(msgs, j, i), i, j,
                                Packet("ACKEPOCH", LastZxid(history[i]),
                                       IF e > acceptedEpoch[i] THEN currentEpoch[i] ELSE -1))
                /\ UNCHANGED <<state, leader, stagedHistory, leaderVars>>
           ELSE /\ GoLooking(i)
                /\ UNCHANGED acceptedEpoch
    /\ UNCHANGED <<history, currentEpoch, lastCommitted, checkVars, faults>>

(***************************************************************************)
(* Leader i takes ACKEPOCH(lastZxid, currentEpoch) from j (steps 5-7).  If *)
(* j is more up to date than i (a greater currentEpoch, or the same one    *)
(* and a greater lastZxid), i goes back to leader election.  Once a quorum *)
(* has acknowledged the epoch, i sets currentEpoch (ZooKeeper's Leader     *)
(* does so here) and starts phase 2 with every acknowledged learner: the   *)
(* sync packets, then NEWLEADER(e).  A later ACKEPOCH is synced at once.   *)
(*                                                                         *)
(* An ACKEPOCH carrying -1 (j had accepted epoch e before, from i or from  *)
(* another leader of e) does not count toward the quorum: i takes it only *)
(* once its discovery is over, and syncs j then (ZooKeeper's              *)
(* Leader.waitForEpochAck).  Were it counted, two leaders that chose the   *)
(* same epoch could both establish it with one learner's two answers      *)
(* (spec/README.md, "Where the spec and ZooKeeper 3.8 differ", 1).        *)
(***************************************************************************)
LeaderProcessACKEPOCH(i, j) ==
    /\ state[i] = LEADING /\ learnerPhase[i][j] = "LEADERINFO"
    /\ HasPacket(j, i, "ACKEPOCH")
    /\ Head(msgs[j][i]).data /= -1 \/ zabState[i] /= DISCOVERY
    /\ LET m == Head(msgs[j][i])
           behind == \/ m.data = -1
                     \/ m.data < currentEpoch[i]
                     \/ m.data = currentEpoch[i] /\ ZxidLE(m.zxid, LastZxid(history[i]))
           acked == {f \in Server : learnerPhase[i][f] = "ACKEPOCH"} \cup {j}
           lz(f) == IF f = j THEN m.zxid ELSE learnerLastZxid[i][f]
           e == newEpoch[i]
           \* what the sync commits: a leader in BROADCAST its commit point, one in DISCOVERY or SYNCHRONIZATION
           \* its whole history, which it commits at its NEWLEADER quorum (LeaderProcessACKNEWLEADER)
           upto == IF zabState[i] = BROADCAST THEN lastCommitted[i] ELSE Len(history[i])
           sync(f) == SyncPackets(history[i], lastCommitted[i], lz(f), upto)
                      \o <<Packet("NEWLEADER", <<e, 0>>, NoData)>>
       IN  IF ~behind
           THEN /\ GoLooking(i)
                /\ UNCHANGED currentEpoch
           ELSE IF zabState[i] = DISCOVERY /\ IsQuorum(acked \cup {i})
           THEN /\ currentEpoch' = [currentEpoch EXCEPT ![i] = e]
                /\ zabState' = [zabState EXCEPT ![i] = SYNCHRONIZATION]
                /\ learnerPhase' = [learnerPhase EXCEPT ![i] =
                                      [f \in Server |-> IF f \in acked THEN "NEWLEADER" ELSE @[f]]]
                /\ learnerLastZxid' = [learnerLastZxid EXCEPT ![i][j] = m.zxid]
                /\ msgs' = LET ch == Discard(msgs, j, i)
                           IN  [ch EXCEPT ![i] = [f \in Server |->
                                   IF f \in acked THEN ch[i][f] \o sync(f) ELSE ch[i][f]]]
                /\ UNCHANGED <<state, leader, stagedHistory, newEpoch, ackIndex>>
           ELSE IF zabState[i] = DISCOVERY
           THEN /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "ACKEPOCH"]
                /\ learnerLastZxid' = [learnerLastZxid EXCEPT ![i][j] = m.zxid]
                /\ msgs' = Discard(msgs, j, i)
                /\ UNCHANGED <<currentEpoch, state, zabState, leader, stagedHistory, newEpoch, ackIndex>>
           ELSE /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "NEWLEADER"]
                /\ learnerLastZxid' = [learnerLastZxid EXCEPT ![i][j] = m.zxid]
                /\ msgs' = SendSeq(Discard(msgs, j, i), i, j, sync(j))
                /\ UNCHANGED <<currentEpoch, state, zabState, leader, stagedHistory, newEpoch, ackIndex>>
    \* The one step that establishes a leader: a quorum's ACKEPOCH ends its discovery (IsEstablished).
    /\ established' = IF zabState[i] = DISCOVERY /\ zabState'[i] = SYNCHRONIZATION
                      THEN established \cup {<<currentEpoch'[i], i>>}
                      ELSE established
    /\ UNCHANGED <<history, acceptedEpoch, lastCommitted, proposed, committed, faults>>

-----------------------------------------------------------------------------
(* Phase 2: sync with followers (seed 000).  The follower stages what it *)
(* receives and changes nothing on disk until NEWLEADER -- except, when   *)
(* TruncAtOnce, the truncation a TRUNC asks for.                          *)

(***************************************************************************)
(* TruncAtOnce: whether a follower truncates its history when it takes    *)
(* TRUNC (ZooKeeper's Learner.syncWithLeader calls truncateLog there) or   *)
(* stages the truncation until NEWLEADER like every other sync packet     *)
(* (seed 000: the follower "doesn't modify its state until it receives    *)
(* the NEWLEADER(e) packet").  zabref follows the seed (FALSE); the        *)
(* ZooKeeper models override it with TRUE (`TruncAtOnce <- ...` in their  *)
(* cfg).  Both are model-checked: the transactions a TRUNC removes are    *)
(* ones the leader does not have, so removing them early loses nothing    *)
(* (spec/README.md, departure 11).                                        *)
(***************************************************************************)
TruncAtOnce == FALSE

SyncingFrom(i, j) == state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = SYNCHRONIZATION

\* DIFF(lastCommittedZxid): the follower's history is a prefix of the leader's; keep it.
FollowerProcessDIFF(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "DIFF")
    /\ stagedHistory' = [stagedHistory EXCEPT ![i] = history[i]]
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, serverVars, leaderVars, checkVars, faults>>

\* TRUNC(truncZxid): forget every transaction after truncZxid (the ones the leader skipped).
FollowerProcessTRUNC(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "TRUNC")
    /\ LET t == Head(msgs[j][i]).zxid
           h == history[i]
           after == {k \in 1 .. Len(h) : ~ZxidLE(h[k].zxid, t)}
           \* the longest prefix whose zxids are all <= t ends before the first transaction after t (one pass
           \* over the history: `zabref validate` evaluates this on production histories of thousands)
           keep == IF after = {} THEN Len(h) ELSE (CHOOSE k \in after : \A k2 \in after : k <= k2) - 1
       IN  /\ stagedHistory' = [stagedHistory EXCEPT ![i] = SubSeq(h, 1, keep)]
           /\ history' = IF TruncAtOnce THEN [history EXCEPT ![i] = SubSeq(h, 1, keep)] ELSE history
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<acceptedEpoch, currentEpoch, serverVars, leaderVars, checkVars, faults>>

\* SNAP: a state transfer; here the packet carries the leader's whole history.
FollowerProcessSNAP(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "SNAP")
    /\ stagedHistory' = [stagedHistory EXCEPT ![i] = Head(msgs[j][i]).data]
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, serverVars, leaderVars, checkVars, faults>>

\* A PROPOSAL that is part of the sync (before NEWLEADER) is staged, not logged and not ACKed.
FollowerProcessPROPOSALInSync(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "PROPOSAL")
    /\ LET m == Head(msgs[j][i])
       IN  stagedHistory' = [stagedHistory EXCEPT ![i] = Append(@, [zxid |-> m.zxid, value |-> m.data])]
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, serverVars, leaderVars, checkVars, faults>>

(***************************************************************************)
(* A COMMIT that is part of the sync follows the PROPOSAL of the same zxid *)
(* (SyncPackets): the follower takes it and changes nothing but the        *)
(* channel.  What it commits, UPTODATE names (it carries the leader's     *)
(* commit point, at least every zxid the sync COMMITted); ZooKeeper's      *)
(* follower keeps it to apply at UPTODATE.  A COMMIT anywhere else in a    *)
(* sync is no step of the follower.                                       *)
(***************************************************************************)
FollowerProcessCOMMITInSync(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "COMMIT")
    /\ stagedHistory[i] /= <<>> /\ Head(msgs[j][i]).zxid = LastZxid(stagedHistory[i])
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults>>

(***************************************************************************)
(* NewLeaderDefers, what NEWLEADER must have logged.  FALSE (seed 000,     *)
(* zabref): the whole staged history.  TRUE (ZooKeeper 3.9.3 and later,   *)
(* Learner.syncWithLeader after ZOOKEEPER-4394): the follower may leave    *)
(* staged a suffix of transactions of the new epoch e that its history    *)
(* does not hold (ZooKeeper keeps the proposals its sync did not COMMIT in *)
(* packetsNotLogged), ACK NEWLEADER, and log them when UPTODATE comes.    *)
(* Only a leader in BROADCAST has transactions of epoch e, and it counts   *)
(* them by their own ACKs, never by NEWLEADER's; a leader in its own       *)
(* synchronization commits its whole history at NEWLEADER's quorum, so     *)
(* transactions of older epochs must be logged first (the mutation        *)
(* NewLeaderDefersOlder loses a committed one: ZOOKEEPER-4646).  The       *)
(* ZooKeeper model cizk39 overrides it with TRUE (spec/README.md,          *)
(* departure 12).                                                         *)
(***************************************************************************)
NewLeaderDefers == FALSE

\* The sizes of the suffix of staged history s that NEWLEADER(e) may leave staged, from history h: 0, and with
\* NewLeaderDefers every suffix of transactions of epoch e above h's last zxid (s is in zxid order).
Deferrable(s, h, e) ==
    {0} \cup IF NewLeaderDefers
             THEN {d \in 1 .. Len(s) : s[Len(s) - d + 1].zxid[1] = e /\ ZxidLT(LastZxid(h), s[Len(s) - d + 1].zxid)}
             ELSE {}

(***************************************************************************)
(* NEWLEADER(e): the follower atomically applies the staged history (with *)
(* NewLeaderDefers, all but a deferred suffix), sets currentEpoch = e and  *)
(* sends ACK(e << 32) (phase 2, step 2).  From here on it logs and ACKs    *)
(* proposals (it is on the leader's forwarding list).                     *)
(***************************************************************************)
FollowerProcessNEWLEADER(i, j) ==
    /\ SyncingFrom(i, j)
    /\ HasPacket(j, i, "NEWLEADER")
    /\ LET e == Head(msgs[j][i]).zxid[1]
           s == stagedHistory[i]
       IN  /\ \E d \in Deferrable(s, history[i], e) :
                  /\ history' = [history EXCEPT ![i] = SubSeq(s, 1, Len(s) - d)]
                  /\ stagedHistory' = [stagedHistory EXCEPT ![i] = SubSeq(s, Len(s) - d + 1, Len(s))]
           /\ currentEpoch' = [currentEpoch EXCEPT ![i] = e]
           /\ msgs' = Send(Discard(msgs, j, i), i, j, Packet("ACK", <<e, 0>>, NoData))
    /\ zabState' = [zabState EXCEPT ![i] = BROADCAST]
    /\ UNCHANGED <<acceptedEpoch, state, leader, lastCommitted, leaderVars, checkVars, faults>>

(***************************************************************************)
(* Leader i takes the ACK of NEWLEADER from j (step 3).  With a quorum the *)
(* leader takes leadership of the epoch: it commits (delivers) its whole   *)
(* history and queues UPTODATE to the learners that ACKed.  A learner that *)
(* ACKs later gets UPTODATE at once.  UPTODATE carries the leader's commit *)
(* point (see the departures in spec/README.md).                           *)
(***************************************************************************)
LeaderProcessACKNEWLEADER(i, j) ==
    /\ state[i] = LEADING /\ learnerPhase[i][j] = "NEWLEADER"
    /\ HasPacket(j, i, "ACK")
    /\ Head(msgs[j][i]).zxid = <<currentEpoch[i], 0>>
    /\ LET acked == {f \in Server : learnerPhase[i][f] = "ACKNEWLEADER"} \cup {j}
           h == history[i]
       IN  IF zabState[i] = SYNCHRONIZATION /\ IsQuorum(acked \cup {i})
           THEN /\ zabState' = [zabState EXCEPT ![i] = BROADCAST]
                /\ Deliver(i, h, Len(h))
                /\ learnerPhase' = [learnerPhase EXCEPT ![i] =
                                      [f \in Server |-> IF f \in acked THEN "UPTODATE" ELSE @[f]]]
                /\ msgs' = SendAll(Discard(msgs, j, i), i, acked, Packet("UPTODATE", LastZxid(h), NoData))
           ELSE IF zabState[i] = SYNCHRONIZATION
           THEN /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "ACKNEWLEADER"]
                /\ msgs' = Discard(msgs, j, i)
                /\ UNCHANGED <<zabState, lastCommitted, committed>>
           ELSE /\ learnerPhase' = [learnerPhase EXCEPT ![i][j] = "UPTODATE"]
                /\ msgs' = Send(Discard(msgs, j, i), i, j,
                                Packet("UPTODATE", CommittedZxid(h, lastCommitted[i]), NoData))
                /\ UNCHANGED <<zabState, lastCommitted, committed>>
    /\ UNCHANGED <<persistentVars, state, leader, stagedHistory, newEpoch, learnerLastZxid, ackIndex,
                   proposed, established, faults>>

(***************************************************************************)
(* UPTODATE(commit point): the follower delivers up to the leader's commit *)
(* point and serves clients.  If its history goes beyond that point, it    *)
(* ACKs each transaction of its epoch after the point, in order: the      *)
(* transactions its sync carried were never ACKed one by one (NEWLEADER's  *)
(* ACK names only the epoch), and without these ACKs a leader that synced  *)
(* it in BROADCAST would not count them until a later proposal            *)
(* (spec/README.md, "Liveness").  One ACK each, not one of the last: a     *)
(* ZooKeeper leader counts an ACK for its own proposal only and commits in *)
(* order (Leader.processAck, tryToCommit), so one ACK of the last left the *)
(* others waiting for another follower (docs/zookeeper.md, "A zabref       *)
(* server in a ZooKeeper ensemble", 4); ZooKeeper's follower ACKs each     *)
(* proposal of its sync through its logging pipeline.                     *)
(***************************************************************************)
\* The commit point follower i reads in leader j's UPTODATE(z): z.  A ZooKeeper leader's UPTODATE carries none
\* (zxid -1; its learner takes the point from the sync's COMMITs); a zabref follower reads the point its sync named
\* (zabref/core/node.py, `sync_commit`), and the validation of a mixed ensemble overrides this for a zabref follower
\* of a ZooKeeper leader with the point the observed sync named (spec/README.md, departure 2).
UptodatePoint(i, j, z) == z

\* The ACKs of history h's transactions of epoch e after its k-th, in order (a history holds its epochs in order).
\* Every transaction after a leader's commit point is of its epoch (it commits its whole history when it
\* establishes the epoch), so the epoch bounds only what a follower ACKs at a point below its epoch (a ZooKeeper
\* leader's UPTODATE after a sync that named no point the follower holds): not its older epochs' transactions.
UptodateAcks(h, k, e) ==
    LET from == Max(k, Cardinality({m \in 1 .. Len(h) : h[m].zxid[1] < e}))
    IN  [m \in 1 .. Len(h) - from |-> Packet("ACK", h[from + m].zxid, NoData)]

FollowerProcessUPTODATE(i, j) ==
    /\ state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = BROADCAST
    /\ HasPacket(j, i, "UPTODATE")
    /\ LET h == history[i] \o stagedHistory[i]   \* what NEWLEADER left staged is logged first (NewLeaderDefers)
           k == IndexOf(h, UptodatePoint(i, j, Head(msgs[j][i]).zxid))
       IN  /\ history' = [history EXCEPT ![i] = h]
           /\ IF k > lastCommitted[i]
              THEN Deliver(i, h, k)
              ELSE UNCHANGED <<lastCommitted, committed>>
           /\ msgs' = SendSeq(Discard(msgs, j, i), i, j, UptodateAcks(h, k, currentEpoch[i]))
    /\ stagedHistory' = [stagedHistory EXCEPT ![i] = <<>>]
    /\ UNCHANGED <<acceptedEpoch, currentEpoch, state, zabState, leader, leaderVars, proposed, established,
                   faults>>

-----------------------------------------------------------------------------
(* Phase 3: broadcast (seed 000). *)

(***************************************************************************)
(* A client's request reaches leader i (step 1): i assigns the next zxid   *)
(* of its epoch, logs the transaction, and queues PROPOSAL(zxid, value) to *)
(* every learner on its forwarding list.  The value is the number of the   *)
(* broadcast, so every transaction is unique.                              *)
(***************************************************************************)
ClientRequest(i) ==
    /\ state[i] = LEADING /\ zabState[i] = BROADCAST
    /\ Cardinality(proposed) < MaxTxns
    /\ LET c == Cardinality({k \in 1 .. Len(history[i]) : history[i][k].zxid[1] = currentEpoch[i]})
           t == [zxid |-> <<currentEpoch[i], c + 1>>, value |-> Cardinality(proposed) + 1]
           fwd == {f \in Server : learnerPhase[i][f] \in ForwardingPhases}
       IN  /\ history' = [history EXCEPT ![i] = Append(@, t)]
           /\ proposed' = proposed \cup {t}
           /\ msgs' = SendAll(msgs, i, fwd, Packet("PROPOSAL", t.zxid, t.value))
    /\ UNCHANGED <<acceptedEpoch, currentEpoch, serverVars, stagedHistory, leaderVars, committed, established,
                   faults>>

\* Follower i logs a PROPOSAL (on disk before it answers) and sends ACK(zxid) (step 2).  While NEWLEADER left
\* something staged (NewLeaderDefers), the proposal is staged behind it, and UPTODATE logs and ACKs it.
FollowerProcessPROPOSAL(i, j) ==
    /\ state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = BROADCAST
    /\ HasPacket(j, i, "PROPOSAL")
    /\ LET m == Head(msgs[j][i])
           t == [zxid |-> m.zxid, value |-> m.data]
       IN  IF stagedHistory[i] = <<>>
           THEN /\ history' = [history EXCEPT ![i] = Append(@, t)]
                /\ msgs' = Send(Discard(msgs, j, i), i, j, Packet("ACK", m.zxid, NoData))
                /\ UNCHANGED stagedHistory
           ELSE /\ stagedHistory' = [stagedHistory EXCEPT ![i] = Append(@, t)]
                /\ msgs' = Discard(msgs, j, i)
                /\ UNCHANGED history
    /\ UNCHANGED <<acceptedEpoch, currentEpoch, serverVars, leaderVars, checkVars, faults>>

(***************************************************************************)
(* Leader i takes ACK(zxid) of a proposal from j (step 3).  When a quorum  *)
(* (the leader counts itself, with LeaderLogsLate once it logged the       *)
(* transaction: CountsSelf) has ACKed a longer prefix than i has           *)
(* committed, i delivers it and queues one COMMIT(zxid) for each           *)
(* transaction it newly commits, in order, to its forwarding list (seed    *)
(* 000, phase 3: a COMMIT for each proposal a quorum acknowledged;         *)
(* ZooKeeper's Leader.tryToCommit; a ZooKeeper follower applies a COMMIT   *)
(* only to the oldest transaction it has not applied).  A COMMIT still     *)
(* means "everything up to zxid" to the follower.                          *)
(***************************************************************************)
\* The COMMITs of history h's transactions from+1 .. to, in order.
Commits(h, from, to) == [k \in 1 .. to - from |-> Packet("COMMIT", h[from + k].zxid, NoData)]

\* Leader i's commit point reaches c (when c is past it): it delivers its history up to c and queues, on channels ch,
\* one COMMIT for each transaction it newly commits to its forwarding list; else the channels are ch.
CommitTo(i, c, ch) ==
    IF c > lastCommitted[i]
    THEN /\ Deliver(i, history[i], c)
         /\ msgs' = SendAllSeq(ch, i, {f \in Server : learnerPhase[i][f] \in ForwardingPhases},
                               Commits(history[i], lastCommitted[i], c))
    ELSE /\ msgs' = ch
         /\ UNCHANGED <<lastCommitted, committed>>

LeaderProcessACK(i, j) ==
    /\ state[i] = LEADING /\ zabState[i] = BROADCAST
    /\ learnerPhase[i][j] \in {"ACKNEWLEADER", "UPTODATE"}
    /\ HasPacket(j, i, "ACK")
    /\ Head(msgs[j][i]).zxid[2] > 0
    /\ LET h == history[i]
           acks == [ackIndex[i] EXCEPT ![j] = Max(@, IndexOf(h, Head(msgs[j][i]).zxid))]
       IN  /\ ackIndex' = [ackIndex EXCEPT ![i] = acks]
           /\ CommitTo(i, QuorumPoint(i, acks, IF IsQuorum({i}) THEN Len(h) ELSE MaxAck(acks)), Discard(msgs, j, i))
    /\ UNCHANGED <<persistentVars, state, zabState, leader, stagedHistory, newEpoch, learnerPhase,
                   learnerLastZxid, proposed, established, faults>>

(***************************************************************************)
(* With LeaderLogsLate (ZooKeeper's leader), leader i's log write of its   *)
(* proposals up to history[i][k] is durable, and it counts its own ACK of  *)
(* them (SyncRequestProcessor, then AckRequestProcessor: Leader.processAck *)
(* with its own sid): as LeaderProcessACK, it commits what a quorum has    *)
(* now and queues a COMMIT for each.  Any k past what it had logged: its   *)
(* log writes come in batches, each taking what was proposed by then.      *)
(***************************************************************************)
LeaderOwnACK(i) ==
    /\ LeaderLogsLate
    /\ state[i] = LEADING /\ zabState[i] = BROADCAST
    /\ \E k \in ackIndex[i][i] + 1 .. Len(history[i]) :
          LET acks == [ackIndex[i] EXCEPT ![i] = k]
          IN  /\ ackIndex' = [ackIndex EXCEPT ![i] = acks]
              /\ CommitTo(i, QuorumPoint(i, acks, k), msgs)
    /\ UNCHANGED <<persistentVars, state, zabState, leader, stagedHistory, newEpoch, learnerPhase,
                   learnerLastZxid, proposed, established, faults>>

\* COMMIT(zxid): follower i delivers everything in its history up to zxid (step 3).
FollowerProcessCOMMIT(i, j) ==
    /\ state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = BROADCAST
    /\ HasPacket(j, i, "COMMIT")
    /\ LET k == IndexOf(history[i], Head(msgs[j][i]).zxid)
       IN  IF k > lastCommitted[i]
           THEN Deliver(i, history[i], k)
           ELSE UNCHANGED <<lastCommitted, committed>>
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, state, zabState, leader, stagedHistory, leaderVars, proposed, established,
                   faults>>

-----------------------------------------------------------------------------
(* Failures: timeouts and crashes.  Each sends the server back to leader *)
(* election; a crash also loses everything volatile.                      *)

\* Whether follower i's connection to its leader is still open at the leader's end (or its FOLLOWERINFO
\* is still on the way there).
LeaderConnected(i) ==
    LET l == leader[i]
    IN  state[l] = LEADING /\ (learnerPhase[l][i] /= "NONE" \/ msgs[i][l] /= <<>>)

(***************************************************************************)
(* A follower stops hearing from its leader (no packets or pings within   *)
(* the timeout) and goes back to election.  When the leader's end of the  *)
(* connection is gone (it crashed or gave up), the timeout is bound to    *)
(* come; when the connection is still open, the timeout is a fault (a     *)
(* partition, a slow network) and counts against MaxFaults.               *)
(***************************************************************************)
FollowerTimeout(i) ==
    /\ state[i] = FOLLOWING
    /\ IF LeaderConnected(i)
       THEN faults < MaxFaults /\ faults' = faults + 1
       ELSE UNCHANGED faults
    /\ GoLooking(i)
    /\ UNCHANGED <<persistentVars, lastCommitted, checkVars>>

\* Learner f's ACKEPOCH(-1) waits at the head of its connection to leader i until i's discovery is over
\* (LeaderProcessACKEPOCH).
HeldAck(i, f) == msgs[f][i] /= <<>> /\ Head(msgs[f][i]).type = "ACKEPOCH" /\ Head(msgs[f][i]).data = -1

\* The learners that keep leader i alive: in DISCOVERY every connected one whose ACKEPOCH is not held;
\* afterwards only those syncing or synced (NEWLEADER and later).  A learner that connects and then rejects the
\* epoch (it accepted a greater one) never counts, however often it comes back, nor does one that can only
\* answer -1 (spec/README.md, "Liveness").
Counted(i, f) == IF zabState[i] = DISCOVERY
                 THEN learnerPhase[i][f] /= "NONE" /\ ~HeldAck(i, f)
                 ELSE learnerPhase[i][f] \in {"NEWLEADER", "ACKNEWLEADER", "UPTODATE"}

(***************************************************************************)
(* A leader stops hearing from a quorum (phase 3: "the leader will remain  *)
(* active as long as there is a quorum of followers") and goes back to     *)
(* election.  Without a quorum of Counted learners the timeout is bound    *)
(* to come; with one, the learners must have gone silent (a partition, a   *)
(* pause) and it counts against MaxFaults, as FollowerTimeout does.        *)
(***************************************************************************)
LeaderTimeout(i) ==
    /\ state[i] = LEADING
    /\ IF IsQuorum({i} \cup {f \in Server : Counted(i, f)})
       THEN faults < MaxFaults /\ faults' = faults + 1
       ELSE UNCHANGED faults
    /\ GoLooking(i)
    /\ UNCHANGED <<persistentVars, lastCommitted, checkVars>>

\* The lengths server i's history may keep through a crash: all of it, or with LeaderLogsLate, for a leader in
\* broadcast, any prefix that keeps what it logged (LeaderOwnACK). What it committed without counting itself, on
\* its followers' ACKs alone, may go with the rest: a quorum of them holds it.
Kept(i) == IF LeaderLogsLate /\ state[i] = LEADING /\ zabState[i] = BROADCAST
           THEN ackIndex[i][i] .. Len(history[i])
           ELSE {Len(history[i])}

(***************************************************************************)
(* Server i crashes and restarts: it keeps history (but, LeaderLogsLate,   *)
(* what a leader had not logged yet), acceptedEpoch and currentEpoch,      *)
(* loses everything else, and is LOOKING again.  (Crash and recovery are   *)
(* one step: a server that stays down is indistinguishable, for safety,    *)
(* from a LOOKING server that takes no step.)  A crash of a LOOKING server *)
(* that has delivered nothing changes nothing and is left out, so that     *)
(* every edge of the state graph changes the state.                        *)
(***************************************************************************)
Crash(i) ==
    /\ state[i] /= LOOKING \/ lastCommitted[i] > 0
    /\ faults < MaxFaults
    /\ faults' = faults + 1
    /\ GoLooking(i)
    /\ lastCommitted' = [lastCommitted EXCEPT ![i] = 0]
    /\ \E k \in Kept(i) : history' = [history EXCEPT ![i] = SubSeq(@, 1, k)]
    /\ UNCHANGED <<acceptedEpoch, currentEpoch, checkVars>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* The next-state relation, grouped by phase.  Keep every disjunct in the  *)
(* form "\E params \in Domain : Action(params)": the toolchain reads this  *)
(* list to label every edge of a dumped graph with its parameters.         *)
(***************************************************************************)
Next ==
    \* Election: each server's decision (fine-grained in FastLeaderElection.tla)
    \/ \E i \in Server : BecomeLeader(i)
    \/ \E i, j \in Server : BecomeFollower(i, j)
    \* Phase 1: discovery
    \/ \E i, j \in Server : LeaderProcessFOLLOWERINFO(i, j)
    \/ \E i, j \in Server : FollowerProcessLEADERINFO(i, j)
    \/ \E i, j \in Server : LeaderProcessACKEPOCH(i, j)
    \* Phase 2: synchronization
    \/ \E i, j \in Server : FollowerProcessDIFF(i, j)
    \/ \E i, j \in Server : FollowerProcessTRUNC(i, j)
    \/ \E i, j \in Server : FollowerProcessSNAP(i, j)
    \/ \E i, j \in Server : FollowerProcessPROPOSALInSync(i, j)
    \/ \E i, j \in Server : FollowerProcessCOMMITInSync(i, j)
    \/ \E i, j \in Server : FollowerProcessNEWLEADER(i, j)
    \/ \E i, j \in Server : LeaderProcessACKNEWLEADER(i, j)
    \/ \E i, j \in Server : FollowerProcessUPTODATE(i, j)
    \* Phase 3: broadcast
    \/ \E i \in Server : ClientRequest(i)
    \/ \E i, j \in Server : FollowerProcessPROPOSAL(i, j)
    \/ \E i, j \in Server : LeaderProcessACK(i, j)
    \/ \E i \in Server : LeaderOwnACK(i)
    \/ \E i, j \in Server : FollowerProcessCOMMIT(i, j)
    \* Failures
    \/ \E i \in Server : FollowerTimeout(i)
    \/ \E i \in Server : LeaderTimeout(i)
    \/ \E i \in Server : Crash(i)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants.  Each restates a property of the papers in English above    *)
(* its formula.  "Delivered(s)" is what server s has delivered in its      *)
(* current incarnation; `committed` is every delivery by any server, ever, *)
(* in the order it first happened.                                         *)
(***************************************************************************)
Zxids == (0 .. MaxEpoch + 1) \X (0 .. MaxTxns)
Txns == [zxid : Zxids, value : 1 .. MaxTxns]

TypeOK ==
    /\ \A s \in Server : history[s] \in Seq(Txns) /\ stagedHistory[s] \in Seq(Txns)
    /\ acceptedEpoch \in [Server -> 0 .. MaxEpoch + 1]
    /\ currentEpoch \in [Server -> 0 .. MaxEpoch + 1]
    /\ \A s \in Server : currentEpoch[s] <= acceptedEpoch[s]
    /\ state \in [Server -> {LOOKING, FOLLOWING, LEADING}]
    /\ zabState \in [Server -> {ELECTION, DISCOVERY, SYNCHRONIZATION, BROADCAST}]
    /\ leader \in [Server -> Server \cup {NoServer}]
    /\ \A s \in Server : lastCommitted[s] \in 0 .. Len(history[s])
    /\ newEpoch \in [Server -> 0 .. MaxEpoch + 1]
    /\ learnerPhase \in [Server -> [Server -> LearnerPhases]]
    /\ learnerLastZxid \in [Server -> [Server -> Zxids]]
    /\ \A l, f \in Server : ackIndex[l][f] \in 0 .. Len(history[l])
    /\ \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
          msgs[a][b][k].type \in {"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "DIFF", "TRUNC", "SNAP",
                                  "NEWLEADER", "ACK", "UPTODATE", "PROPOSAL", "COMMIT",
                                  "REQUEST", "SYNC", "PING"}  \* REQUEST, SYNC, PING: ZabSync.tla
          /\ msgs[a][b][k].zxid \in Zxids
    /\ proposed \subseteq Txns
    /\ committed \in Seq(Txns)
    /\ established \subseteq (0 .. MaxEpoch + 1) \X Server
    /\ faults \in 0 .. MaxFaults

\* Integrity: if some process delivers <v, z>, then some process has broadcast <v, z>.
Integrity == \A s \in Server : Range(Delivered(s)) \subseteq proposed

\* Agreement: if p delivers <v, z> and q delivers <v', z'>, then p delivers <v', z'> or q delivers <v, z>.
\* (Deliveries are prefixes of histories, so: the two delivered sequences are prefixes of one another.)
Agreement == \A p, q \in Server : IsPrefix(Delivered(p), Delivered(q)) \/ IsPrefix(Delivered(q), Delivered(p))

\* Total order: if some process delivers a before b, any process that delivers b delivers a, before b.
\* Every server's deliveries, in every incarnation, are a prefix of the one order of first deliveries.
TotalOrder == \A s \in Server : IsPrefix(Delivered(s), committed)

\* Local primary order: if a primary broadcasts a before b, a process that delivers b delivers a before b.
\* A primary of epoch e broadcasts counters 1, 2, ... in turn, so <<e, c>> is delivered after <<e, c-1>>.
LocalPrimaryOrder ==
    \A k \in 1 .. Len(committed) :
        committed[k].zxid[2] > 1 =>
            \E k2 \in 1 .. k - 1 : committed[k2].zxid = <<committed[k].zxid[1], committed[k].zxid[2] - 1>>

\* Global primary order: transactions of an earlier primary are delivered before those of a later one
\* (epochs never decrease along what any server delivers, nor along the order of first deliveries).
EpochsInOrder(seq) == \A k1, k2 \in 1 .. Len(seq) : k1 < k2 => seq[k1].zxid[1] <= seq[k2].zxid[1]
GlobalPrimaryOrder == EpochsInOrder(committed) /\ \A s \in Server : EpochsInOrder(Delivered(s))

\* Every transaction delivered: by a server now, or by any server at any time before.
DeliveredEver == Range(committed) \cup UNION {Range(Delivered(s)) : s \in Server}

\* An established leader: it has a quorum's ACKEPOCH for its epoch (it set currentEpoch).
IsEstablished(s) == state[s] = LEADING /\ zabState[s] \in {SYNCHRONIZATION, BROADCAST}

\* A primary: a leader that a quorum acknowledged with NEWLEADER, in broadcast (it may broadcast now).
IsPrimary(s) == state[s] = LEADING /\ zabState[s] = BROADCAST

\* Primary integrity: a primary of epoch e delivers every transaction of an earlier epoch that any
\* process delivers, before it broadcasts its own: such transactions are in its history, ahead of its epoch.
\* (Only primaries: a leader with a quorum's ACKEPOCH that never completed sync broadcasts nothing, and what it
\* lacks may still be delivered by a later primary; the deep model found this, see spec/README.md.)
PrimaryIntegrity ==
    \A l \in Server : IsPrimary(l) =>
        \A t \in DeliveredEver : t.zxid[1] < currentEpoch[l] =>
            \E k \in 1 .. Len(history[l]) :
                /\ history[l][k] = t
                /\ \A k2 \in 1 .. k : history[l][k2].zxid[1] < currentEpoch[l]

\* At most one established leader per epoch, over the whole run (seed 004's "primary uniqueness"; ZooKeeper's
\* spec checks it with a history variable too): no two servers ever established the same epoch, at the same
\* time or one after the other. `established` records every <<epoch, leader>> when discovery ends; the
\* leaders established now are among them (the first conjunct: the record misses none).
LeaderUniqueness ==
    /\ \A s \in Server : IsEstablished(s) => <<currentEpoch[s], s>> \in established
    /\ \A a, b \in established : a[1] = b[1] => a[2] = b[2]

\* Seed 004, Fig. 3: a delivered message is never forgotten. It is on the disks of a quorum
\* ("messages are recorded on the disk media of a quorum of disks before a message is delivered"),
\* so every later leader, elected by a quorum, has it.
CommittedNeverLost == \A t \in Range(committed) : IsQuorum({s \in Server : t \in Range(history[s])})

\* Seed 004, Fig. 4: a skipped proposal stays skipped. A server in broadcast in epoch e holds every
\* delivered transaction of an earlier epoch; what it does not hold of those epochs was skipped and
\* must never be delivered.
SkippedNeverDelivered ==
    \A s \in Server : zabState[s] = BROADCAST =>
        \A t \in DeliveredEver : t.zxid[1] < currentEpoch[s] => t \in Range(history[s])


-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants about histories, sync and packets in flight.  The papers'   *)
(* properties above are about deliveries; these say why they hold, one    *)
(* step earlier, so that a mistake shows in the state where it is made.   *)
(* ZooKeeper's own specs (zookeeper-specifications, zk_test) check the     *)
(* same facts under the names given in each comment.                      *)
(***************************************************************************)

\* Every transaction anywhere: broadcast, in a history, staged by a syncing follower.
AllTxns == proposed \cup UNION {Range(history[s]) \cup Range(stagedHistory[s]) : s \in Server}

\* Zxid uniqueness: a zxid names one transaction (seed 004: "each proposal has a unique zxid").  Two
\* transactions with one zxid -- a leader reusing a counter, two leaders of one epoch -- make every
\* comparison by zxid (DIFF, TRUNC, COMMIT, election votes) ambiguous.
ZxidUnique == \A a, b \in AllTxns : a.zxid = b.zxid => a = b

\* Log matching: two histories that hold one zxid hold it at the same position, after the same
\* transactions.  A follower's history is always a copy of a leader's prefix followed by that leader's
\* proposals in order, and truncation only removes a suffix, so two histories never disagree before a zxid
\* they share (Raft's Log Matching property; ZooKeeper's spec: PrefixConsistency).
LogMatching ==
    \A p, q \in Server : \A k \in 1 .. Len(history[p]) :
        LET k2 == IndexOf(history[q], history[p][k].zxid)
        IN  k2 > 0 => k2 = k /\ SubSeq(history[p], 1, k) = SubSeq(history[q], 1, k)

\* A history holds each epoch's counters 1, 2, ... in turn, with no gap: a primary numbers its proposals so
\* (ClientRequest), a follower logs them in the order they were sent, a sync gives a follower a run of its leader's
\* history, and a truncation or a crash removes a suffix.  A gap is a transaction held without the ones of its epoch
\* before it (the shape of ZOOKEEPER-4925: a DIFF across a hole in the leader's in-memory log).  The validation of
\* ZooKeeper runs reads it of the proposals of an observed sync (conformance/validate/synccheck.py).
HistoryContiguous ==
    \A s \in Server : \A k \in 1 .. Len(history[s]) :
        history[s][k].zxid[2] = IF k > 1 /\ history[s][k - 1].zxid[1] = history[s][k].zxid[1]
                                THEN history[s][k - 1].zxid[2] + 1 ELSE 1

\* A history holds no transaction of an epoch its server has not made current.  A follower changes its
\* history only at NEWLEADER(e), in the one step that sets currentEpoch = e (seed 000, phase 2, step 2: "the
\* follower syncs with the leader, but doesn't modify its state until it receives NEWLEADER"), and after
\* that logs proposals of epoch e only; a leader proposes in its currentEpoch.  A history changed before
\* NEWLEADER -- on the SNAP, the DIFF, or a crash that keeps a part of NEWLEADER's write -- can hold
\* transactions of the leader's past epochs that its server's epochs do not vouch for (Raft's rule that a
\* log's last term is at most currentTerm is the same fact).
HistoryWithinCurrentEpoch ==
    \A s \in Server : \A k \in 1 .. Len(history[s]) : history[s][k].zxid[1] <= currentEpoch[s]

\* A synced follower's history is a prefix of its leader's: after NEWLEADER, while the leader still knows
\* it as a learner, the follower holds what the sync gave it (the leader's history, which does not change
\* during sync) and then the leader's proposals in order (ZooKeeper's spec: MonotonicRead, "when a follower
\* completes log recovery, its log is a prefix of the leader's").
SyncedFollowerPrefix ==
    \A f \in Server :
        LET l == leader[f]
        IN  state[f] = FOLLOWING /\ zabState[f] = BROADCAST /\ state[l] = LEADING
            /\ learnerPhase[l][f] \in ForwardingPhases
            => IsPrefix(history[f], history[l])

\* A leader in broadcast holds every delivered transaction of its own and earlier epochs (ZooKeeper's
\* spec: LeaderLogCompleteness).  Later epochs are excluded: a deposed primary that has not yet timed out
\* rightly lacks what a newer leader committed.
LeaderHoldsCommitted ==
    \A l \in Server : IsPrimary(l) =>
        \A t \in DeliveredEver : t.zxid[1] <= currentEpoch[l] => t \in Range(history[l])

\* The packet in position k of the channel from a to b.
InFlight(a, b, k) == msgs[a][b][k]

\* A PROPOSAL in flight is in its sender's history: a leader logs a transaction before it sends it (seed
\* 000, phase 3, step 1) and sync sends the leader's own history (ZooKeeper's spec: ProposalConsistent).
\* A leader never shortens its history while it leads, and leaving LEADING closes its connections.
ProposalInFlight ==
    \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
        InFlight(a, b, k).type = "PROPOSAL" =>
            [zxid |-> InFlight(a, b, k).zxid, value |-> InFlight(a, b, k).data] \in Range(history[a])

\* An ACK of a proposal in flight names a transaction its sender has logged: a follower writes a
\* proposal to disk before it acknowledges it (seed 000, phase 3, step 2; ZooKeeper's spec:
\* AckConsistent).  The ACK of NEWLEADER, <<e, 0>>, names no transaction.
AckInFlight ==
    \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
        InFlight(a, b, k).type = "ACK" /\ InFlight(a, b, k).zxid[2] > 0 =>
            IndexOf(history[a], InFlight(a, b, k).zxid) > 0

\* A COMMIT (or an UPTODATE, which carries the commit point) in flight names a transaction its sender
\* has delivered and a quorum holds: a leader commits only what a quorum acknowledged (seed 000, phase 3,
\* step 3; ZooKeeper's spec: CommitConsistent) -- or, from a leader still in its synchronization, one of
\* the history it commits whole at its NEWLEADER quorum (the COMMITs of its syncs: SyncPackets).  Such a
\* leader is in BROADCAST before any COMMIT it sent can be in flight after its quorum, and then it holds.
CommitInFlight ==
    \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
        InFlight(a, b, k).type \in {"COMMIT", "UPTODATE"} /\ InFlight(a, b, k).zxid /= <<0, 0>> =>
            LET p == IndexOf(history[a], InFlight(a, b, k).zxid)
            IN  /\ 0 < p
                /\ \/ /\ p <= lastCommitted[a]
                      /\ IsQuorum({s \in Server : history[a][p] \in Range(history[s])})
                   \/ InFlight(a, b, k).type = "COMMIT" /\ state[a] = LEADING /\ zabState[a] = SYNCHRONIZATION

\* What a sync leaves a learner of its own history is what its leader has committed: a DIFF or TRUNC in flight to
\* a learner synchronizing with a leader in BROADCAST keeps no transaction above the leader's commit point, so each
\* one the learner is yet to commit comes to it as a PROPOSAL on this connection (SyncPackets).  ZooKeeper's
\* follower commits only the oldest proposal it took on its connection (Follower.commit exits on another), and its
\* leader syncs so (LearnerHandler.syncFollower, Leader.startForwarding; docs/zookeeper.md, item 8).  A leader not
\* in BROADCAST commits its whole history at its NEWLEADER quorum, before anything it synced is committed.
SyncKeepsCommitted ==
    \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
        /\ InFlight(a, b, k).type \in {"DIFF", "TRUNC"}
        /\ state[a] = LEADING /\ zabState[a] = BROADCAST /\ SyncingFrom(b, a)
        => ZxidLE(IF InFlight(a, b, k).type = "DIFF" THEN LastZxid(history[b]) ELSE InFlight(a, b, k).zxid,
                  CommittedZxid(history[a], lastCommitted[a]))

(***************************************************************************)
(* An action property: within an incarnation, a server's deliveries only   *)
(* grow.  What a server delivered stays delivered, in place, until it      *)
(* crashes (seed 001: delivery is final).  It also says that a truncation  *)
(* during sync never removes a delivered transaction (ZooKeeper's spec:    *)
(* CommittedLogDurability): lastCommitted survives going back to election, *)
(* so a TRUNC or SNAP that dropped or replaced a delivered entry would     *)
(* change Delivered(s).  Checked by TLC as the PROPERTY DeliveredGrows.    *)
(***************************************************************************)
DeliveredGrowsStep == \A s \in Server : Crash(s) \/ IsPrefix(Delivered(s), Delivered(s)')
DeliveredGrows == [][DeliveredGrowsStep]_vars

(***************************************************************************)
(* No hidden deadlock.  The models run TLC with -deadlock because a bounded *)
(* model ends in states where nothing is enabled.  NoHiddenDeadlock says   *)
(* which: a state where no action is enabled must be one where the bounds, *)
(* not the protocol, stopped progress -- every server following or leading *)
(* the one established leader in broadcast, nothing in flight, every      *)
(* transaction the model allows broadcast, and no fault left to spend.  A  *)
(* protocol that gets stuck short of that (a leader waiting for a packet   *)
(* nobody will send, a follower the leader forgot) is reported.            *)
(***************************************************************************)
BoundsStopProgress ==
    /\ faults = MaxFaults
    /\ Cardinality(proposed) = MaxTxns
    /\ \A a, b \in Server : msgs[a][b] = <<>>
    /\ \E l \in Server :
        /\ IsPrimary(l)
        /\ \A s \in Server \ {l} : state[s] = FOLLOWING /\ leader[s] = l /\ zabState[s] = BROADCAST

NoHiddenDeadlock == (ENABLED Next) \/ BoundsStopProgress

-----------------------------------------------------------------------------
(***************************************************************************)
(* Liveness.  Safety holds whatever the network and the clocks do;        *)
(* progress needs them to behave (seed 004: "a quorum of processes         *)
(* eventually is up and can communicate").  LiveSpec says how, in two      *)
(* parts, and the two properties below are checked on it (MC_live,        *)
(* MC_live2).                                                              *)
(*                                                                         *)
(* 1. Every untimely step is a fault (LiveNext).  The spec already counts  *)
(*    each fault in `faults` (a crash, a timeout while connected, an       *)
(*    election decision that needs stale ballots) and bounds them by       *)
(*    MaxFaults.  LiveSpec asks every other step to be timely (TimelyStep): *)
(*    an election ends as FastLeaderElection ends when every notification  *)
(*    arrives in time -- a server leads only with the best vote of those   *)
(*    in the election (Top), and follows Top or a leader its vote would    *)
(*    give a quorum (Joinable: checkLeader); a leader gives up only when   *)
(*    the servers that could still back it are no quorum (Backers: initLimit *)
(*    is longer than a quorum needs to connect and sync); a follower waits *)
(*    for a leader whose election is still under way.  So the faults are   *)
(*    the only disorder, and they end: MaxFaults bounds them.              *)
(* 2. Weak fairness on what a running server does once it can, for as long *)
(*    as it can: read the packet at the head of each connection (Receive), *)
(*    take its election decision (Decide), give up on a leader or a quorum *)
(*    that is gone (GiveUp).  Clients need not write: ClientRequest has no *)
(*    fairness.                                                            *)
(*                                                                         *)
(* LiveSpec's behaviours are behaviours of Spec (LiveNext implies Next),   *)
(* so every invariant above holds on them too.  Weaker timing fails: while *)
(* these were written, TLC found a livelock when a leader could give up    *)
(* before its followers arrived, a stall when a LOOKING server could join *)
(* only a leader a quorum followed, and epochs used up when an election    *)
(* could ignore a leader elected in the same round (spec/README.md).       *)
(***************************************************************************)
\* Follower s has lost its leader and is bound to give up (a timely timeout, below): its leader's end of the
\* connection is gone, or its FOLLOWERINFO waits at a server that decided to follow another.
Adrift(s) ==
    /\ state[s] = FOLLOWING
    /\ ~LeaderConnected(s)
    /\ ~(state[leader[s]] = LOOKING /\ msgs[s][leader[s]] /= <<>>)

\* The servers in the election: LOOKING ones, leaders, and followers that have lost their leader (a closed
\* connection is seen at once).  Top(j): j's vote (currentEpoch, lastZxid, sid) is the greatest of them, and j
\* is LOOKING or leads: the server FastLeaderElection elects when every notification arrives in time, and the
\* one a leader elected in that round is.
InElection(s) == state[s] \in {LOOKING, LEADING} \/ Adrift(s)
Top(j) == state[j] /= FOLLOWING /\ \A s \in Server \ {j} : InElection(s) => VoteLT(Vote(s), Vote(j))
Followers(l) == {f \in Server : state[f] = FOLLOWING /\ leader[f] = l}
\* FastLeaderElection's out-of-election rule (checkLeader): a LOOKING server i joins a leader j when j, its
\* followers and i make a quorum.
Joinable(i, j) == state[j] = LEADING /\ IsQuorum({i, j} \cup Followers(j))

\* The servers that follow leader l or are LOOKING, and can take its epoch in a way that counts: l has not
\* chosen it yet (it will go above their acceptedEpoch), or they have not accepted it or a greater one
\* (FollowerProcessLEADERINFO), or they accepted it from l (their ACKEPOCH to l carries their currentEpoch), or
\* l's discovery is over (an ACKEPOCH(-1) is synced at once).
Backers(l) == {s \in Followers(l) \cup {s2 \in Server : state[s2] = LOOKING} :
                 \/ acceptedEpoch[l] /= newEpoch[l]
                 \/ acceptedEpoch[s] < newEpoch[l]
                 \/ acceptedEpoch[s] = newEpoch[l] /\ zabState[l] /= DISCOVERY
                 \/ acceptedEpoch[s] = newEpoch[l] /\ learnerPhase[l][s] = "ACKEPOCH"
                 \/ acceptedEpoch[s] = newEpoch[l] /\ \E k \in 1 .. Len(msgs[s][l]) :
                        msgs[s][l][k].type = "ACKEPOCH" /\ msgs[s][l][k].data /= -1}

\* A timely step.  An election decision (LOOKING to LEADING or FOLLOWING) is as above.  A timeout waits for an
\* election still under way: a leader gives up only when its Backers are no quorum with it; a follower whose
\* FOLLOWERINFO waits at a server still LOOKING waits for it.  The primed variables are those of the step Next
\* chose.
TimelyStep ==
    /\ \A i \in Server : state[i] = LOOKING /\ state'[i] = LEADING => Top(i)
    /\ \A i \in Server : state[i] = LOOKING /\ state'[i] = FOLLOWING => Top(leader'[i]) \/ Joinable(i, leader'[i])
    /\ \A i \in Server : LeaderTimeout(i) => ~IsQuorum({i} \cup Backers(i))
    /\ \A i \in Server : FollowerTimeout(i) => ~(state[leader[i]] = LOOKING /\ msgs[i][leader[i]] /= <<>>)

\* Server i reads the packet at the head of j's connection to it: the one action that packet enables.
Receive(i, j) ==
    \/ LeaderProcessFOLLOWERINFO(i, j) \/ FollowerProcessLEADERINFO(i, j) \/ LeaderProcessACKEPOCH(i, j)
    \/ FollowerProcessDIFF(i, j) \/ FollowerProcessTRUNC(i, j) \/ FollowerProcessSNAP(i, j)
    \/ FollowerProcessPROPOSALInSync(i, j) \/ FollowerProcessCOMMITInSync(i, j) \/ FollowerProcessNEWLEADER(i, j)
    \/ LeaderProcessACKNEWLEADER(i, j) \/ FollowerProcessUPTODATE(i, j)
    \/ FollowerProcessPROPOSAL(i, j) \/ LeaderProcessACK(i, j) \/ FollowerProcessCOMMIT(i, j)

Decide(i) == (BecomeLeader(i) \/ \E j \in Server : BecomeFollower(i, j)) /\ TimelyStep
GiveUp(i) == (FollowerTimeout(i) \/ LeaderTimeout(i)) /\ UNCHANGED faults /\ TimelyStep

LiveNext == Next /\ (faults' > faults \/ TimelyStep)

Fairness ==
    /\ \A i, j \in Server : WF_vars(Receive(i, j))
    /\ \A i \in Server : WF_vars(Decide(i)) /\ WF_vars(GiveUp(i))

LiveSpec == Init /\ [][LiveNext]_vars /\ Fairness

\* Leader l is established and a quorum (l with its followers in BROADCAST) follows it.
Stable(l) == IsPrimary(l) /\ IsQuorum({l} \cup {f \in Followers(l) : zabState[f] = BROADCAST})

(***************************************************************************)
(* A leader is eventually established for good, with a quorum following  *)
(* it in BROADCAST.  (It is one leader: two are never Stable together,     *)
(* since a server follows one leader, and no step makes one Stable as     *)
(* another stops being: a step moves one server.)                          *)
(***************************************************************************)
EventuallyStableLeader == <>[](\E l \in Server : Stable(l))

(***************************************************************************)
(* A quorum eventually delivers everything the stable leader holds, for    *)
(* good.  With EventuallyStableLeader this is the promise to clients: a    *)
(* value a client submits after the last fault goes to a primary, which    *)
(* keeps its quorum from then on (a timely leader gives up only without    *)
(* one), so it is the stable leader and a quorum delivers the value.  The  *)
(* form is "eventually always" because TLC 2.15 cannot check a temporal    *)
(* formula quantified over values; the models have finitely many writes,   *)
(* so nothing is lost there.  A value a primary took before a fault, with  *)
(* no quorum left to replicate it, may be lost with that leader: its       *)
(* client was never told it was written.                                   *)
(***************************************************************************)
StableWritesDelivered ==
    <>[](\A l \in Server : Stable(l) => IsQuorum({s \in Server : IsPrefix(history[l], Delivered(s))}))

=============================================================================
