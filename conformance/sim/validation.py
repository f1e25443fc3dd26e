"""A simulated run's action logs, checked against spec/Zab.tla by TLC at the end of the run (``--validate``).

Theory of operation: with `Options.validate` every simulated server writes the action log a real server writes with
``zabref serve --action-log`` -- the runtime's own `zabref.runtime.actionlog.ActionLog`, called by the same pump --
into memory: one buffer a server, which every incarnation of it appends to, as a real process appends to its file
(lines of the steps a power cut undid stay, as the page cache keeps them after a SIGKILL; the validator's merge
drops them). A line's ``t`` is not a clock but the simulation's count of lines: the servers share one process, so
that count is the order in which the steps really ran, and the merge orders lines of different servers by it where
the packets leave a choice.

At the end of a run that passed every other check, `ActionValidation` (an observer) writes the logs to a temporary
folder and runs `conformance.validate.command.validate` on it -- the merge and TLC, exactly as ``zabref validate``
does for a real cluster (docs/validation.md): every step must be one spec/Zab.tla can take from the state the steps
before it left, with the variables and packets the server logged. Where the invariants ask whether a state is safe,
this asks whether each step is the spec's: a step that departs from the spec without breaking an invariant (a
leader's epoch computed from the wrong numbers, a packet sent to a learner the spec would not send it to) fails
here. The logging changes nothing in the run: no random draw, no timing; the same seed runs the same with or without
it.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path
from typing import Any

from conformance.validate.command import validate
from zabref.runtime.actionlog import ActionLog, log_path

__all__ = ["ActionLogs", "ActionValidation"]


class ActionLogs:
    """Every server's action log of one run, in memory, with one line counter for all of them."""

    def __init__(self) -> None:
        self.files: dict[int, io.BytesIO] = {}
        self.lines = 0

    def _next(self) -> int:
        self.lines += 1
        return self.lines

    def open(self, sid: int) -> ActionLog:
        """The log of a new incarnation of server ``sid`` (it appends to the server's earlier lines)."""
        return ActionLog(self.files.setdefault(sid, io.BytesIO()), sid, clock=self._next)

    def write(self, folder: Path) -> None:
        for sid, buffer in sorted(self.files.items()):
            log_path(folder, sid).write_bytes(buffer.getvalue())


class ActionValidation:
    """The `conformance.sim.Observer` that validates the run's action logs with TLC when the run ends."""

    def __init__(self) -> None:
        self.result: Any = None  # the ValidationResult, once the run ended

    def step(self, sim: Any, sid: int, eff: Any) -> str | None:
        return None

    def crashed(self, sim: Any, sid: int) -> str | None:
        return None

    def finished(self, sim: Any) -> str | None:
        folder = Path(tempfile.mkdtemp(prefix="zabref-sim-actions-"))
        sim.action_logs.write(folder)
        self.result = validate(folder)
        if self.result.passed:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        return f"validation: {self.result.failure}\n  the action logs are kept in {folder}"
