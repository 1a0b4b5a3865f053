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
