"""``zabref zk``: real ZooKeeper ensembles, recorded from outside (docs/zookeeper.md).

Theory of operation: this module reads options and prints; the work is in the modules it names. A `ZkError` becomes
click's ``Error: ...`` with exit code 1. Subcommands: ``versions`` (what is supported, what is ready), ``fetch
VERSION``, ``run`` (an ensemble through the recording proxy, a few client writes, a summary), ``decode RECORDING``
(one line a message) and ``disk DATADIR`` (a server's epochs and transaction logs). Subcommands that need a higher
layer of conformance (``faults`` and ``matrix``, which use the history checker of conformance.faults) are plugged in
through the entry-point group `ZK_PLUGIN_GROUP`, as zabref's own commands are (`zabref.cli.PluginGroup`).
"""

from __future__ import annotations

import collections
import json
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

import click

from conformance.zk import ZkError
from zabref.cli import PluginGroup

__all__ = ["zk", "ZK_PLUGIN_GROUP"]

#: Subcommands of ``zabref zk`` that live in a higher layer (``faults``, ``matrix``: conformance/faults/zkcommand.py)
#: are entry points of this group in pyproject.toml.
ZK_PLUGIN_GROUP = "zabref.zk.commands"


class ZkGroup(PluginGroup):
    plugin_group = ZK_PLUGIN_GROUP


def _errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ZkError as e:
            raise click.ClickException(str(e)) from e

    run.__name__, run.__doc__ = fn.__name__, fn.__doc__
    return run


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@click.group(cls=ZkGroup)
def zk() -> None:
    """Unmodified Apache ZooKeeper ensembles, every server-to-server byte recorded and decoded."""
    # SIGTERM (`timeout`, a CI's cancel) unwinds like an error: the ensembles' `with` blocks stop every JVM, proxy
    # and zabref server they started (Python's default would end the process and leave them running). The handler
    # before is put back when the command ends: a caller that runs the command in its own process (a test's
    # CliRunner) keeps its own (an install that outlived the command was the suspect of a lost pytest worker).
    if threading.current_thread() is threading.main_thread():  # signal.signal works there only
        before = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        click.get_current_context().call_on_close(lambda: signal.signal(signal.SIGTERM, before))


@zk.command("versions")
@_errors
def versions_command() -> None:
    """The supported versions, where each comes from, and which are ready without a download."""
    from conformance.zk.versions import available, cache_root  # noqa: PLC0415 (the group loads fast)

    for version, source, ready in available():
        click.echo(f"{version:<7} {source:<7} {'ready' if ready else '-'}")
    click.echo(f"cache: {cache_root() / 'zookeeper'}")


@zk.command("fetch")
@click.argument("version")
@_errors
def fetch_command(version: str) -> None:
    """Make VERSION runnable: apt for 3.8.0, Maven Central for the others (cached)."""
    from conformance.zk.versions import resolve  # noqa: PLC0415

    started = time.monotonic()
    dist = resolve(version, click.echo)
    click.echo(f"ZooKeeper {dist.version} ({dist.source}, logging: {dist.logging}): {len(dist.jars)} jars, ready in "
               f"{time.monotonic() - started:.1f} s")
    for jar in dist.jars:
        click.echo(f"  {jar}")


@zk.command("run")
@click.option("--servers", type=click.Choice(["3", "5"]), default="3", show_default=True)
@click.option("--version", "version", default="3.8.0", show_default=True, help="A version of `zabref zk versions`.")
@click.option("--dir", "folder", type=click.Path(file_okay=False), default="out/zk-run", show_default=True,
              help="The run's folder: one per server and recording.zkrec (emptied first).")
@click.option("--seconds", type=click.FloatRange(0), default=2.0, show_default=True,
              help="How long the ensemble runs after the writes.")
@click.option("--writes", type=click.IntRange(0), default=5, show_default=True, help="Client writes through kazoo.")
@click.option("--tick-ms", type=click.IntRange(10), default=200, show_default=True, help="tickTime.")
@click.option("--heap-mb", type=click.IntRange(32), default=256, show_default=True, help="Each JVM's -Xmx.")
@click.option("--validate/--no-validate", default=False, show_default=True,
              help="Then check the recording against spec/Zab.tla (the `zabref zk validate` plugin).")
