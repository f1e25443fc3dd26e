"""The graph pipeline: TLC's state graph -> rows -> shortest paths -> conformance traces, on Spark.

Theory of operation: `dotparse` parses the DOT dump (a lark grammar, streamed), `labels` reads the action parameters
of an edge label, `rows` (stage 1) turns the dump into node and edge rows, `paths` (stage 2) finds a shortest path
from Init to every state, `select` (stage 3) chooses the traces that cover the graph, `traces` is the trace file,
`spark` the one SparkSession, `pipeline` is ``zabref traces``.
"""
