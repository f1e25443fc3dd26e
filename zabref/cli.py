"""The `zabref` command line.

Theory of operation: `main` is a click group. zabref's own commands (`serve`, `cluster`, `client`) are defined in
this module, under the heading below. Other packages add commands as plugins: each is an entry point in the group
`zabref.commands` naming a click command (the conformance toolchain declares `check`, later `traces`, `render`,
`conform`, in pyproject.toml). That keeps the one rule of dependencies -- zabref never imports conformance -- and
keeps start-up cheap: a plugin is imported only when it runs or when `--help` lists it, so `zabref serve` never
loads TLC or Spark code. A plugin that fails to import shows up as unavailable, with the reason; the other
commands keep working.

Exit codes: a ZabError from one of zabref's own commands is printed as `Error: ...` with exit code 1; plugins
document their own codes (`zabref check`: docs/toolchain.md).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click

from zabref import __version__
from zabref.errors import ZabError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

PLUGIN_GROUP = "zabref.commands"


@functools.lru_cache(maxsize=8)
def plugin_entry_points(group: str = PLUGIN_GROUP) -> dict[str, EntryPoint]:
    """The installed entry points of ``group`` (`zabref.commands`), by command name (read once per process;
    importlib.metadata is imported here, not at start-up: `zabref serve`, which every test cluster starts, never
    needs it)."""
    from importlib.metadata import entry_points  # noqa: PLC0415 (start-up: see the module docstring)

    return {ep.name: ep for ep in entry_points(group=group)}


def _unavailable(name: str, ep: EntryPoint, exc: BaseException) -> click.Command:
    reason = f"{type(exc).__name__}: {exc}"

    def fail() -> None:
        raise click.ClickException(f"command {name!r} ({ep.value}) cannot be loaded: {reason}")

    return click.Command(name, callback=fail, help=f"[unavailable: {reason}]", short_help="[unavailable]")


class PluginGroup(click.Group):
    """A click group that also offers the commands registered under the entry-point group ``plugin_group``
    (`zabref.commands`), loaded on demand. A subclass with another ``plugin_group`` lets a higher layer add
    subcommands to a group defined in a lower one (``zabref zk faults``: conformance/zk/command.py)."""

    plugin_group = PLUGIN_GROUP

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.plugins()))

    def plugins(self) -> dict[str, EntryPoint]:
        # the default group is asked for without an argument, as tests replace `plugin_entry_points` by a lambda
        return plugin_entry_points() if self.plugin_group == PLUGIN_GROUP else plugin_entry_points(self.plugin_group)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        ep = self.plugins().get(cmd_name)
        if ep is None:
            return None
        try:
            command = ep.load()
        except Exception as exc:  # a broken plugin must not take the other commands down
            return _unavailable(cmd_name, ep, exc)
        if not isinstance(command, click.Command):
            return _unavailable(cmd_name, ep, TypeError(f"{ep.value} is not a click command"))
        return command

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ZabError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=PluginGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="zabref")
def main() -> None:
    """zabref: an executable reference for ZooKeeper's Zab protocol.

    The spec (spec/Zab.tla) is model-checked with TLC, its state graph becomes conformance traces, and the
    implementation is replayed through them step by step. See README.md and docs/.
    """


# --- zabref's own commands ---------------------------------------------------------------------------------------
# `serve`, `cluster` and `client` go here as `@main.command()` functions. Import zabref's runtime modules inside the
# function bodies, so that `zabref --help` and the plugin commands stay fast.

DEFAULT_CLUSTER_CONFIG = "zabref-cluster/cluster.toml"


@main.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False), help="The cluster's TOML file.")
@click.option("--id", "sid", required=True, type=int, help="This server's id in the config.")
@click.option("--control", is_flag=True,
              help="Control mode: inputs wait until the control socket releases them; time moves when it says tick.")
@click.option("--action-log", type=click.Path(file_okay=False), default=None,
              help="Append every spec action taken to DIR/actions-<id>.jsonl (for zabref validate).")
@click.option("--control-token", type=click.Path(dir_okay=False), default=None,
              help="Open the control port (loopback only), admitting only the token in this file (chmod 600).")
def serve(config_path: str, sid: int, control: bool, action_log: str | None, control_token: str | None) -> None:
    """Run one zabref server until SIGTERM/SIGINT (docs/runtime.md; the config: TOML, or ZooKeeper's zoo.cfg)."""
    import logging  # noqa: PLC0415 (start-up: see the module docstring)

    from zabref.config import load_config  # noqa: PLC0415 (start-up: see the module docstring)
    from zabref.runtime.control import read_token  # noqa: PLC0415 (start-up: see the module docstring)
    from zabref.runtime.server import run_server  # noqa: PLC0415 (start-up: see the module docstring)

    config = load_config(config_path)
    token = read_token(control_token) if control_token is not None else None
    me = config.server(sid)
    me.data_dir.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s zabref[{sid}] %(levelname)s %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(), logging.FileHandler(me.data_dir / "server.log")]
    logger = logging.getLogger("zabref")
    for h in handlers:
        h.setFormatter(fmt)
        logger.addHandler(h)
    logger.setLevel(logging.INFO)
    raise SystemExit(run_server(config, sid, control=control, action_log=action_log, control_token=token))