@_errors
def run_command(servers: str, version: str, folder: str, seconds: float, writes: int, tick_ms: int,
                heap_mb: int, validate: bool) -> None:
    """Start an ensemble through the recording proxy, write, wait, stop; print a summary and the recording's path.
    The time the stop began goes to <dir>/harness.json (``stop_ns``, the proxy's clock): what follows is the
    harness's, not the protocol's (docs/zookeeper.md, "Validation of ZooKeeper runs")."""
    from conformance.zk.harness import ProxiedEnsemble, rss_mb  # noqa: PLC0415
    from conformance.zk.wire import decode_recording  # noqa: PLC0415

    out = Path(folder)
    if out.exists():
        shutil.rmtree(out)
    started = time.monotonic()
    z = ProxiedEnsemble(out, int(servers), version, tick_time_ms=tick_ms, heap_mb=heap_mb, echo=click.echo)
    with z.start():
        click.echo(f"serving after {time.monotonic() - started:.1f} s: {z.ensemble.modes()}")
        if writes:
            zxids = z.client_writes(writes)
            click.echo(f"{len(zxids)} writes committed, zxids 0x{zxids[0]:x}..0x{zxids[-1]:x}")
        time.sleep(seconds)
        rss = {sid: rss_mb(pid) for sid in z.ensemble.procs if (pid := z.ensemble.pid(sid)) is not None}
        click.echo("resident memory: " + ", ".join(f"server {s} {v:.0f} MiB" for s, v in rss.items() if v))
        (out / "harness.json").write_text(json.dumps({"stop_ns": time.monotonic_ns()}) + "\n")
    left = z.ensemble.leftovers()
    decoded = decode_recording(z.recording)
    counts = collections.Counter(m.name for m in decoded.messages if m.kind != "event")
    click.echo("messages: " + ", ".join(f"{name} {n}" for name, n in sorted(counts.items())))
    click.echo(f"ZooKeeper {z.distribution.version}, {servers} servers, {len(decoded.messages)} records decoded, "
               f"{z.faults.bytes_recorded} bytes between servers; recording: {z.recording}; "
               f"logs: {out}/*/server.log; processes left: {len(left)}")
    if validate:
        ctx = click.get_current_context()
        ctx.invoke(zk.get_command(ctx, "validate"), recording_dir=out)  # a plugin: conformance.validate.zkcommand


@zk.command("decode")
@click.argument("recording", type=click.Path(dir_okay=False, exists=True))
@click.option("--events/--no-events", default=True, show_default=True,
              help="Also show the proxy's events (connections opened and closed, faults).")
@_errors
def decode_command(recording: str, events: bool) -> None:
    """Print every message of a recording, one line each, in the order the proxy saw them."""
    from conformance.zk.wire import decode_recording, format_message  # noqa: PLC0415

    decoded = decode_recording(recording)
    t0 = decoded.recording.meta.get("started_ns", decoded.messages[0].t_ns if decoded.messages else 0)
    shown = 0
    for m in decoded.messages:
        if events or m.kind != "event" or m.name == "TRUNCATED":
            click.echo(format_message(m, t0))
            shown += 1
    truncated = decoded.truncated()
    click.echo(f"{shown} lines; {len(truncated)} truncated tail(s)" + (
        ": " + ", ".join(f"connection {m.conn} {m.direction} at byte {m.offset}" for m in truncated)
        if truncated else ""))


@zk.command("disk")
@click.argument("data_dir", type=click.Path(file_okay=False, exists=True))
@_errors
def disk_command(data_dir: str) -> None:
    """A server's acceptedEpoch, currentEpoch and transaction log records."""
    from conformance.zk.disk import log_files, read_epochs, read_txn_log  # noqa: PLC0415

    click.echo(" ".join(f"{k}={v}" for k, v in read_epochs(data_dir).items()))
    for path in log_files(data_dir):
        log = read_txn_log(path)
        click.echo(f"{path.name}: dbid {log.dbid}, {len(log.records)} records, ends with {log.end} at byte "
                   f"{log.end_offset}" + (f" ({log.torn})" if log.torn else ""))
        for r in log.records:
            txn = r.txn
            rest = " ".join(f"{k}={v}" for k, v in txn.items() if k not in ("op", "zxid", "session", "time"))
            click.echo(f"  @{r.offset:<8} zxid=0x{txn['zxid']:x} {txn['op']:<14} session={txn['session']} {rest}")
