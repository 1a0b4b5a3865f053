"""The proxy's descriptor reads (``transport.StdFd``) on real pipes: in order, bounded
read-ahead, end of input, and a stop that wakes a read waiting on a silent pipe."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolswap.mcp import transport
from toolswap.mcp.transport import (
    READ_CHUNK,
    StdFd,
    loads_frame,
    prepare_fast_loads,
    pump_frames,
    request_id_of,
    request_key,
)

T = TypeVar("T")


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


async def _offer(w: int, blocks: int) -> int:
    """Offer ``blocks`` blocks of 64 KiB to the non-blocking pipe ``w``, yielding to the loop
    after each; return how many bytes it took (a full pipe takes none of a block)."""
    written = 0
    block = b"x" * (1 << 16)
    for _ in range(blocks):
        try:
            written += os.write(w, block)
        except BlockingIOError:
            await anyio.sleep(0.001)
            continue
        await anyio.sleep(0)
    return written


def _pump_while(
    r: int,
    handle: Callable[[bytes], Awaitable[None]],
    now: Callable[[bytes], bool],
    feed: Callable[[], Awaitable[T]],
    *,
    timeout: float = 10,
) -> T:
    """Run pump_frames on ``r`` while ``feed`` writes to the pipe (and closes it); its
    result once the pump has ended."""

    async def main() -> T:
        fd = StdFd(r)
        try:
            with anyio.fail_after(timeout):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(functools.partial(pump_frames, fd, handle, now=now))
                    return await feed()
        finally:
            fd.restore()

    return anyio.run(main)


def test_reads_come_in_order_and_end_with_empty_bytes(pipe: tuple[int, int]) -> None:
    r, w = pipe

    async def main() -> list[bytes]:
        fd = StdFd(r)
        got: list[bytes] = []
        try:
            for i in range(50):
                os.write(w, b"frame %d\n" % i)
                got.append(await fd.read())
            os.close(w)
            got.append(await fd.read())
            got.append(await fd.read())  # stays at the end
        finally:
            fd.restore()
        return got

    got = anyio.run(main)
    assert got[:50] == [b"frame %d\n" % i for i in range(50)]
    assert got[50:] == [b"", b""]


def test_read_ahead_is_bounded_so_a_slow_reader_pushes_back_on_the_writer(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    os.set_blocking(w, False)

    async def main() -> tuple[int, int]:
        fd = StdFd(r)
        try:
            first = await fd.read()  # the descriptor is watched from now on
            # Give the loop many chances to read ahead while nobody asks for more.
            written = await _offer(w, 400)
            assert first == b"start\n"
            taken = 0
            while taken < written:
                taken += len(await fd.read())
            return written, taken
        finally:
            fd.restore()

    os.write(w, b"start\n")
    written, taken = anyio.run(main)
    # Without the bound, the loop would have drained everything written into memory and the
    # writer would never have been refused; with it, the pipe filled and pushed back, so
    # far less than 400 blocks got in, at most the read-ahead plus the pipe's own buffer.
    assert written < 400 * (1 << 16)
    assert written <= 3 * READ_CHUNK + (1 << 20)
    assert taken == written


def test_stop_reading_wakes_a_read_waiting_on_a_silent_pipe(pipe: tuple[int, int]) -> None:
    r, _w = pipe

    async def main() -> bytes:
        fd = StdFd(r)
        result = b"unset"

        async def reader() -> None:
            nonlocal result
            result = await fd.read()

        try:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(reader)
                    await anyio.sleep(0.05)
                    fd.stop_reading()
        finally:
            fd.restore()
        return result

    assert anyio.run(main) == b""


def test_frames_dealt_with_now_never_overtake_a_frame_left_to_the_reader(
    pipe: tuple[int, int],
) -> None:
    """pump_frames's ``now`` sees a frame only while the reader holds none: what it relays
    comes after what the reader was still handling, as the frames were written."""
    r, w = pipe
    out: list[bytes] = []

    def now(line: bytes) -> bool:
        if line.startswith(b"slow"):
            return False
        out.append(b"now " + line)
        return True

    async def handle(line: bytes) -> None:
        await anyio.sleep(0.02)  # a rewrite that takes a while, frames queue behind it
        out.append(b"handled " + line)

    async def feed() -> None:
        os.write(w, b"a\nslow 1\n")
        await anyio.sleep(0.005)  # the reader holds slow 1, nothing is queued
        os.write(w, b"b\nc")  # c continues in the next write
        await anyio.sleep(0.005)
        os.write(w, b"\nd\n")
        await anyio.sleep(0.1)
        os.write(w, b"e\nslow 2\nf\nlast, unterminated")
        os.close(w)

    _pump_while(r, handle, now, feed)
    assert out == [
        b"now a\n",
        b"handled slow 1\n",
        b"handled b\n",
        b"handled c\n",
        b"handled d\n",
        b"now e\n",
        b"handled slow 2\n",
        b"handled f\n",
        b"handled last, unterminated\n",
    ]


def test_write_now_writes_a_whole_frame_or_nothing(pipe: tuple[int, int]) -> None:
    r, w = pipe
    out = StdFd(w)
    try:
        frame = b"x" * 100 + b"\n"
        sent = 0
        while out.write_now(frame):  # until the pipe is full
            sent += 1
        assert sent > 0
        os.set_blocking(r, False)
        got = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(r, 1 << 20):
                got += chunk
        assert got == frame * sent  # no frame cut short by the full pipe
        assert not out.write_now(b"y" * (select.PIPE_BUF + 1))  # too long to promise
        assert out.write_now(b"z\n")
    finally:
        out.restore()


def test_a_frame_now_cannot_judge_goes_to_the_reader_and_none_is_lost(
    pipe: tuple[int, int],
) -> None:
    """``now`` raising (a frame nested too deep for the parser, say) leaves the frame to
    the reader's handler, where the error is met and reported; the frames after it still
    arrive, in order."""
    r, w = pipe
    deep = b"[" * 5000 + b"]" * 5000 + b"\n"
    assert loads_frame(deep) is None  # too deep to parse: not JSON to the proxy
    seen: list[bytes] = []

    def now(line: bytes) -> bool:
        if line.startswith(b"["):
            raise RecursionError("maximum recursion depth exceeded")
        seen.append(b"now " + line)
        return True

    async def handle(line: bytes) -> None:
        seen.append(b"handled " + line[:8])

    async def feed() -> None:
        os.write(w, b"a\n" + deep + b"b\n")
        await anyio.sleep(0.05)
        os.close(w)

    _pump_while(r, handle, now, feed)
    assert seen == [b"now a\n", b"handled [[[[[[[[", b"handled b\n"]


def test_an_unfinished_frame_is_not_read_without_bound_while_the_reader_is_busy(
    pipe: tuple[int, int],
) -> None:
    """While the reader handles a frame, what is read ahead, an unfinished frame included,
    stays within the bound: the writer is pushed back."""
    r, w = pipe
    os.set_blocking(w, False)
    release = anyio.Event()

    async def handle(line: bytes) -> None:
        await release.wait()

    async def feed() -> int:
        os.write(w, b"first\n")
        await anyio.sleep(0.02)  # the reader now holds "first"
        written = await _offer(w, 1600)  # 100 MiB of one frame, unterminated
        release.set()
        os.close(w)
        return written

    written = _pump_while(r, handle, lambda _: False, feed, timeout=20)
    assert written <= 3 * READ_CHUNK + (1 << 20)  # the bound, a read, and the pipe's buffer


def test_read_error_ends_ends_on_a_read_error_but_not_on_the_handler_s(
    pipe: tuple[int, int], tmp_path: Path
) -> None:
    r, w = pipe

    async def kept(line: bytes) -> None:
        raise AssertionError("a directory has no frames")

    async def read_fails(read_error_ends: bool) -> None:
        # Reading a directory fails with EISDIR: a real read error from the kernel.
        fd = StdFd(os.open(tmp_path, os.O_RDONLY))
        try:
            await pump_frames(fd, kept, now=lambda _: False, read_error_ends=read_error_ends)
        finally:
            os.close(fd.fd)

    anyio.run(read_fails, True)  # the end of input, quietly
    with pytest.raises(IsADirectoryError):
        anyio.run(read_fails, False)

    async def failing(line: bytes) -> None:
        raise OSError("the handler's own failure")

    async def main() -> None:
        fd = StdFd(r)
        try:
            os.write(w, b"frame\n")
            await pump_frames(fd, failing, now=lambda _: False, read_error_ends=True)
        finally:
            fd.restore()

    with pytest.raises(OSError, match="the handler's own failure"):
        anyio.run(main)


def test_a_request_key_tells_every_json_rpc_id_apart_and_gives_it_back() -> None:
    ids: list[object] = [1, "1", True, 1.0, None, "null", "true", "1.0", "s1", "", 10**30, [1]]
    keys = [request_key(i) for i in ids]
    assert len(set(keys)) == len(ids)
    for request_id, key in zip(ids, keys, strict=True):
        back = request_id_of(key)
        assert back == request_id and type(back) is type(request_id)


def _json_frame(line: bytes) -> object:
    """What ``loads_frame`` read a frame as before it had a fast decoder: ``json``'s."""
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


