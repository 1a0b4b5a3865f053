"""The root ``toolswap`` command group (private; commands register on it)."""

from __future__ import annotations

import os

import click

from .. import __version__
from ..backends.store import STORE_ENV, canonical_store_url
from ..errors import ConfigurationError

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="toolswap")
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
        try:
            os.environ[STORE_ENV] = canonical_store_url(store)  # every session below looks
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint="--store") from None
