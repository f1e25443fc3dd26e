"""Known ZooKeeper bugs, recognised in the servers' own logs.

Theory of operation: some bugs of ZooKeeper leave a mark in the log the server writes itself, which nothing here
adds or changes (the log is configured by `conformance.zk.serverconfig`, the code is the released jar's).
`SIGNATURES` lists the bugs whose mark is certain, each with where the JIRA and the released code say the bug lives
and was fixed: an exception with its top stack frame (`Signature`), or two lines of one synchronization whose zxids
contradict each other (`AheadSignature`: the database a learner reloads after a TRUNC holds more than the TRUNC
kept). `sightings` reads every ``<folder>/<sid>/server.log`` of a run (the layout of `conformance.zk.ensemble`) and
returns each mark with the server, the file, the line and the time ZooKeeper gave it.

A sighting is a name, not a verdict: the fault runner reports them beside its history check
(`conformance.faults.zkrun`), `zabref zk matrix` judges a bug's rows by them when the bug loses no data that the
history check could see, and a validation departure lists them so that the departure can be decided
(docs/zookeeper.md, "Known bugs in ZooKeeper's own logs"). A log that is not UTF-8 is read with replacement
characters; a log cut in the middle of a stack trace (a kill) yields the marks before the cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

__all__ = ["SIGNATURES", "AheadSignature", "Signature", "Sighting", "at_departure", "scan_log", "sightings",
           "summarise"]


@dataclass(frozen=True)
class Signature:
    """A bug's mark: an exception line matching ``exception`` whose first stack frame matches ``frame``."""

    jira: str
    summary: str
    exception: re.Pattern[str]
    frame: re.Pattern[str]
    affects: str  # the versions whose released code has it (read in the source, seen in runs: docs/zookeeper.md)
    fixed: str

    def marks(self, lines: list[str]) -> list[int]:
        """The indexes of the exception lines of this mark."""
        out = []
        for k, line in enumerate(lines):
            if not self.exception.search(line):
                continue
            frame = next((x for x in lines[k + 1:k + 3] if x.lstrip().startswith("at ")), None)
            if frame is not None and self.frame.search(frame):
                out.append(k)
        return out


@dataclass(frozen=True)
class AheadSignature:
    """A bug's mark: a line matching ``first`` that names a zxid (group ``zxid``, hexadecimal), followed before the
    next line matching ``until`` (or the log's end) by a line matching ``then`` that names a greater one: the mark is
    that later line."""

    jira: str
    summary: str
    first: re.Pattern[str]
    then: re.Pattern[str]
    until: re.Pattern[str]
    affects: str
    fixed: str

    def marks(self, lines: list[str]) -> list[int]:
        out, kept = [], None
        for k, line in enumerate(lines):
            if (m := self.first.search(line)) is not None:
                kept = int(m.group("zxid"), 16)
            elif kept is not None and (m := self.then.search(line)) is not None:
                if int(m.group("zxid"), 16) > kept:
                    out.append(k)
                kept = None
            elif kept is not None and self.until.search(line):
                kept = None
        return out


SIGNATURES: tuple[Signature | AheadSignature, ...] = (
    Signature(
        "ZOOKEEPER-4394",
        "Learner.syncWithLeader: a COMMIT read during synchronization when no proposal waits for it "
        "(packetsNotCommitted empty) throws a NullPointerException; the learner drops its leader and goes back to "
        "election with its data tree behind what it has logged and acknowledged",
        re.compile(r"\bjava\.lang\.NullPointerException\b"),
        re.compile(r"^\s+at org\.apache\.zookeeper\.server\.quorum\.Learner\.syncWithLeader\("),
        "3.8.0-3.8.6 (no 3.8 release up to 3.8.6 has the fix; 3.8.7 is not fetchable here), 3.9.0-3.9.2",
        "3.9.3 (PR 2152 / 2188)"),
    AheadSignature(
        "ZOOKEEPER-4837",
        "a learner told to TRUNC to z truncates its log and reloads its database from its newest snapshot, which may "
        "be newer than z (a leader snapshots at the start of its term the transactions it had logged alone, applied "
        "when it stepped down): what the TRUNC removed stays in its data tree, and it diverges",
        re.compile(r"Truncating log to get in sync with the leader 0x(?P<zxid>[0-9a-fA-F]+)"),
        re.compile(r"Snapshot loaded in \d+ ms, highest zxid is 0x(?P<zxid>[0-9a-fA-F]+)"),
        re.compile(r"Learner received NEWLEADER message|DIFF sync got first proposal|Getting a (diff|snapshot) "
                   r"from the leader|Truncating log to get in sync"),
        "every version read here (FileTxnSnapLog.truncateLog keeps newer snapshots, ZKDatabase.loadDataBase takes "
        "the newest; 3.8.0-3.9.5 and the repository's head)",
        "none released (PR 2172, open)"),
)


