"""The replica backend: the session lives in a shared store; this directory is a replica.

The store is the authority (:mod:`toolswap.backends.store`): a name is taken when the store accepts
an artifact under it (only if it is free there), a manifest record exists once the store
holds record ``seq`` (written only if that number is free), and deletes name the exact
version they verified. This directory holds the store's records byte for byte and the
artifacts this host wrote or read. Writing, the store gets the bytes first; reading, an
artifact missing here is fetched into a temporary name, checked against the manifest's
SHA-256 and size, fsynced, and only then linked under its name: the replica never holds
unverified bytes under an artifact name.

Beside each copy the replica remembers which version of the object (its ETag) the copy was
written as or checked against, in ``store-versions/<name>``. While the store still reports
that version, its object holds the bytes of this host's verified copy, so ``verify`` need
not fetch it again; any other version (an object overwritten, even with bytes of the same
size and its old metadata) is fetched and hashed. The note is a hint, never trusted for
more: it is written without fsync, and a missing or unreadable one only costs that fetch.

This module is the only one that knows a session's store, its URL and the workspace and
session names the store files it under.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from .. import durable
from .._verify_model import FindingKind, VerifyFinding
from ..artifact import temporary_filename
from ..crashpoints import crash_point
from ..durable import open_dir_nofollow, write_all
from ..errors import (
    ArtifactAccessError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactStoreError,
)
from ..records import ArtifactRecord
from .base import SessionBackend
from .store import ArtifactStore, StoreBinding, StoreObject

__all__ = ["ReplicaBackend"]

_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PULL_INTERVAL = 1.0
"""Seconds a replica's manifest may lag the store on reads (appends and cleanup never lag)."""
VERSIONS_DIR = "store-versions"
"""Beside ``tool-results/``: per artifact, the version of the object this host's copy is."""
_VERSION_MAX = 1024


