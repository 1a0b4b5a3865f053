"""``toolswap verify``: compare every artifact on disk with its manifest record.

Like diskcache's ``Cache.check``: read-only, typed findings, nothing repaired. A session
kept in a shared store is checked there too: every recorded artifact must be in the store
(this host's replica fetches, and so verifies, each one it lacks), and every object there
must have a record.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from ._fs import open_dir_nofollow
from .artifact import parse_artifact_filename
from .capture import TMP_PREFIX
from .errors import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactStoreError,
    ChainLogError,
)
from .manifest import Manifest
from .replica import fetch_into_replica
from .session import Session

__all__ = ["FindingKind", "VerifyFinding", "verify_session"]


class FindingKind(StrEnum):
    OK = "ok"
    """The file matches its manifest record (size and SHA-256)."""
    MISSING = "missing"
    """The manifest records the artifact but the file is gone (and no collection is recorded)."""
    DIGEST_MISMATCH = "digest_mismatch"
    """Same size as recorded, different SHA-256: the bytes changed; never trust this file."""
    SIZE_MISMATCH = "size_mismatch"
    """A different size than recorded: truncated or appended to."""
    NOT_REGULAR = "not_regular"
    """A symlink, directory or other non-regular file under an artifact name."""
    UNRECORDED = "unrecorded"
    """An artifact-named file with no manifest record (a crash between link and record)."""
    UNKNOWN_FILE = "unknown_file"
    """A file in tool-results/ whose name toolswap never writes."""
    TEMPORARY = "temporary"
    """A capture's temporary file (in progress, or left by a crash; cleanup collects it)."""
    COLLECTING = "collecting"
    """A file the manifest records as collected: a cleanup was interrupted before the
    unlink; the next cleanup removes it."""
    MANIFEST_CORRUPT = "manifest_corrupt"
    """The manifest itself fails verification; nothing else was checked."""
    MANIFEST_BEHIND = "manifest_behind"
    """The manifest lost records its head file saw (deleted, cut, or an older copy)."""
    STORE_UNREACHABLE = "store_unreachable"
    """The session's shared store could not be listed; only this host's replica was checked."""

    @property
    def is_problem(self) -> bool:
        return self not in (FindingKind.OK, FindingKind.TEMPORARY, FindingKind.COLLECTING)


@dataclass(frozen=True, slots=True)
class VerifyFinding:
    kind: FindingKind
    name: str
    """File name inside tool-results/ (or the manifest's name)."""
    detail: str = ""
    source_id: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "problem": self.kind.is_problem,
            "name": self.name,
            "detail": self.detail,
            "source_id": self.source_id,
        }


def _hash_fd(fd: int) -> tuple[str, int]:
    sha = hashlib.sha256()
    size = 0
    while True:
        block = os.read(fd, 1 << 20)
        if not block:
            return sha.hexdigest(), size
        sha.update(block)
        size += len(block)


def verify_session(
    session: Session, *, progress: Callable[[int, int], None] | None = None
) -> list[VerifyFinding]:
    """Check every artifact of ``session`` against its manifest record (read-only)."""
    manifest = Manifest.of(session)
    findings: list[VerifyFinding] = []
    unreachable = False
    try:
        try:
            manifest.sync()
        except ChainLogError as exc:
            if not isinstance(exc.__cause__, ArtifactStoreError):
                raise
            # The store cannot be reached: say so, and check what this host's replica holds.
            assert session.binding is not None
            unreachable = True
            findings.append(
                VerifyFinding(FindingKind.STORE_UNREACHABLE, session.binding.url, str(exc))
            )
        records = {r["filename"]: r for r in manifest.records()}
        behind = manifest.behind_head()
    except ChainLogError as exc:
        return [VerifyFinding(FindingKind.MANIFEST_CORRUPT, session.manifest_path.name, str(exc))]
    if behind is not None:
        findings.append(
            VerifyFinding(FindingKind.MANIFEST_BEHIND, session.manifest_path.name, behind)
        )
    reported: set[str] = set()
    if session.binding is not None and not unreachable:
        findings.extend(_check_store(session, manifest, records, reported))
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    try:
        names = sorted(os.listdir(dir_fd))
        total = len(set(names) | records.keys())
        done = 0
        for name in names:
            done += 1
            if progress:
                progress(done, total)
            record = records.pop(name, None)
            if name in reported:
                continue  # decided by the store check
            if parse_artifact_filename(name) is None:
                kind = (
                    FindingKind.TEMPORARY
                    if name.startswith(TMP_PREFIX)
                    else FindingKind.UNKNOWN_FILE
                )
                findings.append(VerifyFinding(kind, name))
                continue
            if record is None and manifest.collected(name) is not None:
                findings.append(
                    VerifyFinding(FindingKind.COLLECTING, name, "collected; unlink interrupted")
                )
                continue
            if record is None:
                findings.append(
                    VerifyFinding(FindingKind.UNRECORDED, name, "no manifest record; not readable")
                )
                continue
            sid = record["source_id"]
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    findings.append(VerifyFinding(FindingKind.NOT_REGULAR, name, "symlink", sid))
                else:
                    findings.append(
                        VerifyFinding(FindingKind.NOT_REGULAR, name, exc.strerror or "", sid)
                    )
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    findings.append(
                        VerifyFinding(FindingKind.NOT_REGULAR, name, "not a regular file", sid)
                    )
                    continue
                digest, size = _hash_fd(fd)
            finally:
                os.close(fd)
            if size != record["byte_size"]:
                findings.append(
                    VerifyFinding(
                        FindingKind.SIZE_MISMATCH,
                        name,
                        f"{size} bytes on disk, {record['byte_size']} recorded",
                        sid,
                    )
                )
            elif digest != record["sha256"]:
                findings.append(
                    VerifyFinding(FindingKind.DIGEST_MISMATCH, name, "SHA-256 differs", sid)
                )
            else:
                findings.append(VerifyFinding(FindingKind.OK, name, "", sid))
        for name, record in sorted(records.items()):
            done += 1
            if progress:
                progress(done, total)
            if name in reported:
                continue
            findings.append(
                VerifyFinding(
                    FindingKind.MISSING, name, "recorded but not on disk", record["source_id"]
                )
            )
    finally:
        os.close(dir_fd)
    return findings


