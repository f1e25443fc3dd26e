"""Replay: traces driven through real zabref servers (and edges through the core), checked after every step.

Theory of operation: `driver` replays one trace step by step on servers from `harness` (processes forked by
`forkserver`), steering their real election with `steer`; `mapping` reads implementation state as spec variables
and `inverse` goes back; `fle_driver` and `fle_mapping` do the same for spec/FastLeaderElection.tla; `edges` takes
every edge of a graph on the core (``zabref edges``, reported by `edges_report`); `seeded` applies the catalogue of
known-wrong variants in `bugs/`; `minimize` shortens a failing trace; `regress` and `scenarios` keep the committed
regression traces; `conform` is ``zabref conform``.
"""
