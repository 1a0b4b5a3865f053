"""The command a pointer names runs toolswap in the environment that made the pointer."""

from __future__ import annotations

import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap._invocation import cli_command


def _script(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "toolswap"
    script.write_text(f"#!{sys.executable}\nfrom toolswap.cli import main\nmain()\n")
    script.chmod(0o755)
    return script


@pytest.fixture
def no_scripts_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interpreter whose scripts directory holds no toolswap command."""
    empty = tmp_path / "no-scripts"
    empty.mkdir()
    real = sysconfig.get_path

    def get_path(name: str, *args: object, **kwargs: object) -> str:
        return str(empty) if name == "scripts" else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sysconfig, "get_path", get_path)


@pytest.mark.usefixtures("no_scripts_dir")
def test_the_running_command_is_named_by_its_full_path_when_not_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path / "venv bin")
    monkeypatch.setattr(sys, "argv", [str(script), "run"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")

    assert cli_command() == shlex.quote(str(script))


@pytest.mark.usefixtures("no_scripts_dir")
def test_the_running_command_is_named_toolswap_when_that_name_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path / "bin")
    monkeypatch.setattr(sys, "argv", [str(script), "run"])
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")

    assert cli_command() == "toolswap"


@pytest.mark.usefixtures("no_scripts_dir")
def test_another_toolswap_on_path_is_not_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = _script(tmp_path / "ours"), _script(tmp_path / "theirs")
    monkeypatch.setattr(sys, "argv", [str(ours), "run"])
    monkeypatch.setenv("PATH", f"{theirs.parent}:/usr/bin:/bin")

    assert cli_command() == str(ours)


@pytest.mark.usefixtures("no_scripts_dir")
def test_without_a_toolswap_command_the_interpreter_runs_the_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["/somewhere/app.py"])

    assert cli_command() == f"{shlex.quote(sys.executable)} -m toolswap"


def test_a_library_pointer_names_a_command_that_reads_the_artifact(tmp_path: Path) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    result = ext.externalize("line\n" * 40_000, "bash")
    (read,) = [x for x in result.context_text.splitlines() if x.startswith("Read more: ")]
    command = read.removeprefix("Read more: ").split(" | ")[0]

    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, check=False, timeout=60
    )

    assert command.startswith(cli_command() + " read ")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("line\n")
