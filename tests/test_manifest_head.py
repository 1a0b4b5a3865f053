"""A name is never handed out twice, whatever file is lost.

``manifest.head`` keeps the highest name ever handed out and the furthest manifest head
seen. Losing the manifest (deleted, or rolled back to an older copy) after cleanup
collected an artifact must not make the next capture reuse its name; reading the old ID
says its record may be lost; verify reports it; cleanup refuses to trust the manifest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from toolswap import (
    ArtifactNotFoundError,
    ArtifactReference,
    ArtifactRetentionClaim,
    ArtifactWriteError,
    ChainLogError,
    CleanupError,
    ToolResultExternalizer,
    plan_cleanup,
)
from toolswap.cleanup import ArtifactCleanupPolicy, apply_cleanup
from toolswap.verify import FindingKind, verify_session

GC_ALL = ArtifactCleanupPolicy(orphan_ttl_seconds=0, dry_run=False)


def _three_then_collect_the_last(session_dir: Path) -> tuple[ToolResultExternalizer, str]:
    ext = ToolResultExternalizer(session_dir)
    arts = [ext.externalize(f"output {i}\n" * 100, "bash").artifact for i in range(3)]
    keep = _claims(arts[:2])
    plan = plan_cleanup(ext.session, keep, policy=GC_ALL)
    report = apply_cleanup(ext.session, plan, keep)
    assert [e.name for e in report.entries if e.status.value == "deleted"] == [arts[2].filename]
    return ext, arts[2].source_id


def _claims(arts: list[ArtifactReference]) -> list[ArtifactRetentionClaim]:
    return [ArtifactRetentionClaim.from_memory_reference(a.for_memory()) for a in arts]


@pytest.mark.parametrize("loss", ["deleted", "rolled back"])
def test_a_lost_manifest_never_makes_a_collected_name_come_back(tmp_path: Path, loss: str) -> None:
    session_dir = tmp_path / "s1"
    _, collected_id = _three_then_collect_the_last(session_dir)
    manifest = session_dir / "manifest.jsonl"
    if loss == "deleted":
        manifest.unlink()
    else:
        manifest.write_bytes(b"".join(manifest.read_bytes().splitlines(True)[:2]))
    before = sorted(p.name for p in (session_dir / "tool-results").iterdir())

    fresh = ToolResultExternalizer(session_dir)
    # A capture on a lost manifest would fork its chain: refused, the output still returned.
    with pytest.raises(ArtifactWriteError, match="restore it from a backup") as refused:
        fresh.externalize("after the loss\n" * 5000, "bash")

    assert "after the loss" in refused.value.preview
    assert sorted(p.name for p in (session_dir / "tool-results").iterdir()) == before
    with pytest.raises(ArtifactNotFoundError, match="its record may be lost"):
        fresh.read_artifact(collected_id)
    kinds = {f.kind for f in verify_session(fresh.session)}
    assert FindingKind.MANIFEST_BEHIND in kinds
    with pytest.raises(CleanupError, match="restore it from a backup"):
        plan_cleanup(fresh.session, [], policy=GC_ALL)


def test_a_name_the_lease_journal_holds_is_never_handed_out_again_when_manifest_and_head_are_lost(
    tmp_path: Path,
) -> None:
    from toolswap.retention import SqliteMemoryOwner, open_retention

    session_dir = tmp_path / "s1"
    ext = ToolResultExternalizer(session_dir)
    art = ext.externalize("leased output\n" * 5000, "bash").artifact
    retention = open_retention(ext.session, create=True)
    owner = retention.owner
    assert isinstance(owner, SqliteMemoryOwner)
    retention.journal.publish_reference(
        ArtifactRetentionClaim.from_memory_reference(art.for_memory()),
        lambda: owner.publish("tx-1", art.for_memory()),
        transaction_id="tx-1",
    )
    (session_dir / "manifest.jsonl").unlink()
    (session_dir / "manifest.head").unlink()
    art.path.unlink()

    fresh = ToolResultExternalizer(session_dir)
    with pytest.raises(ArtifactWriteError, match=r"tool_result_001\.txt"):
        fresh.externalize("another output\n" * 5000, "bash")

    assert not art.path.exists()  # the leased name was not handed out again
    behind = [f for f in verify_session(fresh.session) if f.kind is FindingKind.MANIFEST_BEHIND]
    assert behind and "retention-leases.jsonl" in behind[0].detail


def test_a_corrupt_head_file_refuses_every_capture_and_writes_nothing(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    ext = ToolResultExternalizer(session_dir)
    ext.externalize("first\n", "bash")
    (session_dir / "manifest.head").write_text("not json", encoding="utf-8")

    with pytest.raises(ChainLogError, match=r"manifest\.head is corrupt"):
        ToolResultExternalizer(session_dir).check_ready()
    with pytest.raises(ArtifactWriteError, match=r"manifest\.head is corrupt"):
        ToolResultExternalizer(session_dir).externalize(iter([b"y" * 100]), "bash")
    assert sorted(p.name for p in (session_dir / "tool-results").iterdir()) == [
        "tool_result_001.txt"
    ]


def test_a_missing_head_file_is_rebuilt_from_an_intact_manifest(tmp_path: Path) -> None:
    session_dir = tmp_path / "s1"
    ext = ToolResultExternalizer(session_dir)
    ext.externalize("first\n", "bash")
    (session_dir / "manifest.head").unlink()  # a session from before the head file

    nxt = ToolResultExternalizer(session_dir).externalize("second\n", "bash").artifact

    assert nxt.filename == "tool_result_002.txt"
    assert (session_dir / "manifest.head").stat().st_mode & 0o777 == 0o600
    assert verify_session(ext.session)[0].kind is FindingKind.OK


def test_a_corrupt_manifest_found_after_output_was_read_still_gives_a_preview(
    tmp_path: Path,
) -> None:
    session_dir = tmp_path / "s1"
    ToolResultExternalizer(session_dir).externalize("first\n", "bash")
    with open(session_dir / "manifest.jsonl", "ab") as f:
        f.write(b"junk\n")
    lines = iter([b"line %d\n" % i for i in range(100_000)])

    with pytest.raises(ArtifactWriteError) as caught:
        ToolResultExternalizer(session_dir).process(lines, "bash", exit_code=2)

    assert "line 0\n" in caught.value.preview and "line 99999" in caught.value.preview
    assert caught.value.exit_code == 2
    assert next(lines, None) is None  # the whole output was taken, none of it written
    assert sorted(p.name for p in (session_dir / "tool-results").iterdir()) == [
        "tool_result_001.txt"
    ]
