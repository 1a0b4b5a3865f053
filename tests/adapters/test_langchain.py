"""LangChain v1 agent with ToolswapMiddleware, driven by a scripted chat model (no network)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the langchain extra is part of the dev extra")

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
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
from toolswap.adapters.langchain import ToolswapMiddleware, artifact_langchain_tools


class ScriptedModel(BaseChatModel):
    """Calls the big tool, greps its artifact, reads the line found, tries a bad regex."""

    @property
    def _llm_type(self) -> str:
        return "toolswap-scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        answers = [m for m in messages if isinstance(m, ToolMessage)]
        step = len(answers)
        if step == 0:
            call = ("search_logs", {"service": "api"})
        elif step == 1:
            sid = source_id(str(answers[0].content))
            call = ("grep_artifact", {"source_id": sid, "pattern": NEEDLE})
        elif step == 2:
            sid = source_id(str(answers[0].content))
            offset = line_number(str(answers[1].content)) - 1
            call = ("read_artifact", {"source_id": sid, "offset": offset, "limit": 1})
        elif step == 3:
            sid = source_id(str(answers[0].content))
            call = ("grep_artifact", {"source_id": sid, "pattern": "(unclosed"})
        else:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="done"))])
        name, args = call
        message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"c{step}"}])
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_agent_gets_a_pointer_then_greps_and_reads_the_exact_line(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    agent = create_agent(
        ScriptedModel(), tools=[tool(search_logs)], middleware=[ToolswapMiddleware(ext)]
    )

    state = agent.invoke({"messages": [{"role": "user", "content": "why did the api fail?"}]})

    answers = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    pointer, found, page, bad = (str(m.content) for m in answers)
    assert len(pointer.encode()) <= POINTER_MAX
    sid = source_id(pointer)
    assert ext.get_artifact(sid).path.read_text(encoding="utf-8") == BIG
    assert f"{line_number(found)}:{expected_line()}" in found
    assert page.splitlines()[1].split("\t", 1)[1] == expected_line()
    # A bad regex is the tool's answer (status error) with the real typed message.
    assert answers[3].status == "error"
    assert bad.split(":", 1)[0].endswith("Error") and "(unclosed" in bad
    assert state["messages"][-1].content == "done"


def test_read_tools_carry_argument_descriptions() -> None:
    tools = {t.name: t for t in artifact_langchain_tools()}
    assert set(tools) == {
        "read_artifact",
        "read_artifact_bytes",
        "grep_artifact",
        "query_artifact",
        "list_artifacts",
    }
    for name in ("read_artifact", "grep_artifact", "read_artifact_bytes"):
        for arg, schema in tools[name].args.items():
            assert schema.get("description"), (name, arg)
    assert "instead of running the original command again" in tools["read_artifact"].description
