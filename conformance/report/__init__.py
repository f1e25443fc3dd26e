"""What people read: the conformance report, trace pictures and the auditor's site.

Theory of operation: `results` writes ``index.html`` and ``report.json`` of a conformance run, `render` draws a trace
or a small state graph, `auditmap` maps spec/Zab.tla to zabref/ from the two texts, and `site` (with `site_content`,
`site_pages`, `site_graph`) is ``zabref docs``.
"""
