"""Hostile or odd files and settings never hang a command or end in a traceback.

Each case runs real ``python -m toolswap`` processes with a deadline: a hang fails the test
instead of freezing the suite. Every refusal is one line naming a typed error.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

DEADLINE = 60


def toolswap(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolswap", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env if env is not None else dict(os.environ),
        timeout=DEADLINE,
        check=False,
    )


def _one_typed_line(done: subprocess.CompletedProcess[str], error: str) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"toolswap: {error}: "), line
    return line


def _session_with_an_artifact(toolswap_home: Path) -> Path:
    done = toolswap("run", "--session", "s1", "--", sys.executable, "-c", "print('x' * 70000)")
    assert done.returncode == 0, done.stderr
    return toolswap_home / "projects" / "ws" / "s1"


@pytest.mark.parametrize("name", ["manifest.jsonl", "retention-leases.jsonl"])
@pytest.mark.parametrize("command", [("ls",), ("gc", "plan")])
def test_a_fifo_in_place_of_a_log_is_refused_without_hanging(
    toolswap_home: Path, name: str, command: tuple[str, ...]
) -> None:
    session = _session_with_an_artifact(toolswap_home)
    (session / name).unlink(missing_ok=True)
    os.mkfifo(session / name)

    done = toolswap(*command, "--session", "s1")

    if name == "retention-leases.jsonl" and command == ("ls",):
        assert done.returncode == 0  # ls never reads the journal
        return
    # gc reads the manifest through the journal's anchor check: a journal error either way.
    error = "ArtifactLeaseJournalError" if command == ("gc", "plan") else "ChainLogError"
    assert "not a regular file" in _one_typed_line(done, error)


def test_a_planted_temporary_name_with_an_impossible_pid_is_kept_as_unknown(
    toolswap_home: Path,
) -> None:
    session = _session_with_an_artifact(toolswap_home)
    planted = session / "tool-results" / f".tmp-{'9' * 25}-{'a' * 16}.partial"
    planted.write_bytes(b"planted")

    done = toolswap("gc", "plan", "--session", "s1", "--ttl", "0s", "--json")

    assert done.returncode == 0, done.stderr
    entries = {e["name"]: e for e in json.loads(done.stdout)["plans"][0]["plan"]["entries"]}
    assert entries[planted.name]["status"] == "retained_unknown"
    assert entries["tool_result_001.txt"]["status"] == "planned_delete"


def test_a_symlinked_home_is_followed_and_everything_below_it_is_private(tmp_path: Path) -> None:
    real = tmp_path / "real-home"
    real.mkdir()
    link = tmp_path / "home-link"
    link.symlink_to(real)
    env = {**os.environ, "TOOLSWAP_HOME": str(link)}

    done = toolswap("run", "--", sys.executable, "-c", "print('y' * 70000)", env=env)

    assert done.returncode == 0, done.stderr
    session = real / "projects" / "ws" / "default"
    for directory in (
        real / "projects",
        real / "projects" / "ws",
        session,
        session / "tool-results",
    ):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert toolswap("ls", env=env).stdout.count("tool_result_001.txt") == 1


def test_a_symlinked_workspace_is_refused_before_anything_is_created(
    toolswap_home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (toolswap_home / "projects").mkdir(parents=True)
    (toolswap_home / "projects" / "ws").symlink_to(elsewhere)

    done = toolswap("run", "--", "echo", "hi")

    assert "must be a real directory" in _one_typed_line(done, "ArtifactAccessError")
    assert list(elsewhere.iterdir()) == []


def test_a_home_that_is_a_file_is_a_configuration_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("", encoding="utf-8")

    done = toolswap("run", "--", "echo", "hi", env={**os.environ, "TOOLSWAP_HOME": str(not_a_dir)})

    assert "is not a directory" in _one_typed_line(done, "ConfigurationError")


def test_an_empty_home_variable_means_unset(tmp_path: Path) -> None:
    env = {**os.environ, "TOOLSWAP_HOME": "", "HOME": str(tmp_path)}

    done = toolswap("run", "--", sys.executable, "-c", "print('z' * 70000)", env=env)

    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".toolswap" / "projects" / "ws" / "default" / "tool-results").is_dir()


def test_a_saved_plan_is_private_and_a_fifo_plan_is_refused(
    toolswap_home: Path, tmp_path: Path
) -> None:
    _session_with_an_artifact(toolswap_home)
    saved = tmp_path / "plan.json"
    assert toolswap("gc", "plan", "--session", "s1", "--save", str(saved)).returncode == 0
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600

    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    done = toolswap("gc", "apply", "--plan", str(fifo), "--yes")
    assert "not a regular file" in _one_typed_line(done, "CleanupError")
