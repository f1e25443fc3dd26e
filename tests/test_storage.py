"""Storage (zabref/storage/store.py) and its log format (records.py): layout, the API the core's outputs need,
recovery (a torn tail at every byte offset is cut and reported; damage in the middle refuses to start and leaves the
file as it was), bad input, compaction, and read_durable agreeing with Storage under random steps and crashes.
"""

from __future__ import annotations

import errno
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from storage_steps import BASE, BASE_STEPS, STEP_GROUPS, states, txn

import zabref
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
from zabref.errors import LogCorruption, StorageError
from zabref.storage import LOG_NAME, RealDisk, SimDisk, Storage, read_durable
from zabref.storage import records as rec
from zabref.storage.store import RESERVE_MIN


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def open_(d, **kw) -> Storage:
    return Storage.open(d, **kw)[0]


def at_base(d, **kw) -> Storage:
    s = open_(d, **kw)
    for step in BASE_STEPS:
        s.apply(step)
    s.sync()
    return s


def written(d) -> bytes:
    """The log's bytes up to the end of what was written: without the zeros reserved after it."""
    data = (d / LOG_NAME).read_bytes()
    return data[: len(data) - rec.scan_log(data, "test").reserved]


def reopen(d) -> Persistent:
    with open_(d) as s:
        return s.persistent()


# ------------------------------------------------------------------------------------------------- layout


def test_record_layout_exact_bytes():
    # uint32 crc32(everything after it), uint32 length (kind + body), uint8 kind, body
    assert zlib.crc32(bytes.fromhex("0000000a 01 0000000100000001 76")) == 0xB7F77C90
    assert rec.encode_txn(0x100000001, b"v") == bytes.fromhex("b7f77c90 0000000a 01 0000000100000001 76")
    assert rec.encode_truncate(0x100000001) == bytes.fromhex("97f05ce8 00000009 02 0000000100000001")
    assert rec.encode_reset() == bytes.fromhex("463097e6 00000001 03")
    assert rec.encode_epoch(rec.Kind.CURRENT_EPOCH, 7) == bytes.fromhex("e0409fce 00000005 05 00000007")
    assert rec.encode_commit(3, 2) == bytes.fromhex("775e45c7 0000000d 06 0000000000000003 00000002")


def test_fresh_directory_is_initialized_with_the_header_only(data_dir):
    storage, report = Storage.open(data_dir)
    with storage:
        assert report.initialized and report.batches == 0 and not report.repaired
        assert storage.persistent() == Persistent() and storage.last_zxid == 0
    assert (data_dir / LOG_NAME).read_bytes() == rec.MAGIC
    assert not Storage.open(data_dir)[1].initialized


def test_one_step_is_one_batch_with_its_commit(data_dir):
    with at_base(data_dir) as s:
        before = (data_dir / LOG_NAME).read_bytes()
        size = len(written(data_dir))
        s.apply((TruncateHistory(make_zxid(1, 1)), SetCurrentEpoch(2)))
        assert (data_dir / LOG_NAME).read_bytes() == before  # buffered until sync
        s.sync()
    tail = written(data_dir)[size:]
    assert tail == (rec.encode_truncate(make_zxid(1, 1)) + rec.encode_epoch(rec.Kind.CURRENT_EPOCH, 2)
                    + rec.encode_commit(4, 2))


# ------------------------------------------------------------------------------------------------- the API


@pytest.mark.parametrize("name", sorted(STEP_GROUPS))
def test_each_step_kind_gives_the_model_state_in_memory_on_disk_and_after_reopen(data_dir, name):
    expected = states(STEP_GROUPS[name])
    with at_base(data_dir) as s:
        for step, want in zip(STEP_GROUPS[name], expected[1:]):
            s.apply(step)
            assert s.persistent() == want
            assert (s.history, s.accepted_epoch, s.current_epoch) == (list(want.history), want.accepted_epoch,
                                                                     want.current_epoch)
        assert s.pending and read_durable(data_dir).persistent() == BASE
        s.sync()
        assert not s.pending and s.durable_zxid == s.last_zxid
        assert read_durable(data_dir).persistent() == expected[-1]
    assert reopen(data_dir) == expected[-1]


