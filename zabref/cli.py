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
from importlib.metadata import EntryPoint, entry_points

import click

from zabref import __version__
from zabref.errors import ZabError

PLUGIN_GROUP = "zabref.commands"


@functools.lru_cache(maxsize=1)
def plugin_entry_points() -> dict[str, EntryPoint]:
    """The installed `zabref.commands` entry points, by command name (read once per process)."""
    return {ep.name: ep for ep in entry_points(group=PLUGIN_GROUP)}


def _unavailable(name: str, ep: EntryPoint, exc: BaseException) -> click.Command:
    reason = f"{type(exc).__name__}: {exc}"

    def fail() -> None:
        raise click.ClickException(f"command {name!r} ({ep.value}) cannot be loaded: {reason}")

    return click.Command(name, callback=fail, help=f"[unavailable: {reason}]", short_help="[unavailable]")


class PluginGroup(click.Group):
    """A click group that also offers the commands registered under `zabref.commands`, loaded on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(plugin_entry_points()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        own = super().get_command(ctx, cmd_name)
        if own is not None:
            return own
        ep = plugin_entry_points().get(cmd_name)
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


if __name__ == "__main__":  # pragma: no cover
    main()
