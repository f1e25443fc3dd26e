"""Fault injection for zabref: a fault runner under a write load, and a checker of what clients saw (issue 6).

Modules: `zabref.faults.check` (the checker, pure), `zabref.faults.workload` (writers and the sampler),
`zabref.faults.nemesis` (kill -9 / SIGSTOP / link cuts on a `zabref.cluster.LocalCluster`), `zabref.faults.run`
(the runner), `zabref.faults.command` (``zabref faults``). The link cuts use the runtime's fault layer
(`zabref.runtime.Server.cut_links`, the control ops ``partition`` / ``heal``); docs/faults.md says why.
This package is light to import: the command loads the runner only when it runs.
"""
