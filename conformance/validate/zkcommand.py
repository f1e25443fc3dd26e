"""``zabref zk validate RECORDING_DIR``: a plugin of the harness's group (`conformance.zk.command.ZkGroup`).

Theory of operation: the harness's commands live in `conformance.zk`, a layer below `conformance.validate`, so they
cannot import the validator; this command is an entry point of the group ``zabref.zk.commands`` (pyproject.toml),
and ``zabref zk run --validate`` invokes it by name. The work is in `conformance.validate.zkcheck`.

Two checks: the quorum packets against spec/Zab.tla (`conformance.validate.zkcheck`) and the election
notifications against spec/FastLeaderElection.tla with QuorumCnxManager's send queue (`conformance.validate.flecheck`),
side by side (each runs TLC with one worker, one search at a time), so a run is judged in the time of the longer.
Exit codes of ``validate`` (and of ``run --validate``): 0 the run is a behaviour of both; 1 it is not a behaviour of
one of them (the report names the first observation that spec cannot take); 3 the recording does not decode (a
WireError with the connection and byte offset); 4 no verdict (TLC did not finish) and no departure.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from conformance.errors import ConformanceError
from conformance.zk import WireError

__all__ = ["validate_command"]


def _validate(folder: Path, election: bool = True) -> int:
    from conformance.validate.flecheck import validate_elections  # noqa: PLC0415 (the group loads fast)
    from conformance.validate.zkcheck import validate_recording  # noqa: PLC0415
    from conformance.zk.elections import elections_observed  # noqa: PLC0415
    from conformance.zk.observe import observe_dir_decoded  # noqa: PLC0415

    try:
        # decoded once, for both checks, before either starts TLC: bytes that do not decode are reported at once
        decoded, observation = observe_dir_decoded(folder)
        notices = elections_observed(decoded, observation) if election else None
        with ThreadPoolExecutor(max_workers=1) as pool:  # each check runs one TLC of one worker: two cores, two TLCs
            fle_check = pool.submit(validate_elections, notices, echo=click.echo) if notices is not None else None
            result = validate_recording(folder, echo=click.echo, observed=(decoded, observation))
            fle = fle_check.result() if fle_check is not None else None
    except WireError as e:
        click.echo(f"zk validate: {e}", err=True)
        return 3
    except ConformanceError as e:
        click.echo(f"zk validate: {e}", err=True)
        return 4
    checks = [r for r in (result, fle) if r is not None]
    for r in checks:
        if r.failure:
            click.echo(f"zk validate: {r.failure}", err=True)
    for r in checks:
        click.echo(r.line())
    if all(r.matched for r in checks):
        return 0
    departed = any(not r.matched and not r.inconclusive for r in checks)
    return 1 if departed else 4


@click.command("validate")
@click.argument("recording_dir", type=click.Path(exists=True, path_type=Path))
@click.option("--election/--no-election", default=True, show_default=True,
              help="Also hold the election notifications against spec/FastLeaderElection.tla.")
def validate_command(recording_dir: Path, election: bool = True) -> None:
    """Check with TLC that the ZooKeeper run recorded in RECORDING_DIR (zabref zk run --dir) is a behaviour of
    spec/Zab.tla (every quorum packet sent, in the proxy's order, made by some behaviour of the spec) and that its
    election notifications are made by spec/FastLeaderElection.tla (with QuorumCnxManager's send queue and Zab's
    data between elections).

    Exit codes: 0 it is; 1 it is not (the first observation the spec cannot take is named, with its connection and
    byte offset); 3 the recording does not decode; 4 no verdict."""
    raise SystemExit(_validate(recording_dir, election))
