"""`toolswap demo` runs end to end on this machine's real data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_every_step_and_exits_zero_twice_in_the_same_home(tmp_path: Path) -> None:
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, "-m", "toolswap", "demo", "--home", str(tmp_path / "demo-home")],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"run {run}: {done.stderr}"
        out = done.stdout
        for step in range(1, 8):
            assert f"== {step}." in out
        assert "of the context saved" in out
        assert "grep_artifact('RecursionError') -> " in out
        assert "-> committed" in out
        assert "was collected by cleanup" in out
        assert "planned_delete" in out and "retained_referenced" in out
