"""``toolswap mcp serve`` and the proxy's own tools answer without the MCP SDK, and answer
what the SDK's ``MCPServer`` with the same tools answers, frame by frame, in both protocol
eras.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types
import mcp_types.jsonrpc
import mcp_types.version
import pytest
from mcp_helpers import SESSION, UPSTREAM, proxy_argv, serve_argv
from upstream_data import big_lines, png

from import_recorder import loaded, modules_in, recorder_argv
from toolswap import ToolResultExternalizer
from toolswap.mcp import create_server, local

# The SDK's server over stdio, with the same tools over the same session.
SDK_SERVER = (
    "import sys, anyio\n"
    "from toolswap import ToolResultExternalizer\n"
    "from toolswap.mcp import create_server\n"
    "ext = ToolResultExternalizer(sys.argv[1], read_hint='mcp')\n"
    "anyio.run(create_server(ext).run_stdio_async)\n"
)
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
def session_path(toolswap_home: Path) -> Path:
    return toolswap_home / "projects" / "ws" / SESSION


@pytest.fixture
def ids(session_path: Path) -> dict[str, str]:
    ext = ToolResultExternalizer(session_path, read_hint="mcp")
    return {
        "text": ext.externalize(big_lines(3000), "pytest").artifact.source_id,
        "image": ext.externalize(png(40, 40), "shot").artifact.source_id,
    }


def _exchange(argv: list[str], requests: list[dict[str, Any]]) -> dict[object, Any]:
    """Send every request to a fresh server process; its answers by request id."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    wanted = [r["id"] for r in requests if "id" in r]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[object, Any] = {}
    try:
        for request in requests:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            # One at a time, so each server sees the same order of events.
            while "id" in request and request["id"] not in answers:
                line = proc.stdout.readline()
                assert line, f"no answer to {request}"
                message = json.loads(line)
                if "id" in message and "method" not in message:
                    answers[message["id"]] = message
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        proc.stdout.close()
    assert list(answers) == wanted
    return answers


