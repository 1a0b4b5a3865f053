"""The MCP proxy's stdio plumbing: JSON-RPC line framing, the proxy's own descriptors, and
the upstream process (started with exactly the host's environment, see :mod:`.upstream`,
read and written through the event loop, stopped with a grace period).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import stat
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.to_thread

from .upstream import host_environment, say, spawn_upstream

__all__ = [
    "READ_CHUNK",
    "STOP_GRACE",
    "LineSplitter",
    "StdFd",
    "UpstreamProcess",
    "describe_exit",
    "dumps_frame",
    "host_environment",
    "loads_frame",
    "prepare_fast_loads",
    "pump_frames",
    "request_id_of",
    "request_key",
    "say",
    "start_upstream",
    "stop_upstream",
]

READ_CHUNK = 1 << 20
STOP_GRACE = 5.0
"""Seconds the upstream gets to exit after its stdin closes, and again after SIGTERM."""


def dumps_frame(message: Mapping[str, Any]) -> bytes:
    """One JSON-RPC message as a newline-terminated UTF-8 frame."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: let JSON escape it
        return (json.dumps(message, separators=(",", ":")) + "\n").encode("ascii")


_fast: tuple[Callable[[bytes], object], type[Exception]] | None = None
"""msgspec's JSON decoder and its error, once imported (see :func:`prepare_fast_loads`)."""


def prepare_fast_loads() -> None:
    """Import msgspec's JSON decoder for :func:`loads_frame`: ten times faster than
    ``json`` on a small frame (0.6 us against 6.5), which is most of what the proxy does
    with a frame it passes through. Its import takes about 20 ms, so the proxy runs this on
    a helper thread while the upstream starts; frames read before it is done use ``json``."""
    global _fast
    try:
        import msgspec.json
    except ImportError:  # a dependency, but json does the same, only slower
        return
    _fast = msgspec.json.Decoder().decode, msgspec.MsgspecError


def loads_frame(line: bytes) -> object:
    """The message in a frame, or None if it is not JSON."""
    fast = _fast
    if fast is not None:
        try:
            return fast[0](line)
        except RecursionError:  # nested too deep: not ours (nor json's)
            return None
        except fast[1]:
            # msgspec takes strict JSON only, and json decides the rest: NaN, Infinity,
            # 1e400 (inf), a lone surrogate, UTF-16 (and what is not JSON at all).
            pass
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # nested too deep: not ours
        return None


def request_key(request_id: object) -> str:
    """A dict key for a JSON-RPC id: ``1`` and ``"1"`` are different ids. A string or an
    integer (nearly every id) costs no JSON encoding; other values are keyed by their JSON,
    which never starts with ``s``."""
    if type(request_id) is str:
        return "s" + request_id
    if type(request_id) is int:
        return str(request_id)  # as JSON writes it
    return json.dumps(request_id)


def request_id_of(key: str) -> object:
    """The JSON-RPC id that :func:`request_key` made ``key`` of."""
    return key[1:] if key.startswith("s") else json.loads(key)


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
        self.pending = 0
        """Bytes of the unfinished frame held."""

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
                self.pending = 0
            else:
                lines.append(chunk[start : end + 1])
            start = end + 1
        if start < len(chunk):
            self._parts.append(chunk[start:])
            self.pending += len(chunk) - start
        return lines

    def rest(self) -> bytes:
        rest = b"".join(self._parts)
        self._parts = []
        self.pending = 0
        return rest


async def pump_frames(
    source: StdFd,
    handle: Callable[[bytes], Awaitable[None]],
    *,
    now: Callable[[bytes], bool] | None = None,
    read_error_ends: bool = False,
) -> None:
    """Hand each frame read from ``source`` to ``handle`` until the end of input; an
    unterminated last frame gets its newline (one of white space only is dropped).

    ``now`` sees each frame first, in the event loop's read callback, when nothing read
    before it is still waiting for ``handle``: it returns True when it dealt with the frame
    itself (a relay that needs no await), False to leave it to ``handle``. That saves the
    frame a trip through the event loop's queue (about a third of a small call's relay).

    Raises:
        OSError: reading failed (unless ``read_error_ends``: then that is the end of
            input), or ``handle`` raised it.
    """

    async def read_next() -> bytes:
        try:
            if now is not None and source.pollable:
                return await source.read_frame(now)
            return await source.read()
        except OSError:
            if read_error_ends:
                return b""
            raise

    if now is not None and source.pollable:
        while line := await read_next():
            await handle(line)
        return
    splitter = LineSplitter()
    while chunk := await read_next():
        for line in splitter.feed(chunk):
            await handle(line)
    rest = splitter.rest()
    if rest.strip():
        await handle(rest + b"\n")


