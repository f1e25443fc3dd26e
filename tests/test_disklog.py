"""The persistent state of a Zab server (seed 000: history, acceptedEpoch, currentEpoch): layout, recovery, fsyncs.

Recovery rules under test (docs/wire-and-disk.md): a damaged record with no valid record after it is a torn tail and
is truncated; a damaged record with a valid record after it is corruption in the middle and the file is not touched.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from zabref.disklog import LOG_NAME, Storage, encode_record
from zabref.epochs import ACCEPTED_EPOCH, CURRENT_EPOCH, CorruptEpochFile, encode_epoch, temp_path
from zabref.errors import LogCorruption, StorageError

SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


def open_(d: Path) -> Storage:
    storage, _ = Storage.open(d)
    return storage


def reopen(d: Path) -> tuple[list, int, int]:
    with open_(d) as s:
        return s.history, s.accepted_epoch, s.current_epoch


# ------------------------------------------------------------------------------------------------- layout


def test_record_layout_exact_bytes():
    # uint32 length (8 + len(value)), uint32 crc32(zxid + value), int64 zxid, value
    assert encode_record(0x100000001, b"v") == bytes.fromhex("00000009 8d282243 0000000100000001 76")


def test_epoch_file_exact_bytes():
    assert encode_epoch(CURRENT_EPOCH, 7) == b"currentEpoch 7 278b16c8\n"


def test_fresh_directory_is_initialized(data_dir):
    storage, report = Storage.open(data_dir)
    with storage:
        assert report.initialized and report.records_kept == 0 and not report.repaired
        assert (storage.history, storage.accepted_epoch, storage.current_epoch, storage.last_zxid) == ([], 0, 0, 0)
    assert (data_dir / LOG_NAME).read_bytes() == b""
    assert (data_dir / ACCEPTED_EPOCH).read_bytes() == encode_epoch(ACCEPTED_EPOCH, 0)
    _, report = Storage.open(data_dir)
    assert not report.initialized


def test_append_writes_exactly_the_records(data_dir):
    txns = [(0x100000001, b"a"), (0x100000002, b""), (0x200000001, b"xyz")]
    with open_(data_dir) as s:
        s.append(txns[:2])
        s.append(txns[2:])
        s.sync()
    assert (data_dir / LOG_NAME).read_bytes() == b"".join(encode_record(z, v) for z, v in txns)


# ------------------------------------------------------------------------------------------------- the data dir


def test_missing_data_dir_is_named(tmp_path):
    with pytest.raises(StorageError, match=str(tmp_path / "nope")):
        Storage.open(tmp_path / "nope")


def test_a_file_is_not_a_data_dir(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(StorageError, match="not a directory"):
        Storage.open(tmp_path / "f")


def test_unwritable_data_dir_is_named(data_dir):
    (data_dir / "LOCK").mkdir()  # cannot be opened for writing, whatever our privileges
    with pytest.raises(StorageError, match=str(data_dir / "LOCK")):
        Storage.open(data_dir)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_data_dir_is_named(data_dir):
    data_dir.chmod(0o500)
    try:
        with pytest.raises(StorageError, match=str(data_dir)):
            Storage.open(data_dir)
    finally:
        data_dir.chmod(0o700)


def test_a_data_dir_has_one_owner_at_a_time(data_dir):
    s = open_(data_dir)
    with pytest.raises(StorageError, match="in use"):
        Storage.open(data_dir)
    s.close()
    open_(data_dir).close()


def test_log_missing_while_epochs_are_set(data_dir):
    with open_(data_dir) as s:
        s.set_current_epoch(2)
    (data_dir / LOG_NAME).unlink()
    with pytest.raises(StorageError, match=f"{data_dir / LOG_NAME}: missing"):
        Storage.open(data_dir)


@pytest.mark.parametrize("name", [ACCEPTED_EPOCH, CURRENT_EPOCH])
def test_epoch_file_missing_while_log_exists(data_dir, name):
    open_(data_dir).close()
    (data_dir / name).unlink()
    with pytest.raises(StorageError, match=f"{data_dir / name}: missing"):
        Storage.open(data_dir)


# ------------------------------------------------------------------------------------------------- round trips


txn_batches = st.lists(st.lists(st.tuples(st.integers(1, 1 << 33), st.binary(max_size=40)), max_size=5), max_size=5)
epochs = st.integers(0, (1 << 32) - 1)


def with_increasing_zxids(batches):
    zxid, out = 0, []
    for batch in batches:
        out.append([])
        for gap, value in batch:
            zxid += gap
            out[-1].append((zxid, value))
    return out


@SLOW
@given(txn_batches, epochs, epochs)
def test_state_survives_close_and_reopen(batches, accepted, current):
    batches = with_increasing_zxids(batches)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        with open_(d) as s:
            for batch in batches:
                s.append(batch)
                s.sync()
            s.set_accepted_epoch(accepted)
            s.set_current_epoch(current)
        assert reopen(d) == ([t for b in batches for t in b], accepted, current)


class StorageModel(RuleBasedStateMachine):
    """A plain list and two ints beside the real Storage; every rule updates both, every step compares them."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.storage = open_(Path(self.dir))
        self.history: list[tuple[int, bytes]] = []
        self.epochs = [0, 0]

    def next_zxid(self, gap: int) -> int:
        return (self.history[-1][0] if self.history else 0) + gap

    @rule(gaps=st.lists(st.integers(1, 3), min_size=1, max_size=3), value=st.binary(max_size=8))
    def append(self, gaps, value):
        batch = []
        for g in gaps:
            batch.append((self.next_zxid(g) if not batch else batch[-1][0] + g, value))
        self.storage.append(batch)
        self.history += batch

    @rule()
    def sync(self):
        assert self.storage.sync() == self.storage.last_zxid

    @precondition(lambda self: self.history)
    @rule(data=st.data())
    def truncate(self, data):
        zxid = data.draw(st.integers(0, self.history[-1][0]))
        self.storage.truncate(zxid)
        self.history = [t for t in self.history if t[0] <= zxid]

    @rule(n=st.integers(0, 4))
    def replace(self, n):
        new = [(i + 1, b"snap%d" % i) for i in range(n)]
        self.storage.replace(new)
        self.history = new

    @rule(which=st.sampled_from([0, 1]), epoch=st.integers(0, 9))
    def set_epoch(self, which, epoch):
        (self.storage.set_accepted_epoch, self.storage.set_current_epoch)[which](epoch)
        self.epochs[which] = epoch

    @rule()
    def reopen(self):
        self.storage.close()
        self.storage, report = Storage.open(self.dir)
        assert not report.repaired

    @invariant()
    def agrees_with_model(self):
        s = self.storage
        assert s.history == self.history
        assert [s.accepted_epoch, s.current_epoch] == self.epochs

    def teardown(self):
        self.storage.close()
        shutil.rmtree(self.dir)


