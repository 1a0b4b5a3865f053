"""``toolswap verify``: compare every artifact on disk with its manifest record.

Like diskcache's ``Cache.check``: read-only, typed findings, nothing repaired. Each file is
opened as the reader opens it (no symlink, a regular file of this user), so verify never
calls a file OK that a read would refuse. What the directory cannot show (a session kept in
a shared store: the objects there) the session's backend audits.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import durable
from ._verify_model import FindingKind, VerifyFinding
from .artifact import parse_artifact_filename
from .capture import TMP_PREFIX
from .durable import open_dir_nofollow
from .errors import ArtifactAccessError, ArtifactIntegrityError, ArtifactStoreError, ChainLogError
from .manifest import Manifest
from .records import ArtifactRecord
from .session import Session

__all__ = ["FindingKind", "VerifyFinding", "verify_session"]


def verify_session(
    session: Session, *, progress: Callable[[int, int], None] | None = None
) -> list[VerifyFinding]:
    """Check every artifact of ``session`` against its manifest record (read-only)."""
    manifest = Manifest.of(session)
    backend = session.backend
    findings: list[VerifyFinding] = []
    unreachable = False
    try:
        try:
            manifest.sync()
        except ChainLogError as exc:
            if not isinstance(exc.__cause__, ArtifactStoreError):
                raise
            # The store cannot be reached: say so, and check what this host's replica holds.
            unreachable = True
            findings.append(
                VerifyFinding(FindingKind.STORE_UNREACHABLE, backend.location, str(exc))
            )
        records = {r.filename: r for r in manifest.records()}
        behind = manifest.behind_head()
    except ChainLogError as exc:
        return [VerifyFinding(FindingKind.MANIFEST_CORRUPT, session.manifest_path.name, str(exc))]
    if behind is not None:
        findings.append(
            VerifyFinding(FindingKind.MANIFEST_BEHIND, session.manifest_path.name, behind)
        )
    reported: set[str] = set()
    if not unreachable:
        found, reported = backend.audit(
            session.tool_results_dir,
            records,
            lambda name: manifest.collected(name) is not None,
            lambda record: _fetched_check(record, backend.location),
        )
        findings.extend(found)
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    try:
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError as exc:
            raise ArtifactAccessError(
                f"cannot list {session.tool_results_dir}: {exc.strerror}"
            ) from exc
        total = len(set(names) | records.keys())
        done = 0
        for name in names:
            done += 1
            if progress:
                progress(done, total)
            record = records.pop(name, None)
            if name in reported:
                continue  # decided by the backend's audit
            findings.append(_check_file(dir_fd, name, record, manifest))
        for name, record in sorted(records.items()):
            done += 1
            if progress:
                progress(done, total)
            if name in reported:
                continue
            findings.append(
                VerifyFinding(
                    FindingKind.MISSING, name, "recorded but not on disk", record.source_id
                )
            )
    finally:
        durable.close_unwritten(dir_fd)
    return findings


class _Untrusted(Exception):
    pass


def _check_file(
    dir_fd: int, name: str, record: ArtifactRecord | None, manifest: Manifest
) -> VerifyFinding:
    """The finding for one file of ``tool-results/``: opened as the reader opens it."""
    if parse_artifact_filename(name) is None:
        kind = FindingKind.TEMPORARY if name.startswith(TMP_PREFIX) else FindingKind.UNKNOWN_FILE
        return VerifyFinding(kind, name)
    if record is None and manifest.collected(name) is not None:
        return VerifyFinding(FindingKind.COLLECTING, name, "collected; unlink interrupted")
    if record is None:
        return VerifyFinding(FindingKind.UNRECORDED, name, "no manifest record; not readable")
    sid = record.source_id
    try:
        fd, _ = durable.open_trusted(name, dir_fd=dir_fd, what=name, error=_Untrusted)
    except FileNotFoundError:
        return VerifyFinding(FindingKind.MISSING, name, "vanished while verifying", sid)
    except _Untrusted as exc:
        detail = str(exc)
        if "symlink" in detail:
            detail = "symlink"
        elif "regular file" in detail:
            detail = "not a regular file owned by this user"
        return VerifyFinding(FindingKind.NOT_REGULAR, name, detail, sid)
    try:
        digest, size = durable.hash_fd(fd)
    except OSError as exc:
        return VerifyFinding(FindingKind.UNREADABLE, name, f"cannot read: {exc.strerror}", sid)
    finally:
        durable.close_unwritten(fd)
    if size != record.byte_size:
        return VerifyFinding(
            FindingKind.SIZE_MISMATCH,
            name,
            f"{size} bytes on disk, {record.byte_size} recorded",
            sid,
        )
    if digest != record.sha256:
        return VerifyFinding(FindingKind.DIGEST_MISMATCH, name, "SHA-256 differs", sid)
    return VerifyFinding(FindingKind.OK, name, "", sid)


def _fetched_check(record: ArtifactRecord, location: str) -> Callable[[int], None]:
    """Refuses a fetched copy unless its bytes are the recorded output."""

    def check(fd: int) -> None:
        if durable.hash_fd(fd) != (record.sha256, record.byte_size):
            raise ArtifactIntegrityError(
                f"{record.filename}: the copy in {location} is not the recorded output"
            )

    return check
