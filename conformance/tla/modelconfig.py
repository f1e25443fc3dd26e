"""Preparing a model config for a TLC run: labels, TLC options, a scratch copy of the spec.

Theory of operation: config NAME is `MC_NAME.tla` + `MC_NAME.cfg` in the spec folder. Before TLC runs, `prepare`
copies the spec folder's modules into a scratch folder and, when the model's spec keeps its `Next` in the regular
form that conformance/tla/labels.py reads (and the cfg says `NEXT Next`), writes the labeled wrapper `MCL_NAME` whose
edges carry action parameters. The state graph is the same either way; only edge labels differ.

A cfg may carry TLC options in a comment line, for options TLC 2.15 only takes on its command line:

    \\* TLC-OPTIONS: -deadlock

(`-deadlock` turns deadlock checking off: the Zab models are bounded and end in states where nothing is enabled.)
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import SpecFormatError
from conformance.tla.labels import config_module_base, model_next, write_labeled_model

_OPTIONS = re.compile(r"^\s*\\\*\s*TLC-OPTIONS:\s*(.*)$", re.M)
_ALLOWED = {"-deadlock"}


@dataclass(frozen=True)
class PreparedModel:
    module: Path       # the module TLC runs (MCL_NAME.tla when labeled, else MC_NAME.tla), in the scratch folder
    cfg: Path
    tlc_options: tuple[str, ...]
    labeled: bool


def tlc_options(cfg_text: str, cfg_path: Path) -> tuple[str, ...]:
    options: list[str] = []
    for m in _OPTIONS.finditer(cfg_text):
        for opt in shlex.split(m.group(1)):
            if opt not in _ALLOWED:
                raise SpecFormatError(f"{cfg_path}: TLC-OPTIONS allows only {sorted(_ALLOWED)}, not {opt!r}")
            options.append(opt)
    return tuple(options)


_KEYWORD = re.compile(r"^\s*(CONSTANTS?|INIT|NEXT|SPECIFICATION|INVARIANTS?|PROPERTY|PROPERTIES|CONSTRAINTS?|"
                      r"ACTION_CONSTRAINTS?|SYMMETRY|VIEW|CHECK_DEADLOCK|ALIAS|POSTCONDITION)\b(.*)$")


def constraints(cfg_text: str) -> tuple[str, ...]:
    """The names a cfg lists under CONSTRAINT(S) and ACTION_CONSTRAINT(S): the model's cuts of the spec's
    behaviours, so that a step missing from its state graph may be one the spec takes but a cut left out."""
    names: list[str] = []
    inside = False
    for line in cfg_text.splitlines():
        line = line.split("\\*")[0]
        m = _KEYWORD.match(line)
        if m:
            inside = m.group(1).startswith(("CONSTRAINT", "ACTION_CONSTRAINT"))
            line = m.group(2)
        if inside:
            names += line.split()
    return tuple(names)


def constants_section(cfg_text: str) -> str:
    """The CONSTANTS section of a model's cfg, as it stands (for a module that EXTENDS the model and checks a
    behaviour of it: conformance/replay/tracecheck.py, conformance/replay/cutheads.py)."""
    out, inside = [], False
    for line in cfg_text.splitlines():
        if re.match(r"^CONSTANTS?\b", line):
            inside = True
        elif re.match(r"^[A-Z_]+\b", line):
            inside = False
        if inside:
            out.append(line)
    return "\n".join(out) + "\n"


def wants_labels(spec_dir: Path, config: str, cfg_text: str) -> bool:
    """Label edges when the cfg uses `NEXT Next` and the spec writes `Next ==` on a line of its own."""
    if not re.search(r"^\s*NEXT\s+Next\s*$", cfg_text, re.M):
        return False
    base = Path(spec_dir) / f"{config_module_base(spec_dir, config)}.tla"
    return bool(re.search(r"^Next\s*==\s*$", base.read_text(encoding="utf-8"), re.M))


def labelable(spec_dir: Path, config: str) -> bool:
    """Whether the model's next-state relation can be labeled (`conformance.tla.labels.model_next` reads it)."""
    try:
        model_next(spec_dir, config)
    except SpecFormatError:
        return False
    return True


def prepare(spec_dir: Path, config: str, scratch: Path, labels: bool | None = None) -> PreparedModel:
    """Copy the spec into `scratch` and return what TLC should run there.

    labels=None labels when the model allows it (`wants_labels`); True insists (a Next that cannot be read is a
    SpecFormatError naming its line); False never labels.
    """
    spec_dir, scratch = Path(spec_dir), Path(scratch)
    cfg_path = spec_dir / f"MC_{config}.cfg"
    cfg_text = cfg_path.read_text(encoding="utf-8")
    options = tlc_options(cfg_text, cfg_path)
    scratch.mkdir(parents=True, exist_ok=True)
    for tla in spec_dir.glob("*.tla"):
        shutil.copy2(tla, scratch / tla.name)
    shutil.copy2(cfg_path, scratch / cfg_path.name)
    if labels is None:
        labels = wants_labels(spec_dir, config, cfg_text)
    if labels:
        model_next(spec_dir, config)  # fail early, naming the line
        module, cfg = write_labeled_model(spec_dir, config, scratch)
        return PreparedModel(module, cfg, options, True)
    return PreparedModel(scratch / f"MC_{config}.tla", scratch / cfg_path.name, options, False)
