------------------------------- MODULE ZabSync -------------------------------
(***************************************************************************)
(* What ZooKeeper's quorum connections carry beyond broadcast, for reads:  *)
(* a client's sync at a follower, forwarded to the leader as a REQUEST     *)
(* (packet 1) and answered with SYNC (packet 7), and the read guarantees   *)
(* it buys (ZooKeeper's programmer's guide: a client that must see what    *)
(* another wrote calls sync before it reads; its API: sync "flushes the    *)
(* channel between process and leader").                                   *)
(*                                                                         *)
(* ZooKeeper 3.8/3.9 (its released source, read: LearnerHandler,          *)
(* Leader.processSync): the follower's FollowerRequestProcessor forwards   *)
(* the sync as REQUEST; the leader answers at once when no proposal is     *)
(* outstanding, else it keeps the sync in pendingSyncs under its last      *)
(* proposed zxid and answers once that zxid is committed, after the       *)
(* COMMIT; the follower completes the client's sync when it takes SYNC,    *)
(* behind every COMMIT the leader sent before it (one FIFO connection).    *)
(* Here every sync waits in pendingSyncs, for nothing when nothing is      *)
(* outstanding, and LeaderSendSYNC answers it: ZooKeeper's "at once" is    *)
(* the two steps back to back.  With SyncConfirms (zabref's leader), a     *)
(* sync is answered only once a quorum has confirmed, after it arrived,    *)
(* that the leader still leads: the leader PINGs every learner whose sync  *)
(* it has sent when the sync arrives (Pinged), each learner answers each   *)
(* PING in order while it follows the leader, and an answer to a PING sent *)
(* at or after the arrival confirms; a learner whose sync is sent later    *)
(* confirms with its answer to its first PING (LeaderSendPING,             *)
(* FollowerProcessPING, LeaderProcessPING).                                *)
(*                                                                         *)
(* This module extends Zab.tla and changes none of its actions.  A sync   *)
(* adds packets to msgs (as every packet, the one at the head of a channel *)
(* is taken before those behind it) and one leader variable, pendingSyncs; *)
(* while no sync is under way, SyncNext's steps are Next's or ClientSync.  *)
(* Writes forwarded as REQUEST are not modelled apart: their effect on     *)
(* Zab's state is the leader's ClientRequest.  PING is modelled only for   *)
(* SyncConfirms: it carries no Zab state, and what its absence means (a    *)
(* timeout) is FollowerTimeout and LeaderTimeout (spec/README.md, "Reads:  *)
(* REQUEST, SYNC, PING").                                                  *)
(***************************************************************************)
EXTENDS Zab

CONSTANT
    MaxSyncs    \* bound: ClientSync is enabled while fewer than MaxSyncs syncs are under way

ASSUME MaxSyncs \in Nat

VARIABLE
    \* ---- leader, volatile ----
    pendingSyncs      \* pendingSyncs[l]: syncs l took and has not answered, oldest first:
                      \* [learner, point (it waits for history[l][1..point] to be committed), awaits
                      \* (SyncConfirms: per server, the answers to l's PINGs still to come before it confirms
                      \* that l still leads, 0 once it has; -1 for a server that was not l's learner when the
                      \* sync arrived, which never confirms it), ghost]

syncVars == <<vars, pendingSyncs>>

\* zabref's leader confirms that it still leads before it answers a sync: each learner that answers a PING sent
\* after the sync arrived confirms it, and it answers once a quorum has, itself counted (Raft's ReadIndex);
\* ZooKeeper's leader does not (spec/README.md, "Reads": a deposed leader). A switch, like Zab.tla's TruncAtOnce:
\* FALSE is ZooKeeper.
SyncConfirms == FALSE

\* PINGs (SyncConfirms only).  A PING goes from a leader to a learner, and the learner's answer back, both with
\* type PING, as ZooKeeper's; neither carries anything the spec reads.
IsPing(m) == m.type = "PING"
\* The PINGs of leader l to learner f not answered at l yet: those on their way to f, and f's answers on their way
\* back (f answers each as it takes it).
PingsOwed(l, f) == Len(SelectSeq(msgs[l][f], IsPing)) + Len(SelectSeq(msgs[f][l], IsPing))
\* The learners whose connection to leader l is open (zabref: the leader's learner connections): followers of l
\* whose FOLLOWERINFO l took or has on its way.
Learners(l) == {f \in Server \ {l} : state[f] = FOLLOWING /\ leader[f] = l /\ LeaderConnected(f)}
\* The servers that confirmed, since sync p arrived, that its leader still leads.
Confirmed(p) == {f \in Server : p.awaits[f] = 0}
\* A bound for the models (a CONSTRAINT): a learner that takes none of its PINGs while the others confirm one sync
\* after another would owe its leader ever more answers; the models keep one owed at most.
PingsBounded == \A l, f \in Server : PingsOwed(l, f) <= 1
\* The learners leader l PINGs: those whose synchronization it has sent (NEWLEADER and after), as ZooKeeper's
\* LearnerHandler.ping sends nothing before startSendingPackets: a ZooKeeper learner reads the packet after its
\* ACKEPOCH as its sync's head and the packet after FOLLOWERINFO as LEADERINFO, and leaves on a PING there
\* (docs/zookeeper.md, item 7).  Every packet such a learner sent that l takes after it was sent with l's epoch
\* accepted (its ACKEPOCH came first on one FIFO connection), so its answer confirms; a learner before its sync
\* confirms with its answer to the first PING it gets after (LeaderSendPING).
Pinged(l) == {f \in Learners(l) : learnerPhase[l][f] \in ForwardingPhases}
\* Leader l sends a PING to every learner it PINGs.
PingAll(ch, l) == [a \in Server |-> [b \in Server |->
                      IF a = l /\ b \in Pinged(l) THEN Append(ch[a][b], Packet("PING", <<0, 0>>, 0)) ELSE ch[a][b]]]

\* The checking-only part of a sync (ZooKeeper's REQUEST carries the client's request, its SYNC nothing): REQUEST's
\* data is `mark`, how many transactions were committed anywhere (Len(committed)) when the client issued the sync;
\* SYNC's data is the ghost [mark, seen], `seen` the last zxid the leader had proposed when the sync reached it.
\* No action reads them but to pass them on; the invariants below do.
IsSyncPacket(m) == m.type \in {"REQUEST", "SYNC"}
\* The syncs on their way between p[1] and p[2] (REQUEST or SYNC in flight), and, for p[1] = p[2], those
\* waiting at p[1].
SyncsAt(p) == Len(SelectSeq(msgs[p[1]][p[2]], IsSyncPacket)) + IF p[1] = p[2] THEN Len(pendingSyncs[p[1]]) ELSE 0
RECURSIVE SyncsIn(_)
SyncsIn(S) == IF S = {} THEN 0 ELSE LET p == CHOOSE p \in S : TRUE IN SyncsAt(p) + SyncsIn(S \ {p})
SyncsUnderWay == SyncsIn(Server \X Server)

SyncInit == Init /\ pendingSyncs = [s \in Server |-> <<>>]

(***************************************************************************)
(* A client of follower i issues a sync: i forwards it to its leader as    *)
(* REQUEST (ZooKeeper's FollowerRequestProcessor).  Only a follower in     *)
(* broadcast serves clients, and only on a connection its leader still     *)
(* holds open: a packet on a closed connection reaches nobody (a follower  *)
(* whose leader gave up and came back, leading again, is not its learner). *)
(***************************************************************************)
ClientSync(i) ==
    /\ state[i] = FOLLOWING /\ zabState[i] = BROADCAST
    /\ LeaderConnected(i)
    /\ SyncsUnderWay < MaxSyncs
    /\ msgs' = Send(msgs, i, leader[i], Packet("REQUEST", <<0, 0>>, Len(committed)))
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults, pendingSyncs>>

(***************************************************************************)
(* Leader i takes a sync REQUEST from learner j (Leader.processSync): the  *)
(* sync waits until everything i has proposed so far is committed.  With   *)
(* SyncConfirms i also PINGs every learner, and each learner f confirms    *)
(* the sync with its answer to that PING: the PingsOwed(i, f) answers      *)
(* before it are to older PINGs.                                           *)
(***************************************************************************)
LeaderProcessREQUEST(i, j) ==
    /\ state[i] = LEADING /\ zabState[i] = BROADCAST
    /\ HasPacket(j, i, "REQUEST")
    /\ msgs' = IF SyncConfirms THEN PingAll(Discard(msgs, j, i), i) ELSE Discard(msgs, j, i)
    /\ LET awaits == [f \in Server |-> IF SyncConfirms /\ f \in Learners(i) THEN PingsOwed(i, f) + 1 ELSE -1]
       IN  pendingSyncs' = [pendingSyncs EXCEPT ![i] =
                               Append(@, [learner |-> j, point |-> Len(history[i]), awaits |-> awaits,
                                          ghost |-> [mark |-> Head(msgs[j][i]).data,
                                                     seen |-> LastZxid(history[i])]])]
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults>>

(***************************************************************************)
(* Leader i answers its oldest waiting sync once what it waited for is     *)
(* committed: ZooKeeper at once when nothing was outstanding, else right   *)
(* after that COMMIT, in the same call (both are interleavings of this     *)
(* step).                                                                  *)
(***************************************************************************)
\* Whether leader i may answer its oldest waiting sync: what it waited for is committed (and, with SyncConfirms, a
\* quorum confirmed that i still leads).
SyncAnswerable(i) ==
    /\ state[i] = LEADING
    /\ pendingSyncs[i] /= <<>>
    /\ Head(pendingSyncs[i]).point <= lastCommitted[i]
    /\ SyncConfirms => IsQuorum({i} \cup Confirmed(Head(pendingSyncs[i])))

LeaderSendSYNC(i) ==
    /\ SyncAnswerable(i)
    /\ LET p == Head(pendingSyncs[i])
       IN  msgs' = Send(msgs, i, p.learner, Packet("SYNC", <<0, 0>>, p.ghost))
    /\ pendingSyncs' = [pendingSyncs EXCEPT ![i] = Tail(@)]
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults>>

(***************************************************************************)
(* With SyncConfirms, the PING round.  Leader i PINGs its learners again   *)
(* when a waiting sync still needs more answers from a learner it PINGs    *)
(* than are owed: a learner whose connection closed and opened again since *)
(* the sync arrived (SyncsDropped: it then confirms with its first answer  *)
(* on the new connection), or one whose sync was not sent yet when the     *)
(* sync arrived.  zabref's leader PINGs on every tick; the PINGs no sync   *)
(* needs change nothing here and are not steps of the spec.                *)
(***************************************************************************)
LeaderSendPING(i) ==
    /\ SyncConfirms
    /\ state[i] = LEADING
    /\ \E k \in 1 .. Len(pendingSyncs[i]) : \E f \in Pinged(i) : pendingSyncs[i][k].awaits[f] > PingsOwed(i, f)
    /\ msgs' = PingAll(msgs, i)
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults, pendingSyncs>>

\* Follower i answers its leader's PING, in whatever phase it is (zabref's follower does; so does ZooKeeper's).
FollowerProcessPING(i, j) ==
    /\ SyncConfirms
    /\ state[i] = FOLLOWING /\ leader[i] = j
    /\ HasPacket(j, i, "PING")
    /\ msgs' = Send(Discard(msgs, j, i), i, j, Packet("PING", <<0, 0>>, 0))
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults, pendingSyncs>>

\* Leader i takes learner j's answer to its oldest PING not yet answered: every waiting sync that still needs
\* answers from j needs one fewer.  i PINGs only a learner whose sync it sent (Pinged), after its ACKEPOCH: a
\* learner that may have accepted a later epoch, helped its leader commit and come back to follow i never answers
\* before i took its ACKEPOCH (MC_fivestale: a PING before it, counted, lets a deposed leader answer a sync that
\* misses that commit; the mutation PingBeforeSyncCounts).
LeaderProcessPING(i, j) ==
    /\ SyncConfirms
    /\ state[i] = LEADING
    /\ HasPacket(j, i, "PING")
    /\ msgs' = Discard(msgs, j, i)
    /\ LET waiting == pendingSyncs[i]
           Answered(p) == [p EXCEPT !.awaits[j] = IF @ > 0 THEN @ - 1 ELSE @]
       IN  pendingSyncs' = [pendingSyncs EXCEPT ![i] = [k \in 1 .. Len(waiting) |-> Answered(waiting[k])]]
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults>>

\* Follower i takes SYNC from its leader: the client's sync completes, and its next read is served from what i
\* has delivered now (every COMMIT sent before the SYNC was taken before it).
FollowerProcessSYNC(i, j) ==
    /\ state[i] = FOLLOWING /\ leader[i] = j /\ zabState[i] = BROADCAST
    /\ HasPacket(j, i, "SYNC")
    /\ msgs' = Discard(msgs, j, i)
    /\ UNCHANGED <<persistentVars, serverVars, stagedHistory, leaderVars, checkVars, faults, pendingSyncs>>

(***************************************************************************)
(* Every step of Zab.tla, with the waiting syncs of a leader that stopped  *)
(* leading, or of a learner whose connection closed, dropped with it (the  *)
(* client's connection to that follower sees the sync fail).               *)
(***************************************************************************)
\* What a step of Zab.tla does to pendingSyncs (the validation of ZooKeeper runs, conformance/validate/zkmodule.py,
\* conjoins it to each of Next's actions one by one).  With SyncConfirms, a learner whose connection closed
\* confirms a waiting sync only with an answer on a new connection (its answers in flight are lost with the old
\* one): it awaits one answer again, confirmed before or not.
\* (With no sync waiting anywhere it leaves pendingSyncs as it is, the same value, without building it again.)
Reconnects(l, p) == [f \in Server |-> IF p.awaits[f] >= 0 /\ f \in Learners(l) /\ f \notin Learners(l)'
                                      THEN 1 ELSE p.awaits[f]]
SyncsDropped ==
    pendingSyncs' = IF \A l \in Server : pendingSyncs[l] = <<>> THEN pendingSyncs
                    ELSE [l \in Server |->
                             IF state'[l] = LEADING
                             THEN LET kept == SelectSeq(pendingSyncs[l],
                                                        LAMBDA p : learnerPhase'[l][p.learner] /= "NONE")
                                  IN  IF SyncConfirms
                                      THEN [k \in 1 .. Len(kept) |-> [kept[k] EXCEPT !.awaits = Reconnects(l, kept[k])]]
                                      ELSE kept
                             ELSE <<>>]

ZabStep == Next /\ SyncsDropped

\* Keep every disjunct in the form "\E params \in Domain : Action(params)" (Zab.tla's Next says why).
SyncNext ==
    \/ ZabStep
    \/ \E i \in Server : ClientSync(i)
    \/ \E i, j \in Server : LeaderProcessREQUEST(i, j)
    \/ \E i \in Server : LeaderSendPING(i)
    \/ \E i, j \in Server : FollowerProcessPING(i, j)
    \/ \E i, j \in Server : LeaderProcessPING(i, j)
    \/ \E i \in Server : LeaderSendSYNC(i)
    \/ \E i, j \in Server : FollowerProcessSYNC(i, j)

SyncSpec == SyncInit /\ [][SyncNext]_syncVars

\* A model rule (an ACTION_CONSTRAINT) for implementations whose leader answers a sync in the step that makes it
\* answerable, as zabref's does (the ACK that commits its point, the PING answer that completes its quorum, in the
\* same input) and ZooKeeper's (its "at once"): when leader i may answer its oldest sync, the next step is that
\* answer.  Conformance's model (MC_ciconfirm) keeps it, so that its traces take LeaderSendSYNC right after the
\* step that enabled it and the driver checks the two against one input of the server.
SyncAnsweredAtOnce == \A i \in Server : SyncAnswerable(i) => LeaderSendSYNC(i)

-----------------------------------------------------------------------------
(***************************************************************************)
(* The read guarantees, checked when a SYNC reaches the head of the        *)
(* follower's connection from its leader (the follower's next step there   *)
(* takes it, and until then nothing else on that connection can add to     *)
(* what it delivered).                                                     *)
(*                                                                         *)
(* SyncSeesCommitted: the follower has delivered every transaction         *)
(* committed anywhere before its client issued the sync (a read after sync *)
(* sees every write that completed before the sync began).  Delivered(f)   *)
(* is a prefix of `committed` (TotalOrder), so its length says it all.      *)
(*                                                                         *)
(* SyncFlushesChannel: the follower has delivered everything its leader    *)
(* had proposed when the sync reached it (ZooKeeper's API: sync "flushes   *)
(* the channel between process and leader"), so a client's own earlier     *)
(* writes, forwarded on the same connection ahead of the sync, are read    *)
(* back.  This is what the leader's wait for outstanding proposals buys;   *)
(* SyncSeesCommitted alone does not tell a leader that answers at once     *)
(* apart (spec/README.md, "Reads: REQUEST, SYNC, PING").                   *)
(***************************************************************************)
SyncAtHead(f, j) == state[f] = FOLLOWING /\ leader[f] = j /\ HasPacket(j, f, "SYNC")

SyncSeesCommitted ==
    \A f, j \in Server : SyncAtHead(f, j) => Len(Delivered(f)) >= Head(msgs[j][f]).data.mark

SyncFlushesChannel ==
    \A f, j \in Server : SyncAtHead(f, j) =>
        LET seen == Head(msgs[j][f]).data.seen
        IN  seen = <<0, 0>> \/ IndexOf(Delivered(f), seen) > 0

SyncTypeOK ==
    /\ \A l \in Server : \A k \in 1 .. Len(pendingSyncs[l]) :
          /\ pendingSyncs[l][k].learner \in Server
          /\ pendingSyncs[l][k].point \in 0 .. Len(history[l])
          /\ DOMAIN pendingSyncs[l][k].awaits = Server
          /\ \A f \in Server : pendingSyncs[l][k].awaits[f] \in Int /\ pendingSyncs[l][k].awaits[f] >= -1
          /\ pendingSyncs[l][k].awaits[l] = -1
          /\ pendingSyncs[l][k].ghost \in [mark : 0 .. MaxTxns, seen : Zxids]
    /\ \A a, b \in Server : \A k \in 1 .. Len(msgs[a][b]) :
          /\ msgs[a][b][k].type = "REQUEST" => msgs[a][b][k].data \in 0 .. MaxTxns
          /\ msgs[a][b][k].type = "SYNC" => msgs[a][b][k].data \in [mark : 0 .. MaxTxns, seen : Zxids]

\* Zab.tla's NoHiddenDeadlock over SyncNext: a state with no step enabled is one the bounds explain, with no
\* sync left waiting.
SyncNoHiddenDeadlock ==
    (ENABLED SyncNext) \/ (BoundsStopProgress /\ \A l \in Server : pendingSyncs[l] = <<>>)

=============================================================================
