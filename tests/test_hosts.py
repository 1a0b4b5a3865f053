"""docs/hosts.md: every host recipe parses in its host's format and starts a real server;
the Claude Code Bash hook rewrites a command that then runs under `toolswap run`."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[1]
HOSTS = ROOT / "docs" / "hosts.md"
CHECKOUT = "/path/to/toolswap"
INSTALLED = f"{CHECKOUT}/.venv/bin/toolswap"
"""Where the recipes say `make demo` installs the command."""
TOOLSWAP = str(Path(sys.executable).parent / "toolswap")
"""The command this test run installed (the same file when the suite runs under make)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _blocks(language: str) -> list[str]:
    text = HOSTS.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def _servers() -> list[tuple[str, str, list[str]]]:
    """(host, command, args) of every MCP server entry in the recipes."""
    found: list[tuple[str, str, list[str]]] = []
    for block in _blocks("sh"):
        argv = shlex.split(block.replace("\\\n", " "))
        assert argv[:3] == ["claude", "mcp", "add"], block
        command = argv[argv.index("--") + 1 :]
        found.append(("claude", command[0], command[1:]))
    for block in _blocks("toml"):
        for entry in tomllib.loads(block)["mcp_servers"].values():
            found.append(("codex", entry["command"], entry["args"]))
    for block in _blocks("json"):
        data = json.loads(block)
        if "mcpServers" in data:
            found += [("cursor", e["command"], e["args"]) for e in data["mcpServers"].values()]
        elif "servers" in data:
            for entry in data["servers"].values():
                assert entry["type"] == "stdio"
                found.append(("vscode", entry["command"], entry["args"]))
    return found


def test_every_host_has_recipes_that_parse_and_name_the_installed_command() -> None:
    servers = _servers()
    assert {host for host, _, _ in servers} == {"claude", "codex", "cursor", "vscode"}
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "VENV := .venv" in makefile and "BIN := $(VENV)/bin" in makefile
    for _host, command, args in servers:
        assert command == INSTALLED
        assert args[0] == "mcp" and args[1] in ("serve", "proxy")
        if args[1] == "proxy":
            upstream = args[args.index("--") + 1 :]
            assert upstream[:2] == ["npx", "-y"]
    assert os.access(TOOLSWAP, os.X_OK)


async def test_every_serve_recipe_starts_a_server_that_offers_the_read_tools(
    toolswap_home: Path, tmp_path: Path
) -> None:
    serve = [(host, args) for host, _, args in _servers() if args[1] == "serve"]
    assert len(serve) == 4
    for host, args in serve:
        params = StdioServerParameters(
            command=TOOLSWAP, args=args, env={"TOOLSWAP_HOME": str(toolswap_home), **_pythonpath()}
        )
        with open(tmp_path / "stderr.log", "w", encoding="utf-8") as errlog, anyio.fail_after(60):
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = {t.name for t in (await session.list_tools()).tools}
        assert {"read_artifact", "grep_artifact"} <= names, host


def _pythonpath() -> dict[str, str]:
    """PYTHONPATH, when set: the tree under test, when it is not the installed one."""
    return {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}


def _hook(event: dict[str, Any]) -> str:
    (script,) = _blocks("python")
    script = script.replace(f'TOOLSWAP = "{INSTALLED}"', f"TOOLSWAP = {TOOLSWAP!r}")
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_claude_code_hook_is_registered_for_bash_and_its_rewrite_saves_large_output(
    tmp_path: Path, toolswap_home: Path
) -> None:
    (settings,) = [json.loads(b) for b in _blocks("json") if "hooks" in json.loads(b)]
    (entry,) = settings["hooks"]["PreToolUse"]
    assert entry["matcher"] == "Bash"
    assert entry["hooks"][0]["command"].endswith("toolswap_bash.py")

    command = "seq 1 200000; echo 'error: disk full' >&2; exit 3"
    answer = json.loads(_hook({"tool_name": "Bash", "tool_input": {"command": command}}))
    decision = answer["hookSpecificOutput"]
    assert decision["hookEventName"] == "PreToolUse"
    assert decision["permissionDecision"] == "ask"
    rewritten = decision["updatedInput"]["command"]

    env = {k: v for k, v in os.environ.items() if k != "TOOLSWAP_WORKSPACE"}
    done = subprocess.run(
        ["bash", "-c", rewritten], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 3
    assert "[Artifact: artifact:claude-bash:" in done.stdout
    assert len(done.stdout) + len(done.stderr) < 30_000  # under Claude Code's own cut
    # Already wrapped, or not Bash: the hook leaves the call alone.
    assert _hook({"tool_name": "Bash", "tool_input": {"command": rewritten}}) == ""
    assert _hook({"tool_name": "Read", "tool_input": {"file_path": "/etc/hosts"}}) == ""


def test_claude_code_hook_pointer_names_reads_that_run_through_the_hook_without_toolswap_on_path(
    tmp_path: Path, toolswap_home: Path
) -> None:
    bare = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "toolswap").exists()
    )
    env = {k: v for k, v in os.environ.items() if k != "TOOLSWAP_WORKSPACE"}
    env["PATH"] = bare

    def bash(command: str) -> subprocess.CompletedProcess[str]:
        answer = _hook({"tool_name": "Bash", "tool_input": {"command": command}})
        if answer:  # what Claude Code runs is the hook's rewrite, if it makes one
            command = json.loads(answer)["hookSpecificOutput"]["updatedInput"]["command"]
        return subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True
        )

    assert bash("toolswap --version").returncode == 127  # not on this PATH
    pointer = bash("seq 1 200000").stdout
    (line,) = [x for x in pointer.splitlines() if x.startswith("Read more: ")]
    read, search = line.removeprefix("Read more: ").split(" | search: ")
    assert read.startswith(shlex.quote(TOOLSWAP) + " read artifact:claude-bash:")

    page = bash(read)
    found = bash(search.replace("'PATTERN'", "'^150000$'"))

    assert page.returncode == 0, page.stderr
    first = int(read.split("--offset ")[1].split()[0])
    assert page.stdout.splitlines()[0] == str(first + 1)
    assert found.returncode == 0, found.stderr
    assert "150000" in found.stdout