def test_the_core_reads_its_state_from_storage(data_dir):
    """What zabref.core.types needs: Persistent.from_storage reads the three properties; persistent() is the same."""
    with at_base(data_dir) as s:
        assert Persistent.from_storage(s) == s.persistent() == BASE


def test_group_commit_is_one_write_and_one_fsync(data_dir):
    disk = RealDisk()
    with at_base(data_dir, disk=disk) as s:
        disk.arm(None)
        for k in range(4, 504):
            s.apply((AppendTxns((txn(1, k),)),))
        s.sync()
        assert (disk.counts.writes, disk.counts.fsyncs) == (1, 1)
        s.sync()  # nothing pending: no I/O
        assert (disk.counts.writes, disk.counts.fsyncs) == (1, 1)
    assert len(reopen(data_dir).history) == 503


def test_a_bad_step_changes_nothing_and_names_the_operation(data_dir):
    with at_base(data_dir) as s:
        good = (AppendTxns((txn(1, 4),)),)
        cases = [
            ((*good, AppendTxns((txn(1, 2),))), ValueError, r"operation 1 \(AppendTxns\): zxid 0x100000002 does not "),
            ((SetAcceptedEpoch(1 << 32),), ValueError, r"operation 0 \(SetAcceptedEpoch\): epoch 4294967296"),
            # the compiled build refuses it at the call, naming the types it takes
            ((*good, "ACK"), TypeError, "operation 1: not a storage operation: 'ACK'" if zabref.build() == "pure"
             else r"AppendTxns, .*SetCurrentEpoch\] object expected; got str"),
            ((TruncateHistory(1 << 63),), ValueError, "outside 0.."),
        ]
        bool_epoch = SetCurrentEpoch(True)
        if type(bool_epoch.epoch) is bool:  # the pure build keeps what it is given; the compiled one stores int 1
            cases.append(((bool_epoch,), ValueError, "epoch True"))
        for ops, error, match in cases:
            with pytest.raises(error, match=match):
                s.apply(ops)
            assert s.persistent() == BASE and not s.pending
        s.max_record = 20
        with pytest.raises(ValueError, match="exceed the record limit"):
            s.apply((AppendTxns((txn(1, 4, b"x" * 12),)),))
        s.apply(())  # an empty step writes nothing
        assert not s.pending


def test_steps_applied_after_the_last_sync_are_dropped_by_close(data_dir):
    with at_base(data_dir) as s:
        s.apply(STEP_GROUPS["proposal"][0])
    assert reopen(data_dir) == BASE


def test_a_closed_storage_refuses(data_dir):
    s = at_base(data_dir)
    s.close()
    s.close()
    with pytest.raises(StorageError, match="closed"):
        s.apply(STEP_GROUPS["proposal"][0])
    with pytest.raises(StorageError, match="closed"):
        s.sync()


class FailingDisk(RealDisk):
    def _fsync(self, f):
        raise OSError(errno.EIO, "Input/output error", f.path)


def test_a_failed_fsync_breaks_the_storage_until_reopened(data_dir):
    at_base(data_dir).close()
    s = open_(data_dir, disk=FailingDisk())
    s.apply(STEP_GROUPS["proposal"][0])
    with pytest.raises(StorageError, match=f"{data_dir / LOG_NAME}: sync failed: Input/output error"):
        s.sync()
    with pytest.raises(StorageError, match="failed earlier"):
        s.apply(STEP_GROUPS["leaderinfo"][0])
    s.close()
    assert reopen(data_dir) in states(STEP_GROUPS["proposal"])  # written, not known durable


# ------------------------------------------------------------------------------------------------- the data dir


