"""The manifest's fold: a record the fold cannot accept is refused on every read."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolswap import ChainLogError, ToolResultExternalizer
from toolswap.chainlog import ChainLog
from toolswap.manifest import Manifest
from toolswap.session import Session


@pytest.mark.parametrize(
    "body",
    [
        {"event": "renamed", "filename": "tool_result_009.txt"},
        {"event": "artifact", "filename": "../etc/passwd"},
        {"event": "journal", "journal": 7},
    ],
)
def test_a_well_chained_record_the_fold_refuses_is_refused_on_every_read(
    tmp_path: Path, body: dict[str, object]
) -> None:
    ext = ToolResultExternalizer(tmp_path / "s1")
    source_id = ext.externalize("x\n" * 50000, "bash").artifact.source_id
    session = Session.at(tmp_path / "s1")
    ChainLog(session.manifest_path, "s1").append(body, crash_prefix="manifest")

    manifest = Manifest.of(session)
    for _ in range(3):  # the same object, again and again: never read past the bad record
        with pytest.raises(ChainLogError, match="manifest record 2"):
            manifest.records()
    with pytest.raises(ChainLogError):
        ext.read_artifact(source_id, 0, 1)


def test_a_record_the_manifest_would_refuse_to_read_is_never_written(tmp_path: Path) -> None:
    """Once on the chain, such a record (a collected record whose source ID names another
    file) stopped every later read of the session (a review of cleanup's saved plans)."""
    from toolswap.records import CollectedRecord

    ext = ToolResultExternalizer(tmp_path / "s")
    first = ext.externalize("a\n" * 9000, "t").artifact
    second = ext.externalize("b\n" * 9000, "t").artifact
    bad = CollectedRecord(
        filename=second.filename,
        source_id=first.source_id,
        collected_at="2026-01-01T00:00:00+00:00",
        reason="test",
    )
    size = ext.session.manifest_path.stat().st_size
    with pytest.raises(ChainLogError, match="cannot read"):
        ext.manifest.append(bad)
    assert ext.session.manifest_path.stat().st_size == size
    assert ToolResultExternalizer(tmp_path / "s").manifest.record_for(second.filename) is not None
