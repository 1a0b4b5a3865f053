"""The outline helper process: the same outline as the capture's thread, computed on another
core; it declines what it cannot take (not ready, busy, gone) and the capture outlines on its
thread then; it ends with the process that started it; one-shot commands never start it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolswap import ExternalizerSettings, ToolResultExternalizer
from toolswap.structured import inspect_output
from toolswap.structured.outline_process import OutlineProcess

pytest.importorskip("msgspec")

two_cores = pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="the helper is started only with a second core"
)


def _outputs() -> dict[str, bytes]:
    items = [{"id": n, "name": f"item-{n}", "status": "ok"} for n in range(5_000)]
    items[3_777] = {"id": 3_777, "name": "item-3777", "status": "failed", "error": "timed out"}
    deps = {
        f"pkg-{n}": {"version": f"1.{n}.0", "dependencies": {f"sub-{n}": {"version": "2.0.0"}}}
        for n in range(300)
    }
    rows = "\n".join(f"{n},name-{n},{'FAILED' if n == 900 else 'ok'}" for n in range(2_000))
    return {
        "array": json.dumps(items).encode(),
        "tree": json.dumps({"name": "app", "dependencies": deps}, indent=2).encode(),
        "lines": b"\n".join(json.dumps(item).encode() for item in items) + b"\n",
        "table": f"id,name,status\n{rows}\n".encode(),
        "text": b"just some text\n" * 5_000,
        "cut": json.dumps(items).encode()[:-100_000],
    }


def _reader(data: bytes) -> Callable[[int, int], bytes]:
    return lambda count, offset: data[offset : offset + count]


@pytest.fixture
def helper() -> Iterator[OutlineProcess]:
    process = OutlineProcess()
    process.warm()
    yield process
    _stop(process)


def _stop(process: OutlineProcess) -> None:
    with process._lock:
        if process._sock is not None:
            process._close(process._sock)


def _written(tmp_path: Path, name: str) -> tuple[bytes, Path, bytes]:
    """One of ``_outputs`` in a file: its bytes, its path and the head a capture keeps."""
    data = _outputs()[name]
    path = tmp_path / name
    path.write_bytes(data)
    return data, path, data[: 32 << 10]


def _submit(
    helper: OutlineProcess, path: Path, head: bytes, *, wait: float = 30.0
) -> Callable[[], str]:
    """Hand ``path`` to the helper once it is ready (it starts in the background)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        deadline = time.monotonic() + wait
        while (waiter := helper.submit(head, fd, path.stat().st_size)) is None:
            assert time.monotonic() < deadline, "the helper never became ready"
            time.sleep(0.02)
        return waiter
    finally:
        os.close(fd)  # (the helper has its own copy of the descriptor)


@two_cores
def test_the_helper_s_outline_is_the_thread_s(helper: OutlineProcess, tmp_path: Path) -> None:
    for name in _outputs():
        data, path, head = _written(tmp_path, name)
        expected = inspect_output(head, _reader(data), len(data))
        assert _submit(helper, path, head)() == expected, name
        assert (expected != "") == (name not in ("text", "cut")), name  # (cut: not valid)


@two_cores
def test_a_busy_helper_declines_and_takes_the_next(helper: OutlineProcess, tmp_path: Path) -> None:
    data, path, head = _written(tmp_path, "tree")
    _submit(helper, path, head)()  # (ready: its process is known from here on)
    proc = helper._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)  # (busy with the next for as long as this test says)
    try:
        first = _submit(helper, path, head, wait=5)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert helper.submit(head, fd, len(data)) is None  # one outline at a time
        finally:
            os.close(fd)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    assert "--- structure" in first()
    assert "--- structure" in _submit(helper, path, head, wait=5)()


@two_cores
def test_a_dead_helper_declines_and_is_started_again(
    helper: OutlineProcess, tmp_path: Path
) -> None:
    data, path, head = _written(tmp_path, "array")
    assert _submit(helper, path, head)()
    proc = helper._proc
    assert proc is not None
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while helper._sock is not None:  # its reader sees the socket's end
        assert time.monotonic() < deadline
        time.sleep(0.01)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert helper.submit(head, fd, len(data)) is None
    finally:
        os.close(fd)
    helper.warm()
    assert "--- structure" in _submit(helper, path, head)()
    assert helper._proc is not None and helper._proc.pid != proc.pid


