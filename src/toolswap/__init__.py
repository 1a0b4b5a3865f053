"""toolswap: virtual memory for LLM context.

Large tool output goes to an immutable, digest-verified artifact; the model gets a small
pointer and pages the rest in on demand.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .artifact import (
    ArtifactMemoryReference,
    ArtifactReference,
    ArtifactSource,
    ExternalizedToolResult,
    InlineToolResult,
    ParsedSourceId,
    parse_artifact_source_id,
)
from .cleanup import (
    ArtifactCleanupPlan,
    ArtifactCleanupPolicy,
    ArtifactCleanupReport,
    ArtifactCleanupStatus,
    apply_cleanup,
    apply_cleanup_from_journal,
    plan_cleanup,
    plan_cleanup_from_journal,
)
from .crashpoints import CRASH_POINTS
from .errors import (
    ArtifactAccessError,
    ArtifactCollectedError,
    ArtifactFenceStaleError,
    ArtifactIntegrityError,
    ArtifactLeaseJournalError,
    ArtifactNotFoundError,
    ArtifactPatternError,
    ArtifactPublicationConflictError,
    ArtifactPublicationRejected,
    ArtifactReadError,
    ArtifactReferenceOwnerError,
    ArtifactReferenceTombstonedError,
    ArtifactRetentionError,
    ArtifactSearchTimeoutError,
    ArtifactStoreError,
    ArtifactWriteError,
    ChainLogError,
    CleanupError,
    ConfigurationError,
    SourceIdError,
    ToolswapError,
)
from .externalizer import Output, ToolResultExternalizer
from .grep import GrepMatch, GrepResult
from .pointer import POINTER_TEMPLATE
from .reader import ArtifactReader, ByteRange, LinePage
from .retention import (
    ArtifactClaimView,
    ArtifactLeasePhase,
    ArtifactLeaseTransaction,
    ArtifactObservationState,
    ArtifactReconcileReport,
    ArtifactReconcileStatus,
    ArtifactReferenceFence,
    ArtifactReferenceObservation,
    ArtifactReferenceOwner,
    ArtifactRetentionClaim,
    ArtifactRetentionJournal,
    JournalHead,
    SqliteMemoryOwner,
    StoredMemoryReference,
)
from .session import Session
from .settings import ExternalizerSettings, ToolThreshold
from .wrap import externalize_tool

try:
    __version__ = version("toolswap")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "CRASH_POINTS",
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
    "ArtifactObservationState",
    "ArtifactPatternError",
    "ArtifactPublicationConflictError",
    "ArtifactPublicationRejected",
    "ArtifactReadError",
    "ArtifactReader",
    "ArtifactReconcileReport",
    "ArtifactReconcileStatus",
    "ArtifactReference",
    "ArtifactReferenceFence",
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
    "ConfigurationError",
    "ExternalizedToolResult",
    "ExternalizerSettings",
    "GrepMatch",
    "GrepResult",
    "InlineToolResult",
    "JournalHead",
    "LinePage",
    "Output",
    "ParsedSourceId",
    "Session",
    "SourceIdError",
    "SqliteMemoryOwner",
    "StoredMemoryReference",
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
