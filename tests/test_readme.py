"""The README is the front door: the two commands first, every CLI command listed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from toolswap.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    """Every command under ``group``, loading lazily registered ones as help would."""
    ctx = click.Context(group)
    out: list[tuple[str, click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"`toolswap {prefix}{name}` is listed but cannot be loaded"
        full = f"{prefix}{name}"
        out.append((full, command))
        if isinstance(command, click.Group):
            out.extend(_commands(command, full + " "))
    return out


def test_readme_starts_with_make_demo_then_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    demo, test = text.find("make demo"), text.find("make test")
    assert 0 < demo < test < 1200


def test_every_command_has_help_text_and_appears_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    for name, command in _commands(main):
        assert (command.help or "").strip(), f"`toolswap {name}` has no help text"
        assert f"toolswap {name}" in text, f"`toolswap {name}` is not in README.md"


def _python_blocks_before(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    text = text[: text.index(heading)]
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_readme_library_lease_and_cleanup_snippets_run_twice_in_a_row(tmp_path: Path) -> None:
    blocks = _python_blocks_before("## Running on a fleet")
    assert len(blocks) == 3
    script = tmp_path / "readme.py"
    script.write_text("\n".join(blocks), encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TOOLSWAP_")},
        "HOME": str(tmp_path / "user"),  # the snippet uses the default home, ~/.toolswap
    }
    for run in (1, 2):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"run {run}: {done.stderr}"
        assert "[Artifact: artifact:my-session:" in done.stdout
    assert (tmp_path / "user" / ".toolswap" / "projects").is_dir()