@two_cores
def test_an_outline_abandoned_by_its_capture_frees_the_helper(
    helper: OutlineProcess, tmp_path: Path
) -> None:
    """A capture that failed after handing its outline over never waits for it: the
    helper's answer still ends the request, and the next capture's outline is taken."""
    _, path, head = _written(tmp_path, "lines")
    _submit(helper, path, head)  # (never waited for)
    assert "--- structure" in _submit(helper, path, head, wait=10)()


_CHILD = """
import json, os, sys, tempfile, time
from pathlib import Path
from toolswap import ToolResultExternalizer
from toolswap.structured import outline_process
ext = ToolResultExternalizer(Path(sys.argv[1]))
data = json.dumps([{"id": n, "status": "ok"} for n in range(20_000)]).encode()
ext.externalize(data, "api")
deadline = time.monotonic() + 30
while not outline_process.OUTLINES.ready:
    assert time.monotonic() < deadline, "no helper"
    time.sleep(0.01)
print(outline_process.OUTLINES._proc.pid, flush=True)
if sys.argv[2] == "fork":
    pid = os.fork()
    if pid == 0:
        deadline = time.monotonic() + 30
        ext.externalize(data, "api")
        while outline_process.OUTLINES._proc is None:  # (started on a thread)
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.01)
        print(outline_process.OUTLINES._proc.pid, flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
sys.stdin.read()
"""


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True  # (exited; its parent, init, reaps it)
        time.sleep(0.02)
    return False


@two_cores
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_the_helper_ends_with_its_process(how: str, tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "session"), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    helper = int(child.stdout.readline())
    # In a session of its own: a terminal's Ctrl-C, sent to the foreground group, is not for it.
    assert os.getsid(helper) == helper != os.getsid(child.pid)
    if how == "kill":
        child.kill()
    child.stdin.close()
    child.wait(10)
    child.stdout.close()
    assert _gone(helper)


@two_cores
def test_a_forked_child_starts_a_helper_of_its_own(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tmp_path / "session"), "fork"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stdin is not None
    parents, forked = int(child.stdout.readline()), int(child.stdout.readline())
    assert forked not in (0, parents)
    assert _gone(forked)  # (the forked child exited: its helper ends)
    child.stdin.close()
    child.wait(10)
    child.stdout.close()
    assert _gone(parents)


def test_one_core_starts_no_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    process = OutlineProcess()
    process.warm()
    assert process._sock is None and process.submit(b"[]", 0, 2) is None


def test_the_setting_and_one_shot_commands(tmp_path: Path) -> None:
    assert ExternalizerSettings().outline_process is True
    off = ExternalizerSettings.from_env({"TOOLSWAP_OUTLINE_PROCESS": "off"})
    assert off.outline_process is False and off.structured_outline is True
    with pytest.raises(Exception, match="TOOLSWAP_OUTLINE_PROCESS"):
        ExternalizerSettings.from_env({"TOOLSWAP_OUTLINE_PROCESS": "later"})
    with pytest.raises(Exception, match="outline_process must be a bool"):
        ExternalizerSettings(outline_process=1)  # type: ignore[arg-type]
    # `toolswap run` and `toolswap query` capture once: no helper is started for them.
    from toolswap.cli._common import open_externalizer

    ext = open_externalizer("one-shot", None, tmp_path / "s")
    assert ext.settings.outline_process is False and ext.settings.structured_outline is True
    produce = "import json; print(json.dumps([{'id': n} for n in range(20_000)]))"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "toolswap", "run", "--session-dir", str(tmp_path / "s")),
            *("--", sys.executable, "-c", produce),
        ],
        capture_output=True,
        text=True,
    )
    assert "--- structure" in done.stdout, done.stderr[-2000:]
    data = json.dumps([{"id": n} for n in range(20_000)])
    ext = ToolResultExternalizer(tmp_path / "s2", settings=off)
    assert "--- structure" in ext.externalize(data.encode(), "api").context_text


