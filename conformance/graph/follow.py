"""Reading TLC's DOT dump while TLC writes it: the parse stage streamed (`zabref traces --stream`).

Theory of operation: `zabref check --dump-dot G` runs as a child process; TLC writes the dump to a partial file beside
G (`conformance.tla.tools.partial_dump`) and `run_tlc` renames it to G when TLC finds no violation, or deletes it.
As soon as the partial file appears, `DumpFollower` makes a hard link to it (the same inode under a name of its own),
so that the bytes stay readable through the rename, and through the deletion of a failed run, until the follower is
closed.

TLC only appends, so every byte before the last newline on disk is final. `batches` yields byte ranges
[start, end) of whole lines, in file order, from `chunk` to `2 * chunk` bytes (the last may be shorter; a single
line longer than that is one range); the parse stage reads each range as Spark partitions (`split_range`, `read_lines`)
while TLC goes on writing, so the dump is never read twice and never held whole in memory. A range's partitions are
numbered after the previous range's, so partition order is file order and `rows.line_offsets` turns (partition,
line) into file lines as for a whole file. TLC's own verdict decides: a child that exits non-zero (a violation, an
error) ends the stream with a PipelineError, and an error in the parse kills the child (its process group) before
it is raised.

Partitions read the link by path: executors need the same file system as the driver (any local master; a cluster
with a shared disk).

With ``discard`` (`zabref traces --stream --discard-dump`), `parsed` gives the disk blocks of every range parsed back
to the file system as it goes (`release`: the file keeps its size, the bytes read as zeros; the byte before the next
range, which its reader reads, stays), and `run` deletes the dump at the end: the disk holds about one batch of the
dump, not all of it, so a dump larger than the free disk can be parsed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

from conformance.errors import PipelineError
from conformance.tla.tools import partial_dump

__all__ = ["DumpFollower", "split_range", "read_lines", "release"]

MIN_PART = 4 << 20  # a partition of a range reads at least this many bytes (fewer only for a range this small)


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most `parts` consecutive ranges of about equal size, none under MIN_PART bytes."""
    parts = max(1, min(parts, (end - start) // MIN_PART))
    step = (end - start) // parts
    cuts = [start + k * step for k in range(parts)] + [end]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 1, 2  # linux/falloc.h


def release(path: str | os.PathLike[str], start: int, end: int) -> int:
    """Give back to the file system the disk blocks of ``path`` that lie wholly in [start, end): the file keeps its
    size and those bytes read as zeros from then on (fallocate's hole punching); the others are untouched. Returns
    the offset up to which blocks were freed (``start`` when none was); OSError when the file system cannot punch
    holes."""
    fd = os.open(path, os.O_WRONLY)
    try:
        block = os.fstat(fd).st_blksize or 4096
        lo, hi = -(-start // block) * block, end // block * block
        if hi <= lo:
            return start
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        if libc.fallocate(fd, _FALLOC_FL_KEEP_SIZE | _FALLOC_FL_PUNCH_HOLE, lo, hi - lo) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot free bytes {lo}-{hi} of {path}: {os.strerror(code)}")
        return hi
    finally:
        os.close(fd)


def read_lines(path: str, start: int, end: int) -> Iterator[str]:
    """The lines of `path` that start at a byte in [start, end) (a line that starts before `start` belongs to the
    range before), as text; consecutive ranges read every line once."""
    with open(path, "rb") as f:
        if start > 0:
            f.seek(start - 1)
            f.readline()  # the rest of the line holding byte start - 1: the next line starts at or after start
        pos = f.tell()
        while pos < end:
            raw = f.readline()
            if not raw:
                return
            pos += len(raw)
            yield raw.decode("utf-8", "replace")


class DumpFollower:
    """`zabref check --dump-dot dot ...` as a child, and the ranges of its dump as TLC writes them."""

    def __init__(self, command: list[str], dot: Path, chunk: int, poll: float = 0.2, discard: bool = False) -> None:
        self.dot = Path(dot).resolve()
        self.chunk, self.poll, self.discard = chunk, poll, discard
        self.freed = 0  # with discard: the dump's blocks before this offset are given back (`parsed`)
        self.warning: str | None = None  # with discard: why blocks could not be given back, once
        self.link = self.dot.with_name(f".{self.dot.name}.{os.getpid()}.follow")
        self.link.unlink(missing_ok=True)
        self.dot.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(command, start_new_session=True)
        self.partial = partial_dump(self.dot, self.proc.pid)
        self.exited: float | None = None  # seconds from the start to when the follower saw the child exit

    def _linked(self, code: int | None) -> bool:
        if self.link.exists():
            return True
        # A run quicker than one poll may have renamed its dump already: then the dump is at `dot`, just written.
        for source in (self.partial, self.dot) if code == 0 else (self.partial,):
            try:
                os.link(source, self.link)
                return True
            except FileNotFoundError:
                pass
        return False

    def _last_newline(self, cut: int, size: int) -> int:
        """The offset just after the last newline in [cut, size), or cut if there is none."""
        window = 1 << 16
        with open(self.link, "rb") as f:
            while True:
                lo = max(cut, size - window)
                f.seek(lo)
                at = f.read(size - lo).rfind(b"\n")
                if at >= 0:
                    return lo + at + 1
                if lo == cut:
                    return cut
                window *= 4

    def batches(self) -> Iterator[tuple[int, int]]:
        """Ranges of whole lines in file order until TLC exits; raises PipelineError if `zabref check` fails."""
        cut = 0
        while True:
            code = self.proc.poll()
            if code is not None and self.exited is None:
                self.exited = time.monotonic() - self.started
            if not self._linked(code):
                if code is not None:
                    raise PipelineError(f"zabref check exited with code {code} before TLC wrote any of {self.dot}")
                time.sleep(self.poll)
                continue
            size = self.link.stat().st_size
            if code is not None and code != 0:
                raise PipelineError(f"zabref check exited with code {code}: no state graph at {self.dot} "
                                    "(its output above says why)")
            done = code is not None
            if not done and size - cut < self.chunk:
                time.sleep(self.poll)
                continue
            if done and size - cut <= 2 * self.chunk:  # the dump is complete: its last range
                if size > cut:
                    yield cut, size
                return
            end = self._last_newline(cut, min(size, cut + 2 * self.chunk))
            if end == cut:  # no newline in the window: one line longer than it, a range of its own once on disk
                end = self._first_newline(cut, size) or (size if done else cut)
            if end == cut:
                time.sleep(self.poll)
                continue
            yield cut, end
            cut = end

    def _first_newline(self, cut: int, size: int) -> int:
        """The offset just after the first newline in [cut, size), or 0 if there is none."""
        with open(self.link, "rb") as f:
            f.seek(cut)
            at = cut
            while at < size:
                block = f.read(min(1 << 20, size - at))
                if not block:
                    return 0
                found = block.find(b"\n")
                if found >= 0:
                    return at + found + 1
                at += len(block)
        return 0

    def parsed(self, end: int) -> None:
        """The dump's lines before ``end`` are parsed and written: with ``discard``, free their blocks but the one
        holding byte ``end - 1`` (the next range's reader reads that byte, `read_lines`). A file system that cannot
        punch holes leaves them (`warning` says why; the dump is still deleted at the end)."""
        if not self.discard or self.warning is not None or end - 1 <= self.freed:
            return
        try:
            self.freed = release(self.link, self.freed, end - 1)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise PipelineError(f"{self.dot}: {e.strerror or e}") from None
            self.warning = f"the file system cannot free the parsed part of the dump ({e.strerror or e})"

    def close(self) -> None:
        """Stop the child if it still runs (its whole process group: TLC's JVM too; a child stopped so leaves its
        partial dump behind, which goes too) and drop the link."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.partial.unlink(missing_ok=True)
        self.link.unlink(missing_ok=True)

    def __enter__(self) -> "DumpFollower":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
