"""The artifact tools as MCP tools on plain JSON-RPC values, without the MCP SDK.

What ``tools/list`` says about ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact``
and ``list_artifacts`` (:func:`tool_definitions`), and what ``tools/call`` answers
(:class:`LocalTools`), as JSON-ready dicts. ``toolswap mcp serve`` and ``toolswap mcp proxy``
answer with this module, so neither imports the SDK, whose import alone takes longer than a
host waits comfortably for ``initialize`` (about 1.5 s). :func:`toolswap.mcp.create_server`
offers the same tools through the SDK's ``MCPServer``; the tests hold the two to the same
definitions and answers.

The calls block (they verify digests and run searches): run them on worker threads.
"""

from __future__ import annotations

import base64
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._tool_descriptions import (
    DEFAULT_QUERY_TIMEOUT,
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
    TOOL_NAMES,
)
from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer
from ..grep import DEFAULT_TIMEOUT

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

_READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}
# A query's result or a record too large to return is saved as a new artifact: the call
# may write (it adds, never changes or removes), and asking twice saves the result twice.
_MAY_SAVE = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": False,
}

_SAVING = ("query_artifact",)
"""The tools that may save a result as a new artifact."""

# -- arguments ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Arg:
    """One argument of a tool: its JSON schema and the check its value gets."""

    name: str
    kind: type[int] | type[float] | type[str]
    default: int | float | str | None = None
    """None: required."""
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    choices: tuple[str, ...] = ()
    """The only values a string may take (none: any)."""

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {}
        if self.default is not None:
            schema["default"] = self.default
        schema["description"] = PARAMETER_DESCRIPTIONS[self.name]
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.exclusive_minimum is not None:
            schema["exclusiveMinimum"] = self.exclusive_minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.min_length is not None:
            schema["minLength"] = self.min_length
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        schema["title"] = self.name.replace("_", " ").title()
        schema["type"] = {int: "integer", float: "number", str: "string"}[self.kind]
        return schema

    def value(self, arguments: Mapping[str, Any]) -> tuple[object, str | None]:
        """The argument's value, converted as the SDK's validation does; or why it is bad."""
        if self.name not in arguments:
            if self.default is None:
                return None, f"{self.name}: required"
            return self.default, None
        raw = arguments[self.name]
        value = _convert(raw, self.kind)
        if value is None:
            kind = {int: "an integer", float: "a number", str: "a string"}[self.kind]
            return None, f"{self.name}: must be {kind}, got {raw!r}"
        if isinstance(value, str):
            if self.min_length is not None and len(value) < self.min_length:
                return None, f"{self.name}: must not be empty"
            if self.choices and value not in self.choices:
                allowed = " or ".join(repr(c) for c in self.choices)
                return None, f"{self.name}: must be {allowed}, got {raw!r}"
            return value, None
        assert isinstance(value, (int, float))
        if self.minimum is not None and value < self.minimum:
            return None, f"{self.name}: must be >= {self.minimum:g}, got {raw!r}"
        if self.exclusive_minimum is not None and value <= self.exclusive_minimum:
            return None, f"{self.name}: must be > {self.exclusive_minimum:g}, got {raw!r}"
        if self.maximum is not None and value > self.maximum:
            return None, f"{self.name}: must be <= {self.maximum:g}, got {raw!r}"
        return value, None


_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def _convert(raw: object, kind: type) -> int | float | str | None:
    """``raw`` as ``kind`` the way the SDK's (pydantic's, lax) validation takes JSON values:
    integral numbers and numeric strings for numbers, only strings for strings."""
    if kind is str:
        return raw if isinstance(raw, str) else None
    if isinstance(raw, bool):
        return int(raw)
    if kind is int:
        if isinstance(raw, int):
            return raw
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
        if isinstance(raw, str) and _INTEGER.fullmatch(raw):
            return int(raw)
        return None
    if isinstance(raw, (int, float)):
        return float(raw) if isinstance(raw, int) else raw
    if isinstance(raw, str) and _NUMBER.fullmatch(raw):
        return float(raw)
    return None


_ARGUMENTS: dict[str, tuple[_Arg, ...]] = {
    "read_artifact": (
        _Arg("source_id", str),
        _Arg("offset", int, 0, minimum=0),
        _Arg("limit", int, 200, minimum=1, maximum=MAX_LIMIT),
        _Arg("record", str, ""),
    ),
    "read_artifact_bytes": (
        _Arg("source_id", str),
        _Arg("start", int, 0, minimum=0),
        _Arg("length", int, 65536, minimum=1, maximum=MAX_BYTES_LENGTH),
    ),
    "grep_artifact": (
        _Arg("source_id", str),
        _Arg("pattern", str, min_length=1),
        _Arg("context", int, 0, minimum=0, maximum=50),
        _Arg("max_matches", int, 50, minimum=1, maximum=MAX_MATCHES),
        _Arg("timeout", float, DEFAULT_TIMEOUT, exclusive_minimum=0, maximum=MAX_GREP_TIMEOUT),
    ),
    "query_artifact": (
        _Arg("source_id", str),
        _Arg("expression", str, min_length=1),
        _Arg("language", str, "jq", choices=("jq", "jmespath")),
        _Arg(
            "timeout", float, DEFAULT_QUERY_TIMEOUT, exclusive_minimum=0, maximum=MAX_GREP_TIMEOUT
        ),
    ),
    "list_artifacts": (),
}
_DESCRIPTIONS = {
    "read_artifact": READ_ARTIFACT_DESCRIPTION,
    "read_artifact_bytes": READ_ARTIFACT_BYTES_DESCRIPTION,
    "grep_artifact": GREP_ARTIFACT_DESCRIPTION,
    "query_artifact": QUERY_ARTIFACT_DESCRIPTION,
    "list_artifacts": LIST_ARTIFACTS_DESCRIPTION,
}
assert tuple(_ARGUMENTS) == TOOL_NAMES


def tool_definitions() -> list[dict[str, Any]]:
    """The artifact tools as ``tools/list`` gives them (the same JSON the SDK's server gives)."""
    definitions = []
    for name, args in _ARGUMENTS.items():
        schema: dict[str, Any] = {
            "properties": {arg.name: arg.schema() for arg in args},
            "title": f"{name}Arguments",
            "type": "object",
        }
        required = [arg.name for arg in args if arg.default is None]
        if required:
            schema["required"] = required
        definitions.append(
            {
                "name": name,
                "description": _DESCRIPTIONS[name],
                "inputSchema": schema,
                "annotations": dict(_MAY_SAVE if name in _SAVING else _READ_ONLY),
            }
        )
    return definitions


# -- calls -------------------------------------------------------------------------------


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _error(text: str) -> dict[str, Any]:
    return {"content": [_text(text)], "isError": True}


class LocalTools:
    """Answers ``tools/call`` of the four artifact tools over one session.

    Args:
        externalizer: the session whose artifacts are read (sibling sessions too, by
            source ID).
    """

    def __init__(self, externalizer: ToolResultExternalizer) -> None:
        self._externalizer = externalizer
        self._made: ArtifactTools | None = None
        self._lock = threading.Lock()

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
        args = _ARGUMENTS.get(name)
        if args is None:
            return _error(f"Unknown tool: {name}")
        given = arguments if isinstance(arguments, Mapping) else {}
        values: dict[str, Any] = {}
        problems = []
        for arg in args:
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