def test_a_helper_of_another_python_exits_without_a_word() -> None:
    """An embedding's ``sys.executable`` may be another Python: the helper checks the
    version it was started for, and exits before ``READY`` (its parent outlines on threads)."""
    import socket

    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent, child:
        args = ["-m", "toolswap.structured._outline_worker", str(child.fileno())]
        for version, code, said in ((sys.hexversion + 1, 1, b""), (sys.hexversion, 0, b"R")):
            argv = [sys.executable, *args, str(version)]
            proc = subprocess.Popen(argv, pass_fds=[child.fileno()])
            parent.settimeout(30)
            if said:
                assert parent.recv(16) == said
                parent.shutdown(socket.SHUT_WR)  # (its socket's end: it exits)
            assert proc.wait(30) == code
            if not said:
                parent.setblocking(False)
                with pytest.raises(BlockingIOError):
                    parent.recv(16)


_SERVED = """
import json, sys, time
from pathlib import Path
from toolswap import ToolResultExternalizer
from toolswap.cli._common import open_externalizer
from toolswap.structured import outline_process
if sys.argv[2] == "cli":
    ext = open_externalizer("s", None, Path(sys.argv[1]))
else:
    ext = ToolResultExternalizer(Path(sys.argv[1]))
data = json.dumps([{"id": n, "status": "ok"} for n in range(20_000)]).encode()
first = ext.externalize(data, "api").context_text
deadline = time.monotonic() + (1 if sys.argv[2] == "cli" else 30)
while not outline_process.OUTLINES.ready and time.monotonic() < deadline:
    time.sleep(0.01)
second = ext.externalize(data, "api").context_text
cut = lambda text: text.split("--- structure")[1].split("Record:")[0]
print(json.dumps({"served": outline_process.OUTLINES.served, "same": cut(first) == cut(second),
                  "started": outline_process.OUTLINES._starts}))
"""