@main.command()
@click.option("--servers", "-n", type=click.IntRange(2, 99), default=3, show_default=True,
              help="How many servers (at least 2: a leader needs FOLLOWERINFO from others to establish an epoch).")
@click.option("--data-dir", type=click.Path(file_okay=False), default="zabref-cluster", show_default=True,
              help="Folder for cluster.toml and the servers' data dirs.")
@click.option("--base-port", type=int, default=21000, show_default=True, help="First port (all below 32768).")
@click.option("--tick-ms", type=click.IntRange(1, 60_000), default=100, show_default=True)
@click.option("--log-actions", type=click.Path(file_okay=False), default=None,
              help="Every server appends the spec actions it takes to this folder (check with zabref validate).")
@click.option("--leader-logs-late", is_flag=True,
              help="[cluster] leader_logs_late: a leader sends a PROPOSAL before its own log write is durable, as "
                   "ZooKeeper's does (docs/operations.md).")
def cluster(servers: int, data_dir: str, base_port: int, tick_ms: int, log_actions: str | None,
            leader_logs_late: bool) -> None:
    """Start SERVERS zabref servers on 127.0.0.1 and wait until interrupted (Ctrl-C stops them cleanly)."""
    from zabref.runtime.cluster import run_cluster  # noqa: PLC0415 (start-up: see the module docstring)

    run_cluster(servers, data_dir, base_port, tick_ms, log_actions, leader_logs_late)


@main.group()
@click.option("--config", "config_path", default=DEFAULT_CLUSTER_CONFIG, show_default=True,
              type=click.Path(dir_okay=False), help="The cluster's TOML file (as `zabref cluster` writes it).")
@click.pass_context
def client(ctx: click.Context, config_path: str) -> None:
    """Talk to a running cluster through its client ports."""
    from zabref.client import ZabClient, addresses_from_config, tls_from_config  # noqa: PLC0415 (start-up: see the module docstring)

    ctx.obj = ZabClient(addresses_from_config(config_path), tls=tls_from_config(config_path))
    ctx.call_on_close(ctx.obj.close)


@client.command()
@click.argument("value")
@click.pass_obj
def submit(zab, value: str) -> None:
    """Commit VALUE; prints its zxid."""
    zxid = zab.submit(value)
    click.echo(f"{zxid:#x} ({zxid >> 32}, {zxid & 0xFFFFFFFF})")


@client.command()
@click.option("--from-zxid", type=int, default=0, help="Only transactions after this zxid.")
@click.pass_obj
def read(zab, from_zxid: int) -> None:
    """Print the delivered sequence, one `zxid value` a line."""
    for zxid, value in zab.read(from_zxid):
        click.echo(f"{zxid:#x} {value}")


@client.command()
@click.pass_obj
def sync(zab) -> None:
    """Wait until the server has delivered what the leader had committed; prints that zxid."""
    click.echo(f"{zab.sync():#x}")


if __name__ == "__main__":  # pragma: no cover
    main()
