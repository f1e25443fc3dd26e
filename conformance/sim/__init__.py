"""Deterministic simulation: a whole zabref cluster -- the real servers -- in one process, on virtual time, an
in-memory network and simulated disks, every run a pure function of its seed (docs/simulation.md).

Modules: `loop` (the virtual-time event loop), `net` (the network), `cluster` (one run: machines, clients, faults,
the event log and its digest, liveness and durability checks).
"""

from conformance.sim.cluster import FAULTS, Observer, Options, Result, Simulation, simulate

__all__ = ["FAULTS", "Observer", "Options", "Result", "Simulation", "simulate"]
