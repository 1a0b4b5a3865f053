"""MCP proxy overhead: the SDK's stdio client calling an upstream directly vs through
``toolswap mcp proxy``.

Two calls: a small result (passed through byte for byte) and a 10 MB result (saved as an
artifact; the client receives a ~32 KiB pointer instead). The floor for the large call is
what externalizing must do at least: write the 10 MB, fsync it and hash it once.
Medians of N calls after a warm-up, direct and proxied calls in turn (the small call's
overhead is the median of the paired differences); client, proxy and upstream are separate
processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from toolswap import ToolResultExternalizer

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
SMALL_CALLS = 50 if QUICK else 300
LARGE_CALLS = 3 if QUICK else 15
LARGE = 10 * 1000 * 1000
HERE = Path(__file__).resolve().parent
UPSTREAM = [sys.executable, str(HERE / "_mcp_upstream.py")]


@asynccontextmanager
async def _session(argv: list[str], env: dict[str, str]) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()  # call_tool would list once to find output schemas
        await session.call_tool("echo", {"text": "warm-up"})
        await session.call_tool("blob", {"size": LARGE})
        yield session


async def _timed_call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> float:
    start = time.perf_counter()
    await session.call_tool(tool, arguments)
    return time.perf_counter() - start


def _cpu_seconds(marker: str) -> float:
    """User + system CPU seconds of this process's child whose command line holds
    ``marker`` (the relay or the proxy the SDK client started)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and marker in cmdline:
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise LookupError(f"no child process running {marker}")


async def paired(
    upstream: list[str], relay: list[str], proxy: list[str], env: dict[str, str]
) -> tuple[dict[str, list[float]], dict[str, float], int, int]:
    """Per-call seconds of each call, direct, through a plain relay and through the proxy,
    taken in turn (direct, relay, proxied, direct, ...) so that drift in the machine hits
    all alike; the relay's and the proxy's CPU seconds per small call; and the size of the
    large answer each way."""
    times: dict[str, list[float]] = {
        "direct small": [],
        "relay small": [],
        "proxy small": [],
        "direct large": [],
        "proxy large": [],
    }
    async with (
        _session(upstream, env) as direct,
        _session(relay, env) as relayed,
        _session(proxy, env) as proxied,
    ):
        cpu = {"relay": _cpu_seconds("_relay.py"), "proxy": _cpu_seconds("mcp proxy")}
        for i in range(SMALL_CALLS):
            small = {"text": f"ping {i}"}
            times["direct small"].append(await _timed_call(direct, "echo", small))
            times["relay small"].append(await _timed_call(relayed, "echo", small))
            times["proxy small"].append(await _timed_call(proxied, "echo", small))
        cpu = {
            "relay": (_cpu_seconds("_relay.py") - cpu["relay"]) / SMALL_CALLS,
            "proxy": (_cpu_seconds("mcp proxy") - cpu["proxy"]) / SMALL_CALLS,
        }
        for _ in range(LARGE_CALLS):
            times["direct large"].append(await _timed_call(direct, "blob", {"size": LARGE}))
            times["proxy large"].append(await _timed_call(proxied, "blob", {"size": LARGE}))
        sizes = []
        for session in (direct, proxied):
            result = await session.call_tool("blob", {"size": LARGE})
            block = result.content[0]
            sizes.append(len(block.text.encode()) if isinstance(block, TextContent) else 0)
    return times, cpu, sizes[0], sizes[1]


def floor(directory: Path) -> float:
    """Write, fsync and hash 10 MB once (what any externalization must do)."""
    data = os.urandom(LARGE)
    runs = []
    for i in range(max(LARGE_CALLS, 3)):
        path = directory / f"floor-{i}"
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        hashlib.sha256(data).hexdigest()
        runs.append(time.perf_counter() - start)
        path.unlink()
    return statistics.median(runs)


def proxy_work(directory: Path) -> tuple[float, float]:
    """In-process medians of the proxy's own steps on a 10 MB frame: parse, externalize."""
    sys.path.insert(0, str(HERE))
    from _mcp_upstream import _blob

    text = _blob(LARGE)
    frame = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": text}]}}
    ).encode()
    ext = ToolResultExternalizer(directory / "in-process", read_hint="mcp")
    parse, save = [], []
    for _ in range(max(LARGE_CALLS, 3)):
        start = time.perf_counter()
        message = json.loads(frame)
        parse.append(time.perf_counter() - start)
        start = time.perf_counter()
        ext.externalize(message["result"]["content"][0]["text"], "blob")
        save.append(time.perf_counter() - start)
    return statistics.median(parse), statistics.median(save)


