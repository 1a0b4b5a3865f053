"""The MCP proxy's stdio plumbing: JSON-RPC line framing, the proxy's own descriptors, and
the upstream process (started with exactly the host's environment, stopped with a grace
period).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

__all__ = [
    "READ_CHUNK",
    "STOP_GRACE",
    "LineSplitter",
    "StdFd",
    "close_quietly",
    "describe_exit",
    "dumps_frame",
    "host_environment",
    "loads_frame",
    "pump_frames",
    "say",
    "start_upstream",
    "stop_upstream",
]

READ_CHUNK = 1 << 20
STOP_GRACE = 5.0
"""Seconds the upstream gets to exit after its stdin closes, and again after SIGTERM."""

_INITIAL_ENVIRON = "/proc/self/environ"


def host_environment() -> dict[str, str]:
    """The environment this process was started with, as the host gave it.

    Python changes its own environment at startup (under the C locale it sets
    ``LC_CTYPE=C.UTF-8``, PEP 538), and an upstream started with ``os.environ`` would see
    that change. Linux keeps the environment the process was executed with in
    ``/proc/self/environ``; elsewhere ``os.environ`` is the best there is.
    """
    try:
        with open(_INITIAL_ENVIRON, "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def dumps_frame(message: Mapping[str, Any]) -> bytes:
    """One JSON-RPC message as a newline-terminated UTF-8 frame."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: let JSON escape it
        return (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")


def loads_frame(line: bytes) -> object:
    """The message in a frame, or None if it is not JSON."""
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None


def describe_exit(code: int | None) -> str:
    if code is None:
        return "(still running, but it closed its output)"
    if code < 0:
        return f"(killed by signal {-code})"
    return f"with status {code}"


class LineSplitter:
    """Splits a byte stream into newline-terminated frames without rescanning."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if self._parts:
                self._parts.append(chunk[start : end + 1])
                lines.append(b"".join(self._parts))
                self._parts = []
            else:
                lines.append(chunk[start : end + 1])
            start = end + 1
        if start < len(chunk):
            self._parts.append(chunk[start:])
        return lines

    def rest(self) -> bytes:
        rest = b"".join(self._parts)
        self._parts = []
        return rest


async def pump_frames(
    read: Callable[[], Awaitable[bytes]], handle: Callable[[bytes], Awaitable[None]]
) -> None:
    """Hand each frame of what ``read`` gives to ``handle`` until ``read`` gives nothing;
    an unterminated last frame gets its newline (one of white space only is dropped)."""
    splitter = LineSplitter()
    while chunk := await read():
        for line in splitter.feed(chunk):
            await handle(line)
    rest = splitter.rest()
    if rest.strip():
        await handle(rest + b"\n")


class StdFd:
    """Async reads or writes on one of the proxy's own standard descriptors.

    Pipes, sockets and terminals are made non-blocking and waited on with the event loop,
    so shutting down never waits for a read stuck in a thread; regular files (a debugging
    redirect) are read and written directly, as they never block.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self.pollable = stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)
        self._was_blocking = os.get_blocking(fd)
        if self.pollable:
            os.set_blocking(fd, False)

    def restore(self) -> None:
        if self.pollable:
            with contextlib.suppress(OSError):
                os.set_blocking(self.fd, self._was_blocking)

    async def read(self) -> bytes:
        while True:
            try:
                return os.read(self.fd, READ_CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            view = view[written:]


async def start_upstream(argv: Sequence[str], env: Mapping[str, str] | None) -> anyio.abc.Process:
    """Start the upstream with pipes for stdin/stdout; its stderr is the proxy's.

    Args:
        argv: the upstream's command line.
        env: its environment (default: the host's, see :func:`host_environment`).

    Raises:
        OSError: the command cannot be started.
    """
    return await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env=dict(env) if env is not None else host_environment(),
    )


async def close_quietly(stream: anyio.abc.ByteSendStream | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


async def stop_upstream(proc: anyio.abc.Process) -> int | None:
    """Close the upstream's stdin and wait for it to exit; terminate, then kill it."""
    if proc.returncode is not None:
        return proc.returncode
    await close_quietly(proc.stdin)
    for signal in ("wait", "terminate", "kill"):
        if signal == "terminate":
            proc.terminate()
        elif signal == "kill":
            proc.kill()
        with anyio.move_on_after(STOP_GRACE):
            return await proc.wait()
    return proc.returncode


def say(message: str) -> None:
    """A line on the proxy's stderr (the host's log)."""
    print(f"toolswap mcp proxy: {message}", file=sys.stderr, flush=True)
