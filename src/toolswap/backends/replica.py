"""The replica backend: the session lives in a shared store; this directory is a replica.

The store is the authority (:mod:`toolswap.remote`): a name is taken when the store accepts
an artifact under it (only if it is free there), a manifest record exists once the store
holds record ``seq`` (written only if that number is free), and deletes name the exact
version they verified. This directory holds the store's records byte for byte and the
artifacts this host wrote or read. Writing, the store gets the bytes first; reading, an
artifact missing here is fetched into a temporary name, checked against the manifest's
SHA-256 and size, fsynced, and only then linked under its name: the replica never holds
unverified bytes under an artifact name.

This module is the only one that knows a session's store, its URL and the workspace and
session names the store files it under.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from .. import durable
from .._verify_model import FindingKind, VerifyFinding
from ..artifact import temporary_filename
from ..crashpoints import crash_point
from ..durable import open_dir_nofollow, write_all
from ..errors import ArtifactIntegrityError, ArtifactNotFoundError, ArtifactStoreError
from ..records import ArtifactRecord
from ..remote import ArtifactStore, StoreBinding, StoreObject
from .base import SessionBackend

__all__ = ["ReplicaBackend"]

_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PULL_INTERVAL = 1.0
"""Seconds a replica's manifest may lag the store on reads (appends and cleanup never lag)."""


class ReplicaBackend(SessionBackend):
    """A session kept in a shared store, replicated in this directory."""

    record_crash_prefix = "store.replica"
    pull_interval = PULL_INTERVAL
    copies_only = True

    def __init__(self, binding: StoreBinding) -> None:
        self._binding = binding
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
        return True

    def fetch(
        self,
        tool_results_dir: Path,
        filename: str,
        size: int,
        check: Callable[[int], None],
    ) -> os.stat_result | None:
        """Copy ``filename`` (``size`` bytes, as recorded) from the store into the replica,
        checked before it is linked; a longer object is cut off at ``size + 1`` bytes."""
        b = self._binding
        io = durable.current()
        dir_fd = open_dir_nofollow(tool_results_dir)
        tmp = temporary_filename(os.getpid(), secrets.token_hex(8))
        try:
            fd = io.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
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

                self._store.fetch_artifact(b.workspace, b.session, filename, sink)
                io.fsync(fd)
                check(fd)
                crash_point("store.fetched")
                if not durable.link_new(tmp, filename, dir_fd=dir_fd):
                    return None  # another reader here fetched it first (and checks its own)
                durable.unlink_synced(tmp, dir_fd=dir_fd)
                return os.fstat(fd)
            finally:
                io.close(fd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                io.unlink(tmp, dir_fd=dir_fd)
            io.close(dir_fd)

    def objects(self) -> list[StoreObject]:
        b = self._binding
        return self._store.artifacts(b.workspace, b.session)

    def stat_object(self, filename: str) -> StoreObject | None:
        b = self._binding
        return self._store.stat_artifact(b.workspace, b.session, filename)

    def delete_object(self, obj: StoreObject) -> bool:
        b = self._binding
        return self._store.delete_artifact(b.workspace, b.session, obj)

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
                # digest stored with it (fetched and hashed only on a host without a copy).
                try:
                    head = self.stat_object(name)
                except ArtifactStoreError as exc:
                    findings.append(
                        VerifyFinding(FindingKind.STORE_UNREACHABLE, name, str(exc), sid)
                    )
                    continue
                if head is None or head.sha256 != record.sha256:
                    findings.append(
                        VerifyFinding(
                            FindingKind.DIGEST_MISMATCH,
                            name,
                            f"the copy in {url} is stored with another SHA-256",
                            sid,
                        )
                    )
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
