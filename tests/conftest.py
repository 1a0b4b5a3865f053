"""Shared fixtures: every test gets its own TOOLSWAP_HOME and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer

_ENV = (
    "TOOLSWAP_HOME",
    "TOOLSWAP_WORKSPACE",
    "TOOLSWAP_SESSION",
    "TOOLSWAP_BASH_MAX_CHARS",
    "TOOLSWAP_THRESHOLD_KB",
    "TOOLSWAP_TOOL_THRESHOLDS",
    "TOOLSWAP_HEAD_BYTES",
    "TOOLSWAP_TAIL_BYTES",
    "TOOLSWAP_CRASH_POINT",
    "TOOLSWAP_CRASH_SKIP",
    "TOOLSWAP_SYNC_POINT",
    "TOOLSWAP_SYNC_DIR",
    "BASH_MAX_OUTPUT_LENGTH",
    "CODEBUDDY_TOOL_RESULT_THRESHOLD_KB",
)


@pytest.fixture(autouse=True)
def toolswap_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point TOOLSWAP_HOME at a fresh directory and clear toolswap's variables."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    monkeypatch.setenv("TOOLSWAP_HOME", str(home))
    monkeypatch.setenv("TOOLSWAP_WORKSPACE", "ws")
    return home


class Clock:
    """An injectable UTC clock that tests move by hand (no sleeps)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime:
        self.now += timedelta(**kwargs)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def session_dir(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / "s1"


@pytest.fixture
def externalizer(session_dir: Path, clock: Clock) -> Iterator[ToolResultExternalizer]:
    yield ToolResultExternalizer(session_dir, now=clock)
