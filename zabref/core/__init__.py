"""zabref's sans-IO core: every protocol decision of one server, with no sockets, files, clock or event loop.

Theory of operation: `zab.ZabCore` is spec/Zab.tla's actions for one server, one method each (`leader`, `follower`
hold the two roles' halves, `state` the spec's per-server variables, `types` the values it takes and returns,
`packets` seed 000's packet names and numbers); `election` is spec/FastLeaderElection.tla for one server; `node`
wraps both with timers, keepalives and clients and is the one step path every driver runs (`zabref.runtime` for
real servers, the simulator in conformance). Nothing here imports asyncio, socket or file I/O (an import-linter
contract in pyproject.toml, checked by the test command).
"""
