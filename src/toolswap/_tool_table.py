"""The artifact tools as MCP declares them: for each tool its name, description, arguments
(type, default, bounds) and whether a call may save a new artifact.

The one home of these declarations. :mod:`toolswap.mcp.local` answers ``tools/list`` with
:meth:`ToolSpec.definition` and checks a call's arguments with :meth:`ToolArg.value`, without
the SDK; :mod:`toolswap.mcp.server` turns each :class:`ToolSpec` into the signature from which
the SDK's ``MCPServer`` derives the same schema and checks. A parameter added here appears on
both. This module imports neither the SDK nor pydantic: ``toolswap mcp serve`` must not pay
for them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._tool_descriptions import (
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
from .grep import DEFAULT_TIMEOUT

__all__ = ["TOOLS", "ToolArg", "ToolSpec"]

_READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}
# A query's result or a record too large to return is saved as a new artifact: the call
# may write (it adds, never changes or removes, so it is not destructive), and asking twice
# saves the result twice.
_MAY_SAVE = {
    "readOnlyHint": False,
    "destructiveHint": False,
    "idempotentHint": False,
    "openWorldHint": False,
}

_JSON_TYPES = {int: "integer", float: "number", str: "string"}


@dataclass(frozen=True, slots=True)
class ToolArg:
    """One argument of a tool: its JSON schema and the check its value gets."""

    name: str
    """Also the key of its text in ``PARAMETER_DESCRIPTIONS``."""
    kind: type[int] | type[float] | type[str]
    default: int | float | str | None = None
    """None: required."""
    minimum: float | None = None
    exclusive_minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    choices: tuple[str, ...] = ()
    """The only values a string may take (none: any)."""

    @property
    def description(self) -> str:
        return PARAMETER_DESCRIPTIONS[self.name]

    def schema(self) -> dict[str, Any]:
        """The argument's JSON schema, as the SDK (pydantic) writes it."""
        schema: dict[str, Any] = {}
        if self.default is not None:
            schema["default"] = self.default
        schema["description"] = self.description
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
        schema["type"] = _JSON_TYPES[self.kind]
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


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool: what ``tools/list`` says about it, and the arguments a call may pass."""

    name: str
    description: str
    arguments: tuple[ToolArg, ...] = ()
    """In the order the schema lists them."""
    may_save: bool = False
    """Whether a call may save its result as a new artifact (so it is neither read-only nor
    idempotent)."""

    def hints(self) -> dict[str, bool]:
        """The tool's MCP annotations, as JSON."""
        return dict(_MAY_SAVE if self.may_save else _READ_ONLY)

    def input_schema(self) -> dict[str, Any]:
        """The tool's ``inputSchema``, as the SDK (pydantic) writes it."""
        schema: dict[str, Any] = {
            "properties": {arg.name: arg.schema() for arg in self.arguments},
            "title": f"{self.name}Arguments",
            "type": "object",
        }
        required = [arg.name for arg in self.arguments if arg.default is None]
        if required:
            schema["required"] = required
        return schema

    def definition(self) -> dict[str, Any]:
        """The tool as ``tools/list`` gives it."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema(),
            "annotations": self.hints(),
        }


_SOURCE_ID = ToolArg("source_id", str)

TOOLS = (
    ToolSpec(
        "read_artifact",
        READ_ARTIFACT_DESCRIPTION,
        (
            _SOURCE_ID,
            ToolArg("offset", int, 0, minimum=0),
            ToolArg("limit", int, 200, minimum=1, maximum=MAX_LIMIT),
            ToolArg("record", str, ""),
        ),
    ),
    ToolSpec(
        "read_artifact_bytes",
        READ_ARTIFACT_BYTES_DESCRIPTION,
        (
            _SOURCE_ID,
            ToolArg("start", int, 0, minimum=0),
            ToolArg("length", int, 65536, minimum=1, maximum=MAX_BYTES_LENGTH),
        ),
    ),
    ToolSpec(
        "grep_artifact",
        GREP_ARTIFACT_DESCRIPTION,
        (
            _SOURCE_ID,
            ToolArg("pattern", str, min_length=1),
            ToolArg("context", int, 0, minimum=0, maximum=50),
            ToolArg("max_matches", int, 50, minimum=1, maximum=MAX_MATCHES),
            ToolArg(
                "timeout", float, DEFAULT_TIMEOUT, exclusive_minimum=0, maximum=MAX_GREP_TIMEOUT
            ),
        ),
    ),
    ToolSpec(
        "query_artifact",
        QUERY_ARTIFACT_DESCRIPTION,
        (
            _SOURCE_ID,
            ToolArg("expression", str, min_length=1),
            ToolArg("language", str, "jq", choices=("jq", "jmespath")),
            ToolArg(
                "timeout",
                float,
                DEFAULT_QUERY_TIMEOUT,
                exclusive_minimum=0,
                maximum=MAX_GREP_TIMEOUT,
            ),
        ),
        may_save=True,
    ),
    ToolSpec("list_artifacts", LIST_ARTIFACTS_DESCRIPTION),
)
"""The artifact tools, in the order ``tools/list`` gives them."""
assert tuple(spec.name for spec in TOOLS) == TOOL_NAMES
