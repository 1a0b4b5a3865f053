"""``toolswap run`` (and ``wrap``) at the edges: a corrupt manifest, a full disk, a signal.

Every test runs real ``python -m toolswap`` processes. A full disk is a real tmpfs of a few
MiB mounted in a private mount namespace (``unshare -m``), so the kernel itself answers
ENOSPC; where mount namespaces are not allowed, the file-size limit (RLIMIT_FSIZE, EFBIG)
stands in for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap.capture import TMP_PREFIX

TOOLSWAP = [sys.executable, "-m", "toolswap"]
BIG = "import sys\nfor i in range(300000): print('line %d of the build' % i)\nsys.exit(3)"


def test_a_corrupt_manifest_is_refused_before_the_command_runs(tmp_path: Path) -> None:
    session = tmp_path / "s1"
    ToolResultExternalizer(session).externalize("first\n", "bash")
    with open(session / "manifest.jsonl", "ab") as f:
        f.write(b'{"not": "a chained record"}\n')
    marker = tmp_path / "side-effect"

    proc = subprocess.run(
        [*TOOLSWAP, "run", "--session-dir", str(session), "--", "touch", str(marker)],
        capture_output=True,
        check=False,
    )

    assert proc.returncode == 1
    assert not marker.exists()  # the command never ran
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("toolswap: ChainLogError: manifest.jsonl: record at byte")


def test_on_a_full_disk_run_prints_the_preview_and_exits_with_the_commands_status(
    tmp_path: Path, full_disk: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    session = tmp_path / "mnt" / "s1"
    argv = [*TOOLSWAP, "run", "--session-dir", str(session), "--", sys.executable, "-c", BIG]
    script = f"{shlex.join(argv)}; echo rc=$?; ls -a {shlex.quote(str(session))}/tool-results"

    proc = full_disk(tmp_path / "mnt", script, size_kib=2048)

    out = proc.stdout.decode()
    assert out.startswith("[Output NOT saved: the output (")
    assert "line 0 of the build" in out
    assert "line 299999 of the build" in out  # the tail is kept in memory
    assert "exit status 3" in out
    assert len(out.split("rc=")[0].encode()) <= 32 * 1024
    assert "rc=3" in out
    left = out.split("rc=3")[1].split()
    assert left == [".", ".."]  # no partial artifact, no temporary file
    errors = proc.stderr.decode().splitlines()
    assert errors == [errors[0]]
    assert errors[0].startswith("toolswap: ArtifactWriteError: the output")


def test_on_a_full_disk_wrap_prints_the_preview_of_what_it_read_and_exits_1(
    tmp_path: Path, full_disk: Callable[..., subprocess.CompletedProcess[bytes]]
) -> None:
    # Standard input is read once: a save that fails must not lose it (libfiu found
    # wrap printing only the error line).
    session = tmp_path / "mnt" / "s1"
    producer = shlex.join([sys.executable, "-c", BIG])
    wrap = shlex.join([*TOOLSWAP, "wrap", "--session-dir", str(session), "--tool", "bash"])
    script = f"{producer} | {wrap}; echo rc=$?"

    proc = full_disk(tmp_path / "mnt", script, size_kib=2048)

    out = proc.stdout.decode()
    assert out.startswith("[Output NOT saved: the output (")
    assert "line 0 of the build" in out
    assert "line 299999 of the build" in out
    assert len(out.split("rc=")[0].encode()) <= 32 * 1024
    assert out.rstrip().endswith("rc=1")
    errors = proc.stderr.decode().splitlines()
    assert errors == [errors[0]]
    assert errors[0].startswith("toolswap: ArtifactWriteError: the output")


def _start_run(tmp_path: Path, session: Path) -> tuple[subprocess.Popen[bytes], Path]:
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    child = (
        "import sys, time\n"
        "for i in range(200000): print('progress %d' % i)\n"
        "sys.stdout.flush()\n"
        f"open({str(ready)!r}, 'w').write('r')\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [
            *TOOLSWAP,
            "run",
            "--json",
            "--session-dir",
            str(session),
            "--",
            sys.executable,
            "-c",
            child,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # A run that hangs is made to dump its threads' stacks (``_communicate``).
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
    with open(ready, encoding="utf-8") as f:  # the command printed everything and waits
        assert f.read() == "r"
    return proc, ready


def _communicate(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """``proc.communicate(timeout)``; a run still going then fails the test with what it
    was doing: the signal state, kernel wait, kernel stack, flags (0x4: exiting) and CPU
    time of each of its processes and threads, twice a second apart, the machine's pressure,
    and its Python stacks (SIGABRT with ``PYTHONFAULTHANDLER`` set dumps them on stderr)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    report = [f"toolswap run (pid {proc.pid}) still runs after {timeout} s"]
    pids = [proc.pid]
    for look in range(2):
        if look:
            time.sleep(1)
        for pid in pids:  # (grows as the first look finds children)
            with contextlib.suppress(OSError):
                for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
                    report.append(f"pid {pid} task {task.name}: {_task_state(task)}")
                    if not look:
                        children = (task / "children").read_text(encoding="utf-8").split()
                        pids.extend(int(child) for child in children)
    for kind in ("cpu", "memory", "io"):
        with contextlib.suppress(OSError):
            pressure = Path(f"/proc/pressure/{kind}").read_text(encoding="utf-8")
            report.append(f"{kind} pressure: {' | '.join(pressure.splitlines())}")
    with contextlib.suppress(OSError):  # (its stacks on stderr, no core file left behind)
        resource.prlimit(proc.pid, resource.RLIMIT_CORE, (0, 0))
    proc.send_signal(signal.SIGABRT)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        for pid in pids[1:]:  # (what holds the output)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    for pid in pids[1:]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    report.append("its stderr:\n" + err.decode(errors="replace"))
    report.append(f"its stdout: {len(out)} bytes")
    pytest.fail("\n".join(report))


