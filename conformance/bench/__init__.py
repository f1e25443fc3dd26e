"""``zabref bench cluster``: zabref's 3-server cluster beside a 3-server Apache ZooKeeper 3.8 ensemble.

Theory of operation
-------------------
One run starts each system on loopback (fsync on, ports below 32768, leased with
`zabref.runtime.cluster.find_free_base_port`), runs the same workload against each -- zabref with its Python client
(and, with ``--zabref-clients zabclient,java``, once more with ZooKeeper's Java client on its ``zk_client_port``:
system ``zabref-java``), ZooKeeper once with kazoo and once with its own Java client (``--zk-clients``) -- stops it,
and compares:

* `stats`     -- percentiles (nearest rank), one `Row` per (system, op, target, in flight), the zabref/ZooKeeper
  ratios; pure functions, tested without any process.
* the ZooKeeper ensemble itself is `conformance.zk.ensemble.ZkEnsemble` (Debian's ``zookeeper`` package, installed
  with apt when missing: `conformance.zk.versions`): ``zoo.cfg``, ``QuorumPeerMain`` child processes, the leader
  found with the ``srvr`` four-letter word.
* `zabclient` -- an asyncio client of zabref's client port (`zabref.net.clientport` wire format), one connection per
  request in flight, so N connections give N requests in flight.
* `workload`  -- the two Python adapters (zabref: `zabclient`; ZooKeeper: kazoo's ``*_async`` calls) behind one
  interface, and the loop that keeps exactly N requests in flight and records each one's latency.
* `javaclient` -- the third adapter: ``ZkLoad.java`` (ZooKeeper's asynchronous Java API, N in flight), compiled at
  bench time against the Debian jars and cached outside the repository; its output parsed into the same rows. It
  drives ZooKeeper (``zookeeper-java``) and zabref's ZooKeeper client port (``zabref-java``) alike.
* `usage`     -- the servers' CPU time and resident memory, read from ``/proc`` around each row.
* `systems`   -- one `Harness` per system: start the 3-server cluster, find the leader, kill and restart a server.
* `failover`  -- kill -9 the leader under load; time until a surviving server leads and until the first write issued
  after the kill commits.
* `report`    -- the table printed at the end (with each client's CPU share: is the client the bottleneck?), the
  JSON file (checked against its documented shape) and the PNG.
* `runner`    -- the order of it all (what ``zabref bench cluster`` calls).

The workload: W writes of 100 bytes with 1, 16 and 128 in flight, against a follower and against the leader, then
W reads of those values. A zabref write is a ``submit`` (answered once committed and delivered at the server asked);
a ZooKeeper write is a ``create`` of a new znode (answered once committed at the server asked). A read is zabref's
``read`` of one transaction / ZooKeeper's ``get`` of one znode, both served by the server asked from its memory.
docs/performance.md ("zabref beside ZooKeeper 3.8") has the figures.
"""

from __future__ import annotations

from zabref.errors import ZabError

__all__ = ["BenchError"]


class BenchError(ZabError):
    """The benchmark cannot run (ZooKeeper, javac or the jars missing and not installable, a server not ready, the
    Java client failing or answering nonsense, bad options)."""
