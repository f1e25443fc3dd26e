"""Real Apache ZooKeeper ensembles, run unmodified and listened to from outside (docs/zookeeper.md).

Theory of operation
-------------------
ZooKeeper runs from its released jars with no code change and no Java agent; only its configuration differs from a
production install (``zoo.cfg``, the heap flags, the logging config file). Everything the servers say to each other
passes through a recording proxy, and is decoded afterwards from the recording:

* `versions`     -- a version string to a classpath: 3.8.0 from Debian's package (apt), 3.8.3..3.8.7 and 3.9.0..3.9.5
  from Maven Central (mvn), cached by version outside the repository.
* `serverconfig` -- the files one server runs from: ``zoo.cfg``, ``myid``, its logging config, its java command line.
* `ensemble`     -- the servers as child processes, each in its own process group: start, kill -9, SIGSTOP/SIGCONT,
  restart, stop with nothing left behind (no process, no zombie), whatever the caller does.
* `recording`    -- the proxy's file format: every byte each way on every connection, timestamped, in order.
* `proxy`        -- the proxy on asyncio in a thread: one listening port per directed server pair and port kind; it
  records, and it is the network's fault layer (cut, heal, isolate).
* `harness`      -- ports, proxy and ensemble together: `ProxiedEnsemble`.
* `wire`         -- the recorded streams decoded: quorum packets (with the snapshot a SNAP sends), election
  handshakes and notifications; `payloads` decodes what packets carry (learner info, transactions, ...), `snapshot`
  the serialized data tree; `disk` reads a server's epochs and transaction logs.
* `command`      -- ``zabref zk``.

Errors are `ZkError`s, split by who must act: `ZkFetchError` (a version cannot be had: unknown, or apt/mvn failed),
`ZkEnsembleError` (a server does not start or serve), `WireError` (bytes that do not decode: names the connection or
file and the byte offset). A stream that stops in the middle of a record (a server killed while writing) is not an
error: the decoders report it as a truncated tail.
"""

from __future__ import annotations

from conformance.errors import ConformanceError

__all__ = ["ZkError", "ZkFetchError", "ZkEnsembleError", "WireError"]


class ZkError(ConformanceError):
    """Root of the ZooKeeper harness's errors."""


class ZkFetchError(ZkError):
    """A ZooKeeper version cannot be had: unknown or unsupported, or apt-get / mvn failed (the message says which and
    how to do it by hand)."""


class ZkEnsembleError(ZkError):
    """An ensemble cannot be run: a server exited or does not serve in time (the message names its log), bad ports."""


class WireError(ZkError):
    """Bytes that do not decode: ``where`` names the connection and direction (or the file), ``offset`` is the byte
    offset in that stream where the bad record starts or the bad field lies."""

    def __init__(self, where: str, offset: int, reason: str) -> None:
        super().__init__(f"{where}: byte {offset}: {reason}")
        self.where = where
        self.offset = offset
        self.reason = reason
