"""Capturing 1 GiB from a pipe keeps the capturing process's peak RSS growth under 64 MiB.

The child measures its own peak (``VmHWM``, reset just before the capture) rather than
``ru_maxrss``, which a child inherits from its parent across fork and exec.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

GIB = 1 << 30
LIMIT_KIB = 64 * 1024

CHILD = """
import json, resource, subprocess, sys
from toolswap import ToolResultExternalizer


def peak_kib():
    # VmHWM is this process's own peak RSS. ru_maxrss is not: after fork and exec it
    # starts at the parent's RSS (pytest's, here), which would hide any growth below it.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # the peak becomes the current RSS
    except OSError:
        pass


ext = ToolResultExternalizer(sys.argv[1])
ext.externalize(b"warm up: imports, thread, first capture\\n" * 50_000, "bash")
producer = (
    "import sys\\n"
    "block = b''.join(b'compiling module %06d: ok\\\\n' % i for i in range(40_000))\\n"
    "block = block[: (1 << 20) - 32] + b'error: one failure per MiB\\\\n'\\n"
    "block += b'x' * ((1 << 20) - len(block) - 1) + b'\\\\n'\\n"
    "for _ in range(1024):\\n"
    "    sys.stdout.buffer.write(block)\\n"
)
reset_peak()
before = peak_kib()
proc = subprocess.Popen([sys.executable, "-c", producer], stdout=subprocess.PIPE)
result = ext.process(proc.stdout, "bash", argv=["producer"], exit_code=proc.wait)
after = peak_kib()
proc.stdout.close()
print(json.dumps({
    "before_kib": before,
    "after_kib": after,
    "byte_size": result.artifact.byte_size,
    "pointer_bytes": len(result.context_text.encode()),
    "exit_code": result.artifact.exit_code,
}))
"""


def test_capturing_1_gib_from_a_pipe_grows_peak_rss_by_less_than_64_mib(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    try:
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(session_dir)],
            capture_output=True,
            check=False,
        )
        assert child.returncode == 0, child.stderr.decode()
        report = json.loads(child.stdout)
    finally:
        shutil.rmtree(session_dir, ignore_errors=True)  # 1 GiB: do not leave it behind

    assert report["byte_size"] == GIB
    assert report["exit_code"] == 0
    assert report["pointer_bytes"] <= 32 * 1024
    growth = report["after_kib"] - report["before_kib"]
    assert growth < LIMIT_KIB, f"peak RSS grew by {growth / 1024:.1f} MiB"
