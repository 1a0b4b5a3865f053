"""Kill a real capture process at every durable step; a fresh process finds no partial artifact.

Each test runs a child that externalizes a 3 MiB output with ``TOOLSWAP_CRASH_POINT`` naming
one step, so the child SIGKILLs itself right there. Fresh processes (``toolswap verify`` and
``toolswap wrap``) then inspect the session: every final-named file is complete, the earlier
artifact is intact, the next capture takes a name never used, and verify reports exactly
what the crash left.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap.capture import TMP_PREFIX
from toolswap.testing import CRASH_POINTS

POINTS = [p for p in CRASH_POINTS if p.startswith(("capture.", "manifest."))]

EARLIER = b"earlier evidence\n" * 10_000
CRASHED = b"".join(b"crashing capture line %07d\n" % i for i in range(110_000))  # ~3 MiB

CHILD = """
import sys
from toolswap import ToolResultExternalizer
data = b"".join(b"crashing capture line %07d\\n" % i for i in range(110_000))
chunks = [data[i : i + (1 << 20)] for i in range(0, len(data), 1 << 20)]
ToolResultExternalizer(sys.argv[1]).externalize(chunks, "bash", argv=["make"], exit_code=2)
print("not killed")
"""

# What each crash leaves behind: (tool_result_002 published, manifest records it, temp file).
EXPECTED: dict[str, tuple[bool, bool, bool]] = {
    "capture.tmp_created": (False, False, True),
    "capture.tmp_fsynced": (False, False, True),
    "capture.linked": (True, False, True),
    "capture.tmp_unlinked": (True, False, False),
    "capture.dir_fsynced": (True, False, False),
    "manifest.appended": (True, True, False),
    "manifest.fsynced": (True, True, False),
    "manifest.head_written": (True, True, False),
}


def test_every_capture_and_manifest_crash_point_is_exercised() -> None:
    assert sorted(EXPECTED) == sorted(POINTS)


def _toolswap(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "toolswap", *args],
        input=stdin,
        capture_output=True,
        env=env,
        check=False,
    )
    return proc.returncode, proc.stdout.decode()


@pytest.mark.parametrize("point", POINTS)
def test_a_capture_killed_at_a_durable_step_never_leaves_a_partial_artifact(
    tmp_path: Path, point: str
) -> None:
    session_dir = tmp_path / "s1"
    earlier = ToolResultExternalizer(session_dir).externalize(EARLIER, "bash").artifact
    env = {**os.environ, "TOOLSWAP_CRASH_POINT": point}

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(session_dir)], env=env, capture_output=True, check=False
    )

    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert b"not killed" not in child.stdout
    published, recorded, temporary = EXPECTED[point]
    results = session_dir / "tool-results"
    names = sorted(os.listdir(results))
    finals = [n for n in names if n.startswith("tool_result_")]
    temps = [n for n in names if n.startswith(TMP_PREFIX)]
    assert finals == (
        ["tool_result_001.txt", "tool_result_002.txt"] if published else ["tool_result_001.txt"]
    )
    assert (results / "tool_result_001.txt").read_bytes() == EARLIER
    if published:
        # Complete or absent, never partial.
        assert (results / "tool_result_002.txt").read_bytes() == CRASHED
    assert bool(temps) == temporary

    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLSWAP_CRASH")}
    code, out = _toolswap("verify", "--json", "--session-dir", str(session_dir), env=env)
    findings = {f["name"]: f for f in json.loads(out)}
    assert findings["tool_result_001.txt"]["kind"] == "ok"
    if published and recorded:
        assert findings["tool_result_002.txt"]["kind"] == "ok"
    elif published:
        assert findings["tool_result_002.txt"]["kind"] == "unrecorded"
    else:
        assert "tool_result_002.txt" not in findings
    assert [f["kind"] for name, f in findings.items() if name.startswith(TMP_PREFIX)] == (
        ["temporary"] if temporary else []
    )
    assert code == (1 if published and not recorded else 0)

    code, out = _toolswap(
        "wrap",
        "--tool",
        "after-crash",
        "--json",
        "--session-dir",
        str(session_dir),
        stdin=b"next output\n",
        env={**env, "TOOLSWAP_TOOL_THRESHOLDS": "after-crash=0"},
    )
    assert code == 0
    next_name = Path(json.loads(out)["artifact"]["path"]).name
    assert next_name == ("tool_result_003.txt" if published else "tool_result_002.txt")

    ext = ToolResultExternalizer(session_dir)
    assert ext.read_bytes(earlier.source_id, 0, len(EARLIER)).data == EARLIER
    if recorded:
        (crashed,) = [a for a in ext.list_artifacts() if a.filename == "tool_result_002.txt"]
        assert crashed.content_sha256 == hashlib.sha256(CRASHED).hexdigest()
        assert crashed.argv == ("make",)
        assert crashed.exit_code == 2
        assert ext.read_artifact(crashed, 109_999, 1) == "crashing capture line 0109999"
