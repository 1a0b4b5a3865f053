"""MCP test helpers: real stdio subprocesses, driven by the SDK's client or by raw JSON-RPC.

No in-memory fakes: the proxy, the toolswap server and the test upstream
(``upstream_server.py``) all run as their own processes. (A module of its own, not the
conftest, so tests can import it by name.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc
from mcp import ClientSession, StdioServerParameters, stdio_client

import toolswap

HERE = Path(__file__).resolve().parent
UPSTREAM = [sys.executable, str(HERE / "upstream_server.py")]
SESSION = "s1"
HANG_GUARD = 60
"""Seconds before a stuck test fails (a guard against hangs, not a timing assertion)."""


def make_errlog(tmp_path: Path) -> IO[str]:
    """A file for the subprocesses' stderr (some tests read it back)."""
    return open(tmp_path / "stderr.log", "w+", encoding="utf-8")


def proxy_argv(*options: str, upstream: list[str] | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "toolswap",
        "mcp",
        "proxy",
        "--session",
        SESSION,
        *options,
        "--",
        *(upstream or UPSTREAM),
    ]


def serve_argv(*options: str) -> list[str]:
    return [sys.executable, "-m", "toolswap", "mcp", "serve", "--session", SESSION, *options]


def child_env(**extra: str) -> dict[str, str]:
    """What the subprocesses need beyond the SDK's default environment."""
    env = {
        "TOOLSWAP_HOME": os.environ["TOOLSWAP_HOME"],
        "TOOLSWAP_WORKSPACE": os.environ["TOOLSWAP_WORKSPACE"],
        # The tree under test, not whichever toolswap the interpreter would find (the SDK
        # passes no PYTHONPATH: an installed checkout elsewhere would answer instead).
        "PYTHONPATH": str(Path(toolswap.__file__).resolve().parent.parent),
    }
    if "PYTHONPATH" in os.environ:  # the tree under test, when it is not the installed one
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    env.update(extra)
    return env


@asynccontextmanager
async def connect(
    argv: list[str],
    errlog: IO[str],
    *,
    era: str = "legacy",
    env: dict[str, str] | None = None,
) -> AsyncIterator[ClientSession]:
    """The SDK's stdio client and session, connected and negotiated (``legacy`` handshake
    or ``modern`` discover)."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env or child_env())
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        if era == "modern":
            await session.discover()
        else:
            await session.initialize()
        yield session


class RawPeer:
    """A subprocess spoken to in raw JSON-RPC lines (to see the exact bytes)."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        self.proc = proc
        self._buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send((json.dumps(message) + "\n").encode())

    async def line(self) -> bytes:
        """The next frame, or b"" at end of stream."""
        assert self.proc.stdout is not None
        while b"\n" not in self._buffer:
            try:
                self._buffer += await self.proc.stdout.receive()
            except anyio.EndOfStream:
                rest, self._buffer = self._buffer, b""
                return rest
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> bytes:
        """Send a request; return the raw frame that answers it (skipping notifications)."""
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            frame = await self.line()
            if not frame:
                raise EOFError(f"the peer closed its output before answering {method}")
            message = json.loads(frame)
            if "method" not in message and message.get("id") == request_id:
                return frame

    async def handshake(self) -> bytes:
        frame = await self.request(
            0,
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "1"},
            },
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return frame


@asynccontextmanager
async def raw_peer(
    argv: list[str], errlog: IO[str], *, env: dict[str, str] | None = None
) -> AsyncIterator[RawPeer]:
    """A subprocess with pipes (environment: ours plus :func:`child_env`, or ``env``)."""
    env = env if env is not None else {**os.environ, **child_env()}
    proc = await anyio.open_process(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, env=env
    )
    try:
        yield RawPeer(proc)
    finally:
        with anyio.CancelScope(shield=True):
            if proc.stdin is not None:
                await proc.stdin.aclose()
            with anyio.move_on_after(HANG_GUARD):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
            await proc.aclose()