TestStorageModel = StorageModel.TestCase
TestStorageModel.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)


# ------------------------------------------------------------------------------------------------- crashes


RECORDS = [(0x100000001, b""), (0x100000002, b"x"), (0x100000003, b"seven b"), (0x200000001, bytes(range(30)))]
IMAGES = [encode_record(z, v) for z, v in RECORDS]
LOG = b"".join(IMAGES)
ENDS = [sum(len(i) for i in IMAGES[: k + 1]) for k in range(len(IMAGES))]
STARTS = [0, *ENDS[:-1]]


def make_dir(root: Path, log: bytes) -> Path:
    d = root / "crashed"
    d.mkdir()
    (d / LOG_NAME).write_bytes(log)
    (d / ACCEPTED_EPOCH).write_bytes(encode_epoch(ACCEPTED_EPOCH, 2))
    (d / CURRENT_EPOCH).write_bytes(encode_epoch(CURRENT_EPOCH, 1))
    return d


@pytest.mark.parametrize("k", range(len(LOG) + 1))
def test_crash_at_every_byte_offset(tmp_path, k):
    d = make_dir(tmp_path, LOG[:k])
    kept = [r for r, end in zip(RECORDS, ENDS) if end <= k]
    kept_end = max([e for e in ENDS if e <= k], default=0)
    storage, report = Storage.open(d)
    with storage:
        assert storage.history == kept
        assert (report.records_kept, report.bytes_dropped) == (len(kept), k - kept_end)
        assert (d / LOG_NAME).stat().st_size == kept_end  # repaired on disk, not only in memory
        assert (storage.accepted_epoch, storage.current_epoch) == (2, 1)
        storage.append([(0x300000001, b"after")])
        storage.sync()
    assert reopen(d)[0] == [*kept, (0x300000001, b"after")]


