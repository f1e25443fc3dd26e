"""zabref: a plain, readable implementation of ZooKeeper's Zab atomic broadcast.

Theory of operation: a deterministic core (the Zab state machine: one event in, packets to send and records to
persist out) wrapped by a runtime with real TCP and an fsync'd append-only log. The package never imports
`conformance`; the conformance tools drive it only through its control and inspection interface.
"""

__version__ = "0.1.0"
