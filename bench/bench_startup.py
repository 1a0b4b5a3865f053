"""Start-up costs, each beside its floor measured in the same run (min of N, interleaved).

1. ``import toolswap`` against ``python -c pass`` (goal: at most 30 ms over it).
2. ``toolswap run -- true`` against ``true`` alone and against ``python -c pass`` (goal: at
   most 60 ms over the interpreter's start).
3. ``toolswap mcp serve``: from spawn to the answer to ``initialize`` (goal: within 0.5 s),
   against the interpreter's start.
4. ``toolswap mcp proxy``: from spawn to the answer to ``tools/list`` (``initialize``,
   ``notifications/initialized``, ``tools/list``), against the same upstream started directly
   (goal: at most 0.3 s more).
5. ``toolswap run`` of a command that computes before it prints a large log (``sleep 0.2``,
   then 1.3 MB of build log with failures), against the command alone: as shipped, and with
   ``TOOLSWAP_PREWARM=off`` (the capture's modules imported when the output asks for them,
   not while the command is quiet).

``toolswap`` is the venv's console script when it runs this checkout with this interpreter
(as after ``make``), else ``python -m toolswap``; each command runs once first, which leaves
the bytecode caches in place (as an installed package has them).
``TOOLSWAP_BENCH_QUICK=1`` runs fewer rounds.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
ROUNDS = 3 if QUICK else 20
MCP_ROUNDS = 2 if QUICK else 12
HERE = Path(__file__).resolve().parent
UPSTREAM = [sys.executable, str(HERE / "_mcp_upstream.py")]
PY = sys.executable


def _toolswap_command() -> list[str]:
    """``toolswap`` as a user runs it: the console script beside this interpreter when it
    runs this checkout's code, else ``python -m toolswap``."""
    import toolswap  # lazy: this loads nothing but the package's __init__

    script = Path(PY).with_name("toolswap")
    ours = Path(toolswap.__file__).resolve().is_relative_to(HERE.parent)
    try:
        shebang = script.read_bytes().split(b"\n", 1)[0]
    except OSError:
        shebang = b""
    if ours and shebang == b"#!" + os.fsencode(PY):
        return [str(script)]
    return [PY, "-m", "toolswap"]


TOOLSWAP = _toolswap_command()


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSWAP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode cached
    env.update(TOOLSWAP_HOME=str(home), TOOLSWAP_WORKSPACE="bench")
    return env


_COMPUTES = 0.2
LARGE_ROUNDS = 3 if QUICK else 10


def _build_log() -> bytes:
    """A build's log: compiler lines, a few warnings and errors, a summary (1.3 MB)."""
    lines = []
    for i in range(20_000):
        lines.append(f"[{i:5d}/20000] CC src/module_{i % 700}/file_{i}.c -o build/file_{i}.o")
        if i % 2_500 == 1_234:
            lines.append(
                f"src/module_{i % 700}/file_{i}.c:{i % 90 + 1}:5: warning: unused variable 'x'"
            )
        if i == 15_321:
            lines.append(f"src/module_{i % 700}/file_{i}.c:42:13: error: 'count' undeclared")
    lines.append("make: *** [Makefile:120: build/file_15321.o] Error 1")
    return ("\n".join(lines) + "\n").encode()


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _interleaved(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each case once per round, in turn, so drift in the machine hits all alike."""
    for run in cases.values():
        run()  # warm-up: bytecode caches, page cache
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            times[name].append(run())
    return times


def _ms(values: list[float]) -> str:
    return f"{min(values) * 1e3:7.1f} ms (median {statistics.median(values) * 1e3:.1f})"


# -- MCP: spawn until answered -------------------------------------------------------------

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
_INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _answered(argv: list[str], env: dict[str, str], *, list_tools: bool) -> float:
    """Seconds from spawning ``argv`` to the answer to ``initialize`` (and ``tools/list``)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        messages = [_INITIALIZE, _INITIALIZED, _LIST] if list_tools else [_INITIALIZE]
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        proc.stdin.flush()
        wanted = 2 if list_tools else 1
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[:4]} closed its output before answering")
            answer = json.loads(line)
            if answer.get("id") == wanted:
                if "result" not in answer:
                    raise RuntimeError(f"{argv[:4]} refused: {answer}")
                elapsed = time.perf_counter() - start
                break
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return elapsed


