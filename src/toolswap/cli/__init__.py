"""The ``toolswap`` command line. Each command's module registers it on :data:`main` and is
imported only when that command runs (see :mod:`toolswap.cli._group`)."""

from __future__ import annotations

from ._group import main

__all__ = ["main"]
