"""pydantic-ai agent with ToolswapToolset, driven by its FunctionModel (no network)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is part of the dev extra")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from scripted import (
    BIG,
    NEEDLE,
    POINTER_MAX,
    expected_line,
    line_number,
    search_logs,
    source_id,
)

from toolswap import ToolResultExternalizer
from toolswap.adapters.pydantic_ai import ToolswapToolset, artifact_toolset


def _answers(messages: list[ModelMessage]) -> list[str]:
    out: list[str] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, (ToolReturnPart, RetryPromptPart)):
                    out.append(str(part.content))
    return out


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Calls the big tool, greps its artifact, reads the line found, tries a bad regex."""
    answers = _answers(messages)
    step = len(answers)
    if step >= 4:
        return ModelResponse(parts=[TextPart("done")])
    if step == 0:
        name, args = "search_logs", {"service": "api"}
    else:
        sid = source_id(answers[0])
        if step == 1:
            name, args = "grep_artifact", {"source_id": sid, "pattern": NEEDLE}
        elif step == 2:
            offset = line_number(answers[1]) - 1
            name, args = "read_artifact", {"source_id": sid, "offset": offset, "limit": 1}
        else:
            name, args = "grep_artifact", {"source_id": sid, "pattern": "(unclosed"}
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=f"c{step}")])


def test_agent_gets_a_pointer_then_greps_and_reads_the_exact_line(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    agent = Agent(
        FunctionModel(script),
        toolsets=[ToolswapToolset(FunctionToolset([search_logs]), ext), artifact_toolset(ext)],
    )

    result = asyncio.run(agent.run("why did the api fail?"))

    assert result.output == "done"
    pointer, found, page, bad = _answers(result.all_messages())
    assert len(pointer.encode()) <= POINTER_MAX
    assert ext.get_artifact(source_id(pointer)).path.read_text(encoding="utf-8") == BIG
    assert f"{line_number(found)}:{expected_line()}" in found
    assert page.splitlines()[1].split("\t", 1)[1] == expected_line()
    assert bad.split(":", 1)[0].endswith("Error") and "(unclosed" in bad


def test_read_tools_carry_argument_descriptions(tmp_path: Path) -> None:
    seen: dict[str, dict[str, object]] = {}

    def look(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for tool in info.function_tools:
            seen[tool.name] = tool.parameters_json_schema
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(
        FunctionModel(look), toolsets=[artifact_toolset(ToolResultExternalizer(tmp_path / "s"))]
    )
    asyncio.run(agent.run("hi"))

    assert set(seen) == {
        "read_artifact",
        "read_artifact_bytes",
        "grep_artifact",
        "query_artifact",
        "list_artifacts",
    }
    properties = seen["grep_artifact"]["properties"]
    assert isinstance(properties, dict)
    assert all(p.get("description") for p in properties.values())
