"""``toolswap mcp serve``: the artifact tools over stdio, without the MCP SDK.

The server speaks JSON-RPC lines on its own descriptors (:mod:`.transport`) and answers
with :mod:`.local`, so it is ready as soon as the interpreter is: a host's ``initialize``
is answered in a fraction of a second, where importing the SDK alone takes about 1.5 s.
It serves both protocol eras the SDK's ``MCPServer`` serves, decided by the client's first
request as the SDK decides it: the ``initialize`` handshake (2024-11-05 .. 2025-11-25), or
the 2026-07-28 per-request envelope (``server/discover``); the tests compare its answers
with the SDK server's, frame by frame.

Calls run on worker threads and never wait for each other: a search runs in a child process
on a pool of its own (4 at a time), so reads are served while searches run; a cancelled call
(``notifications/cancelled``) gets no answer and its search is killed; when the client
closes stdin the server stops every search and exits.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from ..externalizer import ToolResultExternalizer
from .local import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    INSTRUCTIONS,
    INVALID_PARAMS,
    INVALID_REQUEST,
    LATEST_HANDSHAKE_VERSION,
    METHOD_NOT_FOUND,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    LocalTools,
    tool_definitions,
)
from .transport import StdFd, dumps_frame, loads_frame, pump_frames, request_key

__all__ = ["LocalCalls", "StdioServer", "run_server"]

_CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
_UNSUPPORTED_PROTOCOL_VERSION = -32022
_PARSE_ERROR = -32700
_SEARCHES = 4
"""Searches that run at once; more wait for a slot (reads never do)."""
_LISTS = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}


def server_info() -> dict[str, str]:
    """``serverInfo``: toolswap and its version."""
    from .. import __version__

    return {"name": "toolswap", "version": __version__}


class LocalCalls:
    """The artifact tools' calls on worker threads, cancellable by request (shared by the
    server and the proxy).

    Args:
        externalizer: the session whose artifacts are read.
    """

    def __init__(self, externalizer: ToolResultExternalizer) -> None:
        self.tools = LocalTools(externalizer)
        self._searches = anyio.CapacityLimiter(_SEARCHES)
        self._running: dict[str, tuple[anyio.CancelScope, threading.Event]] = {}

    async def call(self, key: str, name: str, arguments: object) -> dict[str, Any] | None:
        """The ``tools/call`` result, or None when the call was cancelled (no answer then).

        Args:
            key: the request's identity, for :meth:`cancel`.
        """
        cancel = threading.Event()
        run = functools.partial(
            self.tools.call, name, arguments if isinstance(arguments, Mapping) else {}
        )
        result: dict[str, Any] | None = None
        with anyio.CancelScope() as scope:
            self._running[key] = (scope, cancel)
            try:
                result = await anyio.to_thread.run_sync(
                    functools.partial(run, cancel=cancel),
                    abandon_on_cancel=True,
                    limiter=self._searches if self.tools.is_search(name) else None,
                )
            except anyio.get_cancelled_exc_class():
                cancel.set()  # the abandoned thread stops its search
                raise
            finally:
                self._running.pop(key, None)
        return None if scope.cancelled_caught else result

    def cancel(self, key: str) -> bool:
        """Cancel the call with this key; False if there is none."""
        running = self._running.get(key)
        if running is None:
            return False
        scope, event = running
        event.set()
        scope.cancel()
        return True

    def cancel_all(self) -> None:
        for scope, event in list(self._running.values()):
            event.set()
            scope.cancel()


class _Refused(Exception):
    """A request answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class StdioServer:
    """One connection: the client's stdio, the session, the calls in flight.

    Args:
        externalizer: the session whose artifacts are served (its pointers should use
            ``read_hint="mcp"``).
        stdin_fd: descriptor the client writes to (default 0).
        stdout_fd: descriptor the client reads from (default 1).
    """

    def __init__(
        self, externalizer: ToolResultExternalizer, *, stdin_fd: int = 0, stdout_fd: int = 1
    ) -> None:
        self.calls = LocalCalls(externalizer)
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self._era: str | None = None
        """``legacy`` (the initialize handshake) or ``modern`` (2026-07-28), once known."""
        self._info: dict[str, str] | None = None
        self._out: StdFd | None = None
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._tg: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        """Serve until the client closes stdin; in-flight calls are then dropped."""
        stdin = StdFd(self._stdin_fd)
        self._out = StdFd(self._stdout_fd)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                with contextlib.suppress(OSError):  # the client went away: as at EOF
                    await pump_frames(stdin, self._receive)
                self.calls.cancel_all()  # their searches are killed; nobody reads answers
                tg.cancel_scope.cancel()
        finally:
            stdin.restore()
            self._out.restore()

    # -- receiving ---------------------------------------------------------------------

    async def _receive(self, line: bytes) -> None:
        message = loads_frame(line)
        if not isinstance(message, dict):
            if line.strip():
                await self._error(None, _PARSE_ERROR, "Parse error")
            return
        method = message.get("method")
        if not isinstance(method, str):
            return  # a response (we ask the client nothing) or garbage: nothing to answer
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if "id" not in message:
            if method == "notifications/cancelled":
                self.calls.cancel(request_key(params.get("requestId")))
            return
        request_id = message["id"]
        try:
            modern = self._era_of(method, params)
            if method == "tools/call":
                assert self._tg is not None
                self._tg.start_soon(self._tool_call, request_id, params, modern)
                return
            result = self._answer(method, params, modern)
        except _Refused as refused:
            await self._error(request_id, refused.code, refused.message, refused.data)
            return
        await self._result(request_id, result, modern)

    def _era_of(self, method: str, params: Mapping[str, Any]) -> bool:
        """Whether the request is a modern one (checking its envelope); the first request
        decides the connection's era, as the SDK's server does."""
        meta = params.get("_meta")
        enveloped = isinstance(meta, Mapping) and PROTOCOL_VERSION_META_KEY in meta
        if self._era is None:
            self._era = "modern" if enveloped and method != "initialize" else "legacy"
        if self._era == "legacy":
            if enveloped and method != "initialize":
                raise _Refused(
                    INVALID_REQUEST,
                    "this connection serves the handshake protocol era; "
                    "requests carrying the 2026-07-28 envelope are not accepted on it",
                )
            return False
        if method == "initialize":
            requested = params.get("protocolVersion")
            data: dict[str, Any] = {"supported": list(MODERN_PROTOCOL_VERSIONS)}
            if isinstance(requested, str):
                data["requested"] = requested
            raise _Refused(
                _UNSUPPORTED_PROTOCOL_VERSION,
                "connection is serving the 2026-07-28 protocol; the initialize handshake is "
                "not accepted",
                data,
            )
        if not isinstance(meta, Mapping):
            raise _Refused(
                INVALID_PARAMS,
                "params._meta must be an object carrying the required "
                f"{PROTOCOL_VERSION_META_KEY!r} and {_CLIENT_CAPABILITIES_META_KEY!r} "
                "envelope keys",
            )
        missing = [
            key
            for key in (PROTOCOL_VERSION_META_KEY, _CLIENT_CAPABILITIES_META_KEY)
            if key not in meta
        ]
        if missing:
            raise _Refused(
                INVALID_PARAMS,
                f"params._meta is missing the required envelope key(s): {', '.join(missing)}",
            )
        version = meta[PROTOCOL_VERSION_META_KEY]
        if not isinstance(version, str):
            raise _Refused(INVALID_PARAMS, "the protocol-version envelope value must be a string")
        if version not in MODERN_PROTOCOL_VERSIONS:
            raise _Refused(
                _UNSUPPORTED_PROTOCOL_VERSION,
                "Unsupported protocol version",
                {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version},
            )
        return True

    def _answer(self, method: str, params: Mapping[str, Any], modern: bool) -> dict[str, Any]:
        if method == "initialize":
            requested = params.get("protocolVersion")
            version = (
                requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
            )
            return {
                "capabilities": {
                    "prompts": {"listChanged": False},
                    "resources": {"listChanged": False, "subscribe": False},
                    "tools": {"listChanged": False},
                },
                "instructions": INSTRUCTIONS,
                "protocolVersion": version,
                "serverInfo": self._server_info(),
            }
        if method == "server/discover" and modern:
            return {
                "cacheScope": "private",
                "capabilities": {
                    "prompts": {"listChanged": True},
                    "resources": {"listChanged": True, "subscribe": True},
                    "tools": {"listChanged": True},
                },
                "instructions": INSTRUCTIONS,
                "supportedVersions": list(MODERN_PROTOCOL_VERSIONS),
                "ttlMs": 0,
            }
        if method == "ping" and not modern:
            return {}
        listed = _LISTS.get(method)
        if listed is not None:
            result: dict[str, Any] = {listed: tool_definitions() if listed == "tools" else []}
            if modern:
                result.update(cacheScope="private", ttlMs=0)
            return result
        raise _Refused(METHOD_NOT_FOUND, "Method not found", method)

    async def _tool_call(self, request_id: object, params: Mapping[str, Any], modern: bool) -> None:
        name = params.get("name")
        result = await self.calls.call(request_key(request_id), str(name), params.get("arguments"))
        if result is not None:
            await self._result(request_id, result, modern)

    # -- answering ---------------------------------------------------------------------

    def _server_info(self) -> dict[str, str]:
        if self._info is None:
            self._info = server_info()
        return self._info

    async def _result(self, request_id: object, result: dict[str, Any], modern: bool) -> None:
        if modern:
            result = {
                **result,
                "resultType": "complete",
                "_meta": {SERVER_INFO_META_KEY: self._server_info()},
            }
        await self._send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _error(
        self, request_id: object, code: int, message: str, data: object = None
    ) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._out is not None
        frame = dumps_frame(message)
        async with self._write_lock:
            try:
                await self._out.write(frame)
            except (BrokenPipeError, ConnectionResetError):
                # The client stopped reading: nothing more can be delivered.
                if self._tg is not None:
                    self.calls.cancel_all()
                    self._tg.cancel_scope.cancel()


async def run_server(externalizer: ToolResultExternalizer) -> None:
    """Serve the artifact tools over this process's stdin/stdout until the client closes
    the connection."""
    await StdioServer(externalizer).run()
