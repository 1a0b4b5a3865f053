"""LangChain v1 / LangGraph: middleware that externalizes large tool results, and the
read tools as LangChain tools (``pip install '.[langchain]'`` in a checkout).

::

    from langchain.agents import create_agent
    from toolswap.adapters.langchain import ToolswapMiddleware

    agent = create_agent(model, tools=[search_logs], middleware=[ToolswapMiddleware()])

The middleware sees every tool call the agent makes. A result over the tool's threshold
is saved as an artifact and the model gets the pointer in the same ``ToolMessage`` (same
call ID, name and status; the memory reference, with no body, in its ``artifact``). It
also registers ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact`` and
``list_artifacts``, whose argument descriptions reach the model and whose errors come
back as the tool's answer (status ``error``), not as an exception that ends the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.types import Command

from ..externalizer import ToolResultExternalizer
from ..wrap import externalize_result
from ._common import TOOL_NAMES, raising, read_functions, resolve

__all__ = ["ToolswapMiddleware", "artifact_langchain_tools"]


def _langchain_tool(func: Callable[..., str]) -> BaseTool:
    return StructuredTool.from_function(
        raising(ToolException, func),
        name=func.__name__,
        parse_docstring=True,
        handle_tool_error=True,
    )


def artifact_langchain_tools(externalizer: ToolResultExternalizer | None = None) -> list[BaseTool]:
    """The four read tools as LangChain tools, with their argument descriptions.

    Args:
        externalizer: the session to read (default: the one ``externalize_tool`` uses).
    """
    return [_langchain_tool(f) for f in read_functions(resolve(externalizer))]


def _text(content: object) -> str | None:
    """A ToolMessage's content as one text, or None if it holds more than text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            return None
    return "\n".join(parts)


class ToolswapMiddleware(AgentMiddleware):
    """Agent middleware: large tool results become pointers; the read tools are added.

    Args:
        externalizer: where artifacts go (default: the session ``externalize_tool`` uses,
            ``$TOOLSWAP_SESSION`` in the current workspace).
        read_tools: also register the four read tools (default True).
    """

    def __init__(
        self, externalizer: ToolResultExternalizer | None = None, *, read_tools: bool = True
    ) -> None:
        super().__init__()
        self.externalizer = resolve(externalizer)
        self.tools = artifact_langchain_tools(self.externalizer) if read_tools else []

    def _shrink(
        self, request: ToolCallRequest, result: ToolMessage | Command[Any]
    ) -> ToolMessage | Command[Any]:
        if not isinstance(result, ToolMessage):
            return result  # a Command changes the graph's state: not tool output
        name = str(request.tool_call.get("name") or result.name or "tool")
        if name in TOOL_NAMES:
            return result  # reads are bounded already
        text = _text(result.content)
        if text is None:
            return result
        shrunk = externalize_result(text, name, self.externalizer)
        if shrunk is text:
            return result
        return result.model_copy(update={"content": shrunk})

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        return self._shrink(request, handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        result = await handler(request)
        # Writing and fsyncing megabytes would stall the event loop.
        return await asyncio.to_thread(self._shrink, request, result)
