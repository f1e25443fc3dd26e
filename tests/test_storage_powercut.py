"""zabref's own log on the power-cut file system (conformance/zk/powercut.py, which forgets every write not synced):
what `Storage.sync` returned from survives a cut of the power, on `RealDisk` as a server runs it. The simulator and
the crash tests use disks that model the power loss (`PowerLossDisk`, `SimDisk`); only this test sees whether the
sync RealDisk makes (fdatasync) reaches the file system at all. This file system has no fallocate, so the log is
not reserved ahead (`RealDisk._reserve` passes over it) and each sync grows the file: the size is synced too."""

from __future__ import annotations

import os

from storage_steps import BASE, BASE_STEPS, txn

from zabref.core.types import AppendTxns, Persistent
from zabref.storage import Storage, read_durable
from zabref.storage.store import RESERVE_MIN


def test_a_cut_keeps_every_step_synced_on_a_real_disk_and_nothing_after(powercut):
    data = powercut.mount / "data"
    data.mkdir()
    storage, _ = Storage.open(data)
    try:
        for step in BASE_STEPS:
            storage.apply(step)
        storage.sync()
        # a value larger than a first reservation would be: the file's size grows with this sync
        big = txn(1, 4, b"x" * (RESERVE_MIN + 1000))
        storage.apply((AppendTxns((big,)),))
        storage.sync()
        size = os.stat(data / "zab.log").st_size
        storage.apply((AppendTxns((txn(1, 5),)),))  # applied, never synced: the cut takes it
        powercut.cut()
        kept = read_durable(data)
    finally:
        storage.close()
    assert size > RESERVE_MIN
    assert Persistent(kept.history, kept.accepted_epoch, kept.current_epoch) == Persistent(
        BASE.history + (big,), BASE.accepted_epoch, BASE.current_epoch)
    assert kept.torn_bytes == 0
    # and the log opens again as it was: a server restarted after the cut starts from exactly this
    reopened, _ = Storage.open(data)
    try:
        assert tuple(reopened.history) == BASE.history + (big,)
    finally:
        reopened.close()
