"""The MCP part of the demo runs end to end and shows the pointer and the page faults."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap.mcp.demo import SESSION, WORKSPACE, run_mcp_demo


def test_mcp_demo_pages_a_large_result_through_the_proxy(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "demo-home"
    run_mcp_demo(home)
    out = capfd.readouterr().out
    assert "added by toolswap:         read_artifact, read_artifact_bytes" in out
    assert "stdlib_index() -> the host receives a pointer of" in out
    assert "json/decoder.py" in out
    assert "is a tool error the model can act on" in out
    ext = ToolResultExternalizer(home / "projects" / WORKSPACE / SESSION)
    [artifact] = ext.list_artifacts()
    assert artifact.source_tool == "stdlib_index"
    assert artifact.byte_size > 50 * 1024
