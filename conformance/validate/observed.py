"""What the two checks of a recorded ZooKeeper run share: the generated folder, the progress line, one TLC run.

`conformance.validate.zkcheck` (quorum packets against Zab.tla, window by window) and `conformance.validate.flecheck`
(election notifications against FastLeaderElection.tla) each write a module into a folder (`observed_folder`) whose
constraint prints, under a tag, the state that made the longest prefix of the observations (`last_progress` reads
the last such line). flecheck's module has an invariant ``NotDone`` violated exactly when a behaviour makes every
observation; `check_observed` runs TLC on it (one worker, ``-deadlock``) and fills the verdict's common fields: matched
(and the behaviour's length, and its last state, where flecheck's next window starts), inconclusive (TLC did not
finish), or departed, with the last progress line parsed (`last_progress`) for the caller's report. The generated folder
is removed when the run matched and kept otherwise.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from conformance.tla.output import TLCMessage
from conformance.tla.tools import Outcome, run_tlc, toolchain
from conformance.tla.valueparse import parse_value

__all__ = ["check_observed", "last_progress", "observed_folder", "printed"]


def printed(lines: list[str], tag: str, *, last: bool = True) -> str | None:
    """The text of the last (or first) ``<<"tag", ...>>`` value TLC printed, on one line (PrintT wraps a long value
    over several lines); None when there is none."""
    starts = [k for k, line in enumerate(lines) if f'"{tag}"' in line]
    if not starts:
        return None
    text = ""
    for line in lines[starts[-1] if last else starts[0]:]:
        text += " " + line.strip()
        if text.count("<<") == text.count(">>") and text.count("[") == text.count("]"):
            break
    return text.strip()


def last_progress(lines: list[str], tag: str, fields: tuple[str, ...]) -> dict[str, Any]:
    """The last ``<<"tag", ...>>`` value TLC printed, by field."""
    text = printed(lines, tag)
    if text is None:
        return {}
    value = parse_value(text, f"TLC's {tag} line")
    return dict(zip(fields, value[1:]))


def observed_folder(spec: Path, module: str, text: str, cfg: str, prefix: str, work: Path | None) -> Path:
    """A new folder (under ``work``) holding a copy of ``spec`` and the generated ``module``.tla and .cfg."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=work))
    (folder / spec.name).write_text(spec.read_text())
    (folder / f"{module}.tla").write_text(text)
    (folder / f"{module}.cfg").write_text(cfg)
    return folder


def check_observed(result: Any, folder: Path, module: str, tag: str,
                   fields: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Run TLC on ``folder/<module>.tla`` and fill ``result`` (matched, steps, distinct_states, inconclusive,
    failure, tlc_seconds, best; when no behaviour makes every observation the caller writes the report). Returns, when
    one does, the last state of the shortest: each variable's text as TLC printed it (else empty)."""
    printed: list[str] = []

    def on_message(msg: TLCMessage) -> None:
        if msg.code == 0:
            printed.extend(msg.text.splitlines())

    started = time.monotonic()
    tlc = run_tlc(folder / f"{module}.tla", folder / f"{module}.cfg", workers=1, extra_args=("-deadlock",),
                  on_message=on_message, tools=toolchain())
    result.tlc_seconds = time.monotonic() - started
    result.distinct_states = tlc.distinct_states or 0
    if tlc.outcome is Outcome.INVARIANT_VIOLATED and tlc.violated == "NotDone":
        result.matched = True
        result.steps = max(len(tlc.trace) - 1, 0)
        shutil.rmtree(folder, ignore_errors=True)
        return tlc.trace[-1].variables if tlc.trace else ()
    if tlc.outcome is not Outcome.OK:
        result.inconclusive = True
        result.failure = f"TLC did not finish the check ({tlc.result_text()}): {tlc.message}\n  kept: {folder}"
        return ()
    result.best = last_progress(printed, tag, fields)
    if any('<<"budget"' in line for line in printed):  # the module's own bound of the search: no verdict
        result.inconclusive = True
    return ()