def test_missing_data_dir_is_named(tmp_path):
    with pytest.raises(StorageError, match=f"{tmp_path / 'nope'}: data directory does not exist"):
        Storage.open(tmp_path / "nope")


def test_a_file_is_not_a_data_dir(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(StorageError, match="not a directory"):
        Storage.open(tmp_path / "f")


def test_unwritable_data_dir_is_named(data_dir):
    (data_dir / "LOCK").mkdir()  # cannot be opened for writing, whatever our privileges
    with pytest.raises(StorageError, match=str(data_dir / "LOCK")):
        Storage.open(data_dir)


def test_a_data_dir_has_one_owner_at_a_time(data_dir):
    s = open_(data_dir)
    with pytest.raises(StorageError, match="in use"):
        Storage.open(data_dir)
    s.close()
    open_(data_dir).close()


def test_the_old_format_is_refused_not_overwritten(data_dir):
    (data_dir / "log").write_bytes(b"old")
    with pytest.raises(StorageError, match=f"{data_dir}: holds log of the older zabref.disklog format"):
        Storage.open(data_dir)
    assert (data_dir / "log").read_bytes() == b"old" and not (data_dir / LOG_NAME).exists()


def test_a_stale_temp_file_is_removed_and_reported(data_dir):
    at_base(data_dir).close()
    (data_dir / f".{LOG_NAME}.tmp").write_bytes(b"half a compaction")
    storage, report = Storage.open(data_dir)
    storage.close()
    assert report.removed == (str(data_dir / f".{LOG_NAME}.tmp"),)
    assert "removed stale temp files" in str(report)


# ------------------------------------------------------------------------------------------------- recovery


def logged(d) -> tuple[bytes, int, list[int]]:
    """A log at BASE followed by the 'group' steps in one sync: (bytes, size at BASE, end offset of each batch)."""
    with at_base(d) as s:
        base = len(written(d))
        ends = []
        for step in STEP_GROUPS["group"]:
            s.apply(step)
            ends.append(base + len(s._pending))
        s.sync()
    return written(d), base, ends


def test_crash_at_every_byte_offset_of_the_last_write(data_dir):
    data, base, ends = logged(data_dir)
    expected = states(STEP_GROUPS["group"])
    log = data_dir / LOG_NAME
    for cut in range(base, len(data) + 1):
        log.write_bytes(data[:cut])
        whole = sum(1 for e in ends if e <= cut)
        good_end = ends[whole - 1] if whole else base
        assert read_durable(data_dir).persistent() == expected[whole]
        assert log.read_bytes() == data[:cut]  # the reader writes nothing
        storage, report = Storage.open(data_dir)
        with storage:
            assert storage.persistent() == expected[whole], cut
            # a tail of zeros (the first bytes of a CRC may be) is reserved space: kept, written over next
            torn = cut - good_end if data[good_end:cut].count(0) < cut - good_end else 0
            assert report.torn_bytes == torn
            assert (report.torn_reason is None) == (torn == 0)
            assert log.stat().st_size == cut - torn  # the torn tail is cut off
            storage.apply((AppendTxns((txn(4, 1),)),))  # and the log goes on from there
            storage.sync()
        assert reopen(data_dir) == Persistent((*expected[whole].history, txn(4, 1)), expected[whole].accepted_epoch,
                                              expected[whole].current_epoch)


def test_zeros_after_the_last_batch_are_reserved_space_and_kept(data_dir):
    """Whether storage reserved them or the file grew and its blocks were never written, zeros after a whole batch
    hold no record: nothing is torn, nothing is cut, and the next batch is written over them."""
    data, _, _ = logged(data_dir)
    expected = states(STEP_GROUPS["group"])
    log = data_dir / LOG_NAME
    log.write_bytes(data + bytes(300))
    storage, report = Storage.open(data_dir)
    with storage:
        assert report.torn_bytes == 0 and report.torn_reason is None and not report.repaired
        assert storage.persistent() == expected[-1] and log.read_bytes() == data + bytes(300)
        storage.apply((AppendTxns((txn(4, 1),)),))
        storage.sync()
    assert len(log.read_bytes()) == len(data) + 300  # within the reserved space: the file did not grow
    assert reopen(data_dir).history == (*expected[-1].history, txn(4, 1))


@pytest.mark.parametrize("short", [3, rec.COMMIT_RECORD_SIZE], ids=["in its commit", "before its commit"])
def test_a_batch_cut_short_by_zeros_is_torn(data_dir, short):
    """A batch whose write reached the disk only in part, the reserved zeros after it: torn, cut off with them."""
    data, base, ends = logged(data_dir)
    expected = states(STEP_GROUPS["group"])
    log = data_dir / LOG_NAME
    cut = ends[-1] - short  # the last COMMIT lacks its last bytes, or all of them
    log.write_bytes(data[:cut] + bytes(300))
    storage, report = Storage.open(data_dir)
    with storage:
        assert storage.persistent() == expected[-2]
        assert report.torn_bytes == cut - ends[-2] + 300 and report.torn_reason
        assert log.stat().st_size == ends[-2]


def test_a_sync_writes_within_the_reserved_space(data_dir):
    """The log is reserved ahead (the file is longer than what was written, zeros after it) and each sync writes
    into that space; a sync that would pass its end reserves more first."""
    log = data_dir / LOG_NAME
    with open_(data_dir) as s:
        s.apply((AppendTxns((txn(1, 1),)),))
        s.sync()
        reserved = log.stat().st_size
        assert reserved >= len(written(data_dir)) + RESERVE_MIN
        for k in range(2, 50):
            s.apply((AppendTxns((txn(1, k),)),))
            s.sync()
            end = len(written(data_dir))
            assert log.stat().st_size == reserved and log.read_bytes()[end:] == bytes(reserved - end)
        s.apply((AppendTxns((Txn(make_zxid(1, 50), b"v" * (2 * reserved)),)),))
        s.sync()
        assert log.stat().st_size > 3 * reserved
    assert len(reopen(data_dir).history) == 50


def record_spans(data: bytes) -> list[tuple[int, int]]:
    out, off = [], rec.HEADER_SIZE
    while off < len(data):
        (length,) = rec._U32.unpack_from(data, off + 4)
        out.append((off, off + 8 + length))
        off += 8 + length
    return out


def test_every_flipped_byte_in_the_middle_refuses_to_start_and_touches_nothing(data_dir):
    data, base, ends = logged(data_dir)
    log = data_dir / LOG_NAME
    spans = [s for s in record_spans(data) if s[1] <= ends[-2]]  # every record of every batch but the last
    for number, (start, end) in enumerate(spans):
        for p in range(start, end):
            bad = bytearray(data)
            bad[p] ^= 0x40
            log.write_bytes(bad)
            with pytest.raises(LogCorruption) as e:
                Storage.open(data_dir)
            assert (e.value.path, e.value.record, e.value.offset) == (str(log), number, start), p
            assert str(log) in str(e.value) and f"record {number} at byte {start}" in str(e.value)
            assert log.read_bytes() == bad
            with pytest.raises(LogCorruption):
                read_durable(data_dir)


def test_a_flipped_byte_in_the_last_batch(data_dir):
    """Before its COMMIT: the COMMIT proves the batch was written whole, so it is damage (refused); in the last
    COMMIT itself: indistinguishable from a torn write, the batch is dropped and reported (docs/wire-and-disk.md)."""
    data, base, ends = logged(data_dir)
    expected = states(STEP_GROUPS["group"])
    log = data_dir / LOG_NAME
    commit = ends[-1] - rec.COMMIT_RECORD_SIZE
    for p in range(ends[-2], ends[-1]):
        bad = bytearray(data)
        bad[p] ^= 0x01
        log.write_bytes(bad)
        if p < commit:
            with pytest.raises(LogCorruption, match="a valid commit record follows"):
                Storage.open(data_dir)
            assert log.read_bytes() == bad
            continue
        storage, report = Storage.open(data_dir)
        with storage:
            assert storage.persistent() == expected[-2] and report.torn_bytes == ends[-1] - ends[-2], p


def crafted(d, *batches: list[bytes]) -> Path:
    log = d / LOG_NAME
    log.write_bytes(rec.MAGIC + b"".join(b"".join(b) for b in batches))
    return log


@pytest.mark.parametrize(("batches", "record", "match"), [
    ([[rec.encode_txn(5, b"a"), rec.encode_txn(3, b"b"), rec.encode_commit(1, 2)]], 1, "zxid 0x3 does not follow the previous zxid 0x5"),
    ([[rec.encode_txn(5, b"a"), rec.encode_commit(1, 2)]], 1, "counts 2 records, but 1 precede it"),
    ([[rec.encode_commit(1, 0)], [rec.encode_commit(3, 0)]], 1, "batch number 3 does not follow 1"),
    ([[rec._record(9, b"")]], 0, "unknown record kind 9"),
    ([[rec._record(rec.Kind.TRUNCATE, b"\0")]], 0, "TRUNCATE record with a body of 1 bytes"),
    ([[rec._record(rec.Kind.TXN, b"\0" * 7)]], 0, "TXN record with a body of 7 bytes"),
    ([[rec.encode_truncate(-1), rec.encode_commit(1, 1)]], 0, "truncation to a negative zxid"),
])
def test_records_that_check_but_break_a_rule_are_corruption(data_dir, batches, record, match):
    log = crafted(data_dir, *batches)
    before = log.read_bytes()
    with pytest.raises(LogCorruption, match=match) as e:
        Storage.open(data_dir)
    assert e.value.record == record and log.read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"ZABLOG", b"ZABLOG\x00\x02", b"garbage!" * 4])
