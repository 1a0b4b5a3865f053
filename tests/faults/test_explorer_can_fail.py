"""The explorer can fail: a capture broken on purpose (one fsync removed, one order
swapped) makes it report a violation, so its silence about the real code means something.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from toolswap import durable
from toolswap.artifact import artifact_filename
from toolswap.capture import StreamCapture
from toolswap.externalizer import ToolResultExternalizer
from toolswap.records import ArtifactRecord

from .explorer import Explorer
from .scenarios import operations


def _explore_crashes(scratch: Path, name: str) -> list[str]:
    """Every problem the explorer reports for the crashes (no errors) of one operation."""
    explorer = Explorer(scratch, faults=())
    explorer.explore([op for op in operations() if op.name == name])
    assert explorer.result.states > 0
    return [problem for v in explorer.result.violations for problem in v.problems]


def test_the_explorer_reports_a_capture_whose_link_is_not_fsynced_into_its_directory(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def link_as_without_directory_fsync(self: StreamCapture, final_name: str) -> bool:
        if not durable.link_new(self.tmp_name, final_name, dir_fd=self.dir_fd):
            return False
        self._unlink_tmp()
        return True  # the directory fsync that makes the new name durable is gone

    monkeypatch.setattr(StreamCapture, "link_as", link_as_without_directory_fsync)

    problems = _explore_crashes(scratch, "capture str")

    assert any("is recorded but its file is missing" in p for p in problems), problems
    assert any("was handed out but" in p or "is recorded but" in p for p in problems)


def test_the_explorer_reports_a_capture_recorded_before_its_file_is_linked(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def record_then_link(
        self: ToolResultExternalizer,
        capture: StreamCapture,
        record_for: object,
        **_: object,
    ) -> ArtifactRecord:
        self.manifest.sync()
        number = self.manifest.high_water() + 1
        while os.path.lexists(self.session.tool_results_dir / artifact_filename(number)):
            number += 1
        record = record_for(artifact_filename(number))  # type: ignore[operator]
        self.manifest.append(record)  # the record first...
        if not capture.link_as(record.filename):  # ...the file it names second
            raise AssertionError("the name was taken")
        return record  # type: ignore[no-any-return]

    monkeypatch.setattr(ToolResultExternalizer, "_publish", record_then_link)

    problems = _explore_crashes(scratch, "capture str")

    assert any("is recorded but its file is missing" in p for p in problems), problems