def _normalized(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer with what may differ between the two servers taken out: the words of an
    argument-validation error (the SDK's are pydantic's) and the error details."""
    result = answer.get("result")
    if isinstance(result, dict) and result.get("isError"):
        (block,) = result["content"]
        if "invalid arguments" in block["text"] or "validation error" in block["text"]:
            block["text"] = block["text"].split(":", 1)[0] + ": <invalid arguments>"
    error = answer.get("error")
    if isinstance(error, dict):
        error.pop("data", None)
    return answer


def _call(request_id: int, name: str, meta: dict[str, Any] | None = None, **args: Any) -> dict:
    params: dict[str, Any] = {"name": name, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _legacy_script(ids: dict[str, str]) -> list[dict[str, Any]]:
    text, image = ids["text"], ids["image"]
    return [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "id": "p", "method": "prompts/list"},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/list"},
        {"jsonrpc": "2.0", "id": 6, "method": "resources/templates/list"},
        _call(7, "read_artifact", source_id=text, offset=1499, limit=3),
        _call(8, "read_artifact", source_id=text, offset="10", limit=2.0),
        _call(9, "read_artifact", source_id=text, offset=10**6),
        _call(10, "read_artifact", source_id=text, offset=-1),
        _call(11, "read_artifact"),
        _call(12, "grep_artifact", source_id=text, pattern="ERROR", context=1),
        _call(13, "grep_artifact", source_id=text, pattern="(unclosed"),
        _call(14, "grep_artifact", source_id=text, pattern="", timeout=0),
        _call(15, "read_artifact_bytes", source_id=image),
        _call(16, "read_artifact_bytes", source_id=text, start=100, length=50),
        _call(17, "list_artifacts"),
        _call(18, "no_such_tool"),
        _call(19, "read_artifact", source_id="artifact:nope"),
        {"jsonrpc": "2.0", "id": 20, "method": "logging/setLevel", "params": {"level": "info"}},
        {"jsonrpc": "2.0", "id": 21, "method": "tools/list", "params": {"_meta": MODERN_META}},
    ]


def _modern_script(ids: dict[str, str]) -> list[dict[str, Any]]:
    text = ids["text"]
    meta = MODERN_META

    def request(request_id: int, method: str, **params: Any) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": {**params, "_meta": meta},
        }

    return [
        request(1, "server/discover"),
        request(2, "tools/list"),
        _call(3, "read_artifact", meta, source_id=text, limit=2),
        _call(4, "grep_artifact", meta, source_id=text, pattern="(unclosed"),
        _call(5, "read_artifact", meta, source_id=text, limit=0),
        request(6, "ping"),
        request(7, "prompts/list"),
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}},
        {
            "jsonrpc": "2.0",
            "id": 10,
            "method": "tools/list",
            "params": {"_meta": {**meta, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
        },
    ]


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_serve_answers_what_the_sdk_server_answers(
    session_path: Path, ids: dict[str, str], era: str
) -> None:
    script = _legacy_script(ids) if era == "legacy" else _modern_script(ids)
    sdk = _exchange([sys.executable, "-c", SDK_SERVER, str(session_path)], script)
    ours = _exchange(serve_argv(), script)

    for request_id, expected in sdk.items():
        assert _normalized(ours[request_id]) == _normalized(expected), request_id


def test_the_artifact_tools_are_defined_as_the_sdk_server_defines_them(
    session_path: Path,
) -> None:
    server = create_server(ToolResultExternalizer(session_path, read_hint="mcp"))

    async def listed() -> list[dict[str, Any]]:
        tools = await server.list_tools()
        return [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools]

    assert local.tool_definitions() == anyio.run(listed)


def test_the_protocol_constants_are_the_sdks() -> None:
    assert local.HANDSHAKE_PROTOCOL_VERSIONS == mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS
    assert local.MODERN_PROTOCOL_VERSIONS == mcp_types.version.MODERN_PROTOCOL_VERSIONS
    assert local.LATEST_HANDSHAKE_VERSION == mcp_types.version.LATEST_HANDSHAKE_VERSION
    assert local.PROTOCOL_VERSION_META_KEY == mcp.types.PROTOCOL_VERSION_META_KEY
    assert local.SERVER_INFO_META_KEY == mcp.types.SERVER_INFO_META_KEY
    assert local.CONNECTION_CLOSED == mcp_types.jsonrpc.CONNECTION_CLOSED
    assert local.INVALID_REQUEST == mcp_types.jsonrpc.INVALID_REQUEST
    assert local.METHOD_NOT_FOUND == mcp_types.jsonrpc.METHOD_NOT_FOUND
    assert local.INVALID_PARAMS == mcp_types.jsonrpc.INVALID_PARAMS


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "source_id: required"),
        ({"source_id": 7}, "source_id: must be a string, got 7"),
        ({"source_id": "x", "offset": -1}, "offset: must be >= 0, got -1"),
        ({"source_id": "x", "limit": 2001}, "limit: must be <= 2000, got 2001"),
        ({"source_id": "x", "limit": "many"}, "limit: must be an integer, got 'many'"),
        ({"source_id": "x", "limit": 1.5}, "limit: must be an integer, got 1.5"),
    ],
)
def test_a_bad_argument_is_a_tool_error_that_names_it(
    session_path: Path, arguments: dict[str, Any], says: str
) -> None:
    tools = local.LocalTools(ToolResultExternalizer(session_path))

    result = tools.call("read_artifact", arguments)

    assert result["isError"] is True
    assert says in result["content"][0]["text"]


# -- what the processes import ------------------------------------------------------------

_SDK = ("mcp", "mcp_types", "pydantic", "starlette", "uvicorn", "httpx")


def _sdk_modules(path: Path) -> list[str]:
    return loaded(modules_in(path), _SDK)


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_serve_and_proxy_never_import_the_sdk(
    tmp_path: Path, ids: dict[str, str], command: str
) -> None:
    out = tmp_path / "modules.json"
    argv = serve_argv() if command == "serve" else proxy_argv()
    argv = recorder_argv(out, *argv[3:])  # after `-m toolswap`
    script = [
        *_legacy_script(ids)[:3],
        _call(4, "read_artifact", source_id=ids["text"], limit=1),
        _call(5, "grep_artifact", source_id=ids["text"], pattern="ERROR"),
    ]
    if command == "proxy":
        script.append(_call(6, "echo", text="through the upstream"))

    answers = _exchange(argv, script)

    assert "line 000001" in answers[4]["result"]["content"][0]["text"]
    assert "ERROR disk quota" in answers[5]["result"]["content"][0]["text"]
    if command == "proxy":
        assert answers[6]["result"]["content"][0]["text"] == "through the upstream"
        assert argv[-len(UPSTREAM) :] == UPSTREAM
    assert _sdk_modules(out) == []
