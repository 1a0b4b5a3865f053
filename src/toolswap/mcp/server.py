"""The artifact tools on the SDK's :class:`MCPServer`: ``read_artifact``,
``read_artifact_bytes``, ``grep_artifact`` and ``list_artifacts`` over one session, for an
application built on the SDK (mount it, or serve it over another transport).

``toolswap mcp serve`` and the proxy answer the same tools without the SDK
(:mod:`toolswap.mcp.serve`, :mod:`toolswap.mcp.local`): importing it takes longer than a host
should wait for ``initialize``. The tests hold the two to the same answers.

Every failure (unknown, collected or tampered artifact, bad pattern, offset past the end)
comes back as a tool error (``isError: true``) whose text says what to do next; the server
itself never stops because of one. Calls run on worker threads and never wait for each
other: a search runs in a child process (see :mod:`toolswap.grep`) on a pool of its own, so
reads are served while searches run, and a cancelled call kills its search at once.

The tools' parameters, bounds, defaults, descriptions and annotations come from
:mod:`toolswap._tool_table`, the table the SDK-free face answers from: each tool function
takes its arguments by name and is given the signature the table declares, from which the
SDK derives the tool's input schema and checks a call's arguments.
"""

from __future__ import annotations

import functools
import inspect
import threading
import typing
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from .. import __version__
from .._tool_table import TOOLS, ToolArg, ToolSpec
from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer
from ..tools import ArtifactTools
from .local import INSTRUCTIONS

__all__ = ["INSTRUCTIONS", "create_server"]

_T = TypeVar("_T")

_SEARCHES = 4
"""Searches that run at once; more wait for a slot (reads never do)."""


async def _call(
    run: Callable[[], _T],
    *,
    cancel: threading.Event | None = None,
    limiter: anyio.CapacityLimiter | None = None,
) -> _T:
    """Run a blocking artifact read on a worker thread; turn its failures into tool errors.

    A cancelled call returns at once; ``cancel`` tells the abandoned thread to stop.
    """
    try:
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True, limiter=limiter)
    except anyio.get_cancelled_exc_class():
        if cancel is not None:
            cancel.set()
        raise
    except ToolswapError as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise ToolError(
            f"cannot read the artifact ({exc.strerror or exc}); check the session directory's "
            "permissions, or run the tool again"
        ) from None


def _annotation(arg: ToolArg) -> Any:
    """The parameter annotation from which pydantic writes ``arg.schema()`` and checks a value
    as :meth:`ToolArg.value` does."""
    bounds: dict[str, Any] = {
        "ge": arg.minimum,
        "gt": arg.exclusive_minimum,
        "le": arg.maximum,
        "min_length": arg.min_length,
    }
    field = Field(description=arg.description, **{k: v for k, v in bounds.items() if v is not None})
    kind = Literal[arg.choices] if arg.choices else arg.kind
    return Annotated[kind, field]


def _add_tool(server: MCPServer[Any], spec: ToolSpec, body: Callable[..., Awaitable[Any]]) -> None:
    """Offer ``spec``'s tool on ``server``; a call runs ``body`` with the checked arguments
    by name.

    The SDK reads a tool's parameters from its function's signature
    (``inspect.signature``, which honours ``__signature__``) and type hints
    (``typing.get_type_hints``, from ``__annotations__``), and names the argument model
    after ``__name__``; all three are set from ``spec``.
    """

    async def tool(**arguments: Any) -> Any:
        return await body(**arguments)

    parameters = [
        inspect.Parameter(
            arg.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if arg.default is None else arg.default,
            annotation=_annotation(arg),
        )
        for arg in spec.arguments
    ]
    returns = typing.get_type_hints(body).get("return", Any)
    tool.__name__ = tool.__qualname__ = spec.name
    # A function takes any attribute; typeshed declares no __signature__ on one.
    tool.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": returns}
    server.add_tool(
        tool,
        name=spec.name,
        description=spec.description,
        annotations=ToolAnnotations.model_validate(spec.hints()),
        structured_output=False,
    )


def create_server(
    externalizer: ToolResultExternalizer, *, name: str = "toolswap"
) -> MCPServer[Any]:
    """An :class:`MCPServer` with the five artifact tools over ``externalizer``'s session."""
    tools = ArtifactTools(externalizer)
    searches = anyio.CapacityLimiter(_SEARCHES)
    server: MCPServer[Any] = MCPServer(
        name, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    async def read_artifact(**arguments: Any) -> str:
        return await _call(functools.partial(tools.read_artifact, **arguments))

    async def read_artifact_bytes(**arguments: Any) -> CallToolResult:
        chunk = await _call(functools.partial(tools.read_artifact_bytes, **arguments))
        ref = chunk.artifact
        if chunk.whole and ref.binary and ref.media_type.startswith("image/"):
            # The model asked for the whole image: show it as an image, not as base64 text.
            import base64

            return CallToolResult(
                content=[
                    TextContent(
                        text=f"[{ref.source_id}: the whole image, {ref.media_type}, "
                        f"{ref.byte_size:,} bytes]"
                    ),
                    ImageContent(
                        data=base64.b64encode(chunk.data).decode("ascii"),
                        mime_type=ref.media_type,
                    ),
                ]
            )
        return CallToolResult(content=[TextContent(text=chunk.text)])

    async def grep_artifact(**arguments: Any) -> str:
        cancel = threading.Event()
        run = functools.partial(tools.grep_artifact, **arguments, cancel=cancel)
        return await _call(run, cancel=cancel, limiter=searches)

    async def query_artifact(**arguments: Any) -> str:
        run = functools.partial(tools.query_artifact, **arguments)
        return await _call(run, limiter=searches)

    async def list_artifacts() -> str:
        return await _call(tools.list_artifacts)

    bodies: dict[str, Callable[..., Awaitable[Any]]] = {
        "read_artifact": read_artifact,
        "read_artifact_bytes": read_artifact_bytes,
        "grep_artifact": grep_artifact,
        "query_artifact": query_artifact,
        "list_artifacts": list_artifacts,
    }
    for spec in TOOLS:
        _add_tool(server, spec, bodies[spec.name])
    return server
