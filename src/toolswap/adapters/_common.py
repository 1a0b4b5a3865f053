"""What every framework adapter shares (standard library only)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer
from ..tools import TOOL_NAMES, artifact_tools
from ..wrap import default_externalizer

__all__ = ["TOOL_NAMES", "error_text", "raising", "read_functions", "resolve"]


def resolve(externalizer: ToolResultExternalizer | None) -> ToolResultExternalizer:
    """The session an adapter saves into and reads from (default: the wrapper's)."""
    return externalizer if externalizer is not None else default_externalizer()


def read_functions(ext: ToolResultExternalizer) -> list[Callable[..., str]]:
    """``read_artifact``, ``read_artifact_bytes``, ``grep_artifact``, ``list_artifacts``."""
    return artifact_tools(ext)


def raising(error: Callable[[str], Exception], func: Callable[..., str]) -> Callable[..., str]:
    """``func``, raising a toolswap error as the framework's ``error``, whose message is
    what the model sees."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return func(*args, **kwargs)
        except ToolswapError as exc:
            raise error(f"{type(exc).__name__}: {exc}") from exc

    return call


def error_text(error: BaseException) -> str | None:
    """The message a model should see for a toolswap error (also when a framework wrapped
    it in an exception of its own), or None if the error is not toolswap's."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ToolswapError):
            return f"{type(current).__name__}: {current}"
        current = current.__cause__ or current.__context__
    return None
