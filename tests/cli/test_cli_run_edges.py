"""``toolswap run`` at the edges: a corrupt manifest, a full disk, a signal.

Every test runs real ``python -m toolswap`` processes. A full disk is a real tmpfs of a few
MiB mounted in a private mount namespace (``unshare -m``), so the kernel itself answers
ENOSPC; where mount namespaces are not allowed, the file-size limit (RLIMIT_FSIZE, EFBIG)
stands in for it.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
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
    )
    with open(ready, encoding="utf-8") as f:  # the command printed everything and waits
        assert f.read() == "r"
    return proc, ready


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
    out, err = proc.communicate(timeout=60)

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
