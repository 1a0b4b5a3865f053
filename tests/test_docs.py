"""The configuration guide names every environment variable the code reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_toolswap_environment_variable_is_documented() -> None:
    guide = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    names: set[str] = set()
    for path in (ROOT / "src").rglob("*.py"):
        names |= set(re.findall(r"\b(TOOLSWAP_[A-Z_]+[A-Z])\b", path.read_text(encoding="utf-8")))
    assert {"TOOLSWAP_HOME", "TOOLSWAP_WORKSPACE", "TOOLSWAP_SESSION"} <= names
    missing = sorted(name for name in names if f"`{name}`" not in guide)
    assert missing == []


def test_the_default_home_is_documented_where_users_look_first() -> None:
    for doc in ("README.md", "docs/configuration.md"):
        assert "~/.toolswap" in (ROOT / doc).read_text(encoding="utf-8")
