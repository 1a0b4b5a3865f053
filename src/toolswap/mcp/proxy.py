"""``toolswap mcp proxy``: wrap a stdio MCP server so its large tool results become pointers.

::

    MCP host  <-stdio->  toolswap mcp proxy  <-stdio->  upstream MCP server

The proxy relays JSON-RPC frames (one JSON message per line) between the host and the
upstream server it starts (:mod:`.transport`: framing, descriptors, the process, which
gets exactly the host's environment). It reads every frame but rewrites only these:

- the answer to ``tools/call``, and to ``tasks/result`` for a task-augmented
  ``tools/call`` (2025-11-25 tasks), when a part of the result is over the tool's
  threshold: one artifact and one pointer per result (:mod:`.rewrite`: structured content
  that wraps the text points at the same artifact; base64 media never reach the context).
  ``isError``, ``_meta`` and every other field are kept;
- the answer to ``resources/read`` when a content item is over the resource threshold
  (``--resource-threshold``; ``never`` passes resources through whole);
- the answer to ``tools/list``: the artifact tools are added (on the last page). An
  upstream ``outputSchema`` is kept if a ``{"toolswap": reference}`` object conforms to it
  (a large structured result is then replaced by one that does) and dropped otherwise, for
  tools whose structured results may be replaced: the MCP rule is that a tool declaring an
  output schema returns conforming structured results, and hosts validate them;
- the answer to ``initialize`` / ``server/discover``: a ``tools`` capability is added if the
  upstream has none;
- ``tools/call`` of ``read_artifact``, ``read_artifact_bytes``, ``grep_artifact`` and
  ``list_artifacts``: answered by the proxy itself (:mod:`toolswap.mcp.local`, the same
  answers as ``toolswap mcp serve``, shaped for the protocol era of the request).

Everything else (small results, tool names, input schemas and descriptions, resources,
prompts, notifications, progress, cancellation, server-to-client requests, both protocol
eras) is forwarded as the very bytes received. Working at the frame level, rather than
re-serving the upstream through the SDK's server and client objects, is what makes that
byte-for-byte guarantee possible and keeps the proxy neutral to protocol versions. Nothing
here imports the MCP SDK: the upstream is started first, and the proxy's own start adds
little to the upstream's.

If the upstream exits, every request it had not answered fails with a JSON-RPC error that
says so, and the proxy exits with status 1. When the host closes the proxy's stdin, the
proxy closes the upstream's stdin, waits for it to exit (terminating it after a grace
period) and exits with status 0.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from .._threads import start_helper_thread
from .._tool_descriptions import TOOL_NAMES
from ..errors import ConfigurationError, ToolswapError
from ..externalizer import ToolResultExternalizer
from ..settings import ToolThreshold
from .local import (
    CONNECTION_CLOSED,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
    tool_definitions,
)
from .rewrite import UNLISTED_SCHEMA, ResultRewriter, admits_reference
from .serve import LocalCalls
from .transport import (
    StdFd,
    UpstreamProcess,
    describe_exit,
    dumps_frame,
    loads_frame,
    prepare_fast_loads,
    pump_frames,
    request_id_of,
    request_key,
    say,
    start_upstream,
    stop_upstream,
)

__all__ = ["McpProxy", "run_proxy"]

_RULES_KEPT = 1024

_PARSE_IN_THREAD = 1 << 20
"""Frames larger than this are parsed on a worker thread, so other traffic keeps moving."""
_INTERNAL_ERROR = -32603
_TASK_RESULT = "tasks/result"
_TASKS_KEPT = 4096
_TOOLS_KNOWN = 65_536
"""The most tool names remembered as listed (bounded memory; past it, a tool is held to
``UNLISTED_SCHEMA``)."""
"""Task IDs remembered with their tool; an older task's result is still rewritten, under
the name ``tasks/result``."""


@dataclass(slots=True)
class _Pending:
    """A host request forwarded to the upstream and not answered yet."""

    method: str
    tool: str | None = None
    """The tool whose result this is (``tools/call``, or ``tasks/result`` of a tool's task)."""
    cancelled: bool = False
    uri: str | None = None


class McpProxy:
    """One proxy session: the upstream process, the host's stdio, and the artifacts.

    Args:
        upstream: the upstream MCP server's command line.
        externalizer: the session large results are saved in (its pointers should use
            ``read_hint="mcp"``).
        threshold: overrides the externalizer's default threshold for every upstream tool;
            per-tool rules from its settings still win.
        resource_threshold: the rule for ``resources/read`` contents (default: as
            ``threshold``, else the default; ``never`` passes resources through whole).
        stdin_fd: descriptor the host writes to (default 0).
        stdout_fd: descriptor the host reads from (default 1).
        env: the upstream's environment (default: exactly the environment the host
            started the proxy with).
        process: the upstream, already started from ``upstream`` with pipes for stdin and
            stdout (:func:`~toolswap.mcp.upstream.spawn_upstream`), so that it boots while
            the proxy loads; default: started by :meth:`run`.
    """

    def __init__(
        self,
        upstream: Sequence[str],
        externalizer: ToolResultExternalizer,
        *,
        threshold: ToolThreshold | None = None,
        resource_threshold: ToolThreshold | None = None,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        env: Mapping[str, str] | None = None,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        if not upstream:
            raise ConfigurationError("the upstream command line is empty")
        self.upstream = tuple(upstream)
        self.externalizer = externalizer
        self.threshold = threshold
        self.resource_threshold = resource_threshold
        self.rewriter = ResultRewriter(externalizer)
        self.env = dict(env) if env is not None else None
        self._stdin_fd = stdin_fd
        self._stdout_fd = stdout_fd
        self._calls = LocalCalls(externalizer)
        self._local_tools = tool_definitions()
        self._schemas: dict[str, dict[str, Any]] = {}
        self._listed: set[str] = set()
        """Tools the upstream has listed through the proxy (the others' schemas are not
        known: see ``UNLISTED_SCHEMA``)."""
        """The upstream ``outputSchema`` of each tool listed with it kept."""
        self._pending: dict[str, _Pending] = {}
        self._rules: dict[str, ToolThreshold] = {}
        self._tasks: dict[str, str] = {}
        """Task ID -> the tool whose call created it (its result comes by tasks/result)."""
        self._server_info_stamp: object = None
        self._warned_shadowed: set[str] = set()
        self._client_closed = False
        self._client_gone = False
        self._upstream_done = False
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._process = process
        self._proc: UpstreamProcess | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._out: StdFd | None = None

    # -- thresholds ------------------------------------------------------------------

    def rule_for(self, tool: str) -> ToolThreshold:
        """Per-tool rule from the settings, else ``--threshold``, else the default (made
        once per tool name: it is asked for every answer; the settings and the threshold are
        fixed once the proxy is built)."""
        rule = self._rules.get(tool)
        if rule is None:
            settings = self.externalizer.settings
            rule = settings.tools.get(tool)
            if rule is None:
                rule = self.threshold if self.threshold is not None else settings.rule_for(tool)
            if len(self._rules) < _RULES_KEPT:  # the names come from the host: bounded
                self._rules[tool] = rule
        return rule

    def resource_rule(self) -> ToolThreshold:
        """``--resource-threshold``, else ``--threshold``, else the default."""
        if self.resource_threshold is not None:
            return self.resource_threshold
        if self.threshold is not None:
            return self.threshold
        return self.externalizer.settings.rule_for("resources/read")

    # -- running ---------------------------------------------------------------------

    async def run(self) -> int:
        """Relay until the host or the upstream goes away; return the exit status."""
        try:
            if self._process is not None:
                proc = UpstreamProcess(self._process)
            else:
                proc = await start_upstream(self.upstream, self.env)
        except OSError as exc:
            say(f"cannot start the upstream MCP server {self.upstream[0]!r}: {exc.strerror or exc}")
            return 127
        start_helper_thread(prepare_fast_loads, "toolswap-import")  # while the upstream starts
        self._proc = proc
        stdin = StdFd(self._stdin_fd)
        self._out = StdFd(self._stdout_fd)
        status = 0
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._pump_client, stdin)
                await self._pump_upstream()
                code = await self._reap()
                message = (
                    f"the upstream MCP server ({shlex.join(self.upstream)[:300]}) exited "
                    f"{describe_exit(code)}"
                )
                # Also after the host closed our stdin: it may still be reading answers.
                await self._fail_pending(
                    f"{message} before answering this request; the toolswap proxy is "
                    "shutting down. Restart the MCP server to continue."
                )
                if not self._client_closed and not self._client_gone:
                    status = 1
                    say(f"{message}; exiting")
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._reap()
                proc.close()
            stdin.restore()
            self._out.restore()
        return status

    async def _reap(self) -> int | None:
        """Wait for the upstream to exit; terminate, then kill it if it does not."""
        assert self._proc is not None
        return await stop_upstream(self._proc)

    async def _pump_client(self, stdin: StdFd) -> None:
        """Host -> upstream, until the host closes our stdin."""
        try:
            await pump_frames(stdin, self._from_client, now=self._client_now)
        except OSError as exc:
            say(f"reading from the MCP host failed: {exc}")
        self._client_closed = True
        # The upstream sees EOF and exits (or is stopped), and _pump_upstream then ends
        # the session.
        await self._reap()

    async def _pump_upstream(self) -> None:
        """Upstream -> host, until the upstream closes its stdout."""
        proc = self._proc
        assert proc is not None
        try:
            # A read error is the end of its output; an error handling a frame is not.
            await pump_frames(
                proc.stdout, self._from_upstream, now=self._upstream_now, read_error_ends=True
            )
        finally:
            self._upstream_done = True

    # -- host -> upstream ------------------------------------------------------------

    def _client_now(self, line: bytes) -> bool:
        """Relay a host frame from the read callback (see :func:`pump_frames`) when that
        needs no await: not one of the proxy's own tools, not a cancellation, the upstream
        running and its pipe taking the frame at once."""
        proc = self._proc
        assert proc is not None
        if self._upstream_done or not proc.can_send_now(len(line)):
            return False
        message = loads_frame(line)
        if not isinstance(message, dict):
            message = {}
        method = message.get("method")
        if method == "notifications/cancelled" or (method == "tools/call" and _local(message)):
            return False
        noted: tuple[str, _Pending] | None = None
        if isinstance(method, str) and "id" in message:
            noted = request_key(message["id"]), self._pending_for(method, _params(message))
        if not proc.send_now(line):
            return False
        # The answer cannot be read before this callback returns: noting the request after
        # sending it is as good as before.
        if noted is not None:
            self._pending[noted[0]] = noted[1]
        return True

    async def _from_client(self, line: bytes) -> None:
        message = loads_frame(line)
        if isinstance(message, dict):
            method = message.get("method")
            params = _params(message)
            if isinstance(method, str) and "id" in message:
                key = request_key(message["id"])
                if method == "tools/call" and _local(message):
                    assert self._tg is not None
                    self._tg.start_soon(self._local_call, key, message["id"], params)
                    return
                if self._upstream_done:
                    await self._send_error(
                        message["id"], "the upstream MCP server has exited; restart it"
                    )
                    return
                self._pending[key] = self._pending_for(method, params)
            elif method == "notifications/cancelled":
                key = request_key(params.get("requestId"))
                if self._calls.cancel(key):
                    return
                pending = self._pending.get(key)
                if pending is not None:
                    pending.cancelled = True
        proc = self._proc
        assert proc is not None
        # If the upstream is gone, _pump_upstream sees EOF and fails what is pending.
        with contextlib.suppress(OSError):
            await proc.send(line)

    def _pending_for(self, method: str, params: dict[str, Any]) -> _Pending:
        if method == "tools/call":
            name = params.get("name")
            return _Pending(method, tool=name if isinstance(name, str) else None)
        if method == _TASK_RESULT:
            task_id = params.get("taskId")
            # Only tools/call tasks are the upstream's; the proxy may have been restarted
            # since the task began, so an unknown task's result is still tool output.
            tool = self._tasks.get(task_id, _TASK_RESULT) if isinstance(task_id, str) else None
            return _Pending(method, tool=tool)
        if method == "resources/read":
            uri = params.get("uri")
            return _Pending(method, uri=uri if isinstance(uri, str) else None)
        return _Pending(method)

    # -- upstream -> host ------------------------------------------------------------

    def _upstream_now(self, line: bytes) -> bool:
        """Relay an upstream frame from the read callback (see :func:`pump_frames`) when
        it is passed through as received and the host's pipe takes it at once."""
        assert self._out is not None
        if self._client_gone or not self._out.can_write_now(len(line)):
            return False
        message = loads_frame(line)
        key = None
        if isinstance(message, dict) and "method" not in message and "id" in message:
            key = request_key(message["id"])
            pending = self._pending.get(key)
            if pending is not None and not self._passes(pending, message.get("result"), line):
                return False
        if not self._out.write_now(line):
            return False
        if key is not None:
            self._pending.pop(key, None)
        return True

    def _passes(self, pending: _Pending, result: object, line: bytes) -> bool:
        """Whether :meth:`_rewrite` would pass this answer through untouched, remembering
        nothing (an answer the host cancelled is dropped there)."""
        if pending.cancelled:
            return False
        if not isinstance(result, dict):
            return True  # an error: nothing to rewrite
        method = pending.method
        if method in ("tools/call", _TASK_RESULT) and pending.tool is not None:
            return "task" not in result and _fits(self.rule_for(pending.tool), line)
        if method == "resources/read":
            return _fits(self.resource_rule(), line)
        return method not in ("tools/list", "initialize", "server/discover")

    async def _from_upstream(self, line: bytes) -> None:
        if len(line) > _PARSE_IN_THREAD:
            message = await anyio.to_thread.run_sync(loads_frame, line)
        else:
            message = loads_frame(line)
        if isinstance(message, dict) and "method" not in message and "id" in message:
            pending = self._pending.pop(request_key(message["id"]), None)
            if pending is not None:
                if pending.cancelled:
                    return  # the host gave up on it; do not answer a cancelled request
                result = message.get("result")
                if isinstance(result, dict):
                    try:
                        line = await self._rewrite(pending, message, result, line)
                    except ToolswapError as exc:
                        # Not saved, so not passed on whole either (it is what would not
                        # fit): the host gets an error for this request, and the proxy goes on.
                        say(f"a large result could not be saved: {exc}")
                        await self._send_error(
                            message["id"],
                            f"toolswap could not save this large result, so it is not shown: {exc}",
                            code=_INTERNAL_ERROR,
                        )
                        return
        await self._to_client(line)

    async def _rewrite(
        self, pending: _Pending, message: dict[str, Any], result: dict[str, Any], line: bytes
    ) -> bytes:
        method = pending.method
        if method in ("tools/call", _TASK_RESULT) and pending.tool is not None:
            task = result.get("task")
            if method == "tools/call" and isinstance(task, dict):
                task_id = task.get("taskId")
                if isinstance(task_id, str):
                    self._tasks[task_id] = pending.tool
                    if len(self._tasks) > _TASKS_KEPT:  # forget the oldest: bounded memory
                        del self._tasks[next(iter(self._tasks))]
                return line  # a task was created; its result comes by tasks/result
            rule = self.rule_for(pending.tool)
            if _fits(rule, line):
                return line
            schema = (
                self._schemas.get(pending.tool) if pending.tool in self._listed else UNLISTED_SCHEMA
            )
            shrunk = await anyio.to_thread.run_sync(
                self.rewriter.tool_result, pending.tool, result, rule, schema
            )
            return await self._replace_result(message, shrunk, line)
        if method == "resources/read":
            rule = self.resource_rule()
            if _fits(rule, line):
                return line
            shrunk = await anyio.to_thread.run_sync(self.rewriter.resource_result, result, rule)
            return await self._replace_result(message, shrunk, line)
        if method == "tools/list":
            return dumps_frame(message) if self._merge_tools(result) else line
        if method in ("initialize", "server/discover"):
            meta = result.get("_meta")
            if isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is not None:
                self._server_info_stamp = meta[SERVER_INFO_META_KEY]
            capabilities = result.get("capabilities")
            if isinstance(capabilities, dict) and not isinstance(capabilities.get("tools"), dict):
                capabilities["tools"] = {}
                return dumps_frame(message)
        return line

    def _merge_tools(self, result: dict[str, Any]) -> bool:
        tools = result.get("tools")
        if not isinstance(tools, list):
            return False
        kept: list[Any] = []
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and len(self._listed) < _TOOLS_KNOWN:
                self._listed.add(name)
            if isinstance(name, str) and name in TOOL_NAMES:
                if name not in self._warned_shadowed:
                    self._warned_shadowed.add(name)
                    say(
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
                schema = tool["outputSchema"]
                if admits_reference(schema):
                    # A large structured result becomes a reference object that conforms.
                    self._schemas[name] = schema
                else:
                    # Its structured result may be replaced by a reference, which would
                    # not conform; hosts validate results against the schema.
                    self._schemas.pop(name, None)
                    tool = {k: v for k, v in tool.items() if k != "outputSchema"}
            kept.append(tool)
        if not result.get("nextCursor"):
            kept.extend(self._local_tools)
        result["tools"] = kept
        return True

    @staticmethod
    async def _replace_result(
        message: dict[str, Any], shrunk: dict[str, Any] | None, line: bytes
    ) -> bytes:
        if shrunk is None:
            return line
        message["result"] = shrunk
        return await anyio.to_thread.run_sync(dumps_frame, message)

    # -- answering locally -----------------------------------------------------------

    async def _local_call(self, key: str, request_id: object, params: dict[str, Any]) -> None:
        meta = params.get("_meta")
        version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        result = await self._calls.call(key, str(params.get("name")), params.get("arguments"))
        if result is None:
            return  # cancelled by the host: no answer
        if version in MODERN_PROTOCOL_VERSIONS:
            result["resultType"] = "complete"
            if self._server_info_stamp is not None:
                result["_meta"] = {SERVER_INFO_META_KEY: self._server_info_stamp}
        await self._to_client(dumps_frame({"jsonrpc": "2.0", "id": request_id, "result": result}))

    # -- writing to the host ---------------------------------------------------------

    async def _send_error(self, request_id: object, message: str, *, code: int = 0) -> None:
        error = {"code": code or CONNECTION_CLOSED, "message": message}
        await self._to_client(dumps_frame({"jsonrpc": "2.0", "id": request_id, "error": error}))

    async def _fail_pending(self, message: str) -> None:
        pending, self._pending = self._pending, {}
        for key, entry in pending.items():
            if not entry.cancelled:
                await self._send_error(request_id_of(key), message)

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


def _params(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params")
    return params if isinstance(params, dict) else {}


def _local(message: dict[str, Any]) -> bool:
    """A call of one of the proxy's own artifact tools."""
    return _params(message).get("name") in TOOL_NAMES


def _fits(rule: ToolThreshold, line: bytes) -> bool:
    """Whether a frame is certainly left alone: no rule, or too short to hold a part over it."""
    # Every character of a part takes at least one byte of the frame, and so does every
    # UTF-8 byte of it (JSON escapes only make it longer): the frame's length bounds both.
    return not rule.exceeded(size_bytes=len(line), chars=len(line))


async def run_proxy(
    upstream: Sequence[str],
    externalizer: ToolResultExternalizer,
    *,
    threshold: ToolThreshold | None = None,
    resource_threshold: ToolThreshold | None = None,
    process: subprocess.Popen[bytes] | None = None,
) -> int:
    """Run the proxy on this process's stdin/stdout; return the exit status.

    Args:
        process: the upstream, already started (see :class:`McpProxy`).
    """
    proxy = McpProxy(
        upstream,
        externalizer,
        threshold=threshold,
        resource_threshold=resource_threshold,
        process=process,
    )
    return await proxy.run()
