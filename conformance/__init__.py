"""conformance: the toolchain that ties spec/Zab.tla to zabref.

Theory of operation: TLC (conformance.tla.tools) checks the spec and dumps its state graph; lark grammars and a Spark
pipeline turn the graph into traces; the replay driver runs real zabref servers through each trace one step at a
time and compares their state with the spec's. Its commands plug into the `zabref` CLI through the
`zabref.commands` entry-point group, so that zabref itself never imports this package.
"""
