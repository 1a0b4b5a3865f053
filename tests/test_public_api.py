"""The public API is a decision: this list changes only on purpose."""

from __future__ import annotations

import toolswap

EXPECTED = [
    "POINTER_TEMPLATE",
    "ArtifactAccessError",
    "ArtifactClaimView",
    "ArtifactCleanupPlan",
    "ArtifactCleanupPolicy",
    "ArtifactCleanupReport",
    "ArtifactCleanupStatus",
    "ArtifactCollectedError",
    "ArtifactFenceStaleError",
    "ArtifactIntegrityError",
    "ArtifactLeaseJournalError",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactMemoryReference",
    "ArtifactNotFoundError",
    "ArtifactPatternError",
    "ArtifactPublicationConflictError",
    "ArtifactPublicationRejected",
    "ArtifactQueryError",
    "ArtifactQueryTimeoutError",
    "ArtifactReadError",
    "ArtifactReader",
    "ArtifactReconcileReport",
    "ArtifactReconcileStatus",
    "ArtifactReference",
    "ArtifactReferenceObservation",
    "ArtifactReferenceOwner",
    "ArtifactReferenceOwnerError",
    "ArtifactReferenceTombstonedError",
    "ArtifactRetentionClaim",
    "ArtifactRetentionError",
    "ArtifactRetentionJournal",
    "ArtifactSearchTimeoutError",
    "ArtifactSource",
    "ArtifactStoreError",
    "ArtifactWriteError",
    "ByteRange",
    "ChainLogError",
    "CleanupError",
    "ClockError",
    "ConfigurationError",
    "ExternalizedToolResult",
    "ExternalizerSettings",
    "GrepMatch",
    "GrepOptions",
    "GrepResult",
    "InlineToolResult",
    "InvalidArgumentError",
    "JournalHead",
    "LinePage",
    "CallFacts",
    "Output",
    "ParsedSourceId",
    "Session",
    "SourceIdError",
    "SqliteMemoryOwner",
    "ToolResultExternalizer",
    "ToolThreshold",
    "ToolswapError",
    "__version__",
    "apply_cleanup",
    "apply_cleanup_from_journal",
    "externalize_tool",
    "parse_artifact_source_id",
    "plan_cleanup",
    "plan_cleanup_from_journal",
]


def test_public_names_are_exactly_the_decided_list() -> None:
    assert sorted(toolswap.__all__) == sorted(EXPECTED)
    assert len(set(toolswap.__all__)) == len(toolswap.__all__)


def test_the_tiers_keep_implementer_names_and_test_hooks_out_of_the_user_api() -> None:
    import toolswap.retention
    import toolswap.testing

    for name in ("ArtifactReferenceFence", "ArtifactObservationState", "StoredMemoryReference"):
        assert name not in toolswap.__all__
        assert name in toolswap.retention.__all__
    assert "CRASH_POINTS" not in toolswap.__all__
    assert toolswap.testing.CRASH_POINTS


def test_every_public_name_resolves() -> None:
    for name in toolswap.__all__:
        assert getattr(toolswap, name) is not None


def test_the_spec_cleanup_statuses_are_all_eleven() -> None:
    assert {s.value for s in toolswap.ArtifactCleanupStatus} == {
        "retained_referenced",
        "retained_recent",
        "retained_limit",
        "retained_unknown",
        "denied",
        "retained_corrupt",
        "missing_referenced",
        "planned_delete",
        "deleted",
        "already_missing",
        "race_detected",
    }


def test_every_error_derives_from_the_base_and_a_builtin() -> None:
    errors = [
        getattr(toolswap, n)
        for n in toolswap.__all__
        if isinstance(getattr(toolswap, n), type)
        and issubclass(getattr(toolswap, n), BaseException)
    ]
    assert errors
    for error in errors:
        if error is toolswap.ToolswapError:
            continue
        assert issubclass(error, toolswap.ToolswapError), error
        assert any(
            base in error.__mro__ for base in (ValueError, RuntimeError, LookupError, OSError)
        ), error
