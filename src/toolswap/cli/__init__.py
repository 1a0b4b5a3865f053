"""The ``toolswap`` command line. Each module registers its commands on :data:`main`."""

from __future__ import annotations

from . import core, gc, mcp_cmd, query, retention, sessions  # noqa: F401  (registers commands)
from ._group import main

__all__ = ["main"]