@pytest.mark.parametrize("how", ["library", "cli"])
def test_the_second_capture_s_outline_comes_from_the_helper(how: str, tmp_path: Path) -> None:
    """A process's first structured output is outlined on its thread and starts the helper,
    which outlines the next one (the same outline); a one-shot command's starts none."""
    done = subprocess.run(
        [sys.executable, "-c", _SERVED, str(tmp_path / "s"), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = json.loads(done.stdout.splitlines()[-1]) if done.stdout else {}
    assert said.get("same") is True, done.stderr[-2000:]
    two = len(os.sched_getaffinity(0)) >= 2
    if how == "cli" or not two:
        assert said["served"] == said["started"] == 0
    else:
        assert said["served"] == said["started"] == 1


@two_cores
def test_a_helper_that_dies_mid_outline_leaves_the_capture_its_outline(
    helper: OutlineProcess, tmp_path: Path
) -> None:
    data, path, head = _written(tmp_path, "tree")
    expected = inspect_output(head, _reader(data), len(data))
    assert _submit(helper, path, head)() == expected
    proc = helper._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    waiter = _submit(helper, path, head, wait=5)
    proc.kill()  # (the OOM killer, a stray kill -9)
    assert waiter() == expected  # outlined on this thread, from its own descriptor
    path.unlink()


@two_cores
def test_the_working_directory_s_modules_are_not_the_helper_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python -m`` would put the working directory first on the helper's path: a
    workspace's ``csv.py`` or ``ijson.py`` would run there, and outlines come back empty."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("csv", "ijson", "msgspec", "json"):
        (work / f"{name}.py").write_text("raise SystemExit('a module of the workspace')\n")
    monkeypatch.chdir(work)
    helper = OutlineProcess()
    helper.warm()
    try:
        for name in ("table", "tree"):
            data, path, head = _written(tmp_path, name)
            expected = inspect_output(head, _reader(data), len(data))
            assert expected and _submit(helper, path, head)() == expected, name
    finally:
        _stop(helper)


_ORPHAN = """
import json, os, sys, time
from pathlib import Path
from toolswap import ToolResultExternalizer
from toolswap.structured import outline_process
ext = ToolResultExternalizer(Path(sys.argv[1]))
ext.externalize(json.dumps([{"id": n} for n in range(20_000)]).encode(), "api")
deadline = time.monotonic() + 30
while not outline_process.OUTLINES.ready:
    assert time.monotonic() < deadline, "no helper"
    time.sleep(0.01)
print(outline_process.OUTLINES._proc.pid, flush=True)
pid = os.fork()
if pid == 0:  # a child that lives on, as a fork-mode worker pool's would
    os.close(1)
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
"""


@two_cores
def test_the_helper_ends_with_its_process_though_a_forked_child_lives_on(
    tmp_path: Path,
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, str(tmp_path / "s")], stdout=subprocess.PIPE
    )
    assert child.stdout is not None
    helper, forked = int(child.stdout.readline()), int(child.stdout.readline())
    child.wait(30)
    child.stdout.close()
    try:
        assert _gone(helper, within=3.0)  # (not the helper's idle look at its parent: 5 s)
    finally:
        os.kill(forked, signal.SIGKILL)


@two_cores
def test_a_capture_whose_helper_died_gives_its_outline_each_time_it_is_asked(
    helper: OutlineProcess, tmp_path: Path
) -> None:
    """The pointer asks a capture for its outline more than once: a helper that died
    mid-outline leaves it computed once, from the capture's own copy of the descriptor
    (asked again, that copy was closed: the outline came back empty)."""
    from toolswap.capture import StreamCapture

    data, path, head = _written(tmp_path, "tree")
    expected = inspect_output(head, _reader(data), len(data))
    _submit(helper, path, head)()  # (ready)
    proc = helper._proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)  # (busy when asked, then killed)
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        capture = StreamCapture(
            directory,
            head_keep=len(head),
            tail_keep=0,
            scan_limit=0,
            inspect=inspect_output,
            outliner=helper,
        )
        capture.write(data)
        stats = capture.finish()
        proc.kill()
        assert stats.outline == expected
        assert stats.outline == expected
        capture.discard()
    finally:
        os.close(directory)


@pytest.mark.parametrize(
    ("own", "files", "quota"),
    [
        # cgroup v2: the tightest level from its own cgroup up to the root counts.
        ("0::/box/job\n", {"box/cpu.max": "150000 100000", "box/job/cpu.max": "max 100000"}, 1.5),
        ("0::/box/job\n", {"cpu.max": "max 100000", "box/job/cpu.max": "400000 100000"}, 4.0),
        # cgroup v1, as a hybrid host mounts it (the memory line names another hierarchy).
        (
            "4:memory:/m\n2:cpu,cpuacct:/ci\n0::/\n",
            {
                "cpu,cpuacct/ci/cpu.cfs_quota_us": "50000",
                "cpu,cpuacct/ci/cpu.cfs_period_us": "100000",
            },
            0.5,
        ),
        (
            "2:cpu,cpuacct:/\n0::/\n",
            {"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"},
            None,
        ),
        ("0::/gone\n", {}, None),  # (a path this mount does not show)
    ],
)
def test_a_cgroup_s_cpu_quota_counts_as_cores(
    own: str,
    files: dict[str, str],
    quota: float | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A container given fewer than two CPUs' time starts no helper, however many cores its
    host shows: the helper would only take the capture's time."""
    from toolswap import _cores
    from toolswap.structured import outline_process

    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    (tmp_path / "self").write_text(own)
    monkeypatch.setattr(_cores, "_CGROUP_ROOT", root)
    monkeypatch.setattr(_cores, "_OWN_CGROUP", tmp_path / "self")
    assert _cores._quota_cores() == quota
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert _cores.usable_cores() == (4 if quota is None else min(4, quota))
    assert outline_process._worth_starting() == (quota is None or quota >= 2)
    process = OutlineProcess()
    process.warm()
    assert (process._sock is None) == (quota is not None and quota < 2)
    _stop(process)