def test_a_bad_header_is_named(data_dir, content):
    (data_dir / LOG_NAME).write_bytes(content)
    with pytest.raises(LogCorruption, match=f"{data_dir / LOG_NAME}: record 0 at byte 0: file header"):
        Storage.open(data_dir)
    assert (data_dir / LOG_NAME).read_bytes() == content


def test_read_durable_of_a_fresh_or_missing_directory(tmp_path):
    assert read_durable(tmp_path) == read_durable(tmp_path)
    assert not read_durable(tmp_path).exists and read_durable(tmp_path).persistent() == Persistent()
    with pytest.raises(StorageError, match="nope"):
        read_durable(tmp_path / "nope")


# ------------------------------------------------------------------------------------------------- compaction


def test_compaction_rewrites_the_file_as_one_batch(data_dir):
    with at_base(data_dir, compact_min_bytes=0) as s:
        s.apply((TruncateHistory(0),))
        s.apply((AppendTxns((txn(2, 1),)),))
        s.sync()
        assert s.stats.compactions == 1
        want = s.persistent()
        image = rec.encode_image(list(want.history), want.accepted_epoch, want.current_epoch, 5)
        assert (data_dir / LOG_NAME).read_bytes() == image  # nothing reserved after it yet
        s.apply((AppendTxns((txn(2, 2),)),))  # and appends go on in the new file
        s.sync()
    assert reopen(data_dir).history == (txn(2, 1), txn(2, 2))


