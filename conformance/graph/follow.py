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
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

from conformance.errors import PipelineError
from conformance.tla.tools import partial_dump

__all__ = ["DumpFollower", "split_range", "read_lines"]

MIN_PART = 4 << 20  # a partition of a range reads at least this many bytes (fewer only for a range this small)


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most `parts` consecutive ranges of about equal size, none under MIN_PART bytes."""
    parts = max(1, min(parts, (end - start) // MIN_PART))
    step = (end - start) // parts
    cuts = [start + k * step for k in range(parts)] + [end]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


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

    def __init__(self, command: list[str], dot: Path, chunk: int, poll: float = 0.2) -> None:
        self.dot = Path(dot).resolve()
        self.chunk, self.poll = chunk, poll
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
