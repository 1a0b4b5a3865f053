"""pydantic-ai: a toolset wrapper that externalizes large results, and the read tools as a
toolset (``pip install '.[pydantic-ai]'`` in a checkout).

::

    from pydantic_ai import Agent
    from pydantic_ai.toolsets import FunctionToolset
    from toolswap.adapters.pydantic_ai import ToolswapToolset, artifact_toolset

    tools = ToolswapToolset(FunctionToolset([search_logs]))
    agent = Agent(model, toolsets=[tools, artifact_toolset()])

A result of a wrapped tool over its threshold is saved as an artifact and the model gets
the pointer. The read tools answer a toolswap error (a bad regular expression, an offset
past the end) with ``ModelRetry`` carrying the real message, so the model sees what went
wrong and can call again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai import ModelRetry, RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from ..externalizer import ToolResultExternalizer
from ..wrap import externalize_result
from ._common import TOOL_NAMES, raising, read_functions, resolve

__all__ = ["ToolswapToolset", "artifact_toolset"]

_READ_RETRIES = 3
"""How many failed calls of one read tool a run allows (a bad regex, then a fixed one)."""


@dataclass
class ToolswapToolset(WrapperToolset[Any]):
    """Wraps a toolset: its tools' large results become pointers.

    Args:
        wrapped: the toolset whose tools are wrapped.
        externalizer: where artifacts go (default: the session ``externalize_tool`` uses).
    """

    externalizer: ToolResultExternalizer | None = None

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        result = await super().call_tool(name, tool_args, ctx, tool)
        if name in TOOL_NAMES:
            return result
        ext = resolve(self.externalizer)
        # Writing and fsyncing megabytes would stall the event loop.
        return await asyncio.to_thread(externalize_result, result, name, ext)


def artifact_toolset(
    externalizer: ToolResultExternalizer | None = None,
) -> AbstractToolset[Any]:
    """``read_artifact``, ``read_artifact_bytes``, ``grep_artifact`` and ``list_artifacts``.

    Args:
        externalizer: the session to read (default: the one ``externalize_tool`` uses).
    """
    functions = [raising(ModelRetry, f) for f in read_functions(resolve(externalizer))]
    return FunctionToolset(functions, max_retries=_READ_RETRIES, docstring_format="google")
