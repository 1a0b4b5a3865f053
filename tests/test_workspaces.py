"""Workspace names never collide, and a source ID finds its session from any workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolswap import ToolResultExternalizer
from toolswap.errors import ArtifactNotFoundError, SourceIdError
from toolswap.session import Session, legacy_workspace_slug, workspace_slug
from toolswap.tools import ArtifactTools
from toolswap.workspaces import find_session, list_sessions


@pytest.fixture(autouse=True)
def _derived_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLSWAP_WORKSPACE")


def test_paths_that_read_alike_get_different_workspace_names(tmp_path: Path) -> None:
    for left, right in [("a-b", "a/b"), ("my project", "my-project")]:
        (tmp_path / left).mkdir(parents=True, exist_ok=True)
        (tmp_path / right).mkdir(parents=True, exist_ok=True)
        a, b = workspace_slug(tmp_path / left), workspace_slug(tmp_path / right)
        assert a != b
        # ... and the old scheme was the one that collided.
        assert legacy_workspace_slug(tmp_path / left) == legacy_workspace_slug(tmp_path / right)
    name = workspace_slug(tmp_path / "my project")
    assert name.removesuffix(name[-11:]).endswith("my-project") and "/" not in name


def test_a_symlink_to_a_directory_shares_its_workspace_and_the_cwd_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert workspace_slug(tmp_path / "link") == workspace_slug(tmp_path / "real")
    monkeypatch.chdir(tmp_path / "link")
    assert workspace_slug() == workspace_slug(tmp_path / "real")


def _saved(workspace: str, text: str) -> tuple[ToolResultExternalizer, str]:
    ext = ToolResultExternalizer(Session.open("default", workspace=workspace))
    return ext, ext.externalize(text, "bash").artifact.source_id


def test_a_source_id_finds_its_session_when_every_workspace_has_a_default_session(
    toolswap_home: Path,
) -> None:
    _, first = _saved("ws-one", "one\n" * 1000)
    _, second = _saved("ws-two", "two\n" * 1000)
    # Both are tool_result_001.txt of a session called `default`: the digest picks one.
    assert first.split(":")[:3] == second.split(":")[:3]

    assert find_session(first).root.parent.name == "ws-one"
    assert find_session(second).root.parent.name == "ws-two"
    # A named workspace is tried first, but the ID still wins.
    assert find_session(first, workspace="ws-two").root.parent.name == "ws-one"


def test_a_source_id_no_session_holds_is_refused_with_the_workspaces_searched(
    toolswap_home: Path,
) -> None:
    _, first = _saved("ws-one", "one\n" * 1000)
    _saved("ws-two", "two\n" * 1000)
    unknown = first[:-12] + "0" * 12
    with pytest.raises(ArtifactNotFoundError, match=r"ws-one, ws-two"):
        find_session(unknown)
    with pytest.raises(SourceIdError, match="no session 'nosuch' in any workspace"):
        find_session("artifact:nosuch:tool_result_001.txt:" + "0" * 12)


def test_artifact_tools_read_an_id_from_another_workspace_without_asking_to_rerun(
    toolswap_home: Path,
) -> None:
    here, _ = _saved("ws-here", "here\n" * 1000)
    _, elsewhere = _saved("ws-there", "".join(f"row {i}\n" for i in range(5000)))
    _, other = _saved("ws-third", "x\n" * 1000)

    tools = ArtifactTools(here)
    page = tools.read_artifact(elsewhere, offset=4000, limit=1)
    assert "row 4000" in page
    assert "row 4000" in tools.grep_artifact(elsewhere, r"^row 4000$")
    assert tools.read_artifact(other, limit=1).splitlines()[1].endswith("x")


def test_list_sessions_shows_every_workspace_with_counts(toolswap_home: Path) -> None:
    _saved("ws-one", "one\n" * 1000)
    ext, _ = _saved("ws-two", "two\n" * 1000)
    ext.externalize("more\n" * 1000, "bash")
    (toolswap_home / "projects" / "not-a-session-dir").mkdir()
    os.symlink(ext.session_dir, toolswap_home / "projects" / "ws-two" / "alias")

    entries = list_sessions()

    assert [(e.workspace, e.session_id, e.artifacts) for e in entries] == [
        ("ws-one", "default", 1),
        ("ws-two", "default", 2),
    ]
    assert entries[1].byte_size == len("two\n" * 1000) + len("more\n" * 1000)
    assert entries[1].to_dict()["path"] == str(ext.session_dir.absolute())