_EDGE_FRAMES = [
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo"}}\n',
    b'{"id":1,"id":2}\n',  # the last wins, as in json
    b'{"id":123456789012345678901234567890,"result":{}}\n',  # beyond 64 bits
    b'{"id":1,"result":{"x":NaN,"y":-Infinity}}\n',  # json takes these, msgspec does not
    b'{"id":1,"result":{"x":1e400}}\n',  # inf to json, out of range to msgspec
    b'{"id":1,"result":{"text":"\\ud800 lone"}}\n',  # a lone surrogate
    '{"id":1,"result":"caf\u00e9"}\n'.encode("utf-16"),  # json detects UTF-16
    b'{"id":1,"result":"\xff\xfe not utf-8"}\n',
    b"[" * 5000 + b"]" * 5000 + b"\n",  # too deep for either
    b"not json at all\n",
    b"\n",
    b'  {"id":"s1","result":{"content":[]}}  \r\n',
    b'{"id":1.0,"result":[0.1,-0,1E+2,true,false,null,"\\u0000\\n\\"\\\\"]}\n',
]


def test_the_fast_decoder_reads_every_frame_as_json_does() -> None:
    """msgspec decodes a frame the proxy passes through ten times faster than json; where it
    refuses one (NaN, a lone surrogate, UTF-16...) json decides, so a frame means the same
    to the proxy whichever decoder read it, and one neither can read is None."""
    prepare_fast_loads()
    assert transport._fast is not None  # the decoder below is msgspec's
    for frame in _EDGE_FRAMES:
        got, want = loads_frame(frame), _json_frame(frame)
        assert repr(got) == repr(want), frame[:60]  # (repr: NaN != NaN)
        assert type(got) is type(want)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=30,
    ),
    st.booleans(),
)
def test_any_json_value_reads_the_same_with_the_fast_decoder(value: object, ascii: bool) -> None:
    prepare_fast_loads()
    frame = (
        json.dumps({"id": 1, "result": value}, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
        + b"\n"
    )
    got, want = loads_frame(frame), _json_frame(frame)
    assert repr(got) == repr(want)
