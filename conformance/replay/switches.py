"""The spec's switches a model turns on, read from its files: which way the servers replaying its traces must run.

Theory of operation: spec/Zab.tla defines a switch as an operator (``LeaderLogsLate == FALSE``), and a model turns it
on by overriding it in its .cfg with a definition of its own module (``LeaderLogsLate <- TinyLeaderLogsLate`` in
MC_tinylate.cfg, ``TinyLeaderLogsLate == TRUE`` in MC_tinylate.tla). A trace names its model (``config``), so the
driver reads the switch from the same files TLC read (the trace's ``spec_sha256`` covers them) and starts zabref
the matching way: `leader_logs_late` -> ``[cluster] leader_logs_late``. An override this cannot resolve to TRUE or
FALSE is a `SpecFormatError` naming the file, never a guess.
"""

from __future__ import annotations

import re
from pathlib import Path

from conformance.errors import SpecFormatError

__all__ = ["SPEC_DIR", "leader_logs_late", "switch"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"


def _definition(path: Path, name: str) -> bool | None:
    """The value of ``name == TRUE`` / ``FALSE`` in module file ``path``; None when it has no such line."""
    m = re.search(rf"^{re.escape(name)}\s*==\s*(TRUE|FALSE)\s*$", path.read_text(encoding="utf-8"), re.M)
    return None if m is None else m[1] == "TRUE"


def switch(name: str, config: str, spec_dir: Path = SPEC_DIR) -> bool:
    """Switch ``name`` of spec/Zab.tla as model ``config`` sets it: its override in MC_<config>.cfg, else Zab.tla's
    own definition. A model with no files here (a trace of a model kept elsewhere) has the spec's."""
    cfg = spec_dir / f"MC_{config}.cfg"
    spec = spec_dir / "Zab.tla"
    default = _definition(spec, name)
    if default is None:
        raise SpecFormatError(f"{spec}: no line '{name} == TRUE' or '{name} == FALSE' (a switch of the spec)")
    if not cfg.is_file():
        return default
    m = re.search(rf"^\s*{re.escape(name)}\s*<-\s*(\w+)\s*$", cfg.read_text(encoding="utf-8"), re.M)
    if m is None:
        return default
    module = spec_dir / f"MC_{config}.tla"
    value = _definition(module, m[1]) if module.is_file() else None
    if value is None:
        raise SpecFormatError(f"{cfg}: {name} <- {m[1]}: {module} has no line '{m[1]} == TRUE' or '== FALSE'")
    return value


def leader_logs_late(config: str, spec_dir: Path = SPEC_DIR) -> bool:
    """Whether model ``config``'s leaders log late (Zab.tla's LeaderLogsLate): zabref's ``leader_logs_late``."""
    return switch("LeaderLogsLate", config, spec_dir)
