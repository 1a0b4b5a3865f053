"""``toolswap run`` on outputs shaped to make a failure-line search slow or greedy: half a
million short lines, thousands of distinct failure lines, a 50 MB line, deep indentation,
one long block.

Each capture runs in a real child process that reports its own peak RSS (``VmHWM``, reset
once toolswap is imported) and runs under a CPU limit of 60 s for work that takes about a
second. The limit only keeps a regression from hanging the suite: a search that goes
quadratic again (as ``seq 1 100000`` once did: 68 s of CPU) is killed by it and the test
fails. No test measures time.
"""

from __future__ import annotations

import itertools
import json
import random
import string
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CPU_LIMIT_S = 60
RSS_GROWTH_LIMIT_KIB = 32 * 1024
"""Head, tail, the candidate store and a few chunks in flight: under 10 MiB here. A capture
that held the 50 MB line, or every candidate, would pass this."""
POINTER_MAX = 32 * 1024

CHILD = """
import json, resource, sys

resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[1]), int(sys.argv[1])))
from toolswap.cli import main


def peak_kib():
    # VmHWM is this process's own peak RSS; ru_maxrss would start at the parent's.
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
    f.write("5")  # the peak becomes the current RSS: toolswap imported, nothing captured
before = peak_kib()
try:
    main(sys.argv[3:], prog_name="toolswap")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(sys.argv[2], "w", encoding="utf-8") as f:
    json.dump({"exit": code, "growth_kib": peak_kib() - before}, f)
"""


def _words(rnd: random.Random, count: int, size: int = 8) -> list[str]:
    return ["".join(rnd.choices(string.ascii_lowercase, k=size)) for _ in range(count)]


def _short_lines() -> bytes:
    # No space, tab or colon on any line: the shape that made a line pattern read on past
    # the end of its line, from every line.
    return b"7\n" * 500_000


def _numbers() -> bytes:
    return b"".join(b"%d\n" % i for i in range(1, 100_001))  # seq 1 100000


def _distinct_failures() -> bytes:
    rnd = random.Random(16)
    return "".join(f"error: {a} {b}\n" for a, b in itertools.pairwise(_words(rnd, 20_001))).encode()


def _long_tokens() -> bytes:
    # A failure word, then one long unbroken word: each line is scored (its template is
    # new), and a name pattern that retries from every letter costs the square of it.
    rnd = random.Random(16)
    return "".join(f"error {w}{'x' * 500}\n" for w in _words(rnd, 10_000, 6)).encode()


def _one_line() -> bytes:
    return (b"x" * 999 + b" error") * 50_000


def _deep_indentation() -> bytes:
    rnd = random.Random(16)
    words = _words(rnd, 10_000)
    return "".join(" " * (i % 200) + f"E {w} error\n" for i, w in enumerate(words)).encode()


def _one_block() -> bytes:
    # No blank line and no step marker: nothing ends the block a failure line belongs to.
    rnd = random.Random(16)
    words = _words(rnd, 10_000)
    return "".join(f"E   assert {w} == {w[::-1]}\n" for w in words).encode()


def _rules() -> bytes:
    # Above each failure line, a line that opens like a section title and never closes
    # like one: read back with every failure line listed.
    rnd = random.Random(16)
    rule = "___ " + "-" * 8000 + "x"
    return "".join(f"{rule}\nerror: {w}\n" for w in _words(rnd, 300)).encode()


SHAPES: dict[str, tuple[Callable[[], bytes], bool]] = {
    "short-lines": (_short_lines, False),
    "seq-1-100000": (_numbers, False),
    "20k-distinct-failures": (_distinct_failures, True),
    "failure-word-then-long-word": (_long_tokens, True),
    "one-50-mb-line": (_one_line, True),
    "deep-indentation": (_deep_indentation, True),
    "one-block-without-blank-lines": (_one_block, True),
    "unclosed-section-rules": (_rules, True),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_run_captures_an_output_of_a_costly_shape_in_bounded_cpu_and_memory(
    tmp_path: Path, shape: str
) -> None:
    make, failing = SHAPES[shape]
    data = tmp_path / "output.txt"
    data.write_bytes(make())
    report = tmp_path / "report.json"

    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(CPU_LIMIT_S),
            str(report),
            "run",
            "--json",
            "--session-dir",
            str(tmp_path / "s1"),
            "--",
            "cat",
            str(data),
        ],
        capture_output=True,
        check=False,
        timeout=10 * CPU_LIMIT_S,
    )

    assert proc.returncode == 0, f"killed or failed ({proc.returncode}): {proc.stderr[-2000:]!r}"
    measured = json.loads(report.read_text(encoding="utf-8"))
    assert measured["exit"] == 0
    result = json.loads(proc.stdout)
    assert result["externalized"] is True
    pointer = result["context_text"]
    assert len(pointer.encode()) <= POINTER_MAX
    if failing:
        assert "look like failures" in pointer
    else:
        assert "no line in this output looks like a failure" in pointer
    growth = measured["growth_kib"]
    assert growth < RSS_GROWTH_LIMIT_KIB, f"peak RSS grew by {growth / 1024:.1f} MiB"
