"""The TLA+ toolchain: finding java and tla2tools.jar, running SANY and TLC, reading what they print.

Theory of operation: `tools` finds and runs the tools, `output` reads their output, `modelconfig` prepares a model's
config for a run, `check` is ``zabref check``, `mutations` is ``zabref mutations`` (each check shown to fail),
`values` is the canonical form of TLA+ values every other part shares, `tlabin` the tla-bin style commands.
"""
