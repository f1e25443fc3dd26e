"""Deterministic simulation: a whole zabref cluster -- the real servers -- in one process, on virtual time, an
in-memory network and simulated disks, every run a pure function of its seed (docs/simulation.md).

Modules: `loop` (the virtual-time event loop), `net` (the network), `options` (what a run is asked and what it
found), `cluster` (one run: machines, the event log and its digest, liveness and durability checks), `clients` and
`fault_schedule` (its clients and its faults), `invariants` and `fle_invariants` (the spec's invariants after every
step), `validation` (the run's action logs checked by TLC at its end, ``--validate``), `seeds` (seeds run and
checked), `campaign` (seeds on Spark), `command` (``zabref simulate``).
"""

from conformance.sim.cluster import FAULTS, Observer, Options, Result, Simulation, simulate

__all__ = ["FAULTS", "Observer", "Options", "Result", "Simulation", "simulate"]