@pytest.mark.parametrize("byte", range(STARTS[2], ENDS[2]))
def test_flipped_bit_in_a_middle_record_is_corruption(tmp_path, byte):
    for bit in range(8):
        damaged = bytearray(LOG)
        damaged[byte] ^= 1 << bit
        (tmp_path / f"b{bit}").mkdir()
        d = make_dir(tmp_path / f"b{bit}", bytes(damaged))
        with pytest.raises(LogCorruption) as e:
            Storage.open(d)
        assert (e.value.record, e.value.offset, e.value.path) == (2, STARTS[2], str(d / LOG_NAME)), str(e.value)
        assert (d / LOG_NAME).read_bytes() == damaged  # untouched


@pytest.mark.parametrize("byte", range(STARTS[-1], ENDS[-1]))
def test_flipped_bit_in_the_last_record_is_a_torn_tail(tmp_path, byte):
    for bit in range(8):
        damaged = bytearray(LOG)
        damaged[byte] ^= 1 << bit
        (tmp_path / f"b{bit}").mkdir()
        d = make_dir(tmp_path / f"b{bit}", bytes(damaged))
        storage, report = Storage.open(d)
        storage.close()
        assert storage.history == RECORDS[:-1]
        assert report.bytes_dropped == len(IMAGES[-1]) and f"record 3 at byte {STARTS[-1]}" in str(report)
        assert (d / LOG_NAME).read_bytes() == LOG[: STARTS[-1]]


def test_zero_filled_tail_is_torn(tmp_path):
    d = make_dir(tmp_path, LOG + bytes(4096))
    storage, report = Storage.open(d)
    storage.close()
    assert storage.history == RECORDS and report.bytes_dropped == 4096


@pytest.mark.parametrize("position", ["middle", "end"])
def test_zxids_that_do_not_increase_are_corruption(tmp_path, position):
    images = IMAGES[:2] + [encode_record(RECORDS[1][0], b"again")] + (IMAGES[2:] if position == "middle" else [])
    d = make_dir(tmp_path, b"".join(images))
    with pytest.raises(LogCorruption, match="does not follow") as e:
        Storage.open(d)
    assert (e.value.record, e.value.offset) == (2, ENDS[1])


def test_garbage_between_valid_records_is_corruption(tmp_path):
    d = make_dir(tmp_path, LOG[: ENDS[1]] + b"\x00\x00\x00\x01junk" + LOG[ENDS[1] :])
    with pytest.raises(LogCorruption) as e:
        Storage.open(d)
    assert (e.value.record, e.value.offset) == (2, ENDS[1]) and f"valid record follows at byte {ENDS[1] + 8}" in str(
        e.value
    )


# ------------------------------------------------------------------------------------------------- epoch files


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"acceptedEpoch 7 00000000\n", "checksum"),
        (encode_epoch(ACCEPTED_EPOCH, 7).replace(b"7", b"8", 1), "checksum"),
        (encode_epoch(ACCEPTED_EPOCH, 7)[:-3], "not one line"),
        (b"", "not one line"),
        (encode_epoch(ACCEPTED_EPOCH, 7) + b"\n", "not one line"),
        (b"acceptedEpoch 07 " + b"%08x\n" % 0, "not one line"),
        (encode_epoch(CURRENT_EPOCH, 7), "holds currentEpoch, expected acceptedEpoch"),
        (b"acceptedEpoch 9999999999 19a72419\n", "above"),
    ],
)
def test_garbled_epoch_file_is_named(data_dir, content, fragment):
    open_(data_dir).close()
    (data_dir / ACCEPTED_EPOCH).write_bytes(content)
    with pytest.raises(CorruptEpochFile, match=fragment) as e:
        Storage.open(data_dir)
    assert e.value.path == str(data_dir / ACCEPTED_EPOCH)


@pytest.mark.parametrize("name", [LOG_NAME, ACCEPTED_EPOCH, CURRENT_EPOCH])
def test_leftover_temp_file_is_removed_and_ignored(data_dir, name):
    with open_(data_dir) as s:
        s.append([(1, b"a")])
        s.sync()
        s.set_accepted_epoch(4)
    temp_path(data_dir / name).write_bytes(b"half-written garbage")
    storage, report = Storage.open(data_dir)
    storage.close()
    assert (storage.history, storage.accepted_epoch) == ([(1, b"a")], 4)
    assert report.temp_files_removed == (str(temp_path(data_dir / name)),)
    assert not temp_path(data_dir / name).exists()


