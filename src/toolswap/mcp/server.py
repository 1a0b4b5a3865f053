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
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import Field

from .. import __version__
from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer
from ..grep import DEFAULT_TIMEOUT
from ..structured.query import DEFAULT_QUERY_TIMEOUT
from ..tools import (
    GREP_ARTIFACT_DESCRIPTION,
    LIST_ARTIFACTS_DESCRIPTION,
    MAX_BYTES_LENGTH,
    MAX_GREP_TIMEOUT,
    MAX_LIMIT,
    MAX_MATCHES,
    PARAMETER_DESCRIPTIONS,
    QUERY_ARTIFACT_DESCRIPTION,
    READ_ARTIFACT_BYTES_DESCRIPTION,
    READ_ARTIFACT_DESCRIPTION,
    ArtifactTools,
)
from .local import INSTRUCTIONS

__all__ = ["INSTRUCTIONS", "create_server"]

_T = TypeVar("_T")

_READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# A query's result or a record too large to return is saved as a new artifact: the call
# may write (it adds, never changes or removes, so it is not destructive), and asking
# twice saves the result twice.
_MAY_SAVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

SourceId = Annotated[str, Field(description=PARAMETER_DESCRIPTIONS["source_id"])]


_SEARCHES = 4
"""Searches that run at once; more wait for a slot (reads never do)."""


async def _call(
    fn: Callable[..., _T],
    *args: Any,
    cancel: threading.Event | None = None,
    limiter: anyio.CapacityLimiter | None = None,
) -> _T:
    """Run a blocking artifact read on a worker thread; turn its failures into tool errors.

    A cancelled call returns at once; ``cancel`` tells the abandoned thread to stop.
    """
    try:
        return await anyio.to_thread.run_sync(
            functools.partial(fn, *args), abandon_on_cancel=True, limiter=limiter
        )
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


def create_server(
    externalizer: ToolResultExternalizer, *, name: str = "toolswap"
) -> MCPServer[Any]:
    """An :class:`MCPServer` with the four artifact tools over ``externalizer``'s session."""
    tools = ArtifactTools(externalizer)
    searches = anyio.CapacityLimiter(_SEARCHES)
    server: MCPServer[Any] = MCPServer(
        name, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    async def read_artifact(
        source_id: SourceId,
        offset: Annotated[int, Field(ge=0, description=PARAMETER_DESCRIPTIONS["offset"])] = 0,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIMIT, description=PARAMETER_DESCRIPTIONS["limit"])
        ] = 200,
        record: Annotated[str, Field(description=PARAMETER_DESCRIPTIONS["record"])] = "",
    ) -> str:
        return await _call(tools.read_artifact, source_id, offset, limit, record)

    async def read_artifact_bytes(
        source_id: SourceId,
        start: Annotated[int, Field(ge=0, description=PARAMETER_DESCRIPTIONS["start"])] = 0,
        length: Annotated[
            int, Field(ge=1, le=MAX_BYTES_LENGTH, description=PARAMETER_DESCRIPTIONS["length"])
        ] = 65536,
    ) -> CallToolResult:
        chunk = await _call(tools.read_artifact_bytes, source_id, start, length)
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

    async def grep_artifact(
        source_id: SourceId,
        pattern: Annotated[str, Field(min_length=1, description=PARAMETER_DESCRIPTIONS["pattern"])],
        context: Annotated[
            int, Field(ge=0, le=50, description=PARAMETER_DESCRIPTIONS["context"])
        ] = 0,
        max_matches: Annotated[
            int, Field(ge=1, le=MAX_MATCHES, description=PARAMETER_DESCRIPTIONS["max_matches"])
        ] = 50,
        timeout: Annotated[
            float,
            Field(gt=0, le=MAX_GREP_TIMEOUT, description=PARAMETER_DESCRIPTIONS["timeout"]),
        ] = DEFAULT_TIMEOUT,
    ) -> str:
        cancel = threading.Event()
        run = functools.partial(tools.grep_artifact, cancel=cancel)
        return await _call(
            run, source_id, pattern, context, max_matches, timeout, cancel=cancel, limiter=searches
        )

    async def query_artifact(
        source_id: SourceId,
        expression: Annotated[
            str, Field(min_length=1, description=PARAMETER_DESCRIPTIONS["expression"])
        ],
        language: Annotated[
            Literal["jq", "jmespath"], Field(description=PARAMETER_DESCRIPTIONS["language"])
        ] = "jq",
        timeout: Annotated[
            float,
            Field(gt=0, le=MAX_GREP_TIMEOUT, description=PARAMETER_DESCRIPTIONS["timeout"]),
        ] = DEFAULT_QUERY_TIMEOUT,
    ) -> str:
        return await _call(
            tools.query_artifact, source_id, expression, language, timeout, limiter=searches
        )

    async def list_artifacts() -> str:
        return await _call(tools.list_artifacts)

    for fn, description, hints in (
        (read_artifact, READ_ARTIFACT_DESCRIPTION, _READ_ONLY),
        (read_artifact_bytes, READ_ARTIFACT_BYTES_DESCRIPTION, _READ_ONLY),
        (grep_artifact, GREP_ARTIFACT_DESCRIPTION, _READ_ONLY),
        (query_artifact, QUERY_ARTIFACT_DESCRIPTION, _MAY_SAVE),
        (list_artifacts, LIST_ARTIFACTS_DESCRIPTION, _READ_ONLY),
    ):
        server.add_tool(
            fn,
            name=fn.__name__,
            description=description,
            annotations=hints,
            structured_output=False,
        )
    return server