class _Watched:
    """A non-blocking descriptor read as soon as it is readable, registered with the event
    loop once for its whole life: registering it again for every read costs more than the
    relay itself (about 0.15 ms a message, against 0.02 ms, on a 2-core machine). It reads
    ahead of its reader at most ``_AHEAD`` chunks, or ``_AHEAD_BYTES`` of frames, then
    waits for the reader to take them.

    With ``now`` (see :func:`pump_frames`) it splits what it reads into frames and offers
    each to ``now`` while its reader has nothing in hand; the reader gets the rest, in order.
    """

    _AHEAD = 2
    _AHEAD_BYTES = 2 * READ_CHUNK

    def __init__(self, fd: int, now: Callable[[bytes], bool] | None = None) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._chunks: deque[bytes | OSError] = deque()
        self._queued = 0
        self._now = now
        self._splitter = LineSplitter() if now is not None else None
        self._busy = False
        """The reader holds a frame it has not finished with (``now`` must wait)."""
        self._waiter: asyncio.Future[None] | None = None
        self._watching = False
        self._ended = False
        self._watch()

    def _full(self) -> bool:
        if self._splitter is None:
            return len(self._chunks) >= self._AHEAD
        # An unfinished frame is read on while the reader waits for it (it cannot be
        # handed over before it ends), and counts against the bound once the reader is busy.
        waiting = bool(self._chunks) or self._busy
        return waiting and self._queued + self._splitter.pending >= self._AHEAD_BYTES

    def _watch(self) -> None:
        if not self._watching and not self._ended and not self._full():
            self._loop.add_reader(self._fd, self._readable)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def _readable(self) -> None:
        try:
            data: bytes | OSError = os.read(self._fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            data = exc
        if not isinstance(data, bytes) or not data:
            self._ended = True
            if self._splitter is not None:
                rest = self._splitter.rest()
                if rest.strip():
                    self._chunks.append(rest + b"\n")
                    self._queued += len(rest) + 1
            self._chunks.append(data)
        elif self._splitter is None:
            self._chunks.append(data)
        else:
            chunks = self._chunks
            for line in self._splitter.feed(data):
                if chunks or self._busy or not self._dealt_with_now(line):
                    chunks.append(line)
                    self._queued += len(line)
        if self._ended or self._full():
            self._unwatch()
        if self._chunks:
            self._wake()

    def _dealt_with_now(self, line: bytes) -> bool:
        assert self._now is not None
        try:
            return self._now(line)
        except Exception:  # the reader's handler meets it again, where it is reported
            return False

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> bytes:
        if self._busy:
            self._busy = False
            self._watch()  # reading was held back while the last frame was handled
        while not self._chunks:
            if self._ended:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        item = self._chunks.popleft()
        if isinstance(item, bytes) and self._splitter is not None:
            self._queued -= len(item)
            self._busy = bool(item)
        self._watch()
        if isinstance(item, OSError):
            raise item
        return item

    def close(self) -> None:
        """Stop reading: a read waiting now, and every later one, gets end of input."""
        self._unwatch()
        self._ended = True
        self._chunks.clear()
        self._queued = 0
        self._wake()


class StdFd:
    """Async reads or writes on one of the proxy's own standard descriptors.

    Pipes, sockets and terminals are made non-blocking and read as soon as they are
    readable (:class:`_Watched`), so shutting down never waits for a read stuck in a
    thread; regular files (a debugging redirect) are read and written directly, as they
    never block.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        mode = os.fstat(fd).st_mode
        self._fifo = stat.S_ISFIFO(mode)
        self.pollable = self._fifo or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)
        self._writing = False
        self._was_blocking = os.get_blocking(fd)
        self._watched: _Watched | None = None
        if self.pollable:
            os.set_blocking(fd, False)

    def stop_reading(self) -> None:
        """End reads: one waiting now, and every later one, gets end of input (b"")."""
        if self._watched is not None:
            self._watched.close()

    def restore(self) -> None:
        self.stop_reading()
        if self.pollable:
            with contextlib.suppress(OSError):
                os.set_blocking(self.fd, self._was_blocking)

    async def read(self) -> bytes:
        if not self.pollable:
            return os.read(self.fd, READ_CHUNK)
        if self._watched is None:
            self._watched = _Watched(self.fd)
        return await self._watched.read()

    async def read_frame(self, now: Callable[[bytes], bool]) -> bytes:
        """The next frame ``now`` left to the caller (see :func:`pump_frames`); b"" at the
        end of input. Only for a pollable descriptor, read only this way.

        Raises:
            OSError: reading failed.
        """
        if self._watched is None:
            self._watched = _Watched(self.fd, now)
        return await self._watched.read()

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        self._writing = True
        try:
            while view:
                try:
                    written = os.write(self.fd, view)
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)
                    continue
                view = view[written:]
        finally:
            self._writing = False

    def can_write_now(self, size: int) -> bool:
        """Whether :meth:`write_now` may take ``size`` bytes (it may still refuse them)."""
        return self._fifo and not self._writing and size <= select.PIPE_BUF

    def write_now(self, data: bytes) -> bool:
        """Write all of ``data`` without waiting, or nothing: False when that cannot be
        promised (not a pipe, longer than ``PIPE_BUF``, a write in progress, a full pipe, or
        an error, which the caller's ordinary write then meets and reports)."""
        if not self.can_write_now(len(data)):
            return False
        try:
            # A pipe takes a write of at most PIPE_BUF bytes whole, or not at all (POSIX).
            os.write(self.fd, data)
        except OSError:
            return False
        return True


class UpstreamProcess:
    """The upstream server's process and its pipes, read and written through the event loop.

    Args:
        popen: the process, started with pipes for stdin and stdout
            (:func:`~toolswap.mcp.upstream.spawn_upstream`).
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdin is not None and popen.stdout is not None
        self.popen = popen
        self._stdin: StdFd | None = StdFd(popen.stdin.fileno())
        self._stdout = StdFd(popen.stdout.fileno())

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def send(self, data: bytes) -> None:
        """Write ``data`` to its stdin.

        Raises:
            OSError: it no longer reads (BrokenPipeError), or its stdin was closed.
        """
        if self._stdin is None:
            raise BrokenPipeError("the upstream's stdin is closed")
        await self._stdin.write(data)

    def can_send_now(self, size: int) -> bool:
        """Whether :meth:`send_now` may take ``size`` bytes (it may still refuse them)."""
        return self._stdin is not None and self._stdin.can_write_now(size)

    def send_now(self, data: bytes) -> bool:
        """Write ``data`` to its stdin at once, or nothing (see :meth:`StdFd.write_now`)."""
        return self._stdin is not None and self._stdin.write_now(data)

    @property
    def stdout(self) -> StdFd:
        """Its stdout (read it with :func:`pump_frames`)."""
        return self._stdout

    def close_stdin(self) -> None:
        """Close its stdin: the upstream sees end of input (and should exit)."""
        if self._stdin is None:
            return
        self._stdin = None
        assert self.popen.stdin is not None
        anyio.notify_closing(self.popen.stdin.fileno())  # wakes a send waiting on it
        with contextlib.suppress(OSError):
            self.popen.stdin.close()

    async def wait(self) -> int:
        """Wait for it to exit; its status."""
        return await anyio.to_thread.run_sync(self.popen.wait, abandon_on_cancel=True)

    def terminate(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.terminate()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()

    def close(self) -> None:
        """Close both pipes (the process itself is stopped by :func:`stop_upstream`)."""
        self.close_stdin()
        assert self.popen.stdout is not None
        self._stdout.stop_reading()
        with contextlib.suppress(OSError):
            self.popen.stdout.close()


async def start_upstream(argv: Sequence[str], env: Mapping[str, str] | None) -> UpstreamProcess:
    """Start the upstream (see :func:`~toolswap.mcp.upstream.spawn_upstream`).

    Raises:
        OSError: the command cannot be started.
    """
    return UpstreamProcess(spawn_upstream(argv, env))


async def stop_upstream(proc: UpstreamProcess) -> int | None:
    """Close the upstream's stdin and wait for it to exit; terminate, then kill it."""
    if proc.returncode is not None:
        return proc.returncode
    proc.close_stdin()
    for signal in ("wait", "terminate", "kill"):
        if signal == "terminate":
            proc.terminate()
        elif signal == "kill":
            proc.kill()
        with anyio.move_on_after(STOP_GRACE):
            return await proc.wait()
    return proc.returncode
