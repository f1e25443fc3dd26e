"""Fault injection for zabref: a fault runner under a write load, and a checker of what clients saw (issue 6).

Modules: `conformance.faults.history` (the checker, pure), `conformance.faults.workload` (writers and the sampler),
`conformance.faults.nemesis` (kill -9 / SIGSTOP / link cuts on a `zabref.runtime.cluster.LocalCluster`),
`conformance.faults.run` (the runner), `conformance.faults.command` (``zabref faults``). The link cuts use the runtime's
fault layer (`zabref.runtime.server.Server.cut_links`, the control ops ``partition`` / ``heal``); docs/faults.md says
why. This package is light to import: the command loads the runner only when it runs.
"""
