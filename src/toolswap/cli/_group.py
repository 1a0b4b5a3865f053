"""The root ``toolswap`` command group (private; commands register on it).

The group knows each command by name and the module that registers it, and imports that
module only when the command runs (or when help lists every command): ``toolswap run``
loads the capture and nothing of retention, cleanup, grep, rich, asyncio or the MCP SDK.
"""

from __future__ import annotations

import importlib
import os

import click

from ..errors import ConfigurationError
from ..layout import STORE_ENV

__all__ = ["main"]

_COMMANDS: dict[str, str] = {
    "run": "capture",
    "wrap": "capture",
    "read": "core",
    "grep": "core",
    "ls": "core",
    "show": "core",
    "verify": "core",
    "demo": "core",
    "gc": "gc",
    "leases": "retention",
    "reconcile": "retention",
    "journal": "retention",
    "mcp": "mcp_cmd",
    "sessions": "sessions",
    "query": "query",
}
"""Command name -> the module of :mod:`toolswap.cli` whose import registers it."""


class _LazyGroup(click.Group):
    """A group whose commands are registered by their modules, imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = _COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(f"{__package__}.{module}")
        return super().get_command(ctx, cmd_name)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .. import __version__  # the package metadata is read only here

    click.echo(f"toolswap, version {__version__}")
    ctx.exit()


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
@click.option(
    "--store",
    metavar="URL",
    default=None,
    help=f"Keep new sessions in this shared store, s3://bucket/prefix (env {STORE_ENV}).",
)
def main(store: str | None) -> None:
    """toolswap: keep agents alive when tools return more text than the model can hold.

    Large outputs become immutable, digest-verified artifacts; the model gets a pointer and
    pages the rest in with `read` and `grep`.
    """
    if store is not None:
        from ..backends.store import canonical_store_url

        try:
            os.environ[STORE_ENV] = canonical_store_url(store)  # every session below looks
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--store") from None
