"""Durable I/O: the one place toolswap opens, writes, syncs, links, renames and unlinks the
files it must keep (the fault seam).

Two layers:

- :class:`DurableIO` is the set of system calls, one method each (``open``, ``write``,
  ``pwrite``, ``pread``, ``fsync``, ``start_writeback``, ``ftruncate``, ``link``,
  ``rename``, ``unlink``, ``mkdir``, ``close``). The process uses one instance,
  :func:`current`; a test substitutes another (:func:`substituted`) that fails the n-th
  call or simulates a power loss after it, and so reaches every durable step of every
  operation without patching modules.
- The helpers below (:func:`open_trusted`, :func:`hash_fd`, :func:`write_all`,
  :func:`write_atomically`, :func:`append_synced`, :func:`link_new`, :func:`unlink_synced`,
  :func:`fsync_dir`, :func:`ensure_private_dir`, :func:`close_unwritten`, ...) are the rules
  built on those calls, written once: a trusted file is opened without following a symlink
  or blocking on a FIFO, and is a regular file of this user; an atomic write goes to a
  temporary name, is fsynced, linked or renamed into place, and its directory fsynced; an
  error closing what was only read is no error.

Nothing else in toolswap calls ``os.open``/``os.write``/``os.fsync``/``os.link``/``os.rename``/
``os.replace``/``os.unlink`` on a durable file (the session backends go through here too).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ._fork import renew_in_child
from .crashpoints import crash_point
from .errors import ArtifactAccessError

__all__ = [
    "DIR_FLAGS",
    "READ_FLAGS",
    "DurableIO",
    "append_synced",
    "close_unwritten",
    "current",
    "ensure_private_dir",
    "fsync_dir",
    "hash_fd",
    "link_new",
    "not_ours",
    "open_dir_nofollow",
    "open_trusted",
    "read_trusted",
    "substituted",
    "temporary_name",
    "unlink_synced",
    "write_all",
    "write_atomically",
]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
"""A trusted file is read without following a symlink, and without hanging on a FIFO."""
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
HASH_BLOCK = 1 << 20

PathArg = str | Path


class DurableIO:
    """The system calls behind every durable step; subclass it to inject faults.

    Every method is the plain ``os`` call. A substitute may raise ``OSError`` (an injected
    EIO, ENOSPC, EMFILE...), return a short count from ``write``/``pwrite``, or record the
    call to rebuild what a power loss would leave.
    """

    def open(
        self, path: PathArg, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        return os.open(path, flags, mode, dir_fd=dir_fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, count: int, offset: int) -> bytes:
        return os.pread(fd, count, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def start_writeback(self, fd: int, offset: int, length: int) -> None:
        """Ask the kernel to start writing ``length`` bytes of ``fd`` from ``offset`` to
        the device, without waiting (Linux ``sync_file_range`` with
        ``SYNC_FILE_RANGE_WRITE``; nothing elsewhere). A hint, so that the final
        :meth:`fsync` of a large file finds most of it written while the rest was still
        being produced: it promises nothing, and it never fails (a writeback error is
        reported by that fsync)."""
        call = _writeback_call()
        if call is not None:
            call(fd, offset, length, _SYNC_FILE_RANGE_WRITE)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def link(
        self,
        src: PathArg,
        dst: PathArg,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        os.link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=False)

    def rename(
        self,
        src: PathArg,
        dst: PathArg,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        os.replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def unlink(self, path: PathArg, *, dir_fd: int | None = None) -> None:
        os.unlink(path, dir_fd=dir_fd)

    def mkdir(self, path: PathArg, mode: int = 0o700) -> None:
        os.mkdir(path, mode)

    def flock(self, fd: int, operation: int) -> None:
        fcntl.flock(fd, operation)


_SYNC_FILE_RANGE_WRITE = 2
_writeback: list[Callable[[int, int, int, int], int] | None] = []


def _writeback_call() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range``, looked up once (ctypes loads only for a large file);
    None where there is none."""
    if not _writeback:
        try:
            import ctypes  # only here: most captures never need it

            call = ctypes.CDLL(None, use_errno=True).sync_file_range
            call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
            call.restype = ctypes.c_int
            _writeback.append(call)
        except (OSError, AttributeError, ImportError):
            _writeback.append(None)
    return _writeback[0]


_DEFAULT = DurableIO()
_current = _DEFAULT
_SWAP_GUARD = threading.Lock()
renew_in_child(globals(), "_SWAP_GUARD")  # (see _fork)


def current() -> DurableIO:
    """The implementation every durable step uses now."""
    return _current


