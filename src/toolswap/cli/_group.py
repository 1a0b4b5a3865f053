"""The root ``toolswap`` command group (private; commands register on it)."""

from __future__ import annotations

import click

from .. import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toolswap")
def main() -> None:
    """toolswap: keep agents alive when tools return more text than the model can hold.

    Large outputs become immutable, digest-verified artifacts; the model gets a pointer and
    pages the rest in with `read` and `grep`.
    """
