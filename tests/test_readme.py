"""The README is the front door: the two commands first, every CLI command listed."""

from __future__ import annotations

from pathlib import Path

import click

from toolswap.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, command in sorted(group.commands.items()):
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
