"""OpenAI Agents SDK with toolswap's function tools, driven by a scripted Model (no network)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="the openai-agents extra is part of the dev extra")

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
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
from toolswap.adapters.openai_agents import artifact_function_tools, externalized_function_tool
from toolswap.tools import artifact_tools


def _outputs(items: str | list[Any]) -> list[str]:
    if isinstance(items, str):
        return []
    return [
        str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]


class ScriptedModel(Model):
    """Calls the big tool, greps its artifact, reads the line found, tries a bad regex."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        outputs = _outputs(input)
        self.seen = outputs
        step = len(outputs)
        if step >= 4:
            text = ResponseOutputText(text="done", type="output_text", annotations=[])
            message = ResponseOutputMessage(
                id="m", content=[text], role="assistant", status="completed", type="message"
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        if step == 0:
            name, args = "search_logs", {"service": "api"}
        else:
            sid = source_id(outputs[0])
            if step == 1:
                name, args = (
                    "grep_artifact",
                    {"source_id": sid, "pattern": NEEDLE, "context": 0, "max_matches": 5},
                )
            elif step == 2:
                offset = line_number(outputs[1]) - 1
                name, args = "read_artifact", {"source_id": sid, "offset": offset, "limit": 1}
            else:
                name, args = (
                    "grep_artifact",
                    {"source_id": sid, "pattern": "(unclosed", "context": 0, "max_matches": 5},
                )
        call = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"call-{step}",
            name=name,
            arguments=json.dumps(args),
            id=f"fc-{step}",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def test_agent_gets_a_pointer_then_greps_and_reads_the_exact_line(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    model = ScriptedModel()
    agent = Agent(
        name="ops",
        model=model,
        tools=[externalized_function_tool(search_logs, ext), *artifact_function_tools(ext)],
    )

    result = asyncio.run(
        Runner.run(agent, "why did the api fail?", run_config=RunConfig(tracing_disabled=True))
    )

    assert result.final_output == "done"
    pointer, found, page, bad = model.seen
    assert len(pointer.encode()) <= POINTER_MAX
    assert ext.get_artifact(source_id(pointer)).path.read_text(encoding="utf-8") == BIG
    assert f"{line_number(found)}:{expected_line()}" in found
    assert page.splitlines()[1].split("\t", 1)[1] == expected_line()
    # The real, typed message, not "An error occurred while running the tool".
    assert bad.split(":", 1)[0].endswith("Error") and "(unclosed" in bad
    assert "An error occurred" not in bad


def test_plain_function_tool_hides_the_message_that_the_adapter_shows(tmp_path: Path) -> None:
    """Why the adapter exists: the SDK's default error handler hides the reason."""
    ext = ToolResultExternalizer(tmp_path / "s1")
    plain = {f.__name__: function_tool(f) for f in artifact_tools(ext)}
    ours = {t.name: t for t in artifact_function_tools(ext)}
    args = json.dumps(
        {"source_id": "artifact:s1:tool_result_001.txt:000000000000", "offset": 0, "limit": 1}
    )

    async def call(tool: Any) -> str:
        from agents.tool_context import ToolContext

        ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id="c1", tool_arguments=args)
        return str(await tool.on_invoke_tool(ctx, args))

    assert asyncio.run(call(plain["read_artifact"])).startswith("An error occurred")
    shown = asyncio.run(call(ours["read_artifact"]))
    assert shown.startswith("ArtifactNotFoundError:") and "list_artifacts()" in shown
