"""The trusted session root: names, permissions, symlinks, the lock."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from toolswap import ArtifactAccessError, ConfigurationError, Session, SourceIdError
from toolswap.session import toolswap_home


def test_session_directories_are_private(tmp_path: Path) -> None:
    session = Session.at(tmp_path / "a" / "s1")
    for path in (session.root, session.tool_results_dir):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700


def test_an_existing_session_is_never_opened_through_a_symlink(tmp_path: Path) -> None:
    real = Session.at(tmp_path / "real" / "s1")
    link = tmp_path / "links" / "s1"
    link.parent.mkdir()
    os.symlink(real.root, link)
    with pytest.raises(ArtifactAccessError, match="not a symlink"):
        Session.at(link, create=False)
    with pytest.raises(ArtifactAccessError, match="not a symlink"):
        Session.at(link, create=True)


def test_a_missing_session_is_reported_not_created(tmp_path: Path) -> None:
    with pytest.raises(ArtifactAccessError, match="does not exist"):
        Session.at(tmp_path / "nowhere" / "s1", create=False)
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("bad", ["..", "a/b", "", ".hidden", "x" * 200, "sp ace"])
def test_session_ids_are_single_safe_components(tmp_path: Path, bad: str) -> None:
    with pytest.raises(SourceIdError):
        Session.open(bad, workspace="ws", home=tmp_path)


def test_the_session_lock_is_reentrant_in_one_thread(tmp_path: Path) -> None:
    session = Session.at(tmp_path / "s1")
    with session.lock(), session.lock():
        assert session.lock_path.exists()
    assert stat.S_IMODE(os.stat(session.lock_path).st_mode) == 0o600


def test_a_home_that_is_a_symlink_loop_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    monkeypatch.setenv("TOOLSWAP_HOME", str(tmp_path / "a"))

    with pytest.raises(ConfigurationError, match="TOOLSWAP_HOME"):
        toolswap_home()