def test_crash_before_rename_keeps_the_old_epoch(data_dir, monkeypatch):
    s = open_(data_dir)
    s.set_current_epoch(3)

    def no_rename(src, dst):
        raise OSError(errno.EIO, "simulated crash before rename")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(StorageError, match=str(data_dir / CURRENT_EPOCH)):
        s.set_current_epoch(4)
    monkeypatch.undo()
    assert s.current_epoch == 3
    s.close()
    assert reopen(data_dir)[2] == 3


# ------------------------------------------------------------------------------------------------- fsync discipline


@pytest.fixture
def fsyncs(monkeypatch):
    calls: list[int] = []
    real = os.fsync

    def counting(fd):
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


@pytest.mark.parametrize("n", [1, 2, 50])
def test_group_commit_one_fsync_for_many_appends(data_dir, fsyncs, n):
    with open_(data_dir) as s:
        fsyncs.clear()
        for i in range(1, n + 1):
            s.append([(i, b"v%d" % i)])
        assert fsyncs == [] and s.durable_zxid == 0  # appended, not yet durable: no ACK may be sent
        assert s.sync() == n == s.durable_zxid
        assert len(fsyncs) == 1
        s.sync()  # nothing pending
        assert len(fsyncs) == 1


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        (lambda s: s.truncate(1), 1),  # ftruncate + fsync of the log
        (lambda s: s.replace([(5, b"s")]), 2),  # the new file, then the directory
        (lambda s: s.set_accepted_epoch(1), 2),  # the temp file, then the directory
        (lambda s: s.set_current_epoch(1), 2),
    ],
)
def test_durable_operations_fsync(data_dir, fsyncs, operation, expected):
    with open_(data_dir) as s:
        s.append([(1, b"a"), (2, b"b")])
        s.sync()
        fsyncs.clear()
        operation(s)
        assert len(fsyncs) == expected
        assert s.durable_zxid == s.last_zxid


# ------------------------------------------------------------------------------------------------- TRUNC, SNAP, errors


@pytest.mark.parametrize(("zxid", "kept"), [(0, 0), (1, 1), (2, 2), (3, 2), (6, 3), (99, 4)])
def test_truncate_drops_every_record_after_zxid(data_dir, zxid, kept):
    txns = [(1, b"a"), (2, b"bb"), (6, b""), (9, b"dddd")]
    with open_(data_dir) as s:
        s.append(txns)
        s.sync()
        s.truncate(zxid)
        assert s.history == txns[:kept]
        s.append([(100, b"new")])
        s.sync()
    assert reopen(data_dir)[0] == [*txns[:kept], (100, b"new")]


def test_replace_installs_a_whole_history(data_dir):
    with open_(data_dir) as s:
        s.append([(1, b"a"), (2, b"b")])
        s.replace([(0x100000001, b"x"), (0x100000005, b"y")])
        s.append([(0x100000006, b"z")])
        s.sync()
    assert reopen(data_dir)[0] == [(0x100000001, b"x"), (0x100000005, b"y"), (0x100000006, b"z")]
    assert not temp_path(data_dir / LOG_NAME).exists()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.append([(3, b"ok"), (3, b"dup")]),
        lambda s: s.append([(2, b"old")]),
        lambda s: s.append([(0, b"zero")]),
        lambda s: s.replace([(5, b"a"), (4, b"b")]),
        lambda s: s.set_accepted_epoch(-1),
        lambda s: s.set_current_epoch(1 << 32),
        lambda s: s.truncate(-1),
    ],
)
def test_bad_calls_change_nothing(data_dir, call):
    with open_(data_dir) as s:
        s.append([(1, b"a"), (2, b"b")])
        s.sync()
        before = (data_dir / LOG_NAME).read_bytes()
        with pytest.raises(ValueError):
            call(s)
        assert s.history == [(1, b"a"), (2, b"b")]
    assert (data_dir / LOG_NAME).read_bytes() == before
    assert reopen(data_dir) == ([(1, b"a"), (2, b"b")], 0, 0)


def test_failed_write_breaks_the_storage_until_reopened(data_dir, monkeypatch):
    s = open_(data_dir)
    s.append([(1, b"a")])

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(StorageError, match="append failed: No space left"):
        s.append([(2, b"b")])
    monkeypatch.undo()
    with pytest.raises(StorageError, match="failed earlier"):
        s.sync()
    s.close()
    assert reopen(data_dir)[0] == [(1, b"a")]


def test_closed_storage_refuses_calls(data_dir):
    s = open_(data_dir)
    s.close()
    s.close()  # idempotent
    with pytest.raises(StorageError, match="closed"):
        s.append([(1, b"a")])
