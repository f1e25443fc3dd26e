"""Step kinds of the Zab core, as the storage layer sees them: the PersistOp sequence of ONE step (one Output).

Each is named after the spec action that produces it (zabref/core/follower.py, core_leader.py) and starts from
BASE, the state of a follower that accepted epoch 2 in discovery, still has currentEpoch 1 and holds three
transactions of epoch 1. Shared by tests/test_storage_crash.py and the child process of tests/storage_child.py.
"""

from __future__ import annotations

from zabref.core.packets import make_zxid
from zabref.core.types import (
    AppendTxns,
    Persistent,
    ReplaceHistory,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    TruncateHistory,
    Txn,
)


def txn(epoch: int, counter: int, value: bytes | None = None) -> Txn:
    return Txn(make_zxid(epoch, counter), value if value is not None else b"v%d.%d" % (epoch, counter))


#: How BASE is reached: three steps, synced.
BASE_STEPS = (
    (SetAcceptedEpoch(1),),
    (AppendTxns((txn(1, 1), txn(1, 2), txn(1, 3))), SetCurrentEpoch(1)),
    (SetAcceptedEpoch(2),),
)
BASE = Persistent((txn(1, 1), txn(1, 2), txn(1, 3)), 2, 1)

#: name -> the steps applied after BASE and synced together (most are one step).
STEP_GROUPS = {
    # FollowerProcessLEADERINFO: acceptedEpoch before ACKEPOCH (seed 000, phase 1, step 4)
    "leaderinfo": ((SetAcceptedEpoch(3),),),
    # FollowerProcessNEWLEADER with a DIFF: the staged tail, then currentEpoch (phase 2, step 2)
    "newleader_diff": ((AppendTxns((txn(1, 4), txn(2, 1, b"x" * 40))), SetCurrentEpoch(2)),),
    # FollowerProcessNEWLEADER with a TRUNC
    "newleader_trunc": ((TruncateHistory(make_zxid(1, 1)), SetCurrentEpoch(2)),),
    # FollowerProcessNEWLEADER with a SNAP: a whole new history
    "newleader_snap": ((ReplaceHistory((txn(1, 1), txn(1, 2, b"other"), txn(2, 1))), SetCurrentEpoch(2)),),
    # FollowerProcessPROPOSAL: log before ACK (phase 3, step 2)
    "proposal": ((AppendTxns((txn(1, 4),)),),),
    # a batch of the runtime: several steps, one sync (group commit)
    "group": ((AppendTxns((txn(1, 4),)),), (AppendTxns((txn(1, 5),)),), (SetAcceptedEpoch(3),),
              (TruncateHistory(make_zxid(1, 4)), SetCurrentEpoch(3)), (AppendTxns((txn(3, 1),)),)),
}


def after(state: Persistent, step) -> Persistent:
    """The model: the persistent state after one step (the spec's persistent variables)."""
    history, accepted, current = list(state.history), state.accepted_epoch, state.current_epoch
    for op in step:
        match op:
            case AppendTxns(txns):
                history.extend(txns)
            case TruncateHistory(zxid):
                history = [t for t in history if t.zxid <= zxid]
            case ReplaceHistory(new):
                history = list(new)
            case SetAcceptedEpoch(epoch):
                accepted = epoch
            case SetCurrentEpoch(epoch):
                current = epoch
    return Persistent(tuple(history), accepted, current)


def states(group) -> list[Persistent]:
    """BASE, then the state after each step of ``group``."""
    out = [BASE]
    for step in group:
        out.append(after(out[-1], step))
    return out