@contextmanager
def substituted(impl: DurableIO) -> Iterator[DurableIO]:
    """Use ``impl`` for every durable call of this process until the block ends (tests)."""
    global _current
    with _SWAP_GUARD:
        before, _current = _current, impl
    try:
        yield impl
    finally:
        with _SWAP_GUARD:
            _current = before


# -- reading trusted files -------------------------------------------------------------


def _default_error(message: str) -> Exception:
    return ArtifactAccessError(message)


def open_trusted(
    path: PathArg,
    *,
    dir_fd: int | None = None,
    what: str | None = None,
    error: Callable[[str], Exception] = _default_error,
) -> tuple[int, os.stat_result]:
    """Open a file toolswap wrote, for reading: not through a symlink, not blocking on a
    FIFO, and only if it is a regular file owned by this user.

    Returns:
        The descriptor and its status (the caller closes the descriptor).

    Raises:
        FileNotFoundError: there is no such file (the caller decides what absence means).
        Exception: ``error(message)`` for anything else (a symlink, another kind of file,
            another owner, an I/O error); :class:`ArtifactAccessError` by default.
    """
    name = what or str(path)
    io = _current
    try:
        fd = io.open(path, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        why = "it is a symlink" if exc.errno == errno.ELOOP else exc.strerror
        raise error(f"{name}: cannot open ({why})") from exc
    try:
        st = os.fstat(fd)
        if not_ours(st, directory=False) is not None:
            raise error(f"{name} is not a regular file owned by this user")
    except BaseException:
        close_unwritten(fd)
        raise
    return fd, st


def close_unwritten(fd: int) -> None:
    """Close a descriptor nothing was written through (a file read, a directory, a lock).

    close(2) releases the descriptor even when it reports an error, and such an error (the
    flush of a FUSE or network file system failing) concerns no byte this process wrote:
    reporting it would fail a read that already returned whole, verified bytes.
    """
    with contextlib.suppress(OSError):
        _current.close(fd)


def read_trusted(
    path: PathArg,
    limit: int,
    *,
    what: str | None = None,
    error: Callable[[str], Exception] = _default_error,
) -> bytes | None:
    """The first ``limit`` bytes of a trusted file (see :func:`open_trusted`); None if absent.

    Raises:
        Exception: ``error(message)`` when the file cannot be trusted or read.
    """
    try:
        fd, _ = open_trusted(path, what=what, error=error)
    except FileNotFoundError:
        return None
    io = _current
    try:
        data = b""
        while len(data) < limit:  # a read may return less than asked (POSIX)
            block = io.pread(fd, limit - len(data), len(data))
            if not block:
                break
            data += block
        return data
    except OSError as exc:
        raise error(f"{what or path}: cannot read ({exc.strerror})") from exc
    finally:
        close_unwritten(fd)


def hash_fd(
    fd: int,
    *,
    start: int = 0,
    limit: int | None = None,
    block: int = HASH_BLOCK,
    each: Callable[[bytes, int], None] | None = None,
) -> tuple[str, int]:
    """Stream the SHA-256 of ``fd`` from ``start`` (positional reads, so the descriptor's
    offset is left alone), at most ``limit`` bytes.

    Args:
        each: called with every block and its offset (to index lines in the same pass).

    Returns:
        The hex digest and the number of bytes hashed.
    """
    import hashlib  # here: opening a session hashes nothing

    sha = hashlib.sha256()
    io = _current
    offset = start
    end = None if limit is None else start + limit
    while True:
        want = block if end is None else min(block, end - offset)
        if want <= 0:
            break
        data = io.pread(fd, want, offset)
        if not data:
            break
        sha.update(data)
        if each is not None:
            each(data, offset)
        offset += len(data)
    return sha.hexdigest(), offset - start


# -- writing ---------------------------------------------------------------------------


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (a write may write less than asked)."""
    io = _current
    view = memoryview(data)
    while view:
        written = io.write(fd, view)
        view = view[written:]


def append_synced(fd: int, data: bytes) -> None:
    """Write ``data`` at the end of an ``O_APPEND`` descriptor and fsync the file."""
    write_all(fd, data)
    _current.fsync(fd)


def fsync_dir(path: PathArg | int) -> None:
    """fsync a directory (by path or open descriptor) so a link or unlink in it is durable."""
    io = _current
    if isinstance(path, int):
        io.fsync(path)
        return
    fd = io.open(path, DIR_FLAGS)
    try:
        io.fsync(fd)
    finally:
        close_unwritten(fd)


def open_dir_nofollow(path: PathArg) -> int:
    """Open a directory without following a symlink at its last component.

    Raises:
        ArtifactAccessError: it cannot be opened (missing, a symlink, not a directory).
    """
    try:
        return _current.open(path, DIR_FLAGS)
    except OSError as exc:
        raise ArtifactAccessError(
            f"cannot open directory {path}: {exc.strerror} (it must be a real directory, "
            "not a symlink)"
        ) from exc


def temporary_name(prefix: str) -> str:
    """A fresh hidden name for a file about to be written and moved into place."""
    return f".{prefix}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


def write_atomically(
    directory: PathArg,
    name: str,
    data: bytes,
    *,
    replace: bool,
    tmp_name: str | None = None,
    crash_prefix: str | None = None,
) -> bool:
    """Make ``directory/name`` hold exactly ``data``, durably, or leave it as it was.

    The bytes go to a temporary name, are fsynced, and are then renamed over ``name``
    (``replace``) or linked to it only if it is free; the directory is fsynced last.

    Args:
        tmp_name: a fixed temporary name (a stale one left by a crashed writer is removed
            first: the caller holds the lock that serialises writers); a fresh one if None.
        crash_prefix: name the steps as crash points (``<prefix>.tmp_written``,
            ``.tmp_fsynced``, ``.renamed`` or ``.linked``, ``.dir_fsynced``).

    Returns:
        False when ``replace`` is False and the name was already taken (nothing changed).

    Raises:
        OSError: the write failed; no temporary file is left behind.
    """

    def step(label: str) -> None:
        if crash_prefix is not None:
            crash_point(f"{crash_prefix}.{label}")

    io = _current
    dir_fd = io.open(directory, DIR_FLAGS)
    try:
        tmp = tmp_name or temporary_name(name)
        if tmp_name is not None:
            with contextlib.suppress(FileNotFoundError):
                io.unlink(tmp, dir_fd=dir_fd)
        fd = io.open(tmp, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
        taken = False
        try:
            try:
                write_all(fd, data)
                step("tmp_written")
                io.fsync(fd)
            finally:
                io.close(fd)
            step("tmp_fsynced")
            if replace:
                io.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                step("renamed")
            else:
                try:
                    io.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                    step("linked")
                except FileExistsError:
                    taken = True
        finally:
            with contextlib.suppress(FileNotFoundError):  # renamed into place
                io.unlink(tmp, dir_fd=dir_fd)
        io.fsync(dir_fd)
        step("dir_fsynced")
        return not taken
    finally:
        close_unwritten(dir_fd)


def link_new(src: str, dst: str, *, dir_fd: int) -> bool:
    """Hard-link ``src`` to ``dst`` in one directory, never replacing ``dst``.

    Returns:
        False when ``dst`` is taken.
    """
    try:
        _current.link(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def unlink_synced(name: str, *, dir_fd: int) -> None:
    """Unlink ``name`` and fsync its directory."""
    _current.unlink(name, dir_fd=dir_fd)
    _current.fsync(dir_fd)


def not_ours(st: os.stat_result, *, directory: bool) -> str | None:
    """Why ``st`` (an ``lstat``) is not a real directory (or a regular file) of this
    user, as the end of a sentence about it, or None when it is."""
    if directory and (stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode)):
        return "must be a real directory, not a symlink or a file"
    if not directory and (stat.S_ISLNK(st.st_mode) or not stat.S_ISREG(st.st_mode)):
        return "must be a regular file, not a symlink"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this user"
    return None


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents, each with mode 0700; refuse symlinks and
    foreign owners.

    Parents that already exist are left as they are; each directory created is fsynced
    into its parent; the last component must be a real directory owned by this user.

    Raises:
        ArtifactAccessError: a component is not a directory, or the last one is a symlink,
            another user's, or cannot be created.
    """
    io = _current
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    if missing and not probe.is_dir():
        raise ArtifactAccessError(f"{probe} is not a directory; cannot create {path} in it")
    for created in reversed(missing):
        try:
            io.mkdir(created, 0o700)  # makedirs would give the parents the umask's mode
        except FileExistsError:
            pass  # made by someone else meanwhile: checked like any existing directory
        except OSError as exc:
            raise ArtifactAccessError(f"cannot create {created}: {exc.strerror}") from exc
        # New directory entries are durable only once their parents are fsynced (the first
        # parent may be a symlink the caller chose: fsyncing through it is harmless).
        try:
            fd = io.open(created.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                io.fsync(fd)
            finally:
                close_unwritten(fd)
        except OSError as exc:
            raise ArtifactAccessError(f"cannot sync {created.parent}: {exc.strerror}") from exc
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ArtifactAccessError(f"cannot use {path}: {exc.strerror}") from exc
    refusal = not_ours(st, directory=True)
    if refusal is not None:
        raise ArtifactAccessError(f"{path} {refusal}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
