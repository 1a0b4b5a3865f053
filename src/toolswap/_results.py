"""The result of a capture whose output stays inline (private; its public home is
:mod:`toolswap.artifact`, which re-exports it).

It lives apart from the artifact module so that an inline capture, the most common, creates
none of that module's dataclasses (each costs start-up time on every command).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["InlineToolResult"]


@dataclass(frozen=True, slots=True)
class InlineToolResult:
    """A small output, returned as it is; nothing was written."""

    context_text: str
    artifact: None = field(default=None, init=False)
    externalized: bool = field(default=False, init=False)