@dataclass(frozen=True)
class Sighting:
    jira: str
    sid: int
    path: str  # the log, as given
    line: int  # 1-based line of the exception
    when: str  # ZooKeeper's timestamp of the log entry before the exception (its own clock), or ""
    text: str  # the exception line

    def where(self) -> str:
        return f"{self.path}:{self.line}" + (f" ({self.when})" if self.when else "")


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d{3})")


def scan_log(path: str | Path, sid: int,
             signatures: tuple[Signature | AheadSignature, ...] = SIGNATURES) -> list[Sighting]:
    """Every mark of ``signatures`` in one server's log, in the log's order; each with the timestamp of its own
    line, or of the last stamped line before it (an exception's lines carry none)."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    stamps, when = [], ""
    for line in lines:
        if (m := _STAMP.match(line)) is not None:
            when = m.group(1)
        stamps.append(when)
    found = sorted((k, s.jira) for s in signatures for k in s.marks(lines))
    return [Sighting(jira, sid, str(path), k + 1, stamps[k], lines[k].strip()) for k, jira in found]


def sightings(folder: str | Path,
              signatures: tuple[Signature | AheadSignature, ...] = SIGNATURES) -> list[Sighting]:
    """The marks in every ``<folder>/<sid>/server.log`` of a run, by server then line."""
    out: list[Sighting] = []
    for log in sorted(Path(folder).glob("*/server.log"), key=lambda p: (len(p.parent.name), p.parent.name)):
        if log.parent.name.isdigit():
            out += scan_log(log, int(log.parent.name), signatures)
    return out


def summarise(found: list[Sighting]) -> list[str]:
    """One line a bug: its JIRA, how often and at which servers, the first mark, what the bug is."""
    by: dict[str, list[Sighting]] = {}
    for s in found:
        by.setdefault(s.jira, []).append(s)
    known = {s.jira: s for s in SIGNATURES}
    lines = []
    for jira, marks in by.items():
        servers = sorted({m.sid for m in marks})
        what = known[jira].summary if jira in known else ""
        lines.append(f"{jira}: {len(marks)} time{'s' if len(marks) != 1 else ''} at server"
                     f"{'s' if len(servers) != 1 else ''} {', '.join(map(str, servers))}; first at "
                     f"{marks[0].where()}: {what}")
    return lines


#: How long before a departing observation a mark at its sender is taken to explain it (the bug's exception is
#: logged as the server drops its leader, and what it sends next is the departure).
BEFORE_SECONDS = 1.0


def at_departure(found: list[Sighting], sender: int, wall: float) -> list[str]:
    """The marks at server ``sender`` logged at most `BEFORE_SECONDS` before the wall-clock time ``wall`` (seconds
    since the epoch, the machine's clock, which ZooKeeper's log stamps in local time), or up to 50 ms after it (the
    log is written after the bytes): one line each, saying how long before the departing observation it was."""
    lines = []
    for m in found:
        if m.sid != sender or not m.when:
            continue
        stamp = datetime.strptime(m.when.replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        if -0.05 <= wall - stamp <= BEFORE_SECONDS:
            lines.append(f"{m.jira} at server {sender}, the departing observation's sender, "
                         f"{(wall - stamp) * 1000:.0f} ms before it: {m.where()}")
    return lines
