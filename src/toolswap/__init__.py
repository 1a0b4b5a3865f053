"""toolswap: virtual memory for LLM context.

Large tool output goes to an immutable, digest-verified artifact; the model gets a small
pointer and pages the rest in on demand.

The public API comes in tiers:

- ``toolswap`` (this module): what a harness uses: the externalizer, references, reads,
  settings, retention claims and the journal, cleanup, and every error.
- ``toolswap.retention``: what a memory owner's implementer needs besides (fences,
  observation states, the stored reference, the journal stores).
- ``toolswap.testing``: hooks for tests (the named crash points, the durable-I/O seam).

Names are imported on first use (PEP 562), so ``import toolswap`` costs next to nothing and
a capture never loads retention, cleanup or the package metadata.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors as _errors
from .errors import *  # noqa: F403 (every error is public; errors.__all__ names them)

if TYPE_CHECKING:
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
    from .externalizer import CallFacts, Output, ToolResultExternalizer
    from .grep import GrepMatch, GrepOptions, GrepResult
    from .pointer import POINTER_TEMPLATE
    from .reader import ArtifactReader, ByteRange, LinePage
    from .retention import (
        ArtifactClaimView,
        ArtifactLeasePhase,
        ArtifactLeaseTransaction,
        ArtifactReconcileReport,
        ArtifactReconcileStatus,
        ArtifactReferenceObservation,
        ArtifactReferenceOwner,
        ArtifactRetentionClaim,
        ArtifactRetentionJournal,
        JournalHead,
        SqliteMemoryOwner,
    )
    from .session import Session
    from .settings import ExternalizerSettings, ToolThreshold
    from .wrap import externalize_tool

    __version__: str

_LAZY: dict[str, str] = {
    "ArtifactMemoryReference": ".artifact",
    "ArtifactReference": ".artifact",
    "ArtifactSource": ".artifact",
    "ExternalizedToolResult": ".artifact",
    "InlineToolResult": ".artifact",
    "ParsedSourceId": ".artifact",
    "parse_artifact_source_id": ".artifact",
    "ArtifactCleanupPlan": ".cleanup",
    "ArtifactCleanupPolicy": ".cleanup",
    "ArtifactCleanupReport": ".cleanup",
    "ArtifactCleanupStatus": ".cleanup",
    "apply_cleanup": ".cleanup",
    "apply_cleanup_from_journal": ".cleanup",
    "plan_cleanup": ".cleanup",
    "plan_cleanup_from_journal": ".cleanup",
    "CallFacts": ".externalizer",
    "Output": ".externalizer",
    "ToolResultExternalizer": ".externalizer",
    "GrepMatch": ".grep",
    "GrepOptions": ".grep",
    "GrepResult": ".grep",
    "POINTER_TEMPLATE": ".pointer",
    "ArtifactReader": ".reader",
    "ByteRange": ".reader",
    "LinePage": ".reader",
    "ArtifactClaimView": ".retention",
    "ArtifactLeasePhase": ".retention",
    "ArtifactLeaseTransaction": ".retention",
    "ArtifactReconcileReport": ".retention",
    "ArtifactReconcileStatus": ".retention",
    "ArtifactReferenceObservation": ".retention",
    "ArtifactReferenceOwner": ".retention",
    "ArtifactRetentionClaim": ".retention",
    "ArtifactRetentionJournal": ".retention",
    "JournalHead": ".retention",
    "SqliteMemoryOwner": ".retention",
    "Session": ".session",
    "ExternalizerSettings": ".settings",
    "ToolThreshold": ".settings",
    "externalize_tool": ".wrap",
}
"""Public name -> the module (relative to this package) that defines it."""

__all__ = [
    "POINTER_TEMPLATE",
    "ArtifactClaimView",
    "ArtifactCleanupPlan",
    "ArtifactCleanupPolicy",
    "ArtifactCleanupReport",
    "ArtifactCleanupStatus",
    "ArtifactLeasePhase",
    "ArtifactLeaseTransaction",
    "ArtifactMemoryReference",
    "ArtifactReader",
    "ArtifactReconcileReport",
    "ArtifactReconcileStatus",
    "ArtifactReference",
    "ArtifactReferenceObservation",
    "ArtifactReferenceOwner",
    "ArtifactRetentionClaim",
    "ArtifactRetentionJournal",
    "ArtifactSource",
    "ByteRange",
    "CallFacts",
    "ExternalizedToolResult",
    "ExternalizerSettings",
    "GrepMatch",
    "GrepOptions",
    "GrepResult",
    "InlineToolResult",
    "JournalHead",
    "LinePage",
    "Output",
    "ParsedSourceId",
    "Session",
    "SqliteMemoryOwner",
    "ToolResultExternalizer",
    "ToolThreshold",
    "__version__",
    "apply_cleanup",
    "apply_cleanup_from_journal",
    "externalize_tool",
    "parse_artifact_source_id",
    "plan_cleanup",
    "plan_cleanup_from_journal",
]
__all__ += _errors.__all__


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("toolswap")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            found = "0.0.0"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module 'toolswap' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
