"""zabref: a plain, readable implementation of ZooKeeper's Zab atomic broadcast.

Theory of operation: a deterministic core (the Zab state machine: one event in, packets to send and records to
persist out) wrapped by a runtime with real TCP and an fsync'd append-only log. The package never imports
`conformance`; the conformance tools drive it only through its control and inspection interface.
"""

__version__ = "0.1.0"


def build() -> str:
    """Which build this process runs: ``"compiled"`` when the core is mypyc's extension modules (the folder
    scripts/build_compiled.py makes, first on the import path), else ``"pure"`` (docs/performance.md, "A compiled
    build")."""
    from zabref.core import zab

    return "pure" if zab.__file__ is None or zab.__file__.endswith(".py") else "compiled"
