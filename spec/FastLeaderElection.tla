-------------------------- MODULE FastLeaderElection --------------------------
(***************************************************************************)
(* ZooKeeper's FastLeaderElection (FLE), fine-grained.                     *)
(*                                                                         *)
(* Zab.tla takes each server's decision (lead, or follow j) as one step    *)
(* (BecomeLeader, BecomeFollower).  This module is the fine-grained view   *)
(* of how the decision is reached: every server runs                       *)
(* FastLeaderElection.lookForLeader, and votes travel as notifications     *)
(* over FIFO channels.  One action is one server handling one event: the   *)
(* head notification of one channel, the end of its finalize wait, the     *)
(* start of a new election, or a crash and restart.                        *)
(*                                                                         *)
(* Sources: seeds 002 and 003 (logicalclock, vote order (epoch, zxid,      *)
(* sid), ballot box, quorum) and ZooKeeper's FastLeaderElection.java       *)
(* (lookForLeader, totalOrderPredicate, termPredicate/getVoteTracker,      *)
(* checkLeader, WorkerReceiver).  spec/FLE.md maps every action to its     *)
(* seed step and lists every departure from ZooKeeper's code.              *)
(*                                                                         *)
(* A zxid is the pair <<epoch, counter>> (seed 004, section 3).            *)
(*                                                                         *)
(* For the DOT-based tooling: every action changes the state, and the two  *)
(* states of an edge name its parameters (the receive actions pop the head *)
(* of channel electionMsgs[j][i]; the other actions change server i's      *)
(* state or crash counter).                                                *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    Server,     \* the voting members' sids (myid): integers, so sid order is <
    InitZxid,   \* [Server -> <<epoch, counter>>]: getInitLastLoggedZxid() of each server
    InitEpoch,  \* [Server -> Nat]: getPeerEpoch(), each server's currentEpoch
    MaxFaults   \* bound on the total number of StartElection and Restart steps (so logicalclock <= 1 + MaxFaults)

ASSUME ServerIsIntegers == Server \subseteq Nat /\ Server # {}
ASSUME InitDataTyped ==
    /\ InitZxid \in [Server -> Nat \X Nat]
    /\ InitEpoch \in [Server -> Nat]
ASSUME BoundsTyped == MaxFaults \in Nat

VARIABLES
    \* ---- per server: QuorumPeer and FastLeaderElection fields ----
    state,          \* QuorumPeer.state: "LOOKING", "FOLLOWING" or "LEADING"
    logicalclock,   \* FastLeaderElection.logicalclock: the election round (a notification's electionEpoch)
    proposedVote,   \* [leader, zxid, epoch] = (proposedLeader, proposedZxid, proposedEpoch) while LOOKING;
                    \* once decided, QuorumPeer.currentVote (the end vote)
    recvVotes,      \* lookForLeader's recvset: the ballot box of this round, sid -> notification
    outOfElection,  \* lookForLeader's outofelection: sid -> notification from a FOLLOWING/LEADING server
    finalizing,     \* TRUE while lookForLeader polls finalizeWait for a better vote before deciding
    \* ---- network ----
    electionMsgs,   \* electionMsgs[i][j]: FIFO channel (QuorumCnxManager's TCP connection) of notifications i -> j
    \* ---- environment ----
    faults,         \* faults[i]: how many times server i went back to LOOKING by StartElection or Restart
    \* ---- checking only: never read by an action's guard ----
    decisions       \* every decision taken: [sid, round, leader, quorum, looking]: quorum = the sids whose ballots
                    \* agreed, looking = those of them whose ballot was a LOOKING vote

serverVars == <<state, logicalclock, proposedVote, recvVotes, outOfElection, finalizing>>
vars == <<serverVars, electionMsgs, faults, decisions>>

States == {"LOOKING", "FOLLOWING", "LEADING"}
Zxids == Nat \X Nat
Votes == [leader : Server, zxid : Zxids, epoch : Nat]
Rounds == 1..(1 + MaxFaults)  \* every round a run can reach: each fault adds at most one
Notifications == [state : States, leader : Server, zxid : Zxids, electionEpoch : Rounds, peerEpoch : Nat]

-----------------------------------------------------------------------------
(* Votes and their order *)

\* The vote a server casts for itself: (getInitId(), getInitLastLoggedZxid(), getPeerEpoch()).
InitVote(i) == [leader |-> i, zxid |-> InitZxid[i], epoch |-> InitEpoch[i]]

ZxidLess(a, b) == a[1] < b[1] \/ (a[1] = b[1] /\ a[2] < b[2])

\* FastLeaderElection.totalOrderPredicate: is vote new strictly better than vote cur?  Greater epoch wins; on equal
\* epochs the greater zxid; on equal zxids the greater sid (seed 002, "compare Epoch ... ZXID ... myid").
TotalOrderPredicate(new, cur) ==
    \/ new.epoch > cur.epoch
    \/ new.epoch = cur.epoch /\ ZxidLess(cur.zxid, new.zxid)
    \/ new.epoch = cur.epoch /\ new.zxid = cur.zxid /\ new.leader > cur.leader

\* The vote a notification carries, and a notification carrying vote v from a server in state st at round r.
VoteOf(n) == [leader |-> n.leader, zxid |-> n.zxid, epoch |-> n.peerEpoch]
Notification(st, v, r) ==
    [state |-> st, leader |-> v.leader, zxid |-> v.zxid, electionEpoch |-> r, peerEpoch |-> v.epoch]

-----------------------------------------------------------------------------
(* Ballot boxes (partial functions sid -> notification) and quorums *)

EmptyBox == [s \in {} |-> Notification("LOOKING", InitVote(CHOOSE x \in Server : TRUE), 0)]
Put(box, s, n) == [t \in DOMAIN box \cup {s} |-> IF t = s THEN n ELSE box[t]]

\* QuorumMaj.containsQuorum: a strict majority of the voting members.
IsQuorum(S) == 2 * Cardinality(S) > Cardinality(Server)

\* The sids whose ballot equals vote v in round r (getVoteTracker over recvset; Vote.equals compares id, zxid,
\* electionEpoch and peerEpoch when one side is LOOKING).
AgreeingInRound(box, v, r) == {s \in DOMAIN box : VoteOf(box[s]) = v /\ box[s].electionEpoch = r}

\* The sids of outofelection that follow v's leader (Vote.equals between two non-LOOKING votes compares only the
\* leader and peerEpoch, whatever their rounds).
AgreeingOutOfElection(box, v) ==
    {s \in DOMAIN box : box[s].leader = v.leader /\ box[s].peerEpoch = v.epoch}

\* FastLeaderElection.checkLeader: a vote for another server counts only if that server itself said LEADING; a
\* vote for i itself only if it is of i's current round.
CheckLeader(i, box, leader, r) ==
    IF leader # i THEN leader \in DOMAIN box /\ box[leader].state = "LEADING"
                  ELSE logicalclock[i] = r

-----------------------------------------------------------------------------
(* Channels *)

Pop(msgs, j, i) == [msgs EXCEPT ![j][i] = Tail(@)]
Send(msgs, i, j, n) == [msgs EXCEPT ![i][j] = Append(@, n)]
\* FastLeaderElection.sendNotifications: n to every other voting member.  (ZooKeeper also queues it to i itself;
\* here i's own ballot enters recvVotes at once, see FLE.md.)
Broadcast(msgs, i, n) ==
    [s \in Server |-> [t \in Server |-> IF s = i /\ t # i THEN Append(msgs[s][t], n) ELSE msgs[s][t]]]

\* WorkerReceiver's immediate answer to a notification n from j, sent whatever lookForLeader later does with n:
\* a LOOKING i answers a LOOKING sender of an older round with its proposal; a decided i answers every LOOKING
\* sender with its current vote.
ReceiverReply(msgs, i, j, n) ==
    IF n.state = "LOOKING" /\ (state[i] # "LOOKING" \/ n.electionEpoch < logicalclock[i])
    THEN Send(msgs, i, j, Notification(state[i], proposedVote[i], logicalclock[i]))
    ELSE msgs

TotalFaults ==
    LET F[S \in SUBSET Server] == IF S = {} THEN 0
                                  ELSE LET s == CHOOSE x \in S : TRUE IN faults[s] + F[S \ {s}]
    IN F[Server]

-----------------------------------------------------------------------------
(* Shared steps *)

\* The prologue of lookForLeader at round r: vote for itself, fresh ballot boxes, sendNotifications.
EnterElection(i, r, msgs) ==
    /\ state' = [state EXCEPT ![i] = "LOOKING"]
    /\ logicalclock' = [logicalclock EXCEPT ![i] = r]
    /\ proposedVote' = [proposedVote EXCEPT ![i] = InitVote(i)]
    /\ recvVotes' = [recvVotes EXCEPT ![i] = (i :> Notification("LOOKING", InitVote(i), r))]
    /\ outOfElection' = [outOfElection EXCEPT ![i] = EmptyBox]
    /\ finalizing' = [finalizing EXCEPT ![i] = FALSE]
    /\ electionMsgs' = Broadcast(msgs, i, Notification("LOOKING", InitVote(i), r))

\* setPeerState + leaveInstance: i leaves the election at round r behind v's leader; the ballots of q in box
\* decided it.
Decide(i, v, r, box, q) ==
    /\ state' = [state EXCEPT ![i] = IF v.leader = i THEN "LEADING" ELSE "FOLLOWING"]
    /\ logicalclock' = [logicalclock EXCEPT ![i] = r]
    /\ proposedVote' = [proposedVote EXCEPT ![i] = v]
    /\ recvVotes' = [recvVotes EXCEPT ![i] = EmptyBox]
    /\ outOfElection' = [outOfElection EXCEPT ![i] = EmptyBox]
    /\ finalizing' = [finalizing EXCEPT ![i] = FALSE]
    /\ decisions' = decisions \cup {[sid |-> i, round |-> r, leader |-> v.leader, quorum |-> q,
                                     looking |-> {s \in q : box[s].state = "LOOKING"}]}

\* A LOOKING i may take the head n of j's channel in the main loop; while it waits in finalize, only a notification
\* better than its proposal ends the wait, and the main loop takes it next (ZooKeeper puts it back at the tail of its
\* queue, behind what is queued already, j's later notifications too: FLE.md).
CanHandle(i, j) ==
    /\ state[i] = "LOOKING"
    /\ electionMsgs[j][i] # << >>
    /\ finalizing[i] => TotalOrderPredicate(VoteOf(Head(electionMsgs[j][i])), proposedVote[i])

-----------------------------------------------------------------------------
(* Actions *)

Init ==
    /\ state = [i \in Server |-> "LOOKING"]
    /\ logicalclock = [i \in Server |-> 1]
    /\ proposedVote = [i \in Server |-> InitVote(i)]
    /\ recvVotes = [i \in Server |-> (i :> Notification("LOOKING", InitVote(i), 1))]
    /\ outOfElection = [i \in Server |-> EmptyBox]
    /\ finalizing = [i \in Server |-> FALSE]
    /\ electionMsgs = [i \in Server |-> [j \in Server |->
                          IF i = j THEN << >> ELSE << Notification("LOOKING", InitVote(i), 1) >>]]
    /\ faults = [i \in Server |-> 0]
    /\ decisions = {}

\* Seed 003 steps 1-3 (again): a FOLLOWING/LEADING server lost its leader or its quorum and looks for a leader in
\* the next round (QuorumPeer.run -> lookForLeader; logicalclock.incrementAndGet).
StartElection(i) ==
    /\ state[i] # "LOOKING"
    /\ TotalFaults < MaxFaults
    /\ EnterElection(i, logicalclock[i] + 1, electionMsgs)
    /\ faults' = [faults EXCEPT ![i] = @ + 1]
    /\ UNCHANGED decisions

\* Server i crashes and restarts: its in-memory state (logicalclock too) is lost, so are the notifications in
\* flight to and from it; its persistent data (InitZxid, InitEpoch) stays.  It starts looking at round 1.
Restart(i) ==
    /\ TotalFaults < MaxFaults
    /\ LET cut == [s \in Server |-> [t \in Server |-> IF s = i \/ t = i THEN << >> ELSE electionMsgs[s][t]]]
       IN EnterElection(i, 1, cut)
    /\ faults' = [faults EXCEPT ![i] = @ + 1]
    /\ UNCHANGED decisions

\* Seed 003 step 5, first case: a LOOKING notification of a later round.  i joins that round: clear the ballot
\* box, vote for the better of n's vote and its own initial vote, broadcast, then count n's ballot.
HandleHigherRound(i, j) ==
    LET n == Head(electionMsgs[j][i])
        r == n.electionEpoch
        v == IF TotalOrderPredicate(VoteOf(n), InitVote(i)) THEN VoteOf(n) ELSE InitVote(i)
        box == (i :> Notification("LOOKING", v, r)) @@ (j :> n)
    IN /\ CanHandle(i, j)
       /\ n.state = "LOOKING"
       /\ r > logicalclock[i]
       /\ logicalclock' = [logicalclock EXCEPT ![i] = r]
       /\ proposedVote' = [proposedVote EXCEPT ![i] = v]
       /\ recvVotes' = [recvVotes EXCEPT ![i] = box]
       /\ finalizing' = [finalizing EXCEPT ![i] = IsQuorum(AgreeingInRound(box, v, r))]
       /\ electionMsgs' = Broadcast(Pop(electionMsgs, j, i), i, Notification("LOOKING", v, r))
       /\ UNCHANGED <<state, outOfElection, faults, decisions>>

\* Seed 003 steps 5-6, second case: a LOOKING notification of i's round.  If n's vote is better (seed 003 step 6,
\* totalOrderPredicate), adopt it and broadcast; count n's ballot; with a quorum agreeing on i's vote, start the
\* finalize wait (termPredicate).
HandleSameRound(i, j) ==
    LET n == Head(electionMsgs[j][i])
        r == logicalclock[i]
        better == TotalOrderPredicate(VoteOf(n), proposedVote[i])
        v == IF better THEN VoteOf(n) ELSE proposedVote[i]
        box == Put(Put(recvVotes[i], i, Notification("LOOKING", v, r)), j, n)
        m == Pop(electionMsgs, j, i)
    IN /\ CanHandle(i, j)
       /\ n.state = "LOOKING"
       /\ n.electionEpoch = r
       /\ proposedVote' = [proposedVote EXCEPT ![i] = v]
       /\ recvVotes' = [recvVotes EXCEPT ![i] = box]
       /\ finalizing' = [finalizing EXCEPT ![i] = IsQuorum(AgreeingInRound(box, v, r))]
       /\ electionMsgs' = IF better THEN Broadcast(m, i, Notification("LOOKING", v, r)) ELSE m
       /\ UNCHANGED <<state, logicalclock, outOfElection, faults, decisions>>

\* Seed 003 step 5, third case: a LOOKING notification of an older round is discarded; WorkerReceiver answers the
\* sender with i's vote so that it catches up.
HandleLowerRound(i, j) ==
    LET n == Head(electionMsgs[j][i])
    IN /\ CanHandle(i, j)
       /\ n.state = "LOOKING"
       /\ n.electionEpoch < logicalclock[i]
       /\ finalizing' = [finalizing EXCEPT ![i] = FALSE]
       /\ electionMsgs' = ReceiverReply(Pop(electionMsgs, j, i), i, j, n)
       /\ UNCHANGED <<state, logicalclock, proposedVote, recvVotes, outOfElection, faults, decisions>>

\* Seed 003 scenarios 2 and 3: a notification from a FOLLOWING or LEADING server.  Of i's round, it enters the
\* ballot box and decides if a quorum there agrees with it and checkLeader holds; of any round, it enters
\* outofelection, and i joins the established ensemble if a quorum there follows the same leader and checkLeader
\* holds (logicalclock := n's round).
HandleFromDecided(i, j) ==
    LET n == Head(electionMsgs[j][i])
        r == n.electionEpoch
        v == VoteOf(n)
        inRound == r = logicalclock[i]
        box == IF inRound THEN Put(recvVotes[i], j, n) ELSE recvVotes[i]
        q1 == AgreeingInRound(box, v, r)
        decideInRound == inRound /\ IsQuorum(q1) /\ CheckLeader(i, box, n.leader, r)
        ooe == Put(outOfElection[i], j, n)
        q2 == AgreeingOutOfElection(ooe, v)
        decideJoin == IsQuorum(q2) /\ CheckLeader(i, ooe, n.leader, r)
        m == Pop(electionMsgs, j, i)
    IN /\ CanHandle(i, j)
       /\ n.state # "LOOKING"
       /\ electionMsgs' = m
       /\ IF decideInRound \/ decideJoin
          THEN IF decideInRound THEN Decide(i, v, r, box, q1) ELSE Decide(i, v, r, ooe, q2)
          ELSE /\ recvVotes' = [recvVotes EXCEPT ![i] = box]
               /\ outOfElection' = [outOfElection EXCEPT ![i] = ooe]
               /\ finalizing' = [finalizing EXCEPT ![i] = FALSE]
               /\ UNCHANGED <<state, logicalclock, proposedVote, decisions>>
       /\ UNCHANGED faults

\* The finalize wait (lookForLeader's inner poll of finalizeWait ms): a notification that is not better than i's
\* proposal is taken and dropped; WorkerReceiver still answers a LOOKING sender of an older round.
FinalizeDiscard(i, j) ==
    LET n == Head(electionMsgs[j][i])
    IN /\ state[i] = "LOOKING"
       /\ finalizing[i]
       /\ electionMsgs[j][i] # << >>
       /\ ~TotalOrderPredicate(VoteOf(n), proposedVote[i])
       /\ electionMsgs' = ReceiverReply(Pop(electionMsgs, j, i), i, j, n)
       /\ UNCHANGED <<serverVars, faults, decisions>>

\* Seed 003 steps 7-8: finalizeWait passed with no better notification: i decides for its proposal, LEADING if it
\* proposes itself, else FOLLOWING.
FinalizeTimeout(i) ==
    LET r == logicalclock[i]
    IN /\ state[i] = "LOOKING"
       /\ finalizing[i]
       /\ Decide(i, proposedVote[i], r, recvVotes[i], AgreeingInRound(recvVotes[i], proposedVote[i], r))
       /\ UNCHANGED <<electionMsgs, faults>>

\* i sends its current proposal to every other server again (sendNotifications).  ZooKeeper queues the same
\* notification to i itself, and lookForLeader takes it next like a peer's (HandleSameRound with i's own vote: nothing
\* in the box changes, termPredicate is checked again): with a quorum agreeing with i's vote, i waits in finalize
\* again.  A finalize wait that a better notification ended without changing i's vote (HandleLowerRound, or a
\* HandleFromDecided that did not decide) leaves i LOOKING with such a quorum; ZooKeeper 3.9.5 then discards, in the
\* new wait, a decided server's answer that would have decided at once (docs/zookeeper.md, "Windows for elections").
SendVoteAgain(i) ==
    /\ electionMsgs' = Broadcast(electionMsgs, i, Notification("LOOKING", proposedVote[i], logicalclock[i]))
    /\ LET r == logicalclock[i]
       IN  finalizing' = [finalizing EXCEPT ![i] = IsQuorum(AgreeingInRound(recvVotes[i], proposedVote[i], r))]
    /\ UNCHANGED <<state, logicalclock, proposedVote, recvVotes, outOfElection, faults, decisions>>

\* Nothing waits to or from i: every channel into and out of i is empty.
Quiet(i) == \A j \in Server : electionMsgs[j][i] = << >> /\ electionMsgs[i][j] = << >>

\* lookForLeader's poll of notTimeout returned nothing (no notification waits for i) and QuorumCnxManager has
\* delivered everything i sent (haveDelivered): i sends its vote again (SendVoteAgain), which replaces notifications
\* lost with a broken connection.  Not while finalizing: there the same poll timing out is FinalizeTimeout.
ResendNotifications(i) ==
    /\ state[i] = "LOOKING"
    /\ ~finalizing[i]
    /\ Quiet(i)
    /\ SendVoteAgain(i)

\* WorkerReceiver of a FOLLOWING or LEADING i: the notification is not queued for lookForLeader; a LOOKING sender
\* is answered with i's current vote (seed 003 scenario 2: "S2 ... returns ballot [2,3,3] to S1").
HandleAsDecided(i, j) ==
    LET n == Head(electionMsgs[j][i])
    IN /\ state[i] # "LOOKING"
       /\ electionMsgs[j][i] # << >>
       /\ electionMsgs' = ReceiverReply(Pop(electionMsgs, j, i), i, j, n)
       /\ UNCHANGED <<serverVars, faults, decisions>>

-----------------------------------------------------------------------------
(* After the election: the vote a decided server answers with *)

\* ZOOKEEPER-1732 (QuorumPeer.updateElectionVote): once Zab has established the leader's epoch -- the leader at its
\* NEWLEADER quorum, a follower at UPTODATE -- a decided server's vote carries that epoch, "to ensure that all members
\* of the ensemble report the same vote to new servers that start up". A LOOKING server joins an established
\* ensemble only on a quorum of decided votes equal in leader and peerEpoch (AgreeingOutOfElection, and in its round
\* a finalize wait that drops a reply no better than its proposal): a leader that moved its vote and a follower
\* that did not never give one (docs/zookeeper.md, "A zabref server in a ZooKeeper ensemble", item 6).
\* A switch, like ZabSync.tla's SyncConfirms: this module has no Zab, so the models whose traces the conformance
\* replays (MC_fle_tiny, MC_fle_ci: their servers' Zab never runs) keep it FALSE; MC_fle_vote sets it.
VoteUpdates == FALSE

\* The epoch Zab's discovery establishes, as this module sees it: above every server's epoch, one value for every
\* leader.  (Zab's is one above the largest acceptedEpoch of the leader's first quorum, and a server that restarts
\* votes with it; this module has no Zab, and its Restart votes InitVote(i), as its InitZxid stays.)
EstablishedEpoch == 1 + CHOOSE e \in {InitEpoch[s] : s \in Server} : \A s \in Server : InitEpoch[s] <= e

\* The servers that decided for l.
Ensemble(l) == {s \in Server : state[s] /= "LOOKING" /\ proposedVote[s].leader = l}

\* Decided server i moves its vote to the established epoch: its leader leads with a quorum decided for it, and a
\* follower's UPTODATE comes after its leader's NEWLEADER quorum (the leader moved its own vote first).
UpdateElectionVote(i) ==
    LET l == proposedVote[i].leader
    IN /\ VoteUpdates
       /\ state[i] /= "LOOKING"
       /\ state[l] = "LEADING"
       /\ IsQuorum(Ensemble(l))
       /\ proposedVote[i].epoch < EstablishedEpoch
       /\ i /= l => proposedVote[l].epoch = EstablishedEpoch
       /\ proposedVote' = [proposedVote EXCEPT ![i].epoch = EstablishedEpoch]
       /\ UNCHANGED <<state, logicalclock, recvVotes, outOfElection, finalizing, electionMsgs, faults, decisions>>

Next ==
    \* ---- entering an election ----
    \/ \E i \in Server : StartElection(i)
    \/ \E i \in Server : Restart(i)
    \* ---- a LOOKING server handles the head notification of one channel ----
    \/ \E i, j \in Server : HandleHigherRound(i, j)
    \/ \E i, j \in Server : HandleSameRound(i, j)
    \/ \E i, j \in Server : HandleLowerRound(i, j)
    \/ \E i, j \in Server : HandleFromDecided(i, j)
    \* ---- the finalize wait ----
    \/ \E i, j \in Server : FinalizeDiscard(i, j)
    \/ \E i \in Server : FinalizeTimeout(i)
    \/ \E i \in Server : ResendNotifications(i)
    \* ---- a decided server answers; its vote takes the established epoch ----
    \/ \E i, j \in Server : HandleAsDecided(i, j)
    \/ \E i \in Server : UpdateElectionVote(i)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Invariants *)

\* Every variable holds a value of its type; channels hold notifications; ballot boxes map sids to notifications.
TypeOK ==
    /\ state \in [Server -> States]
    /\ logicalclock \in [Server -> Rounds]
    /\ proposedVote \in [Server -> Votes]
    /\ \A i \in Server :
          /\ DOMAIN recvVotes[i] \subseteq Server /\ \A s \in DOMAIN recvVotes[i] : recvVotes[i][s] \in Notifications
          /\ DOMAIN outOfElection[i] \subseteq Server
          /\ \A s \in DOMAIN outOfElection[i] : outOfElection[i][s] \in Notifications
    /\ finalizing \in [Server -> BOOLEAN]
    /\ \A i, j \in Server : \A k \in 1..Len(electionMsgs[i][j]) : electionMsgs[i][j][k] \in Notifications
    /\ faults \in [Server -> 0..MaxFaults]

\* Only a LOOKING server waits in finalize, and it waits only while a quorum of its ballot box agrees with it.
FinalizeOnlyWithQuorum ==
    \A i \in Server : finalizing[i] =>
        /\ state[i] = "LOOKING"
        /\ IsQuorum(AgreeingInRound(recvVotes[i], proposedVote[i], logicalclock[i]))

\* A LOOKING server's ballot box holds ballots of its own round only (lookForLeader's recvset is cleared when its
\* round advances, and a FOLLOWING or LEADING ballot enters it only when n.electionEpoch = logicalclock: ballots of
\* other rounds go to outofelection).  A decision counts the box, so a ballot of an older round there would let
\* an election be decided by votes cast for an earlier one.
BallotsOfOwnRound ==
    \A i \in Server : state[i] = "LOOKING" =>
        \A s \in DOMAIN recvVotes[i] : recvVotes[i][s].electionEpoch = logicalclock[i]

\* A LOOKING server never proposes a vote worse than its own initial vote: the vote it starts a round with is
\* its own, and it only ever adopts a better one (seed 003 step 6).
ProposalAtLeastOwnVote ==
    \A i \in Server : state[i] = "LOOKING" => ~TotalOrderPredicate(InitVote(i), proposedVote[i])

\* The elected leader has the greatest (epoch, zxid, sid) among the servers that elected it while LOOKING: for
\* every decision, no server whose LOOKING ballot is in the deciding quorum has an initial vote better than the
\* leader's.  (Seed 002: "the server with the most recent data is elected Leader".)
LeaderGreatestAmongLookingVoters ==
    \A d \in decisions : \A q \in d.looking : ~TotalOrderPredicate(InitVote(q), InitVote(d.leader))

\* The same over the whole deciding quorum, FOLLOWING/LEADING ballots included.  FLE does NOT guarantee this: a
\* server joins an established leader (checkLeader) even when its own data is better, and a follower of that
\* leader then counts in later quorums.  FLE.md gives TLC's counterexample; Zab's discovery phase rejects such a
\* leader (seed 000, phase 1: Follower.currentEpoch <= Leader.currentEpoch).
LeaderGreatestInQuorum ==
    \A d \in decisions : \A q \in d.quorum : ~TotalOrderPredicate(InitVote(q), InitVote(d.leader))

\* Agreement: two servers that decided in the same round decided the same leader.  FLE does NOT guarantee this
\* (seed 000: Zab only needs "a best-effort leader election"); FLE.md gives TLC's counterexample.
RoundAgreement ==
    \A d1, d2 \in decisions : d1.round = d2.round => d1.leader = d2.leader

\* An established epoch never enters an election: only a decided server's vote carries it (UpdateElectionVote; a
\* server that looks for a leader again votes its own vote, and one that joins takes the decided votes' epoch when it
\* decides).  A LOOKING proposal of that epoch would outrank every vote of the servers' data.
EstablishedEpochDecidedOnly ==
    \A i \in Server : proposedVote[i].epoch >= EstablishedEpoch => state[i] /= "LOOKING"

\* A server that LEADs decided for itself; a server that FOLLOWs decided for another server.
RoleMatchesVote ==
    \A i \in Server :
        /\ state[i] = "LEADING" => proposedVote[i].leader = i
        /\ state[i] = "FOLLOWING" => proposedVote[i].leader # i

=============================================================================
