"""The collector pause around bulk loads (``toolswap._gc``): the collector runs again
afterwards, however the load ends, and a caller's own ``gc.disable()`` is respected."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from toolswap._gc import collector_paused


def test_the_collector_is_paused_inside_and_running_again_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_runs_again_after_a_load_that_fails() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("torn record")
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_journal_recovery_leaves_the_collector_running(tmp_path: Path) -> None:
    from toolswap import ArtifactRetentionClaim, ArtifactRetentionJournal, ToolResultExternalizer

    ext = ToolResultExternalizer(tmp_path / "s")
    ref = ext.externalize("line\n" * 20_000, "bench").artifact.for_memory()
    journal = ArtifactRetentionJournal(ext.session, owner=None)
    journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(ref), lambda: None, transaction_id="t-1"
    )
    view = ArtifactRetentionJournal(ext.session, owner=None).recover()
    assert view.journal_seq > 0
    assert gc.isenabled()
