"""What ``toolswap run`` imports: the capture, and nothing it does not need (start-up cost).

Each case runs the real command in a fresh interpreter and lists ``sys.modules`` at exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import Clock
from import_recorder import loaded, modules_in, recorder_argv
from toolswap import ToolResultExternalizer
from toolswap._cores import usable_cores

# Modules the capture path must not import: each costs start-up time on every command.
NEVER_ON_THE_CAPTURE_PATH = (
    "asyncio",
    "anyio",
    "mcp",
    "importlib.metadata",
    "rich",
    "secrets",  # with random, base64 and hmac: a temporary name needs only os.urandom
    "sqlite3",
    "toolswap.retention",
    "toolswap.cleanup",
    "toolswap._cleanup_model",
    "toolswap._cleanup_plan",
    "toolswap._cleanup_apply",
    "toolswap.verify",
    "toolswap.grep",
    "toolswap.reader",
    "toolswap.workspaces",
    "toolswap.mcp",
    "toolswap.cli.core",
    "toolswap.cli.gc",
    "toolswap.cli.retention",
    "toolswap.cli.mcp_cmd",
)
# Not loaded by `toolswap run [OPTION...] -- COMMAND`, read without click (toolswap.cli._run).
NOT_ON_THE_USUAL_RUN = (
    "click",
    "toolswap.cli._group",
    "toolswap.cli.capture",
    "datetime",  # no clock is read for an inline output
    "hashlib",  # nothing is hashed in a session named explicitly (here TOOLSWAP_WORKSPACE)
)
# Loaded only once an output is spilled to an artifact.
SPILL_MACHINERY = ("toolswap.capture", "toolswap.pointer", "toolswap.salience")
# Loaded only by a session bound to a shared store, or once a manifest has records to read
# or write: a capture in a new local session whose output stays inline needs none of them.
STORE_AND_RECORDS = (
    "toolswap.backends.store",
    "toolswap.backends.replica",
    "toolswap.records",
    "toolswap.artifact",  # its value objects: an inline result is toolswap._results's
)


def _modules_after(
    tmp_path: Path, *args: str, prewarm: bool = False
) -> tuple[subprocess.CompletedProcess[bytes], set[str]]:
    """Run ``toolswap ARGS``; the modules it had imported at exit. Without ``prewarm``, it
    imports nothing ahead while the command runs (a command slowed down by a busy machine
    would have it import the capture's modules, on a thread of their own)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "TOOLSWAP_PREWARM": "on" if prewarm else "off"}
    proc = subprocess.run(recorder_argv(out, *args), capture_output=True, check=False, env=env)
    return proc, modules_in(out)


def test_run_with_small_output_imports_neither_the_spill_nor_retention_cleanup_or_sdks(
    tmp_path: Path,
) -> None:
    proc, modules = _modules_after(tmp_path, "run", "--", sys.executable, "-c", "print('small')")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"small\n"
    assert loaded(modules, NEVER_ON_THE_CAPTURE_PATH + SPILL_MACHINERY + STORE_AND_RECORDS) == []
    assert "shlex" not in modules  # a pointer's read hint quotes with it
    assert loaded(modules, NOT_ON_THE_USUAL_RUN) == []


@pytest.mark.skipif(usable_cores() < 2, reason="imports ahead need a second core")
def test_run_imports_the_capture_ahead_while_the_command_is_quiet_but_nothing_else(
    tmp_path: Path,
) -> None:
    quiet = "import time; time.sleep(1); print('small')"
    proc, modules = _modules_after(tmp_path, "run", "--", sys.executable, "-c", quiet, prewarm=True)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"small\n"
    assert loaded(modules, SPILL_MACHINERY) != []  # imported while the command slept
    assert loaded(modules, NEVER_ON_THE_CAPTURE_PATH) == []

    proc, modules = _modules_after(tmp_path, "run", "--", sys.executable, "-c", quiet)

    assert proc.stdout == b"small\n"
    assert loaded(modules, SPILL_MACHINERY) == []  # TOOLSWAP_PREWARM=off


def test_run_that_spills_imports_the_capture_but_not_retention_cleanup_or_sdks(
    tmp_path: Path,
) -> None:
    big = "for i in range(50_000): print(f'step {i}: ok')"
    proc, modules = _modules_after(tmp_path, "run", "--", sys.executable, "-c", big)

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(b"[Artifact: artifact:")
    assert "toolswap.capture" in modules
    assert loaded(modules, NEVER_ON_THE_CAPTURE_PATH) == []


def test_wrap_imports_nothing_of_retention_cleanup_or_sdks(tmp_path: Path) -> None:
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        recorder_argv(out, "wrap", "--tool", "t"),
        input=b"x" * 100_000,
        capture_output=True,
        check=False,
    )

    assert proc.returncode == 0, proc.stderr
    assert loaded(modules_in(out), NEVER_ON_THE_CAPTURE_PATH) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--version",), "importlib.metadata"),  # the check above would see it
        (("read", "--help"), "toolswap.reader"),
        (("--help",), "toolswap.cli.gc"),  # help lists every command: all are loaded
    ],
)
def test_the_module_check_sees_what_other_commands_import(
    tmp_path: Path, args: tuple[str, ...], expected: str
) -> None:
    proc, modules = _modules_after(tmp_path, *args)

    assert proc.returncode == 0, proc.stderr
    assert expected in modules


def test_small_run_in_a_session_with_artifacts_reads_records_but_loads_no_store_or_spill(
    tmp_path: Path,
) -> None:
    big = "for i in range(50_000): print(f'step {i}: ok')"
    assert _modules_after(tmp_path, "run", "--", sys.executable, "-c", big)[0].returncode == 0

    proc, modules = _modules_after(tmp_path, "run", "--", sys.executable, "-c", "print('small')")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"small\n"
    assert "toolswap.records" in modules  # the readiness check verifies the manifest's records
    assert loaded(modules, NEVER_ON_THE_CAPTURE_PATH + SPILL_MACHINERY) == []
    assert loaded(modules, ("toolswap.backends.store", "toolswap.backends.replica")) == []


def test_small_run_in_a_session_checked_before_reads_no_records(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    ToolResultExternalizer(session_dir).externalize("big\n" * 50_000, "bash")
    later = Clock(datetime.now(UTC) + timedelta(minutes=1))  # the manifest has settled
    ToolResultExternalizer(session_dir, now=later).check_ready()  # remembered as checked

    proc, modules = _modules_after(
        tmp_path, "run", "--session-dir", str(session_dir), "--", sys.executable, "-c", "print(1)"
    )

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"1\n"
    assert "toolswap.records" not in modules  # the manifest was not read again
    assert loaded(modules, NEVER_ON_THE_CAPTURE_PATH + SPILL_MACHINERY + STORE_AND_RECORDS) == []
