"""Claims: validated on construction, path-free, and folded into the claim view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from toolswap import (
    ArtifactClaimView,
    ArtifactMemoryReference,
    ArtifactRetentionClaim,
    ArtifactRetentionError,
    SourceIdError,
)

from .conftest import Env

SHA = "ab" * 32
SID = f"artifact:s1:tool_result_001.txt:{SHA[:12]}"


def test_claim_from_memory_reference_accepts_the_spec_snippet_with_an_iso_deadline(
    env: Env,
) -> None:
    ref = env.reference()
    claim = ArtifactRetentionClaim.from_memory_reference(
        ref, reference_count=2, retain_until="2026-09-01T00:00:00+00:00"
    )
    assert claim.source_id == ref.source.source_id
    assert claim.content_sha256 == ref.content_sha256
    assert claim.reference_count == 2
    assert claim.retain_until == datetime(2026, 9, 1, tzinfo=UTC)
    assert claim.session == "s1"


def test_claim_has_no_path_field_and_its_dict_names_no_path(env: Env) -> None:
    claim = env.claim()
    assert not any("path" in name for name in ArtifactRetentionClaim.__dataclass_fields__)
    assert str(env.session_dir) not in str(claim.to_dict())


def test_claim_deadline_in_another_timezone_is_stored_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    claim = ArtifactRetentionClaim(SID, SHA, retain_until=datetime(2026, 1, 1, 2, tzinfo=plus_two))
    assert claim.retain_until == datetime(2026, 1, 1, tzinfo=UTC)
    assert claim.retain_until is not None and claim.retain_until.tzinfo is UTC


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"content_sha256": SHA[:40]}, "64 lowercase hex"),
        ({"content_sha256": SHA.upper()}, "64 lowercase hex"),
        ({"content_sha256": "cd" * 32}, "does not match"),
        ({"reference_count": 0}, "positive integer"),
        ({"reference_count": -3}, "positive integer"),
        ({"reference_count": True}, "positive integer"),
        ({"reference_count": 1.0}, "positive integer"),
        ({"reference_count": 1 << 40}, "at most"),
        ({"retain_until": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"retain_until": "2026-09-01T00:00:00+00:00"}, "from_memory_reference"),
    ],
)
def test_invalid_claim_is_refused_on_construction(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"source_id": SID, "content_sha256": SHA, **kwargs}
    with pytest.raises(ArtifactRetentionError, match=message):
        ArtifactRetentionClaim(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "source_id",
    [
        "artifact:s1:../../etc/passwd:" + SHA[:12],
        "artifact:s1:tool_result_001.txt/..:" + SHA[:12],
        "artifact:..:tool_result_001.txt:" + SHA[:12],
        "/tmp/tool_result_001.txt",
        "artifact:s1:tool_result_1.txt:" + SHA[:12],
    ],
)
def test_claim_with_a_path_shaped_source_id_is_refused(source_id: str) -> None:
    with pytest.raises(SourceIdError):
        ArtifactRetentionClaim(source_id, SHA)


@pytest.mark.parametrize("deadline", ["2026-09-01T00:00:00", "tomorrow", "2026-13-01T00:00:00Z"])
def test_naive_or_malformed_iso_deadline_is_refused(env: Env, deadline: str) -> None:
    with pytest.raises(ArtifactRetentionError, match="retain_until"):
        ArtifactRetentionClaim.from_memory_reference(env.reference(), retain_until=deadline)


def test_memory_reference_whose_digest_disagrees_with_its_id_never_becomes_a_claim(
    env: Env,
) -> None:
    ref = env.reference()
    forged = ArtifactMemoryReference(
        summary=ref.summary,
        artifact_path=ref.artifact_path,
        content_sha256="0" * 64,
        source_tool=ref.source_tool,
        source=ref.source,
    )
    with pytest.raises(ArtifactRetentionError, match="does not match"):
        ArtifactRetentionClaim.from_memory_reference(forged)


def test_claim_round_trips_through_its_dict_and_refuses_extra_fields() -> None:
    claim = ArtifactRetentionClaim(SID, SHA, 3, datetime(2026, 9, 1, tzinfo=UTC))
    assert ArtifactRetentionClaim.from_dict(claim.to_dict()) == claim
    with pytest.raises(ArtifactRetentionError, match="four fields"):
        ArtifactRetentionClaim.from_dict({**claim.to_dict(), "artifact_path": "/etc/passwd"})


def test_claim_is_active_until_its_deadline_and_forever_without_one() -> None:
    deadline = datetime(2026, 9, 1, tzinfo=UTC)
    claim = ArtifactRetentionClaim(SID, SHA, retain_until=deadline)
    assert claim.is_active(deadline - timedelta(seconds=1))
    assert not claim.is_active(deadline)
    assert ArtifactRetentionClaim(SID, SHA).is_active(datetime(9999, 1, 1, tzinfo=UTC))


def test_claim_view_is_read_only_and_protects_exactly_its_claims() -> None:
    view = ArtifactClaimView(claims={SID: ArtifactRetentionClaim(SID, SHA)})
    assert view.is_protected(SID)
    assert not view.is_protected(SID.replace("001", "002"))
    with pytest.raises(TypeError):
        view.claims[SID.replace("001", "002")] = ArtifactRetentionClaim(SID, SHA)  # type: ignore[index]
