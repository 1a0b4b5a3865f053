"""The artifact tools as MCP tools on plain JSON-RPC values, without the MCP SDK.

What ``tools/list`` says about ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact``
and ``list_artifacts`` (:func:`tool_definitions`), and what ``tools/call`` answers
(:class:`LocalTools`), as JSON-ready dicts. ``toolswap mcp serve`` and ``toolswap mcp proxy``
answer with this module, so neither imports the SDK, whose import alone takes longer than a
host waits comfortably for ``initialize`` (about 1.5 s). :func:`toolswap.mcp.create_server`
offers the same tools through the SDK's ``MCPServer``. Both faces are built from one table
(:mod:`toolswap._tool_table`); the tests hold them to the same definitions and answers.

The calls block (they verify digests and run searches): run them on worker threads.
"""

from __future__ import annotations

import base64
import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._fork import track
from .._tool_table import TOOLS
from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer

if TYPE_CHECKING:
    from ..tools import ArtifactTools

__all__ = [
    "CONNECTION_CLOSED",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "INSTRUCTIONS",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_HANDSHAKE_VERSION",
    "METHOD_NOT_FOUND",
    "MODERN_PROTOCOL_VERSIONS",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO_META_KEY",
    "LocalTools",
    "tool_definitions",
]

# -- the protocol's constants (the SDK's values; tests/mcp checks them against it) ---------

HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Revisions negotiated with ``initialize``."""
MODERN_PROTOCOL_VERSIONS = ("2026-07-28",)
"""Revisions whose every request carries its version in ``_meta`` (``server/discover``)."""
LATEST_HANDSHAKE_VERSION = HANDSHAKE_PROTOCOL_VERSIONS[-1]
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
CONNECTION_CLOSED = -32000
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

INSTRUCTIONS = """\
Large tool results are saved whole as artifacts; the conversation gets a pointer instead: \
[Artifact: artifact:<session>:tool_result_NNN.txt:<hash>], a summary, the head and tail, \
lines from the middle that look like failures, and the exact call that reads more. When a \
result shows such a pointer, page the saved output with read_artifact or search it with \
grep_artifact; do not run the original tool again to see what was cut."""

_TOOLS = {spec.name: spec for spec in TOOLS}


def tool_definitions() -> list[dict[str, Any]]:
    """The artifact tools as ``tools/list`` gives them (the same JSON the SDK's server gives)."""
    return [spec.definition() for spec in TOOLS]


# -- calls -------------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _error(text: str) -> dict[str, Any]:
    return {"content": [_text(text)], "isError": True}


class LocalTools:
    """Answers ``tools/call`` of the five artifact tools over one session.

    Args:
        externalizer: the session whose artifacts are read (sibling sessions too, by
            source ID).
    """

    def __init__(self, externalizer: ToolResultExternalizer) -> None:
        self._externalizer = externalizer
        self._made: ArtifactTools | None = None
        self._lock = threading.Lock()
        track(self)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # (see _fork)

    @property
    def _tools(self) -> ArtifactTools:
        """The tools, made on the first call (a proxy may never answer one)."""
        with self._lock:
            if self._made is None:
                from ..tools import ArtifactTools

                self._made = ArtifactTools(self._externalizer)
            return self._made

    @staticmethod
    def is_search(name: str) -> bool:
        """Whether the call runs a search (searches get a pool of their own)."""
        return name in ("grep_artifact", "query_artifact")

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        cancel: threading.Event | None = None,
    ) -> dict[str, Any]:
        """The ``tools/call`` result (``content``, ``isError``) for one call; never raises
        for a bad call, an artifact that cannot be read or a failing search.

        Args:
            cancel: set it from another thread to stop a running search.
        """
        spec = _TOOLS.get(name)
        if spec is None:
            return _error(f"Unknown tool: {name}")
        given = arguments if isinstance(arguments, Mapping) else {}
        values: dict[str, Any] = {}
        problems = []
        for arg in spec.arguments:
            value, problem = arg.value(given)
            if problem is not None:
                problems.append(problem)
            values[arg.name] = value
        if problems:
            return _error(f"Error executing tool {name}: invalid arguments: {'; '.join(problems)}")
        try:
            return self._run(name, values, cancel)
        except ToolswapError as exc:
            return _error(f"Error executing tool {name}: {exc}")
        except OSError as exc:
            return _error(
                f"Error executing tool {name}: cannot read the artifact "
                f"({exc.strerror or exc}); check the session directory's permissions, or run "
                "the tool again"
            )
        except Exception as exc:  # a bug here must not take the server down
            print(f"toolswap mcp: {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return _error(f"Error executing tool {name}")

    def _run(
        self, name: str, values: dict[str, Any], cancel: threading.Event | None
    ) -> dict[str, Any]:
        tools = self._tools
        if name == "read_artifact_bytes":
            chunk = tools.read_artifact_bytes(
                values["source_id"], values["start"], values["length"]
            )
            ref = chunk.artifact
            if chunk.whole and ref.binary and ref.media_type.startswith("image/"):
                # The model asked for the whole image: show it as an image, not base64 text.
                image = {
                    "type": "image",
                    "data": base64.b64encode(chunk.data).decode("ascii"),
                    "mimeType": ref.media_type,
                }
                header = (
                    f"[{ref.source_id}: the whole image, {ref.media_type}, {ref.byte_size:,} bytes]"
                )
                return {"content": [_text(header), image], "isError": False}
            return {"content": [_text(chunk.text)], "isError": False}
        if name == "grep_artifact":
            text = tools.grep_artifact(**values, cancel=cancel)
        elif name == "query_artifact":
            text = tools.query_artifact(**values)
        elif name == "read_artifact":
            text = tools.read_artifact(**values)
        else:
            text = tools.list_artifacts()
        return {"content": [_text(text)], "isError": False}