def test_a_snap_always_compacts(data_dir):
    with at_base(data_dir) as s:
        s.apply(STEP_GROUPS["newleader_snap"][0])
        s.sync()
        assert s.stats.compactions == 1
    assert reopen(data_dir) == states(STEP_GROUPS["newleader_snap"])[-1]


# ------------------------------------------------------------------------------------------------- a model beside


class StorageVsModel(RuleBasedStateMachine):
    """Random steps, syncs and power cuts on a SimDisk; the model is a list of states. Invariants: Storage's memory
    is the last state; read_durable is the state at the last sync; recovery gives one of the states since then."""

    def __init__(self) -> None:
        super().__init__()
        self.disk = SimDisk()
        self.disk.mkdir("/d")
        self.storage = open_("/d", disk=self.disk, compact_min_bytes=200)
        self.durable = Persistent()
        self.since_sync = [Persistent()]

    @property
    def state(self) -> Persistent:
        return self.since_sync[-1]

    def step(self, *ops) -> None:
        self.storage.apply(ops)
        history, acc, cur = list(self.state.history), self.state.accepted_epoch, self.state.current_epoch
        for op in ops:
            match op:
                case AppendTxns(txns):
                    history += txns
                case TruncateHistory(z):
                    history = [t for t in history if t.zxid <= z]
                case ReplaceHistory(h):
                    history = list(h)
                case SetAcceptedEpoch(e):
                    acc = e
                case SetCurrentEpoch(e):
                    cur = e
        self.since_sync.append(Persistent(tuple(history), acc, cur))

    def next_zxid(self) -> int:
        return (self.state.history[-1].zxid if self.state.history else 0) + 1

    @rule(n=st.integers(1, 3), value=st.binary(max_size=20))
    def append(self, n, value):
        z = self.next_zxid()
        self.step(AppendTxns(tuple(Txn(z + k, value) for k in range(n))))

    @rule(k=st.integers(0, 10), epoch=st.integers(0, 5))
    def newleader_trunc(self, k, epoch):
        zxids = [0] + [t.zxid for t in self.state.history]
        self.step(TruncateHistory(zxids[min(k, len(zxids) - 1)]), SetCurrentEpoch(min(epoch, self.state.accepted_epoch)))

    @rule(values=st.lists(st.binary(max_size=8), max_size=4))
    def snap(self, values):
        self.step(ReplaceHistory(tuple(Txn(k + 1, v) for k, v in enumerate(values))))

    @rule(epoch=st.integers(0, 5))
    def leaderinfo(self, epoch):
        self.step(SetAcceptedEpoch(max(epoch, self.state.accepted_epoch)))

    @rule()
    def sync(self):
        self.storage.sync()
        self.durable = self.state
        self.since_sync = [self.state]

    @rule(tear=st.none() | st.integers(0, 400))
    def power_cut(self, tear):
        self.disk.crash(tear)
        self.storage.close()
        self.storage = open_("/d", disk=self.disk, compact_min_bytes=200)
        assert self.storage.persistent() == self.durable  # nothing unsynced was ever written: a tear changes nothing
        self.since_sync = [self.durable]

    @invariant()
    def memory_is_the_last_state(self):
        assert self.storage.persistent() == self.state

    @invariant()
    def disk_is_the_synced_state(self):
        assert read_durable("/d", self.disk).persistent() == self.durable


StorageVsModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
test_storage_against_a_model = StorageVsModel.TestCase


def test_a_logged_epoch_no_zxid_can_carry_is_corruption_naming_the_record():
    """An epoch record holds a uint32, but a zxid -- a non-negative signed long -- carries epochs up to 2^31 - 1
    (MAX_EPOCH): a larger one was never written by zabref."""
    from zabref.core.packets import MAX_EPOCH

    ok = rec.MAGIC + rec.encode_epoch(rec.Kind.ACCEPTED_EPOCH, MAX_EPOCH) + rec.encode_commit(1, 1)
    assert rec.scan_log(ok, "zab.log").accepted_epoch == MAX_EPOCH
    bad = rec.MAGIC + rec.encode_epoch(rec.Kind.ACCEPTED_EPOCH, MAX_EPOCH + 1) + rec.encode_commit(1, 1)
    with pytest.raises(LogCorruption, match=f"record 0 .*epoch {MAX_EPOCH + 1} is above {MAX_EPOCH}"):
        rec.scan_log(bad, "zab.log")
