"""Small filesystem helpers shared by the durable modules (private)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import ArtifactAccessError

__all__ = ["ensure_private_dir", "fsync_dir", "open_dir_nofollow", "write_all"]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: Path | int) -> None:
    """fsync a directory (by path or open descriptor) so a link or unlink in it is durable."""
    if isinstance(path, int):
        os.fsync(path)
        return
    fd = os.open(path, DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_dir_nofollow(path: Path) -> int:
    """Open a directory without following a symlink at its last component."""
    try:
        return os.open(path, DIR_FLAGS)
    except OSError as exc:
        raise ArtifactAccessError(
            f"cannot open directory {path}: {exc.strerror} (it must be a real directory, "
            "not a symlink)"
        ) from exc


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents, each with mode 0700; refuse symlinks and
    foreign owners.

    Parents that already exist are left as they are; each directory created is fsynced
    into its parent; the last component must be a real directory owned by this user.
    """
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    if missing and not probe.is_dir():
        raise ArtifactAccessError(f"{probe} is not a directory; cannot create {path} in it")
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o700)  # makedirs would give the parents the umask's mode
        except FileExistsError:
            pass  # made by someone else meanwhile: checked like any existing directory
        except OSError as exc:
            raise ArtifactAccessError(f"cannot create {created}: {exc.strerror}") from exc
        # New directory entries are durable only once their parents are fsynced (the first
        # parent may be a symlink the caller chose: fsyncing through it is harmless).
        fd = os.open(created.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ArtifactAccessError(f"{path} must be a real directory, not a symlink or a file")
    if st.st_uid != os.geteuid():
        raise ArtifactAccessError(f"{path} is owned by uid {st.st_uid}, not by this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
