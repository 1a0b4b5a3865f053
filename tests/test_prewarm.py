"""Imports ahead of a capture (``toolswap._prewarm``) and the quiet moment that starts them
(``pipe_chunks``'s ``quiet``): real interpreters, real pipes, real forks and commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from toolswap._cores import usable_cores
from toolswap._prewarm import _STRUCTURED, _TEXT
from toolswap.cli._signals import pipe_chunks

two_cores = pytest.mark.skipif(usable_cores() < 2, reason="imports ahead need a second core")

_PROBE = textwrap.dedent(
    """
    import json, os, sys, threading
    from toolswap import _prewarm
    if "one-core" in sys.argv:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    wanted = [*_prewarm._TEXT, *_prewarm._STRUCTURED]
    before = [name for name in wanted if name in sys.modules]
    stop = _prewarm.prewarm(structured="structured" in sys.argv)
    if "stop" in sys.argv:
        stop()
    again = _prewarm.prewarm()  # (once a process)
    threads = [t for t in threading.enumerate() if t.name == _prewarm.PREWARM_THREAD]
    for thread in threads:
        thread.join()
    after = [name for name in wanted if name in sys.modules]
    print(json.dumps({"before": before, "after": after, "threads": len(threads),
                      "stop": stop is not None, "again": again is not None,
                      "running": _prewarm.prewarming()}))
    """
)


def _probe(*args: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


@two_cores
@pytest.mark.parametrize("kind", ["structured", "text"])
def test_prewarm_imports_on_one_thread_what_a_capture_imports_on_first_use(kind: str) -> None:
    result = _probe(kind)

    assert result["before"] == []  # nothing of it is loaded by importing toolswap
    structured = list(_STRUCTURED) if kind == "structured" else []
    assert result["after"] == [*_TEXT, *structured]
    assert result["threads"] == 1
    assert (result["stop"], result["again"], result["running"]) == (True, False, False)


@two_cores
def test_prewarm_stopped_at_once_imports_no_more_than_the_module_it_was_in() -> None:
    result = _probe("structured", "stop")

    after = result["after"]
    assert isinstance(after, list)
    assert not set(after) & set(_STRUCTURED), after
    assert result["threads"] == 1


def test_prewarm_does_nothing_on_a_single_core() -> None:
    result = _probe("structured", "one-core")

    assert result == {
        "before": [],
        "after": [],
        "threads": 0,
        "stop": False,
        "again": False,
        "running": False,
    }


_FORK_WHILE_IMPORTING = textwrap.dedent(
    """
    import os, signal, sys
    from toolswap import _prewarm
    _prewarm.prewarm()
    pid = os.fork()  # (while the helper thread imports)
    if pid == 0:
        signal.alarm(10)  # (a child that waits on an import forever is ended)
        import msgspec, toolswap.capture, toolswap.structured.outline
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@two_cores
def test_a_child_forked_while_the_imports_run_imports_on_its_own() -> None:
    """A fork waits for the imports to stop: the child inherits no module lock held by the
    helper thread, which is not in the child (it then waited on it forever)."""
    codes = [
        subprocess.run([sys.executable, "-c", _FORK_WHILE_IMPORTING], check=False).returncode
        for _ in range(12)
    ]
    assert codes == [0] * 12


_EXIT = textwrap.dedent(
    """
    import os, sys, threading, time
    from toolswap import _prewarm
    from toolswap.cli._run import _end_now

    class Teardown:
        def __del__(self, write=os.write):
            write(1, b"teardown")

    kept = Teardown()  # (said only when the interpreter tears its modules down)
    _prewarm._TEXT = ("slow_to_import",)  # (an import that takes long: a cold disk)
    _prewarm.prewarm(structured=False)
    if sys.argv[1] == "another thread":
        threading.Thread(target=time.sleep, args=(0.5,)).start()
    _end_now(3)
    sys.exit(3)
    """
)


@two_cores
@pytest.mark.parametrize("beside", ["imports alone", "another thread"])
def test_an_exit_does_not_wait_for_the_imports_but_for_other_threads(
    beside: str, tmp_path: Path
) -> None:
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(5)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT, beside], capture_output=True, check=False, timeout=60, env=env
    )

    assert proc.returncode == 3, proc.stderr
    # Ended at once (no teardown) beside the imports; the usual exit beside another thread.
    assert proc.stdout == (b"" if beside == "imports alone" else b"teardown")


def test_quiet_is_called_once_before_the_first_bytes_and_what_it_returns_when_they_come() -> None:
    calls: list[str] = []

    def quiet() -> object:
        calls.append("quiet")
        return lambda: calls.append("output")

    script = "sleep 0.4; echo a; sleep 0.4; echo b"
    with subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        chunks = list(pipe_chunks(proc.stdout, None, quiet))  # type: ignore[arg-type]

    assert b"".join(chunks) == b"a\nb\n"
    assert calls == ["quiet", "output"]


def test_quiet_is_not_called_once_output_has_come() -> None:
    calls: list[str] = []
    read, write = os.pipe()
    os.write(write, b"first\n")  # (there before the first look)
    with (
        subprocess.Popen(["sh", "-c", "sleep 0.4; echo later"], stdout=write, pass_fds=()) as proc,
        open(read, "rb") as pipe,
    ):
        os.close(write)
        chunks = list(pipe_chunks(pipe, None, lambda: calls.append("quiet")))  # type: ignore[arg-type,func-returns-value]
        proc.wait()

    assert b"".join(chunks) == b"first\nlater\n"
    assert calls == []


def test_a_cgroup_whose_name_is_not_utf8_still_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its quota is read like any other's; reading its name as UTF-8 raised, and ended a
    ``toolswap run`` whose command had been quiet, its output lost."""
    from toolswap import _cores

    name = b"user.slice/caf\xe9.scope"
    level = os.path.join(os.fsencode(tmp_path / "cgroup"), name)
    os.makedirs(level)
    with open(os.path.join(level, b"cpu.max"), "wb") as f:
        f.write(b"50000 100000\n")
    (tmp_path / "self").write_bytes(b"0::/" + name + b"\n")
    monkeypatch.setattr(_cores, "_CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.setattr(_cores, "_OWN_CGROUP", tmp_path / "self")

    assert _cores._quota_cores() == 0.5
    assert _cores.usable_cores() == 0.5
