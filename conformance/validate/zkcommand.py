"""``zabref zk validate RECORDING_DIR``: a plugin of the harness's group (`conformance.zk.command.ZkGroup`).

Theory of operation: the harness's commands live in `conformance.zk`, a layer below `conformance.validate`, so they
cannot import the validator; this command is an entry point of the group ``zabref.zk.commands`` (pyproject.toml),
and ``zabref zk run --validate`` invokes it by name. The work is in `conformance.validate.zkcheck`.

Exit codes of ``validate`` (and of ``run --validate``): 0 the run is a behaviour of spec/Zab.tla; 1 it is not (the
report names the first observation the spec cannot take); 3 the recording does not decode (a WireError with the
connection and byte offset); 4 no verdict (TLC did not finish).
"""

from __future__ import annotations

from pathlib import Path

import click

from conformance.errors import ConformanceError
from conformance.zk import WireError

__all__ = ["validate_command"]


def _validate(folder: Path) -> int:
    from conformance.validate.zkcheck import validate_recording  # noqa: PLC0415 (the group loads fast)

    try:
        result = validate_recording(folder, echo=click.echo)
    except WireError as e:
        click.echo(f"zk validate: {e}", err=True)
        return 3
    except ConformanceError as e:
        click.echo(f"zk validate: {e}", err=True)
        return 4
    if result.failure:
        click.echo(f"zk validate: {result.failure}", err=True)
    click.echo(result.line())
    return 0 if result.matched else 4 if result.inconclusive else 1


@click.command("validate")
@click.argument("recording_dir", type=click.Path(exists=True, path_type=Path))
def validate_command(recording_dir: Path) -> None:
    """Check with TLC that the ZooKeeper run recorded in RECORDING_DIR (zabref zk run --dir) is a behaviour of
    spec/Zab.tla: every quorum packet sent, in the proxy's order, made by some behaviour of the spec.

    Exit codes: 0 it is; 1 it is not (the first observation the spec cannot take is named, with its connection and
    byte offset); 3 the recording does not decode; 4 no verdict."""
    raise SystemExit(_validate(recording_dir))
