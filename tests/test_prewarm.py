"""Imports ahead of a capture (``toolswap._prewarm``) and the quiet moment that starts them
(``pipe_chunks``'s ``quiet``): real interpreters, real pipes and real commands."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from toolswap._cores import usable_cores
from toolswap._fork import CAPTURE_MODULES
from toolswap.cli._signals import pipe_chunks

_PROBE = textwrap.dedent(
    """
    import json, os, sys, threading
    from toolswap import _prewarm
    if len(sys.argv) > 2:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    wanted = [*_prewarm.CAPTURE_MODULES, "msgspec"]
    before = [name for name in wanted if name in sys.modules]
    _prewarm.prewarm(structured=sys.argv[1] == "structured")
    _prewarm.prewarm()  # (once a process)
    threads = [t for t in threading.enumerate() if t.name == _prewarm.PREWARM_THREAD]
    if threads:
        threads[0].join()
    after = [name for name in wanted if name in sys.modules]
    print(json.dumps({"before": before, "after": after, "threads": len(threads),
                      "running": _prewarm.prewarming()}))
    """
)


def _probe(*args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


@pytest.mark.skipif(usable_cores() < 2, reason="imports ahead need a second core")
@pytest.mark.parametrize("kind", ["structured", "text"])
def test_prewarm_imports_on_one_thread_what_a_capture_imports_on_first_use(kind: str) -> None:
    result = _probe(kind)

    assert result["before"] == []  # nothing of it is loaded by importing toolswap
    parsers = ["msgspec"] if kind == "structured" else []
    assert result["after"] == [*CAPTURE_MODULES, *parsers]
    assert result["threads"] == 1
    assert result["running"] is False


def test_prewarm_does_nothing_on_a_single_core() -> None:
    result = _probe("structured", "one-core")

    assert result == {"before": [], "after": [], "threads": 0, "running": False}


def test_quiet_is_called_once_the_first_time_the_command_is_silent() -> None:
    calls: list[int] = []
    script = "sleep 0.3; echo a; sleep 0.3; echo b"
    with subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        chunks = list(pipe_chunks(proc.stdout, None, lambda: calls.append(len(calls))))

    assert b"".join(chunks) == b"a\nb\n"
    assert calls == [0]
