"""``toolswap mcp proxy``: wrap a stdio MCP server so its large tool results become pointers.

::

    MCP host  <-stdio->  toolswap mcp proxy  <-stdio->  upstream MCP server

The proxy relays JSON-RPC frames (one JSON message per line) between the host and the
upstream server it starts. It reads every frame but rewrites only four kinds:

- the answer to ``tools/call`` when a part of the result is over the tool's threshold:
  text is saved as one artifact and replaced by its pointer; ``structuredContent`` is saved
  the same way (as indented JSON, once if the text was the same JSON) and replaced by a
  small ``{"toolswap": {...}}`` reference; image, audio and embedded binary blocks are
  saved as binary artifacts with their MIME type and described, never inlined as base64
  text. ``isError`` and every other field are kept;
- the answer to ``tools/list``: the artifact tools are added (on the last page), and an
  upstream ``outputSchema`` is dropped for tools whose structured results may be replaced,
  so that hosts which validate structured results against it do not reject the pointer;
- the answer to ``initialize`` / ``server/discover``: a ``tools`` capability is added if the
  upstream has none;
- ``tools/call`` of ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact`` and
  ``list_artifacts``: answered by the proxy itself (the SDK's :class:`MCPServer` from
  :mod:`toolswap.mcp.server`, shaped for the protocol version of the request).

Everything else (small results, tool names, input schemas and descriptions, resources,
prompts, notifications, progress, cancellation, server-to-client requests, both protocol
eras) is forwarded as the very bytes received. Working at the frame level, rather than
re-serving the upstream through the SDK's server and client objects, is what makes that
byte-for-byte guarantee possible and keeps the proxy neutral to protocol versions.

If the upstream exits, every request it had not answered fails with a JSON-RPC error that
says so, and the proxy exits with status 1. When the host closes the proxy's stdin, the
proxy closes the upstream's stdin, waits for it to exit (terminating it after a grace
period) and exits with status 0.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    CallToolResult,
    TextContent,
)
from mcp.types.methods import serialize_server_result
from mcp.types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from ..artifact import ArtifactReference
from ..externalizer import ToolResultExternalizer
from ..pointer import human_size
from ..settings import ToolThreshold
from ..tools import TOOL_NAMES
from .server import create_server

__all__ = ["McpProxy", "run_proxy"]

_READ_CHUNK = 1 << 20
_PARSE_IN_THREAD = 1 << 20
"""Frames larger than this are parsed on a worker thread, so other traffic keeps moving."""
_STOP_GRACE = 5.0
"""Seconds the upstream gets to exit after its stdin closes, and again after SIGTERM."""


def _key(request_id: object) -> str:
    """A dict key for a JSON-RPC id (``1`` and ``"1"`` are different ids)."""
    return json.dumps(request_id)


def _dumps(message: Mapping[str, Any]) -> bytes:
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: let JSON escape it
        return (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "(still running, but it closed its output)"
    if code < 0:
        return f"(killed by signal {-code})"
    return f"with status {code}"


@dataclass(slots=True)
class _Pending:
    """A host request forwarded to the upstream and not answered yet."""

    method: str
    tool: str | None = None
    cancelled: bool = False


class _LineSplitter:
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


class _Fd:
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
                return os.read(self.fd, _READ_CHUNK)
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


class McpProxy:
    """One proxy session: the upstream process, the host's stdio, and the artifacts.

    Args:
        upstream: the upstream MCP server's command line.
        externalizer: the session large results are saved in (its pointers should use
            ``read_hint="mcp"``).
        threshold: overrides the externalizer's default threshold for every upstream tool;
            per-tool rules from its settings still win.
        stdin_fd: descriptor the host writes to (default 0).
        stdout_fd: descriptor the host reads from (default 1).
        env: the upstream's environment (default: the proxy's own).
    """

    def __init__(
        self,
        upstream: Sequence[str],
        externalizer: ToolResultExternalizer,
        *,
        threshold: ToolThreshold | None = None,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not upstream:
            raise ValueError("the upstream command line is empty")
        self.upstream = tuple(upstream)
        self.externalizer = externalizer
        self.threshold = threshold
        self.env = dict(env) if env is not None else None
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self._server: MCPServer[Any] = create_server(externalizer)
        self._local_tools: list[dict[str, Any]] = []
        self._pending: dict[str, _Pending] = {}
        self._local: dict[str, anyio.CancelScope] = {}
        self._handshake_version = LATEST_HANDSHAKE_VERSION
        self._server_info_stamp: object = None
        self._warned_shadowed: set[str] = set()
        self._client_closed = False
        self._client_gone = False
        self._upstream_done = False
        self._write_lock = anyio.Lock()
        self._proc: anyio.abc.Process | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._out: _Fd | None = None

    # -- thresholds ------------------------------------------------------------------

    def rule_for(self, tool: str) -> ToolThreshold:
        """Per-tool rule from the settings, else ``--threshold``, else the default."""
        settings = self.externalizer.settings
        rule = settings.tools.get(tool)
        if rule is not None:
            return rule
        if self.threshold is not None:
            return self.threshold
        return settings.rule_for(tool)

    @staticmethod
    def _over(rule: ToolThreshold, text: str) -> bool:
        if rule.never:
            return False
        if rule.max_chars is not None:
            return len(text) > rule.max_chars
        assert rule.max_bytes is not None
        if len(text) > rule.max_bytes:
            return True  # every character takes at least one byte
        if len(text) * 4 <= rule.max_bytes:
            return False  # and at most four
        return len(text.encode("utf-8", "surrogatepass")) > rule.max_bytes

    # -- running ---------------------------------------------------------------------

    async def run(self) -> int:
        """Relay until the host or the upstream goes away; return the exit status."""
        self._local_tools = [
            tool.model_dump(by_alias=True, mode="json", exclude_none=True)
            for tool in await self._server.list_tools()
        ]
        try:
            proc = await anyio.open_process(
                list(self.upstream),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,
                env=self.env,
            )
        except OSError as exc:
            _say(
                f"cannot start the upstream MCP server {self.upstream[0]!r}: {exc.strerror or exc}"
            )
            return 127
        self._proc = proc
        stdin = _Fd(self._stdin_fd)
        self._out = _Fd(self._stdout_fd)
        status = 0
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._pump_client, stdin)
                await self._pump_upstream()
                code = await self._reap()
                message = (
                    f"the upstream MCP server ({shlex.join(self.upstream)[:300]}) exited "
                    f"{_describe_exit(code)}"
                )
                # Also after the host closed our stdin: it may still be reading answers.
                await self._fail_pending(
                    f"{message} before answering this request; the toolswap proxy is "
                    "shutting down. Restart the MCP server to continue."
                )
                if not self._client_closed and not self._client_gone:
                    status = 1
                    _say(f"{message}; exiting")
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._reap()
                await proc.aclose()
            stdin.restore()
            self._out.restore()
        return status

    async def _reap(self) -> int | None:
        """Wait for the upstream to exit; terminate, then kill it if it does not."""
        proc = self._proc
        assert proc is not None
        if proc.returncode is not None:
            return proc.returncode
        await _close_quietly(proc.stdin)
        for signal in ("wait", "terminate", "kill"):
            if signal == "terminate":
                proc.terminate()
            elif signal == "kill":
                proc.kill()
            with anyio.move_on_after(_STOP_GRACE):
                return await proc.wait()
        return proc.returncode

    async def _pump_client(self, stdin: _Fd) -> None:
        """Host -> upstream, until the host closes our stdin."""
        splitter = _LineSplitter()
        try:
            while True:
                chunk = await stdin.read()
                if not chunk:
                    break
                for line in splitter.feed(chunk):
                    await self._from_client(line)
            rest = splitter.rest()
            if rest.strip():
                await self._from_client(rest + b"\n")
        except OSError as exc:
            _say(f"reading from the MCP host failed: {exc}")
        self._client_closed = True
        # The upstream sees EOF and exits (or is stopped), and _pump_upstream then ends
        # the session.
        await self._reap()

    async def _pump_upstream(self) -> None:
        """Upstream -> host, until the upstream closes its stdout."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        splitter = _LineSplitter()
        try:
            while True:
                try:
                    chunk = await proc.stdout.receive(_READ_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                for line in splitter.feed(chunk):
                    await self._from_upstream(line)
            rest = splitter.rest()
            if rest.strip():
                await self._from_upstream(rest + b"\n")
        finally:
            self._upstream_done = True

    # -- host -> upstream ------------------------------------------------------------

    async def _from_client(self, line: bytes) -> None:
        message = _loads(line)
        if isinstance(message, dict):
            method = message.get("method")
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if isinstance(method, str) and "id" in message:
                key = _key(message["id"])
                name = params.get("name")
                if method == "tools/call" and name in TOOL_NAMES:
                    assert self._tg is not None
                    self._tg.start_soon(self._local_call, key, message["id"], params)
                    return
                if self._upstream_done:
                    await self._send_error(
                        message["id"], "the upstream MCP server has exited; restart it"
                    )
                    return
                self._pending[key] = _Pending(
                    method, tool=name if method == "tools/call" and isinstance(name, str) else None
                )
            elif method == "notifications/cancelled":
                key = _key(params.get("requestId"))
                scope = self._local.get(key)
                if scope is not None:
                    scope.cancel()
                    return
                pending = self._pending.get(key)
                if pending is not None:
                    pending.cancelled = True
        proc = self._proc
        assert proc is not None and proc.stdin is not None
        # If the upstream is gone, _pump_upstream sees EOF and fails what is pending.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await proc.stdin.send(line)

    # -- upstream -> host ------------------------------------------------------------

    async def _from_upstream(self, line: bytes) -> None:
        if len(line) > _PARSE_IN_THREAD:
            message = await anyio.to_thread.run_sync(_loads, line)
        else:
            message = _loads(line)
        if isinstance(message, dict) and "method" not in message and "id" in message:
            pending = self._pending.pop(_key(message["id"]), None)
            if pending is not None:
                if pending.cancelled:
                    return  # the host gave up on it; do not answer a cancelled request
                result = message.get("result")
                if isinstance(result, dict):
                    line = await self._rewrite(pending, message, result, line)
        await self._to_client(line)

    async def _rewrite(
        self, pending: _Pending, message: dict[str, Any], result: dict[str, Any], line: bytes
    ) -> bytes:
        method = pending.method
        if method == "tools/call" and pending.tool is not None:
            rule = self.rule_for(pending.tool)
            if rule.never:
                return line
            bound = rule.max_chars if rule.max_chars is not None else rule.max_bytes
            # A frame no longer than the threshold cannot hold a part that is over it.
            if bound is not None and len(line) <= bound:
                return line
            shrunk = await anyio.to_thread.run_sync(self._shrink, pending.tool, result, rule)
            if shrunk is None:
                return line
            message["result"] = shrunk
            return await anyio.to_thread.run_sync(_dumps, message)
        if method == "tools/list":
            return _dumps(message) if self._merge_tools(result) else line
        if method in ("initialize", "server/discover"):
            if method == "initialize" and isinstance(result.get("protocolVersion"), str):
                self._handshake_version = result["protocolVersion"]
            meta = result.get("_meta")
            if isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is not None:
                self._server_info_stamp = meta[SERVER_INFO_META_KEY]
            capabilities = result.get("capabilities")
            if isinstance(capabilities, dict) and not isinstance(capabilities.get("tools"), dict):
                capabilities["tools"] = {}
                return _dumps(message)
        return line

    def _merge_tools(self, result: dict[str, Any]) -> bool:
        tools = result.get("tools")
        if not isinstance(tools, list):
            return False
        kept: list[Any] = []
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and name in TOOL_NAMES:
                if name not in self._warned_shadowed:
                    self._warned_shadowed.add(name)
                    _say(
                        f"the upstream's tool {name!r} is hidden: toolswap's artifact tool of "
                        "the same name takes its place"
                    )
                continue
            if (
                isinstance(tool, dict)
                and isinstance(name, str)
                and "outputSchema" in tool
                and not self.rule_for(name).never
            ):
                # Its structured result may be replaced by a pointer, which would not
                # match the schema; hosts validate results against it.
                tool = {k: v for k, v in tool.items() if k != "outputSchema"}
            kept.append(tool)
        if not result.get("nextCursor"):
            kept.extend(self._local_tools)
        result["tools"] = kept
        return True

    # -- externalizing ---------------------------------------------------------------

    def _save(
        self, data: str | bytes, tool: str, media_type: str | None = None
    ) -> tuple[str, ArtifactReference]:
        saved = self.externalizer.externalize(data, tool, media_type=media_type)
        return saved.context_text, saved.artifact

    def _shrink(
        self, tool: str, result: dict[str, Any], rule: ToolThreshold
    ) -> dict[str, Any] | None:
        """The result with its oversized parts saved and replaced, or None if none is."""
        if result.get("resultType") not in (None, "complete"):
            return None  # input_required and extension results are not tool output
        content = result.get("content")
        blocks: list[Any] = list(content) if isinstance(content, list) else []
        changed = False

        texts = [
            i
            for i, b in enumerate(blocks)
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        joined = "\n".join(blocks[i]["text"] for i in texts)
        text_artifact: ArtifactReference | None = None
        if texts and self._over(rule, joined):
            pointer, text_artifact = self._save(joined, tool)
            first = texts[0]
            blocks[first] = {"type": "text", "text": pointer}
            drop = set(texts[1:])
            blocks = [b for i, b in enumerate(blocks) if i not in drop]
            changed = True

        for i, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            replacement: str | None = None
            if kind in ("image", "audio") and isinstance(block.get("data"), str):
                if self._over(rule, block["data"]):
                    mime = block.get("mimeType")
                    replacement = self._save_base64(
                        block["data"], tool, mime if isinstance(mime, str) else None
                    )
            elif kind == "resource" and isinstance(block.get("resource"), dict):
                resource = block["resource"]
                mime = resource.get("mimeType")
                mime = mime if isinstance(mime, str) else None
                uri = resource.get("uri")
                if isinstance(resource.get("text"), str) and self._over(rule, resource["text"]):
                    pointer, _ = self._save(resource["text"], tool, mime)
                    replacement = f"Embedded resource {uri}:\n{pointer}"
                elif isinstance(resource.get("blob"), str) and self._over(rule, resource["blob"]):
                    pointer = self._save_base64(resource["blob"], tool, mime)
                    replacement = f"Embedded resource {uri}:\n{pointer}"
            if replacement is not None:
                blocks[i] = {"type": "text", "text": replacement}
                changed = True

        structured = result.get("structuredContent")
        new_structured: dict[str, Any] | None = None
        if structured is not None:
            compact = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
            if self._over(rule, compact):
                artifact = text_artifact if _same_json(joined, structured) else None
                if artifact is None:
                    pretty = json.dumps(structured, ensure_ascii=False, indent=2)
                    pointer, artifact = self._save(pretty, tool, "application/json")
                    blocks.append({"type": "text", "text": pointer})
                new_structured = {"toolswap": _structured_reference(artifact)}
                changed = True

        if not changed:
            return None
        shrunk = dict(result)
        shrunk["content"] = blocks
        if new_structured is not None:
            shrunk["structuredContent"] = new_structured
        return shrunk

    def _save_base64(self, data: str, tool: str, mime: str | None) -> str:
        """Save a base64 block as the bytes it encodes; describe it for the model."""
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            pointer, _ = self._save(data, tool)
            return f"(a block whose data is not valid base64; saved as text)\n{pointer}"
        pointer, artifact = self._save(raw, tool, mime or "application/octet-stream")
        return (
            f"[{artifact.media_type} from {tool}, {human_size(artifact.byte_size)}: saved as "
            f"an artifact instead of being inlined as base64]\n{pointer}"
        )

    # -- answering locally -----------------------------------------------------------

    async def _local_call(self, key: str, request_id: object, params: dict[str, Any]) -> None:
        name = str(params.get("name"))
        arguments = params.get("arguments")
        meta = params.get("_meta")
        version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        modern = version in MODERN_PROTOCOL_VERSIONS
        if not isinstance(version, str):
            version = self._handshake_version
        result: CallToolResult | None = None
        error: MCPError | None = None
        with anyio.CancelScope() as scope:
            self._local[key] = scope
            try:
                answer = await self._server.call_tool(
                    name, arguments if isinstance(arguments, dict) else {}
                )
                if isinstance(answer, CallToolResult):
                    result = answer
            except ToolError as exc:
                result = CallToolResult(content=[TextContent(text=str(exc))], is_error=True)
            except MCPError as exc:
                error = exc
            except Exception as exc:  # a bug here must not take the proxy down
                _say(f"{name} failed: {type(exc).__name__}: {exc}")
                result = CallToolResult(
                    content=[TextContent(text=f"{name} failed inside the toolswap proxy: {exc}")],
                    is_error=True,
                )
            finally:
                self._local.pop(key, None)
        if scope.cancelled_caught:
            return  # cancelled by the host: no answer
        if error is not None or result is None:
            await self._send_error(
                request_id,
                error.error.message if error is not None else "no result",
                code=error.error.code if error is not None else -32603,
            )
            return
        data = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        with contextlib.suppress(KeyError, ValueError, ValidationError):
            data = serialize_server_result("tools/call", version, data)
        if modern:
            data.setdefault("resultType", "complete")
            if self._server_info_stamp is not None:
                data["_meta"] = {SERVER_INFO_META_KEY: self._server_info_stamp}
        else:
            data.pop("resultType", None)
        await self._to_client(_dumps({"jsonrpc": "2.0", "id": request_id, "result": data}))

    # -- writing to the host ---------------------------------------------------------

    async def _send_error(self, request_id: object, message: str, *, code: int = 0) -> None:
        error = {"code": code or CONNECTION_CLOSED, "message": message}
        await self._to_client(_dumps({"jsonrpc": "2.0", "id": request_id, "error": error}))

    async def _fail_pending(self, message: str) -> None:
        pending, self._pending = self._pending, {}
        for key, entry in pending.items():
            if not entry.cancelled:
                await self._send_error(json.loads(key), message)

    async def _to_client(self, data: bytes) -> None:
        if self._client_gone:
            return
        assert self._out is not None
        async with self._write_lock:
            try:
                await self._out.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The host stopped reading: nothing more can be delivered.
                self._client_gone = True
                if self._tg is not None:
                    self._tg.cancel_scope.cancel()


def _loads(line: bytes) -> object:
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None


def _same_json(text: str, value: object) -> bool:
    if not text or len(text) > 512 << 20:
        return False
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _structured_reference(artifact: ArtifactReference) -> dict[str, Any]:
    read = (
        f'read_artifact(source_id="{artifact.source_id}", offset=0, limit=200)'
        if not artifact.binary
        else f'read_artifact_bytes(source_id="{artifact.source_id}", start=0, length=65536)'
    )
    return {
        "externalized": True,
        "source_id": artifact.source_id,
        "content_sha256": artifact.content_sha256,
        "byte_size": artifact.byte_size,
        "media_type": artifact.media_type,
        "summary": artifact.summary,
        "read_with": read,
        "note": "The structured result was large and is saved whole; page it with read_with.",
    }


async def _close_quietly(stream: anyio.abc.ByteSendStream | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


def _say(message: str) -> None:
    print(f"toolswap mcp proxy: {message}", file=sys.stderr, flush=True)


async def run_proxy(
    upstream: Sequence[str],
    externalizer: ToolResultExternalizer,
    *,
    threshold: ToolThreshold | None = None,
) -> int:
    """Run the proxy on this process's stdin/stdout; return the exit status."""
    return await McpProxy(upstream, externalizer, threshold=threshold).run()
