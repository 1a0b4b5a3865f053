"""verify_session: every artifact against its manifest record, typed findings, read-only."""

from __future__ import annotations

import os
from pathlib import Path

from toolswap import ToolResultExternalizer
from toolswap.capture import TMP_PREFIX
from toolswap.records import CollectedRecord
from toolswap.verify import FindingKind, verify_session


def _kinds(ext: ToolResultExternalizer) -> dict[str, FindingKind]:
    return {f.name: f.kind for f in verify_session(ext.session)}


def test_a_healthy_session_has_only_ok_findings(externalizer: ToolResultExternalizer) -> None:
    one = externalizer.externalize("one\n" * 1000, "t").artifact
    externalizer.externalize("two\n" * 1000, "t")

    findings = verify_session(externalizer.session)

    assert [(f.kind, f.name) for f in findings] == [
        (FindingKind.OK, "tool_result_001.txt"),
        (FindingKind.OK, "tool_result_002.txt"),
    ]
    assert findings[0].source_id == one.source_id
    assert not any(f.kind.is_problem for f in findings)


def test_a_symlink_or_fifo_under_an_artifact_name_is_not_regular(
    externalizer: ToolResultExternalizer, tmp_path: Path
) -> None:
    one = externalizer.externalize("one\n", "t").artifact
    two = externalizer.externalize("two\n", "t").artifact
    copy = tmp_path / "copy"
    copy.write_bytes(one.path.read_bytes())
    one.path.unlink()
    one.path.symlink_to(copy)
    two.path.unlink()
    os.mkfifo(two.path, 0o600)

    findings = {f.name: f for f in verify_session(externalizer.session)}

    assert findings["tool_result_001.txt"].kind is FindingKind.NOT_REGULAR
    assert findings["tool_result_001.txt"].detail == "symlink"
    assert findings["tool_result_002.txt"].kind is FindingKind.NOT_REGULAR
    assert all(f.kind.is_problem for f in findings.values())


def test_a_temporary_file_is_reported_but_is_not_a_problem(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize("one\n", "t")
    (externalizer.tool_results_dir / f"{TMP_PREFIX}123-abc.partial").write_bytes(b"partial")

    findings = verify_session(externalizer.session)

    temporary = [f for f in findings if f.kind is FindingKind.TEMPORARY]
    assert len(temporary) == 1
    assert not temporary[0].kind.is_problem
    assert temporary[0].to_dict()["problem"] is False


def test_a_collected_artifact_is_not_reported_missing(
    externalizer: ToolResultExternalizer,
) -> None:
    one = externalizer.externalize("one\n", "t").artifact
    with externalizer.session.lock():
        one.path.unlink()
        externalizer.manifest.append(
            CollectedRecord(
                filename=one.filename,
                source_id=one.source_id,
                collected_at="2026-01-03T00:00:00+00:00",
                reason="orphan TTL expired",
            )
        )

    assert verify_session(externalizer.session) == []


def test_verify_reports_progress_and_changes_nothing(externalizer: ToolResultExternalizer) -> None:
    for i in range(3):
        externalizer.externalize(f"output {i}\n", "t")
    (externalizer.tool_results_dir / "stray.txt").write_text("x", encoding="utf-8")
    before = sorted(os.listdir(externalizer.tool_results_dir))
    manifest = externalizer.session.manifest_path.read_bytes()
    seen: list[tuple[int, int]] = []

    kinds = [
        f.kind
        for f in verify_session(externalizer.session, progress=lambda d, t: seen.append((d, t)))
    ]

    assert kinds.count(FindingKind.UNKNOWN_FILE) == 1
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert sorted(os.listdir(externalizer.tool_results_dir)) == before
    assert externalizer.session.manifest_path.read_bytes() == manifest


def test_a_tampered_manifest_is_one_manifest_corrupt_finding(
    externalizer: ToolResultExternalizer,
) -> None:
    externalizer.externalize("one\n", "t")
    path = externalizer.session.manifest_path
    path.write_bytes(path.read_bytes().replace(b'"tool":"t"', b'"tool":"x"'))

    (finding,) = verify_session(externalizer.session)

    assert finding.kind is FindingKind.MANIFEST_CORRUPT
    assert "does not match its hash" in finding.detail