def main() -> None:
    data = HERE / ".data" / "startup"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    home = Path(tempfile.mkdtemp(prefix="home-", dir=data))
    env = _env(home)

    times = _interleaved(
        {
            "pass": lambda: _wall([PY, "-c", "pass"], env),
            "import": lambda: _wall([PY, "-c", "import toolswap"], env),
            "true": lambda: _wall(["true"], env),
            "run": lambda: _wall([*TOOLSWAP, "run", "--", "true"], env),
        },
        ROUNDS,
    )
    floor, imported = min(times["pass"]), min(times["import"])
    true, run = min(times["true"]), min(times["run"])
    print(
        f"start-up of `{' '.join(Path(a).name for a in TOOLSWAP)}`, min of {ROUNDS} "
        "interleaved runs (median in brackets)"
    )
    print(f"  python -c pass                  {_ms(times['pass'])}   <- the floor")
    print(
        f"  python -c 'import toolswap'     {_ms(times['import'])}   "
        f"{(imported - floor) * 1e3:+6.1f} ms over the floor (goal <= +30 ms)"
    )
    print(f"  true                            {_ms(times['true'])}")
    print(
        f"  toolswap run -- true            {_ms(times['run'])}   "
        f"{(run - floor) * 1e3:+6.1f} ms over the floor (goal <= +60 ms), "
        f"{(run - true) * 1e3:+6.1f} ms over `true`"
    )

    log = data / "build.log"
    log.write_bytes(_build_log())
    command = ["sh", "-c", f'sleep {_COMPUTES}; cat "$0"', str(log)]
    cold = {**env, "TOOLSWAP_PREWARM": "off"}
    large = _interleaved(
        {
            "alone": lambda: _wall(command, env),
            "run": lambda: _wall([*TOOLSWAP, "run", "--", *command], env),
            "cold": lambda: _wall([*TOOLSWAP, "run", "--", *command], cold),
        },
        LARGE_ROUNDS,
    )
    alone = min(large["alone"])
    print(
        f"a large output of a command that computes first (sleep {_COMPUTES}; cat a "
        f"{log.stat().st_size / 1e6:.1f} MB build log), min of {LARGE_ROUNDS}"
    )
    print(f"  the command alone               {_ms(large['alone'])}   <- the floor")
    print(
        f"  toolswap run -- the command     {_ms(large['run'])}   "
        f"{(min(large['run']) - alone) * 1e3:+6.1f} ms over the command"
    )
    print(
        f"  the same, TOOLSWAP_PREWARM=off  {_ms(large['cold'])}   "
        f"{(min(large['cold']) - alone) * 1e3:+6.1f} ms over the command"
    )

    mcp = _interleaved(
        {
            "pass": lambda: _wall([PY, "-c", "pass"], env),
            "serve": lambda: _answered([*TOOLSWAP, "mcp", "serve"], env, list_tools=False),
            "upstream": lambda: _answered(UPSTREAM, env, list_tools=True),
            "proxy": lambda: _answered(
                [*TOOLSWAP, "mcp", "proxy", "--", *UPSTREAM], env, list_tools=True
            ),
        },
        MCP_ROUNDS,
    )
    serve, upstream, proxy = min(mcp["serve"]), min(mcp["upstream"]), min(mcp["proxy"])
    # A start takes over a second and the machine drifts meanwhile: each proxied start is
    # compared with the direct one just before it.
    added = statistics.median(p - u for p, u in zip(mcp["proxy"], mcp["upstream"], strict=True))
    print(f"MCP start-up, min of {MCP_ROUNDS} interleaved runs (median in brackets)")
    print(f"  python -c pass                  {_ms(mcp['pass'])}   <- the floor")
    print(
        f"  mcp serve: spawn -> initialize  {_ms(mcp['serve'])}   "
        f"(goal <= 500 ms; {(serve - min(mcp['pass'])) * 1e3:+.0f} ms over the floor)"
    )
    print(
        f"  upstream alone: spawn -> initialize -> tools/list   {_ms(mcp['upstream'])}   "
        "<- the floor"
    )
    print(
        f"  through mcp proxy: the same     {_ms(mcp['proxy'])}   "
        f"{(proxy - upstream) * 1e3:+.0f} ms over the upstream alone, min to min; "
        f"{added * 1e3:+.0f} ms median of the pairs (goal <= +300 ms)"
    )
    shutil.rmtree(data, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
