"""`toolswap sessions`, and source IDs that read from any directory (real subprocesses)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from toolswap.session import legacy_workspace_slug, workspace_slug

BIG = [sys.executable, "-c", "for i in range(20000): print(f'step {i}: ok')"]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "work" / "a-b", tmp_path / "work" / "a" / "b"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    return a, b


def _toolswap(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TOOLSWAP_WORKSPACE"}
    return subprocess.run(
        [sys.executable, "-m", "toolswap", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _read_hint(pointer: str) -> list[str]:
    line = next(x for x in pointer.splitlines() if "toolswap read " in x)
    command = line[line.index("toolswap read ") :].split(" | ")[0]
    return shlex.split(command)[1:]


def _first_omitted(hint: list[str], word: str) -> str:
    """The line the hint's read starts at: the first the pointer's head did not show (line
    N + 1 of BIG's output says ``step N``)."""
    offset = int(hint[hint.index("--offset") + 1])
    assert offset > 0  # the pointer showed a head and left lines out
    return f"step {offset}: {word}\n"


def test_source_ids_from_two_directories_read_from_a_third_with_the_printed_hint(
    dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = dirs
    first = _toolswap("run", "--", *BIG, cwd=a)
    second = _toolswap("run", "--", *BIG[:-1], BIG[-1].replace("ok", "fine"), cwd=b)
    assert first.returncode == second.returncode == 0
    # `/work/a-b` and `/work/a/b` each got a workspace with a `default` session.
    listed = json.loads(_toolswap("sessions", "--json", cwd=a).stdout)
    assert [(s["workspace"], s["session"]) for s in listed] == sorted(
        [(workspace_slug(a), "default"), (workspace_slug(b), "default")]
    )
    assert [s["current_workspace"] for s in listed if s["workspace"] == workspace_slug(a)] == [True]

    for pointer, word in ((first.stdout, "ok"), (second.stdout, "fine")):
        hint = _read_hint(pointer)
        assert "--workspace" not in hint  # the run's own directory: found from the ID
        done = _toolswap(*hint, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(_first_omitted(hint, word))


def test_a_run_in_a_named_workspace_prints_a_hint_that_names_it(tmp_path: Path) -> None:
    run = _toolswap("run", "--workspace", "team-ci", "--", *BIG, cwd=tmp_path)
    hint = _read_hint(run.stdout)
    assert hint[hint.index("--workspace") + 1] == "team-ci"
    done = _toolswap(*hint, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(_first_omitted(hint, "ok"))


def test_sessions_lists_nothing_politely_and_in_plain_text_when_piped(tmp_path: Path) -> None:
    empty = _toolswap("sessions", cwd=tmp_path)
    assert empty.returncode == 0 and "no sessions under" in empty.stderr
    _toolswap("run", "--session", "build", "--", *BIG, cwd=tmp_path)
    rows = _toolswap("sessions", cwd=tmp_path).stdout.splitlines()
    assert rows == [rows[0]]
    workspace, session, count, _size, _when, kept_in = rows[0].split("\t")
    assert (workspace, session, count) == (f"* {workspace_slug(tmp_path)}", "build", "1")
    assert kept_in == "local"


def test_a_session_under_the_old_workspace_name_is_announced_not_silently_orphaned(
    tmp_path: Path, toolswap_home: Path
) -> None:
    old = toolswap_home / "projects" / legacy_workspace_slug(tmp_path.resolve()) / "default"
    (old / "tool-results").mkdir(parents=True)
    done = _toolswap("run", "--", sys.executable, "-c", "print('hi')", cwd=tmp_path)
    assert done.returncode == 0
    assert f"is in workspace {legacy_workspace_slug(tmp_path.resolve())!r}" in done.stderr
    listed = json.loads(_toolswap("sessions", "--json", cwd=tmp_path).stdout)
    assert legacy_workspace_slug(tmp_path.resolve()) in [s["workspace"] for s in listed]
