"""Hooks for tests of toolswap and of harnesses built on it (not for production code).

- :data:`CRASH_POINTS`: every named durable step; with ``TOOLSWAP_CRASH_POINT`` naming one,
  a process kills itself there with SIGKILL (see :mod:`toolswap.crashpoints`).
- :class:`DurableIO` and :func:`substituted`: the durable-I/O seam (see
  :mod:`toolswap.durable`); a subclass can fail any call or record what a power loss would
  keep.
"""

from __future__ import annotations

from .crashpoints import CRASH_POINTS
from .durable import DurableIO, current, substituted

__all__ = ["CRASH_POINTS", "DurableIO", "current", "substituted"]
