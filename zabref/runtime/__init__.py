"""The server process: one asyncio loop that drives a `zabref.core.node.Node` with real sockets and a real disk.

Theory of operation: `server` is the loop (inputs in, persistence before sends, effects out); `drivers` are its two
modes (normal: the wall clock and every input at once; control: a conformance driver releases inputs and ticks);
`machine` is what the loop runs on (disk, clock, connection ids); `actionlog` records the spec actions taken for
`zabref validate`; `cluster` starts N servers as child processes (`zabref cluster`).
"""