def _check_store(
    session: Session,
    manifest: Manifest,
    records: dict[str, dict[str, object]],
    reported: set[str],
) -> list[VerifyFinding]:
    """Findings about the session's store; fetches every recorded artifact this host lacks
    (so the local pass verifies it) and adds the names it reported to ``reported``."""
    binding = session.binding
    assert binding is not None
    store = binding.store
    try:
        stored = {o.filename: o for o in store.artifacts(binding.workspace, binding.session)}
    except ArtifactStoreError as exc:
        return [VerifyFinding(FindingKind.STORE_UNREACHABLE, binding.url, str(exc))]
    findings = []
    for name, record in sorted(records.items()):
        sid = str(record["source_id"])
        obj = stored.get(name)
        if obj is None:
            findings.append(
                VerifyFinding(FindingKind.MISSING, name, f"recorded but not in {binding.url}", sid)
            )
            reported.add(name)
            continue
        if obj.size != record["byte_size"]:
            findings.append(
                VerifyFinding(
                    FindingKind.SIZE_MISMATCH,
                    name,
                    f"{obj.size} bytes in {binding.url}, {record['byte_size']} recorded",
                    sid,
                )
            )
            continue
        if os.path.lexists(session.tool_results_dir / name):
            # This host's copy is checked below; the store's by the digest stored with it
            # (fetched and hashed only on a host without a copy).
            try:
                head = store.stat_artifact(binding.workspace, binding.session, name)
            except ArtifactStoreError as exc:
                findings.append(VerifyFinding(FindingKind.STORE_UNREACHABLE, name, str(exc), sid))
                continue
            if head is None or head.sha256 != record["sha256"]:
                findings.append(
                    VerifyFinding(
                        FindingKind.DIGEST_MISMATCH,
                        name,
                        f"the copy in {binding.url} is stored with another SHA-256",
                        sid,
                    )
                )
            continue
        expected = (str(record["sha256"]), int(str(record["byte_size"])))

        def check(fd: int, name: str = name, expected: tuple[str, int] = expected) -> None:
            os.lseek(fd, 0, os.SEEK_SET)
            if _hash_fd(fd) != expected:
                raise ArtifactIntegrityError(
                    f"{name}: the copy in {binding.url} is not the recorded output"
                )

        try:
            if fetch_into_replica(session, name, expected[1], check) is not None:
                # Hashed on the way in: the local pass need not read it again.
                findings.append(VerifyFinding(FindingKind.OK, name, "", sid))
                reported.add(name)
        except ArtifactIntegrityError as exc:
            findings.append(VerifyFinding(FindingKind.DIGEST_MISMATCH, name, str(exc), sid))
            reported.add(name)
        except (ArtifactNotFoundError, ArtifactStoreError) as exc:
            findings.append(VerifyFinding(FindingKind.MISSING, name, str(exc), sid))
            reported.add(name)
    for name in sorted(stored.keys() - records.keys()):
        if manifest.collected(name) is not None:
            findings.append(
                VerifyFinding(FindingKind.COLLECTING, name, f"collected; still in {binding.url}")
            )
        else:
            findings.append(
                VerifyFinding(
                    FindingKind.UNRECORDED, name, f"in {binding.url} without a manifest record"
                )
            )
    return findings