_STATUS_FIELDS = ("Name", "State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "VmRSS")


def _task_state(task: Path) -> str:
    """One thread's state as /proc shows it (see ``_communicate``)."""
    status = (task / "status").read_text(encoding="utf-8").splitlines()
    kept = [line for line in status if line.startswith(_STATUS_FIELDS)]
    wchan = (task / "wchan").read_text(encoding="utf-8")
    fields = (task / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    flags, utime, stime = int(fields[6]), fields[11], fields[12]
    try:
        stack = (task / "stack").read_text(encoding="utf-8").split()
    except OSError as exc:
        stack = [f"({exc.strerror})"]
    frames = " < ".join(f for f in stack if "+" in f)
    return (
        f"wchan {wchan}, flags {flags:#x}, utime {utime} stime {stime} ticks, "
        f"{' | '.join(kept)}, kernel stack: {frames or '(none)'}"
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_keeps_the_output_as_an_interrupted_artifact_then_exits_by_that_signal(
    tmp_path: Path, sig: signal.Signals
) -> None:
    session = tmp_path / "s1"
    proc, _ = _start_run(tmp_path, session)

    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # a terminal's Ctrl-C reaches the whole process group
    else:
        proc.send_signal(sig)  # a supervisor signals toolswap only; it forwards the signal
    out, err = _communicate(proc, 60)

    assert proc.returncode == -sig
    assert b"Aborted" not in err
    result = json.loads(out)
    assert result["externalized"] is True
    assert result["exit_code"] == -sig
    assert result["artifact"]["interrupted"] == sig.name
    assert f"[interrupted by {sig.name}]" in result["artifact"]["summary"]
    ext = ToolResultExternalizer(session)
    (art,) = ext.list_artifacts()
    assert art.interrupted == sig.name
    assert ext.read_artifact(art, 199_999, 1) == "progress 199999"
    assert not [n for n in os.listdir(session / "tool-results") if n.startswith(TMP_PREFIX)]


def _run_sh(session: Path, script: str) -> subprocess.Popen[bytes]:
    """``toolswap run --json -- sh -c SCRIPT`` into ``session``, off a terminal, in a
    session of its own (so a test's signal reaches toolswap alone)."""
    return subprocess.Popen(
        [*TOOLSWAP, "run", "--json", "--session-dir", str(session), "--", "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # (see ``_communicate``)
    )


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper that never comes does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_signal_reaches_what_the_command_started_in_the_background(tmp_path: Path) -> None:
    session = tmp_path / "s1"
    pidfile = tmp_path / "grandchild.pid"
    os.mkfifo(pidfile)
    script = f"seq 1 100000; sleep 300 & echo $! > {shlex.quote(str(pidfile))}; wait"
    proc = _run_sh(session, script)
    with open(pidfile, encoding="utf-8") as f:  # the background sleep has started
        grandchild = int(f.read())

    proc.send_signal(signal.SIGTERM)  # once: before, three SIGTERMs left it running
    out, _ = _communicate(proc, 60)

    assert proc.returncode == -signal.SIGTERM
    assert not _running(grandchild)
    result = json.loads(out)
    assert result["artifact"]["interrupted"] == "SIGTERM"
    assert ToolResultExternalizer(session).read_artifact(result["artifact"]["source_id"], 0, 1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_does_not_outlive_a_toolswap_killed_by_sigkill(tmp_path: Path) -> None:
    """A harness's timeout (``subprocess.run(timeout=)``) kills toolswap with SIGKILL, which
    it cannot pass on: the command, in a process group of its own, ran on for good."""
    pidfile = tmp_path / "command.pid"
    proc = _run_sh(tmp_path / "s1", f"echo $$ > {shlex.quote(str(pidfile))}; exec sleep 300")
    command: int | None = None
    try:
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert proc.poll() is None  # (toolswap failed before the command ran)
            time.sleep(0.01)
        command = int(pidfile.read_text())

        proc.kill()
        proc.communicate(timeout=60)
        deadline = time.monotonic() + 30
        while _running(command) and time.monotonic() < deadline:
            time.sleep(0.01)

        assert proc.returncode == -signal.SIGKILL
        assert not _running(command)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if command is not None and _running(command):
            with contextlib.suppress(OSError):  # still our sleep (its number is not reused)
                if b"sleep" in Path(f"/proc/{command}/cmdline").read_bytes():
                    os.kill(command, signal.SIGKILL)


def test_a_signal_after_the_output_ended_does_not_mark_it_interrupted(tmp_path: Path) -> None:
    session = tmp_path / "s1"
    sync = tmp_path / "sync"
    sync.mkdir()
    for name in ("capture.tmp_fsynced.reached", "capture.tmp_fsynced.go"):
        os.mkfifo(sync / name)
    env = dict(
        os.environ,
        TOOLSWAP_SYNC_DIR=str(sync),
        TOOLSWAP_SYNC_POINT="capture.tmp_fsynced",
        PYTHONFAULTHANDLER="1",
    )
    proc = subprocess.Popen(
        [*TOOLSWAP, "run", "--json", "--session-dir", str(session), "--", "seq", "1", "100000"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    with open(sync / "capture.tmp_fsynced.reached", "rb") as f:  # saving: the output is whole
        f.read()
    proc.send_signal(signal.SIGTERM)
    with open(sync / "capture.tmp_fsynced.go", "wb") as f:
        f.write(b"go")
    out, _ = _communicate(proc, 60)

    assert proc.returncode == -signal.SIGTERM  # it still exits the way the signal demands
    result = json.loads(out)
    assert result["exit_code"] == 0
    assert result["artifact"]["interrupted"] is None
    assert "[interrupted" not in result["artifact"]["summary"]


@pytest.mark.parametrize("stdout", ["full", "closed"])
def test_run_exits_with_the_commands_status_when_its_stdout_cannot_be_written(
    tmp_path: Path, stdout: str
) -> None:
    argv = [*TOOLSWAP, "run", "--session-dir", str(tmp_path / "s1"), "--"]
    argv += ["sh", "-c", "seq 1 100000; exit 3"]
    if stdout == "full":
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, check=False)
        err = proc.stderr
    else:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # the reader went away before anything was printed
        err = child.stderr.read()
        child.stderr.close()
        child.wait(timeout=60)
        proc = subprocess.CompletedProcess(argv, child.returncode)

    assert proc.returncode == 3
    assert b"Traceback" not in err
    assert len(err.decode().splitlines()) == 1


def test_run_prints_the_preview_and_the_status_when_the_session_lock_fails(
    tmp_path: Path,
) -> None:
    # flock answers ENOLCK on NFS without a lock daemon; the seam makes this host do so.
    wrapper = (
        "import errno, sys\n"
        "from toolswap import durable\n"
        "class NoLocks(durable.DurableIO):\n"
        "    def flock(self, fd, operation):\n"
        "        raise OSError(errno.ENOLCK, 'No locks available')\n"
        "from toolswap.cli import main\n"
        "with durable.substituted(NoLocks()):\n"
        "    main(sys.argv[1:])\n"
    )
    argv = [sys.executable, "-c", wrapper, "run", "--session-dir", str(tmp_path / "s1"), "--"]
    argv += [sys.executable, "-c", BIG]

    proc = subprocess.run(argv, capture_output=True, check=False)

    assert proc.returncode == 3
    out = proc.stdout.decode()
    assert out.startswith("[Output NOT saved: the output (")
    assert "line 299999 of the build" in out
    (line,) = proc.stderr.decode().splitlines()
    assert "No locks available" in line


def test_a_deleted_manifest_is_refused_before_the_command_runs(tmp_path: Path) -> None:
    session = tmp_path / "s1"
    ToolResultExternalizer(session).externalize("first\n" * 10_000, "bash")
    (session / "manifest.jsonl").unlink()  # its head file still says one record was there
    marker = tmp_path / "side-effect"

    proc = subprocess.run(
        [*TOOLSWAP, "run", "--session-dir", str(session), "--", "touch", str(marker)],
        capture_output=True,
        check=False,
    )

    assert proc.returncode == 1
    assert not marker.exists()  # before, it ran and started a forked chain
    (line,) = proc.stderr.decode().splitlines()
    assert "restore it from a backup" in line


def test_a_command_with_an_argument_that_is_not_utf8_is_captured_and_recorded(
    tmp_path: Path,
) -> None:
    """A Latin-1 file name in argv: the record's strict UTF-8 encoding failed after the
    artifact's name was linked, the run died with a traceback and no pointer, and the
    name it left without a record made ``verify`` fail from then on (a review). The
    argument is recorded with its byte written as ``\\xe9``."""
    session = tmp_path / "s1"
    name = os.fsencode(tmp_path) + b"/caf\xe9.txt"
    with open(name, "wb") as f:
        f.write(b"".join(b"%d\n" % i for i in range(40000)))
    done = subprocess.run(
        [*TOOLSWAP, "run", "--json", "--session-dir", str(session), "--", "cat", name],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    artifact = json.loads(done.stdout)["artifact"]
    assert artifact["argv"] == ["cat", os.fsdecode(tmp_path) + "/caf\\xe9.txt"]
    ext = ToolResultExternalizer(session)
    assert ext.read_artifact(artifact["source_id"], 39999, 1) == "39999"
    verified = subprocess.run(
        [*TOOLSWAP, "verify", "--session-dir", str(session)], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_an_interrupt_between_linking_and_recording_leaves_no_unrecorded_name(
    tmp_path: Path,
) -> None:
    """Only typed errors unlinked the name a failed record left; anything else (an
    interrupt, an encoding error) left a name without its record (a review)."""
    session = tmp_path / "s1"
    sync = tmp_path / "sync"
    sync.mkdir()
    for name in ("capture.linked.reached", "capture.linked.go"):
        os.mkfifo(sync / name)
    script = (
        "import sys\nfrom toolswap import ToolResultExternalizer\n"
        "ToolResultExternalizer(sys.argv[1]).externalize('x\\n' * 50000, 't')\n"
    )
    env = dict(os.environ, TOOLSWAP_SYNC_DIR=str(sync), TOOLSWAP_SYNC_POINT="capture.linked")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(session)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    with open(sync / "capture.linked.reached", "rb") as f:  # linked, not yet recorded
        f.read()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert b"KeyboardInterrupt" in err
    assert not (session / "tool-results" / "tool_result_001.txt").exists()
    verified = subprocess.run(
        [*TOOLSWAP, "verify", "--session-dir", str(session)], capture_output=True, check=False
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _in_a_terminal(args: list[str], act: Callable[[int, bytes], bool]) -> tuple[bytes, int]:
    """Run ``args`` as a session whose controlling terminal is a new pty, standard input
    /dev/null (as a harness run from a terminal runs its tools). ``act(pid, out)`` is
    called as output arrives and every few milliseconds, until it returns True; the run
    gets 60 s. Returns (all output, wait status)."""
    import pty
    import select

    pid, master = pty.fork()
    if pid == 0:  # the child
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.execv(args[0], args)
    out = b""
    acted = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child is gone and closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if not acted:
                acted = act(pid, out)
    finally:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
        os.close(master)
    return out, status


def test_a_command_stopped_to_read_the_terminal_is_named_and_ended_by_a_signal(
    tmp_path: Path,
) -> None:
    """Standard input not a tty, but a controlling terminal: the command's own group is a
    background one, and its read of /dev/tty (a sudo, ssh or git prompt) stops it by
    SIGTTIN. toolswap hung with it, and a forwarded SIGTERM never took effect (no SIGCONT
    followed it; a review). Now toolswap says why it waits, and SIGTERM ends it."""
    command = "echo asking; read x < /dev/tty; echo got=$x"
    args = [sys.executable, "-m", "toolswap", "run", "--json", "--session-dir"]
    args += [str(tmp_path / "s1"), "--", "sh", "-c", command]

    def stop_once_stopped(pid: int, out: bytes) -> bool:
        if b"the command is stopped" not in out:
            return False
        os.kill(pid, signal.SIGTERM)
        return True

    out, status = _in_a_terminal(args, stop_once_stopped)
    assert b"the command is stopped: it wants the terminal" in out, out
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, (status, out)
    assert b'"exit_code": -15' in out  # (the command ended by the SIGTERM passed on)


def test_a_harness_in_a_terminal_interrupts_the_command_and_its_children(
    tmp_path: Path,
) -> None:
    """A harness run from a terminal sends SIGINT to toolswap's pid: it reaches the whole
    command group (a version that kept the command in the terminal's group took every
    SIGINT for Ctrl-C, passed none on, and waited for the command to end; a review)."""
    pidfile = tmp_path / "child.pid"
    inner = f"echo $$ > {shlex.quote(str(pidfile))}; exec sleep 60"
    command = f"sh -c {shlex.quote(inner)}; echo after"  # (sleep: the command's child)
    args = [sys.executable, "-m", "toolswap", "run", "--json", "--session-dir"]
    args += [str(tmp_path / "s1"), "--", "sh", "-c", command]

    def interrupt_once_started(pid: int, out: bytes) -> bool:
        if not (pidfile.exists() and pidfile.read_text().strip()):
            return False
        os.kill(pid, signal.SIGINT)
        return True

    out, status = _in_a_terminal(args, interrupt_once_started)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGINT, (status, out)
    assert not _running(int(pidfile.read_text()))


def test_an_escaped_process_holding_the_output_does_not_keep_toolswap_after_a_signal(
    tmp_path: Path,
) -> None:
    """A grandchild in a session of its own (setsid) is outside the command's group: it
    kept the output open after the command died of the forwarded SIGTERM, and toolswap
    read on until it exited, ignoring more signals (a review). Now reading stops once the
    command's group is gone and the output is quiet, and what arrived is saved, marked
    interrupted."""
    session = tmp_path / "s1"
    pidfile = tmp_path / "escaped.pid"
    script = (
        f"setsid sh -c 'echo $$ > {shlex.quote(str(pidfile))}; exec sleep 120' & seq 1 50000; wait"
    )
    proc = _run_sh(session, script)
    try:
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert proc.poll() is None
            time.sleep(0.01)
        escaped = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)  # (the escaped sleep lasts 120 s)
        assert proc.returncode == -signal.SIGTERM
        assert _running(escaped)  # it was still holding the output when toolswap left
        result = json.loads(out)
        assert result["artifact"]["interrupted"] == "SIGTERM"
    finally:
        with contextlib.suppress(ValueError, OSError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_session_directory_whose_name_is_not_utf8_gets_a_pointer_whose_read_works(
    tmp_path: Path,
) -> None:
    """The artifact was recorded, but the pointer, which names the directory, could not be
    encoded: no pointer, and exit 1 for a command that exited 0 (a review). The path is
    shown with the byte as \\xe9, and the read command quotes it as bash reads it back."""
    session = os.fsencode(tmp_path) + b"/caf\xe9/s"
    done = subprocess.run(
        [*TOOLSWAP, "run", "--session-dir", session, "--", "seq", "1", "40000"],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    pointer = done.stdout.decode()
    assert "caf\\xe9/s/tool-results/tool_result_001.txt" in pointer
    command = next(
        line.removeprefix("Read more: ").partition(" | ")[0]
        for line in pointer.splitlines()
        if line.startswith("Read more: ")
    )
    assert "$'" in command
    read = subprocess.run(["bash", "-c", command], capture_output=True, check=False)
    assert read.returncode == 0, read.stderr
    assert read.stdout.startswith(b"11\n12\n")  # (the head showed lines 1-10)


@pytest.mark.parametrize(
    ("background", "signum"),
    [
        # A job sh started with & ignores SIGINT (no job control): it kept the output open.
        ("sleep 60", signal.SIGINT),
        # A setsid daemon that keeps writing: the output is never quiet.
        ("setsid sh -c 'while :; do echo tick; sleep 0.1; done'", signal.SIGTERM),
    ],
)
def test_after_a_signal_what_still_writes_is_not_waited_for_past_the_drain(
    tmp_path: Path, background: str, signum: int
) -> None:
    """Waiting for the command's group to be gone and the output quiet left toolswap
    reading for as long as such a process lived (a review): it stops 5 s after the
    command exited, with what arrived saved and marked interrupted."""
    marker = tmp_path / "started"
    script = f"{background} & echo started; touch {shlex.quote(str(marker))}; sleep 60"
    proc = _run_sh(tmp_path / "s1", script)
    try:
        while not marker.exists():
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signum)
        out, _ = proc.communicate(timeout=45)  # (its processes live 60 s)
        assert proc.returncode == -signum
        assert "started" in json.loads(out)["context_text"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(["pkill", "-f", "while :; do echo tick"], check=False)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_harness_that_hands_its_pty_as_stdin_still_interrupts_the_command(
    tmp_path: Path,
) -> None:
    """Standard input a tty, but not toolswap's terminal's foreground (a harness in a
    session of its own passing its pty): the command stayed in toolswap's group and a
    SIGINT to toolswap, taken for Ctrl-C, never reached it (a review)."""
    master, slave = os.openpty()
    pidfile = tmp_path / "child.pid"
    inner = f"echo $$ > {shlex.quote(str(pidfile))}; exec sleep 60"
    proc = subprocess.Popen(
        [*TOOLSWAP, "run", "--session-dir", str(tmp_path / "s1"), "--", "sh", "-c", inner],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)  # (the command sleeps 60 s)
        assert proc.returncode == -signal.SIGINT
        assert not _running(int(pidfile.read_text()))
    finally:
        os.close(master)
        os.close(slave)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_a_signal_toolswap_was_started_ignoring_stays_ignored(tmp_path: Path) -> None:
    """``nohup toolswap run ...``: toolswap caught the SIGHUP nohup meant to be ignored
    and passed it on, so the command died when the terminal closed (a review). It is left
    ignored, for the command too."""
    marker = tmp_path / "started"
    script = f"touch {shlex.quote(str(marker))}; sleep 1; echo alive"
    argv = ["nohup", *TOOLSWAP, "run", "--json", "--session-dir", str(tmp_path / "s1")]
    proc = subprocess.Popen(
        [*argv, "--", "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        while not marker.exists():
            assert proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        result = json.loads(out)
        assert result["exit_code"] == 0 and "alive" in result["context_text"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