def rewrite_work(directory: Path) -> tuple[float, float]:
    """In-process medians of the rewrite of a 10 MB text result, alone and wrapped again in
    ``structuredContent`` (server-filesystem's shape: found, saved once, one pointer)."""
    sys.path.insert(0, str(HERE))
    from _mcp_upstream import _blob
    from toolswap.mcp.rewrite import ResultRewriter

    text = _blob(LARGE)
    plain = {"content": [{"type": "text", "text": text}]}
    wrapped = {**plain, "structuredContent": {"content": text}}
    ext = ToolResultExternalizer(directory / "rewrite", read_hint="mcp")
    rewriter = ResultRewriter(ext)
    rule = ext.settings.rule_for("blob")
    runs: dict[str, list[float]] = {"plain": [], "wrapped": []}
    for _ in range(max(LARGE_CALLS, 3)):
        for label, result in (("plain", plain), ("wrapped", wrapped)):
            start = time.perf_counter()
            rewriter.tool_result("blob", result, rule)
            runs[label].append(time.perf_counter() - start)
    return statistics.median(runs["plain"]), statistics.median(runs["wrapped"])


def main() -> None:
    data = HERE / ".data" / "mcp"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    home = Path(tempfile.mkdtemp(prefix="home-", dir=data))
    env = {"TOOLSWAP_HOME": str(home), "TOOLSWAP_WORKSPACE": "bench"}
    proxy = [sys.executable, "-m", "toolswap", "mcp", "proxy", "--session", "bench"]
    proxy += ["--", *UPSTREAM]

    relay = [sys.executable, str(HERE / "_relay.py"), *UPSTREAM]
    times, cpu, direct_size, pointer_size = anyio.run(paired, UPSTREAM, relay, proxy, env)
    floor_large = floor(data)
    parse, save = proxy_work(data)
    plain, wrapped = rewrite_work(data)

    ds, ps = statistics.median(times["direct small"]), statistics.median(times["proxy small"])
    dl, pl = statistics.median(times["direct large"]), statistics.median(times["proxy large"])
    added, relay_added = (
        statistics.median(
            p - d for p, d in zip(times[f"{via} small"], times["direct small"], strict=True)
        )
        for via in ("proxy", "relay")
    )
    print(
        f"MCP proxy overhead (SDK stdio client; medians of {SMALL_CALLS} small and "
        f"{LARGE_CALLS} large calls, direct, through a plain relay and proxied in turn)"
    )
    print(
        f"  small result (passed through): direct {ds * 1e3:7.2f} ms   via proxy "
        f"{ps * 1e3:7.2f} ms   added {added * 1e3:+6.2f} ms (median of the pairs; "
        f"goal <= +0.30 ms)   ratio {ps / ds:.2f}x"
    )
    print(
        f"    floor, a plain relay (two threads copying bytes): added {relay_added * 1e3:+6.2f}"
        f" ms; CPU a call: relay {cpu['relay'] * 1e6:.0f} us, proxy {cpu['proxy'] * 1e6:.0f} us"
        f" ({cpu['proxy'] / cpu['relay']:.1f}x)"
    )
    print(
        f"  10 MB result:                  direct {dl * 1e3:7.1f} ms   via proxy "
        f"{pl * 1e3:7.1f} ms   added {(pl - dl) * 1e3:+6.1f} ms   ratio {pl / dl:.2f}x"
    )
    print(
        f"    the client received {direct_size / 1e6:.1f} MB directly, a pointer of "
        f"{pointer_size / 1024:.1f} KiB through the proxy"
    )
    print(
        f"    the proxy's own work on that frame (in-process): parse {parse * 1e3:.1f} ms + "
        f"externalize {save * 1e3:.1f} ms"
    )
    print(
        f"    floor (write + fsync + sha256 of 10 MB): {floor_large * 1e3:.1f} ms; "
        f"externalize / floor: {save / floor_large:.1f}x"
    )
    print(
        f"    rewrite of the 10 MB result (in-process): text alone {plain * 1e3:.1f} ms, "
        f"also wrapped in structuredContent {wrapped * 1e3:.1f} ms "
        f"({wrapped / plain:.2f}x; one artifact either way)"
    )
    shutil.rmtree(data, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
