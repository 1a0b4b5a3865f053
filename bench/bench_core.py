"""Core benchmarks, each a ratio against a floor measured in the same run.

1. Capture 256 MiB from a pipe, against the floor: read the same pipe, sha256, write, fsync;
   and 64 MiB given as in-memory chunks (the library path of the adapters and the MCP proxy),
   against sha256 + write + fsync of the same chunks.
2. Peak RSS growth of a process capturing 1 GiB from a pipe.
3. A 200-line read in the middle of a 1.5-million-line artifact (first read, which verifies
   the digest and builds the line index, and a repeated read), against one sha256 pass.
4. grep over 130 MB, a literal and two regular expressions, each against GNU ``grep -n``
   (``-F`` / ``-E``) with the same pattern.

``TOOLSWAP_BENCH_QUICK=1`` uses tiny sizes (a smoke test, not a measurement). Data lives in
``bench/.data`` and is removed afterwards.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from _floor import capture_floor, chunks_floor
from toolswap import ExternalizerSettings, ToolResultExternalizer
from toolswap import reader as reader_module

QUICK = os.environ.get("TOOLSWAP_BENCH_QUICK") == "1"
MIB = 1 << 20
CAPTURE_BYTES = (4 if QUICK else 256) * MIB
MEMORY_BYTES = (4 if QUICK else 64) * MIB
RSS_BYTES = (32 if QUICK else 1024) * MIB
READ_LINES = 20_000 if QUICK else 1_500_000
GREP_BYTES = (2 if QUICK else 130) * 1_000_000
REPEATS = 1 if QUICK else 5
DATA = Path(__file__).resolve().parent / ".data"

# A producer that writes ``total`` bytes of build-log-like text to stdout in 1 MiB blocks.
PRODUCER = """
import sys
total = int(sys.argv[1])
block = b"".join(
    b"[%08d] compiling src/module_%05d.c -> build/module_%05d.o ok\\n" % (i, i, i)
    for i in range(20_000)
)[: 1 << 20]
block = block[: block.rfind(b"\\n") + 1].ljust(1 << 20, b" ")[:-1] + b"\\n"
out = sys.stdout.buffer
for _ in range(total // len(block)):
    out.write(block)
out.write(block[: total % len(block)])
"""


def _producer(total: int, *, widen: bool = False) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, str(total)], stdout=subprocess.PIPE)
    if widen:
        # The same 1 MiB pipe buffer toolswap asks for, so the floor reads the same pipe.
        assert proc.stdout is not None
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, MIB)
    return proc


def _settings() -> ExternalizerSettings:
    return ExternalizerSettings()  # the spec's defaults, whatever the environment says


def _ratio(value: float, floor: float) -> str:
    return f"{value / floor:.2f}x" if floor > 0 else "n/a"


# -- 1. capture ----------------------------------------------------------------------


def _floor_capture(path: Path) -> float:
    """Read the pipe, sha256 and write every chunk, fsync: the least any capture must do.

    One thread, reading whatever the pipe holds (up to 1 MiB) between hashing and writing.
    """
    proc = _producer(CAPTURE_BYTES, widen=True)
    assert proc.stdout is not None
    elapsed = capture_floor(proc.stdout, path)
    proc.stdout.close()
    proc.wait()
    return elapsed


def _toolswap_capture(session: Path) -> float:
    ext = ToolResultExternalizer(session, settings=_settings())
    proc = _producer(CAPTURE_BYTES)
    assert proc.stdout is not None
    start = time.perf_counter()
    result = ext.process(proc.stdout, "bash", argv=["producer"], exit_code=proc.wait)
    elapsed = time.perf_counter() - start
    proc.stdout.close()
    assert result.artifact is not None and result.artifact.byte_size == CAPTURE_BYTES
    result.artifact.path.unlink()
    return elapsed


def bench_capture() -> None:
    session = DATA / "capture"
    floors: list[float] = []
    captures: list[float] = []
    for _ in range(REPEATS):  # interleaved, so drift in the machine hits both alike
        floors.append(_floor_capture(DATA / "floor.bin"))
        captures.append(_toolswap_capture(session))
    floor, capture = min(floors), min(captures)
    mb = CAPTURE_BYTES / MIB
    print(
        f"capture {mb:.0f} MiB from a pipe: toolswap {capture:.3f} s ({mb / capture:.0f} MiB/s); "
        f"floor (pipe read + sha256 + write + fsync) {floor:.3f} s ({mb / floor:.0f} MiB/s); "
        f"ratio {_ratio(capture, floor)} (target <= 1.30x)"
    )
    print(f"  all runs: toolswap {_fmt(captures)} s; floor {_fmt(floors)} s")


def _memory_chunks(total: int) -> list[bytes]:
    """The producer's build-log text (the same 1 MiB block), as chunks a tool holds."""
    block = b"".join(
        b"[%08d] compiling src/module_%05d.c -> build/module_%05d.o ok\n" % (i, i, i)
        for i in range(20_000)
    )[:MIB]
    block = block[: block.rfind(b"\n") + 1].ljust(MIB, b" ")[:-1] + b"\n"
    return [block] * (total // MIB)


def bench_capture_memory() -> None:
    chunks = _memory_chunks(MEMORY_BYTES)
    ext = ToolResultExternalizer(DATA / "memory", settings=_settings())

    def ours() -> float:
        start = time.perf_counter()
        result = ext.externalize(iter(chunks), "logs")
        elapsed = time.perf_counter() - start
        assert result.artifact is not None and result.artifact.byte_size == MEMORY_BYTES
        result.artifact.path.unlink()
        return elapsed

    floors: list[float] = []
    captures: list[float] = []
    for _ in range(REPEATS + 2):  # interleaved, so drift in the machine hits both alike
        floors.append(chunks_floor(chunks, DATA / "floor-memory.bin"))
        captures.append(ours())
    floor, capture = min(floors), min(captures)
    mb = MEMORY_BYTES / MIB
    print(
        f"capture {mb:.0f} MiB of in-memory chunks: toolswap {capture:.3f} s; floor (sha256 + "
        f"write + fsync of the same chunks) {floor:.3f} s; ratio {_ratio(capture, floor)} "
        "(target <= 1.30x)"
    )
    print(f"  all runs: toolswap {_fmt(captures)} s; floor {_fmt(floors)} s")


def _fmt(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


# -- 2. peak RSS ---------------------------------------------------------------------

# The child reads its own peak RSS (VmHWM, reset just before the capture): ru_maxrss is
# inherited from the parent across fork and exec, and this parent is larger than the child.
RSS_CHILD = """
import json, resource, subprocess, sys
from toolswap import ExternalizerSettings, ToolResultExternalizer

def peak_kib():
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

ext = ToolResultExternalizer(sys.argv[1], settings=ExternalizerSettings())
ext.externalize(b"warm up\\n" * 1000, "bash")
try:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
except OSError:
    pass
before = peak_kib()
proc = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2]], stdout=subprocess.PIPE)
result = ext.process(proc.stdout, "bash", exit_code=proc.wait)
after = peak_kib()
result.artifact.path.unlink()
print(json.dumps({"before": before, "after": after, "size": result.artifact.byte_size}))
"""


def bench_rss() -> None:
    child = subprocess.run(
        [sys.executable, "-c", RSS_CHILD, str(DATA / "rss"), str(RSS_BYTES), PRODUCER],
        capture_output=True,
        check=True,
    )
    report = json.loads(child.stdout)
    growth = (report["after"] - report["before"]) / 1024
    print(
        f"peak RSS growth capturing {RSS_BYTES / MIB:.0f} MiB from a pipe: {growth:.1f} MiB "
        f"(peak {report['after'] / 1024:.1f} MiB; limit: growth < 64 MiB)"
    )


# -- 3. page faults ------------------------------------------------------------------


def _sha256_pass(path: Path) -> float:
    start = time.perf_counter()
    sha = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while block := f.read(MIB):
            sha.update(block)
    return time.perf_counter() - start


def bench_read() -> None:
    ext = ToolResultExternalizer(DATA / "read", settings=_settings())

    def chunks() -> Iterator[bytes]:
        line = b"%07d INFO request handled path=/api/v1/items/%07d status=200 duration_ms=%03d\n"
        for start in range(0, READ_LINES, 10_000):
            stop = min(start + 10_000, READ_LINES)
            yield b"".join(line % (i, i * 7, i % 1000) for i in range(start, stop))

    artifact = ext.externalize(chunks(), "logs").artifact
    middle = READ_LINES // 2

    def first_read() -> float:
        reader_module._VERIFIED.clear()  # forget the verified identity: a cold page fault
        start = time.perf_counter()
        page = ext.read_lines(artifact.source_id, middle, 200)
        elapsed = time.perf_counter() - start
        assert page.lines[0].startswith(f"{middle:07d}")
        return elapsed

    def repeated_read() -> float:
        start = time.perf_counter()
        ext.read_lines(artifact.source_id, middle + 1000, 200)
        return time.perf_counter() - start

    sha = statistics.median(_sha256_pass(artifact.path) for _ in range(REPEATS + 2))
    first = statistics.median(first_read() for _ in range(REPEATS + 2))
    ext.read_lines(artifact.source_id, 0, 1)
    repeated = statistics.median(repeated_read() for _ in range(20))
    print(
        f"read 200 lines mid-way through a {READ_LINES:,}-line artifact "
        f"({artifact.byte_size / MIB:.0f} MiB): first read {first * 1000:.1f} ms "
        f"(verifies sha256 + builds the line index), repeated read {repeated * 1000:.2f} ms; "
        f"one sha256 pass {sha * 1000:.1f} ms; first/sha256 {_ratio(first, sha)} "
        f"(target <= 1.50x); repeated target < 5 ms"
    )
    artifact.path.unlink()


# -- 4. grep -------------------------------------------------------------------------


def bench_grep() -> None:
    ext = ToolResultExternalizer(DATA / "grep", settings=_settings())
    line = b"2026-01-01T00:00:00Z worker-%02d processed batch %09d in %04d ms (ok)\n"
    count = 0
    parts: list[bytes] = []
    size = 0
    while size < GREP_BYTES:
        if count % 20_000 == 10_000:
            parts.append(b"2026-01-01T00:00:00Z worker-07 FATAL needle-in-haystack %09d\n" % count)
        else:
            parts.append(line % (count % 64, count, count % 9999))
        size += len(parts[-1])
        count += 1
    artifact = ext.externalize(parts, "logs").artifact
    del parts
    reader_module._VERIFIED.clear()
    start = time.perf_counter()
    ext.grep(artifact.source_id, "needle-in-haystack", max_matches=1)
    first = time.perf_counter() - start
    print(
        f"grep {artifact.byte_size / 1e6:.0f} MB: first search, with digest verification: "
        f"{first * 1000:.1f} ms"
    )
    # (label, toolswap pattern, fixed, the same search for GNU grep): each pattern means the
    # same in Python syntax and in POSIX ERE.
    cases = [
        ("literal", "needle-in-haystack", True, ["-F"]),
        ("regex", "worker-0[0-9] FATAL needle-in-[a-z-]+ [0-9]+", False, ["-E"]),
        ("regex, many matches", "batch [0-9]*7 in [0-9]+ ms", False, ["-E"]),
    ]
    for label, pattern, fixed, flags in cases:

        def ours(pattern: str = pattern, fixed: bool = fixed) -> tuple[float, int]:
            start = time.perf_counter()
            result = ext.grep(artifact.source_id, pattern, fixed=fixed, max_matches=1_000_000)
            return time.perf_counter() - start, len(result.matches)

        def gnu(pattern: str = pattern, flags: list[str] = flags) -> tuple[float, int]:
            start = time.perf_counter()
            proc = subprocess.run(
                ["grep", "-n", *flags, "-e", pattern, str(artifact.path)],
                capture_output=True,
                check=True,
            )
            return time.perf_counter() - start, proc.stdout.count(b"\n")

        timed = [ours() for _ in range(REPEATS + 2)]
        gnu_runs = [gnu() for _ in range(REPEATS + 2)]
        repeated = statistics.median(t for t, _ in timed)
        floor = statistics.median(t for t, _ in gnu_runs)
        assert timed[0][1] == gnu_runs[0][1], (label, timed[0][1], gnu_runs[0][1])
        target = "1.05x" if fixed else "1.50x"
        print(
            f"grep {label} ({timed[0][1]} matches): toolswap {repeated * 1000:.1f} ms; "
            f"GNU grep -n {' '.join(flags)} {floor * 1000:.1f} ms; "
            f"ratio {_ratio(repeated, floor)} (target <= {target})"
        )
    artifact.path.unlink()


def main() -> int:
    if shutil.which("grep") is None:
        print("GNU grep not found; skipping the grep comparison", file=sys.stderr)
    shutil.rmtree(DATA, ignore_errors=True)
    DATA.mkdir(parents=True)
    try:
        if QUICK:
            print("(TOOLSWAP_BENCH_QUICK=1: tiny sizes, the ratios mean nothing)")
        bench_capture()
        bench_capture_memory()
        bench_rss()
        bench_read()
        if shutil.which("grep") is not None:
            bench_grep()
    finally:
        shutil.rmtree(DATA, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
