"""OpenAI Agents SDK: the read tools as function tools whose errors reach the model, and
a wrapper for your own function tools (``pip install '.[openai-agents]'`` in a checkout).

::

    from agents import Agent
    from toolswap.adapters.openai_agents import artifact_function_tools, externalized_function_tool

    def search_logs(pattern: str) -> str:
        \"\"\"Search the service logs for a regular expression.\"\"\"
        ...

    agent = Agent(
        name="ops",
        tools=[externalized_function_tool(search_logs), *artifact_function_tools()],
    )

The SDK's default error handler hides every error behind "An error occurred while running
the tool. Please try again." These tools use :func:`tool_error_message` instead: a
toolswap error (a bad regular expression, an offset past the end, a collected artifact)
reaches the model as its type and message, which say what to do next; any other error
keeps the SDK's generic answer, so unrelated exception text does not leak.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool
from agents.tool import default_tool_error_function

from ..externalizer import ToolResultExternalizer
from ..wrap import externalize_tool
from ._common import error_text, read_functions, resolve

__all__ = ["artifact_function_tools", "externalized_function_tool", "tool_error_message"]


def tool_error_message(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """A ``failure_error_function``: toolswap errors verbatim, others the SDK's default."""
    text = error_text(error)
    return text if text is not None else default_tool_error_function(ctx, error)


def artifact_function_tools(
    externalizer: ToolResultExternalizer | None = None,
) -> list[FunctionTool]:
    """``read_artifact``, ``read_artifact_bytes``, ``grep_artifact`` and ``list_artifacts``.

    Args:
        externalizer: the session to read (default: the one ``externalize_tool`` uses).
    """
    return [
        function_tool(f, failure_error_function=tool_error_message, docstring_style="google")
        for f in read_functions(resolve(externalizer))
    ]


def externalized_function_tool(
    func: Callable[..., Any],
    externalizer: ToolResultExternalizer | None = None,
    **options: Any,
) -> FunctionTool:
    """``function_tool(externalize_tool(func))``: a large result becomes a pointer.

    Args:
        func: your tool function (sync or async).
        externalizer: where artifacts go (default: the ``externalize_tool`` session).
        **options: passed to ``function_tool`` (``failure_error_function`` defaults to
            :func:`tool_error_message`).
    """
    options.setdefault("failure_error_function", tool_error_message)
    wrapped = externalize_tool(externalizer=externalizer)(func)
    return function_tool(wrapped, **options)
