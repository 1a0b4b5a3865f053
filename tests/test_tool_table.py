"""The tool table is the one declaration both MCP faces are built from.

That the SDK server's ``tools/list`` equals the table's JSON for every real tool and
parameter is tested in ``tests/mcp/test_mcp_serve.py``
(``test_the_artifact_tools_are_defined_as_the_sdk_server_defines_them``). Here a table the
tests make up is put on both faces: what it declares appears on each, and each accepts and
refuses the same values.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from toolswap._tool_table import TOOLS, ToolArg, ToolSpec
from toolswap.mcp.server import _add_tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _read_artifact_with(*extra: ToolArg) -> ToolSpec:
    spec = next(spec for spec in TOOLS if spec.name == "read_artifact")
    return dataclasses.replace(spec, arguments=(*spec.arguments, *extra))


async def _sdk_face(spec: ToolSpec) -> tuple[MCPServer[Any], list[dict[str, Any]]]:
    """A server offering only ``spec``, whose tool answers with the arguments it was given."""
    server: MCPServer[Any] = MCPServer("probe")

    async def body(**arguments: Any) -> str:
        return repr(sorted(arguments.items()))

    _add_tool(server, spec, body)
    listed = [
        t.model_dump(by_alias=True, mode="json", exclude_none=True)
        for t in await server.list_tools()
    ]
    return server, listed


async def test_a_parameter_added_to_the_table_is_offered_by_both_faces() -> None:
    spec = _read_artifact_with(ToolArg("max_matches", int, 50, minimum=1, maximum=500))

    _, listed = await _sdk_face(spec)

    assert listed == [spec.definition()]
    assert spec.definition()["inputSchema"]["properties"]["max_matches"] == {
        "default": 50,
        "description": spec.arguments[-1].description,
        "maximum": 500,
        "minimum": 1,
        "title": "Max Matches",
        "type": "integer",
    }


async def test_a_required_parameter_after_optional_ones_is_required_on_both_faces() -> None:
    spec = _read_artifact_with(ToolArg("pattern", str, min_length=1))

    _, listed = await _sdk_face(spec)

    assert listed == [spec.definition()]
    assert spec.definition()["inputSchema"]["required"] == ["source_id", "pattern"]


_PROBE = ToolSpec(
    "probe",
    "Takes one argument of each kind the table declares.",
    (
        ToolArg("source_id", str),
        ToolArg("pattern", str, min_length=1),
        ToolArg("context", int, 0, minimum=0, maximum=50),
        ToolArg("timeout", float, 10.0, exclusive_minimum=0, maximum=120.0),
        ToolArg("language", str, "jq", choices=("jq", "jmespath")),
    ),
    may_save=True,
)
_GIVEN: list[dict[str, Any]] = [
    {"source_id": "a", "pattern": "x"},
    {"source_id": "a", "pattern": ""},
    {"source_id": "a"},
    {"source_id": 7, "pattern": "x"},
    {"source_id": "a", "pattern": "x", "context": "12"},
    {"source_id": "a", "pattern": "x", "context": 3.0},
    {"source_id": "a", "pattern": "x", "context": 3.5},
    {"source_id": "a", "pattern": "x", "context": 51},
    {"source_id": "a", "pattern": "x", "context": -1},
    {"source_id": "a", "pattern": "x", "timeout": 0},
    {"source_id": "a", "pattern": "x", "timeout": "2.5"},
    {"source_id": "a", "pattern": "x", "timeout": 120},
    {"source_id": "a", "pattern": "x", "timeout": 120.5},
    {"source_id": "a", "pattern": "x", "language": "jmespath"},
    {"source_id": "a", "pattern": "x", "language": "sql"},
]


async def test_both_faces_accept_and_refuse_the_same_arguments() -> None:
    server, listed = await _sdk_face(_PROBE)
    assert listed == [_PROBE.definition()]

    with anyio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            for given in _GIVEN:
                checked = {arg.name: arg.value(given) for arg in _PROBE.arguments}
                result = await client.call_tool("probe", given)
                block = result.content[0]
                assert isinstance(block, TextContent)
                if any(problem for _, problem in checked.values()):
                    assert result.is_error, given
                else:
                    values = sorted((name, value) for name, (value, _) in checked.items())
                    assert not result.is_error, (given, block.text)
                    assert block.text == repr(values), given