class ReplicaBackend(SessionBackend):
    """A session kept in a shared store, replicated in this directory."""

    record_crash_prefix = "store.replica"
    pull_interval = PULL_INTERVAL
    authority_here = False
    copies_only = True

    def __init__(self, binding: StoreBinding, root: Path) -> None:
        self._binding = binding
        self._versions = root / VERSIONS_DIR
        self.location = binding.url

    @property
    def _store(self) -> ArtifactStore:
        return self._binding.store  # opened (and boto3 imported) on first use only

    def key(self, workspace: str, session_id: str) -> str:
        return f"{self._binding.url}/{self._binding.workspace}/{self._binding.session}"

    def local_retention_refused(self) -> str | None:
        return f"is kept in {self.location}: its references live in the journal every host shares"

    # -- manifest records ----------------------------------------------------------------

    def pull(self, after_seq: int, *, snapshot: bool = True) -> list[bytes]:
        b = self._binding
        return self._store.manifest_lines(b.workspace, b.session, after_seq, snapshot=snapshot)

    def offer(self, seq: int, line: bytes) -> bool:
        b = self._binding
        won = self._store.put_manifest_line(b.workspace, b.session, seq, line)
        if won:
            crash_point("store.record_put")
        return won

    def keep_snapshot(self, seq: int, data: Callable[[], bytes]) -> None:
        b = self._binding
        with contextlib.suppress(ArtifactStoreError):
            lines = data()
            if lines.count(b"\n") == seq:
                self._store.put_manifest_snapshot(b.workspace, b.session, seq, lines)

    # -- names and bytes -----------------------------------------------------------------

    def accept(self, dir_fd: int, tmp_name: str, filename: str, size: int, sha256: str) -> bool:
        """Put the capture in the store as ``filename``, only if that name is free here and
        there (a HEAD first: a taken name costs no upload)."""
        try:
            os.stat(filename, dir_fd=dir_fd, follow_symlinks=False)
            return False  # a local leftover: the name is not ours to give
        except FileNotFoundError:
            pass
        b = self._binding
        if self._store.stat_artifact(b.workspace, b.session, filename) is not None:
            return False
        fd, _ = durable.open_trusted(tmp_name, dir_fd=dir_fd)
        with open(fd, "rb") as source:
            version = self._store.put_artifact(
                b.workspace, b.session, filename, source, size, sha256
            )
        if version is None:
            return False
        crash_point("store.object_put")
        self._remember(filename, version)
        return True

    def fetch(
        self,
        tool_results_dir: Path,
        filename: str,
        size: int,
        check: Callable[[int], None],
    ) -> os.stat_result | None:
        """Copy ``filename`` (``size`` bytes, as recorded) from the store into the replica,
        checked before it is linked; a longer object is cut off at ``size + 1`` bytes.

        Raises:
            ArtifactAccessError: this host could not write its copy (a full disk, an I/O
                error); nothing was linked under ``filename``.
        """
        b = self._binding
        io = durable.current()
        dir_fd = open_dir_nofollow(tool_results_dir)
        tmp = temporary_filename(os.getpid(), secrets.token_hex(8))
        try:
            try:
                fd = io.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
            except OSError as exc:
                raise _not_copied(filename, b.url, exc) from exc
            try:
                received = 0

                def sink(block: bytes) -> None:
                    nonlocal received
                    received += len(block)
                    if received > size:  # never fill the disk with what is not the artifact
                        raise ArtifactIntegrityError(
                            f"{filename}: the copy in {b.url} is longer than the recorded "
                            f"{size} bytes; it was not used"
                        )
                    write_all(fd, block)

                obj = self._store.fetch_artifact(b.workspace, b.session, filename, sink)
                io.fsync(fd)
                check(fd)
                crash_point("store.fetched")
                if not durable.link_new(tmp, filename, dir_fd=dir_fd):
                    return None  # another reader here fetched it first (and checks its own)
                durable.unlink_synced(tmp, dir_fd=dir_fd)
                self._remember(filename, obj.version)
                return os.fstat(fd)
            except OSError as exc:
                raise _not_copied(filename, b.url, exc) from exc
            finally:
                # Written and fsynced, or failed already: an error closing it changes nothing.
                with contextlib.suppress(OSError):
                    io.close(fd)
        finally:
            try:
                # A temporary file left here is a dead process's to cleanup (gc collects it).
                with contextlib.suppress(OSError):
                    io.unlink(tmp, dir_fd=dir_fd)
            finally:
                durable.close_unwritten(dir_fd)

    def objects(self) -> list[StoreObject]:
        b = self._binding
        return self._store.artifacts(b.workspace, b.session)

    def stat_object(self, filename: str) -> StoreObject | None:
        b = self._binding
        return self._store.stat_artifact(b.workspace, b.session, filename)

    def delete_object(self, obj: StoreObject) -> bool:
        b = self._binding
        deleted = self._store.delete_artifact(b.workspace, b.session, obj)
        if deleted:
            with contextlib.suppress(OSError):
                durable.current().unlink(self._versions / obj.filename)
        return deleted

    # -- which version this host's copy is -------------------------------------------------

    def _remember(self, filename: str, version: str) -> None:
        """Note that this host's copy of ``filename`` is the object's version ``version``
        (best effort: without the note, verify fetches the object to check it)."""
        with contextlib.suppress(OSError, ArtifactAccessError):
            with contextlib.suppress(FileExistsError):
                durable.current().mkdir(self._versions, 0o700)
            durable.write_atomically(
                self._versions, filename, version.encode()[:_VERSION_MAX], replace=True
            )

    def _remembered(self, filename: str) -> str | None:
        """The version this host's copy of ``filename`` is, if it noted one."""
        try:
            raw = durable.read_trusted(self._versions / filename, _VERSION_MAX, error=OSError)
        except OSError:
            return None
        return raw.decode(errors="replace") if raw else None

    def _stored_digest(self, filename: str, size: int) -> tuple[str, StoreObject]:
        """The SHA-256 of the store's current object (streamed, never kept), and the
        object; a longer object is hashed up to ``size + 1`` bytes."""
        b = self._binding
        sha = hashlib.sha256()
        received = 0

        def sink(block: bytes) -> None:
            nonlocal received
            block = block[: size + 1 - received]
            received += len(block)
            sha.update(block)
            if received > size:
                raise _Longer

        try:
            obj = self._store.fetch_artifact(b.workspace, b.session, filename, sink)
        except _Longer:
            return "", StoreObject(filename, received, 0, "")
        return sha.hexdigest(), obj

    # -- verify --------------------------------------------------------------------------

    def audit(
        self,
        tool_results_dir: Path,
        records: Mapping[str, ArtifactRecord],
        collected: Callable[[str], bool],
        check: Callable[[ArtifactRecord], Callable[[int], None]],
    ) -> tuple[list[VerifyFinding], set[str]]:
        """Every recorded artifact must be in the store (this host fetches, and so
        verifies, each one it lacks), and every object there must have a record."""
        url = self.location
        reported: set[str] = set()
        try:
            stored = {o.filename: o for o in self.objects()}
        except ArtifactStoreError as exc:
            return [VerifyFinding(FindingKind.STORE_UNREACHABLE, url, str(exc))], reported
        findings = []
        for name, record in sorted(records.items()):
            sid = record.source_id
            obj = stored.get(name)
            if obj is None:
                findings.append(
                    VerifyFinding(FindingKind.MISSING, name, f"recorded but not in {url}", sid)
                )
                reported.add(name)
                continue
            if obj.size != record.byte_size:
                findings.append(
                    VerifyFinding(
                        FindingKind.SIZE_MISMATCH,
                        name,
                        f"{obj.size} bytes in {url}, {record.byte_size} recorded",
                        sid,
                    )
                )
                reported.add(name)
                continue
            if os.path.lexists(tool_results_dir / name):
                # This host's copy is checked by the directory pass; the store's by the
                # digest stored with it, and by its version: the one this host's copy was
                # written as or checked against, or else the bytes are fetched and hashed.
                found = self._audit_stored(name, record)
                if found is not None:
                    findings.append(found)
                continue
            try:
                if self.fetch(tool_results_dir, name, record.byte_size, check(record)) is not None:
                    # Hashed on the way in: the directory pass need not read it again.
                    findings.append(VerifyFinding(FindingKind.OK, name, "", sid))
                    reported.add(name)
            except ArtifactIntegrityError as exc:
                findings.append(VerifyFinding(FindingKind.DIGEST_MISMATCH, name, str(exc), sid))
                reported.add(name)
            except (ArtifactNotFoundError, ArtifactStoreError) as exc:
                findings.append(VerifyFinding(FindingKind.MISSING, name, str(exc), sid))
                reported.add(name)
            except ArtifactAccessError as exc:  # this host's disk, not the store's copy
                findings.append(VerifyFinding(FindingKind.UNREADABLE, name, str(exc), sid))
                reported.add(name)
        for name in sorted(stored.keys() - records.keys()):
            if collected(name):
                findings.append(
                    VerifyFinding(FindingKind.COLLECTING, name, f"collected; still in {url}")
                )
            else:
                findings.append(
                    VerifyFinding(
                        FindingKind.UNRECORDED, name, f"in {url} without a manifest record"
                    )
                )
        return findings, reported

    def _audit_stored(self, name: str, record: ArtifactRecord) -> VerifyFinding | None:
        """A finding about the store's object of ``name`` where this host has a copy (None:
        it is the recorded output)."""
        url, sid = self.location, record.source_id
        try:
            head = self.stat_object(name)
            if head is None or head.sha256 != record.sha256:
                why = f"the copy in {url} is stored with another SHA-256"
                return VerifyFinding(FindingKind.DIGEST_MISMATCH, name, why, sid)
            if head.version == self._remembered(name):
                return None  # the very version this host's verified copy was checked against
            digest, obj = self._stored_digest(name, record.byte_size)
        except ArtifactNotFoundError as exc:
            return VerifyFinding(FindingKind.MISSING, name, str(exc), sid)
        except ArtifactStoreError as exc:
            return VerifyFinding(FindingKind.STORE_UNREACHABLE, name, str(exc), sid)
        if (digest, obj.size) != (record.sha256, record.byte_size):
            why = f"the copy in {url} is not the recorded output (it was overwritten)"
            return VerifyFinding(FindingKind.DIGEST_MISMATCH, name, why, sid)
        self._remember(name, obj.version)
        return None


def _not_copied(filename: str, url: str, exc: OSError) -> ArtifactAccessError:
    return ArtifactAccessError(
        f"{filename}: cannot copy it from {url} into this host's replica "
        f"({exc.strerror or exc}); nothing was kept, retry once the disk is writable"
    )


class _Longer(Exception):
    """The store's object is longer than the recorded artifact (its hash stops there)."""
