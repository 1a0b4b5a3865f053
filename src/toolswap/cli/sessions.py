"""``toolswap sessions``: every session under ``$TOOLSWAP_HOME``, across workspaces."""

from __future__ import annotations

import sys

import click

from ..pointer import human_size
from ..session import toolswap_home, workspace_slug
from ..workspaces import list_sessions
from ._common import echo_json, handle_errors
from ._group import main
from ._options import json_option

__all__: list[str] = []


@main.command()
@json_option("Print a JSON array.")
@handle_errors
def sessions(as_json: bool) -> None:
    """List every session under $TOOLSWAP_HOME/projects, in every workspace.

    The current directory's workspace is marked with `*`. A source ID from any of them
    reads from anywhere: `toolswap read ID` finds its session by the ID.
    """
    entries = list_sessions()
    try:
        here = workspace_slug()
    except ValueError:
        here = None
    if as_json:
        echo_json([{**e.to_dict(), "current_workspace": e.workspace == here} for e in entries])
        return
    if not entries:
        click.echo(f"no sessions under {toolswap_home() / 'projects'}", err=True)
        return
    rows = [
        (
            ("* " if e.workspace == here else "  ") + e.workspace,
            e.session_id,
            f"{e.artifacts:,}",
            human_size(e.byte_size),
            e.modified.isoformat(timespec="seconds") if e.modified else "",
            e.store or "local",
        )
        for e in entries
    ]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table("workspace", "session", "artifacts", "size", "last write", "kept in")
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    for row in rows:
        click.echo("\t".join(row))
