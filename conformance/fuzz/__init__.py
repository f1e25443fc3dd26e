"""Live fuzzing: bad input on every port of a running cluster while a client keeps writing (``zabref fuzz``).

Theory of operation
-------------------
A run starts servers 1-3 of a config that also declares a fourth server that never runs: the *ghost*
(`GHOST`), whose sid lets an input pass the handshake without replacing any real connection. (With four servers
configured a quorum is three: every running server takes part in every quorum.) Worker tasks then
throw inputs -- each built from ``random.Random(f"{seed}:{i}")``, so a failing one can be rebuilt -- at the four
ports of every server, while a client thread keeps committing, and each input's outcome is checked against what
its kind demands (close, close after silence, answer, or just survive). After the run every server must be alive,
commit one more write, have written no traceback, and have logged a reason for every fuzz connection it closed.

Modules: `conformance.fuzz.frames` (what an input is, and the bytes inputs are built from), `conformance.fuzz.inputs`
(the kinds of input), `conformance.fuzz.harness` (the cluster, the workers, the checks), `conformance.fuzz.report` (the
counts and the summary tables), `conformance.fuzz.adversary` (a stranger's attempts to get past TLS, quorum
authentication and the control token, with the threat model as data; tests/test_adversary.py),
`conformance.fuzz.command` (the ``zabref fuzz`` command; ``python -m conformance.fuzz`` runs it too). docs/fuzzing.md
records the runs and the issues they found.
"""

from conformance.fuzz.command import DEFAULT_INPUTS, fuzz_command
from conformance.fuzz.frames import Input, Kind, Target
from conformance.fuzz.harness import GHOST, RUNNING, Fuzzer, fuzz_cluster, rss_kib
from conformance.fuzz.inputs import KINDS, kind_table
from conformance.fuzz.report import Report

__all__ = ["GHOST", "RUNNING", "KINDS", "Kind", "Input", "Target", "kind_table", "Fuzzer", "Report", "fuzz_cluster",
           "rss_kib", "fuzz_command", "DEFAULT_INPUTS"]
