"""A host's replica of a session kept in a shared store: artifacts in and out of it.

The store is the authority (:mod:`toolswap.remote`); the session directory holds the
artifacts this host wrote or read. Writing, the store gets the bytes first, under a name
it confirms is free; the replica links the same bytes under that name. Reading, an
artifact missing here is fetched into a temporary name, checked against the manifest's
SHA-256 and size, fsynced, and only then linked under its name: the replica never holds
unverified bytes under an artifact name.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable

from ._fs import open_dir_nofollow, write_all
from .artifact import temporary_filename
from .crashpoints import crash_point
from .errors import ArtifactIntegrityError
from .remote import StoreBinding
from .session import Session

__all__ = ["fetch_into_replica", "put_from_replica"]

_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _binding(session: Session) -> StoreBinding:
    if session.binding is None:
        raise ValueError(f"session {session.session_id!r} is not kept in a store")
    return session.binding


def put_from_replica(
    session: Session, dir_fd: int, tmp_name: str, filename: str, size: int, sha256: str
) -> str | None:
    """Write the finished capture ``tmp_name`` to the store as ``filename``, only if that
    name is free there.

    Returns:
        The stored version, or None when another host took the name.

    Raises:
        ArtifactStoreError: the store failed (nothing is known to be written).
    """
    binding = _binding(session)
    fd = os.open(tmp_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    with open(fd, "rb") as source:
        version = binding.store.put_artifact(
            binding.workspace, binding.session, filename, source, size, sha256
        )
    if version is not None:
        crash_point("store.object_put")
    return version


def fetch_into_replica(
    session: Session, filename: str, size: int, check: Callable[[int], None]
) -> os.stat_result | None:
    """Copy ``filename`` (``size`` bytes, as recorded) from the store into the replica,
    checked before it is linked; a longer object is cut off at ``size + 1`` bytes.

    ``check`` gets a readable descriptor of the fetched, fsynced copy and raises (an
    :class:`ArtifactIntegrityError`) unless its bytes are the recorded output; the reader
    hashes and indexes in that one pass.

    Returns:
        The linked file's status (its identity as the caller may remember it verified),
        or None when another process here linked its own copy first.

    Raises:
        ArtifactNotFoundError: the store has no such object.
        ArtifactIntegrityError: ``check`` refused the store's bytes (nothing is linked).
        ArtifactStoreError: the store failed.
    """
    binding = _binding(session)
    dir_fd = open_dir_nofollow(session.tool_results_dir)
    tmp = temporary_filename(os.getpid(), secrets.token_hex(8))
    try:
        fd = os.open(tmp, _CREATE, 0o600, dir_fd=dir_fd)
        try:
            received = 0

            def sink(block: bytes) -> None:
                nonlocal received
                received += len(block)
                if received > size:  # never fill the disk with what is not the artifact
                    raise ArtifactIntegrityError(
                        f"{filename}: the copy in {binding.url} is longer than the recorded "
                        f"{size} bytes; it was not used"
                    )
                write_all(fd, block)

            binding.store.fetch_artifact(binding.workspace, binding.session, filename, sink)
            os.fsync(fd)
            check(fd)
            crash_point("store.fetched")
            try:
                os.link(tmp, filename, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                return None  # another reader here fetched it first (and checks its own)
            os.unlink(tmp, dir_fd=dir_fd)
            os.fsync(dir_fd)
            return os.fstat(fd)
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)
