"""A fault-injecting twin of toolswap's durable-I/O seam (RocksDB's fault-injection file
system, LazyFS and ALICE, sized for one process).

:class:`FaultIO` is a :class:`toolswap.testing.DurableIO` that counts every call of an
operation and, at the n-th:

- **error mode**: fails it with ENOSPC, EIO, EDQUOT, EMFILE or EINTR, or makes a
  ``write``/``pwrite`` write only half of what it was given (a short write); the
  ``*-stays`` kinds (:class:`Fault`) also fail every later call they can happen to (a disk
  that stays full, a device that stays dead);
- **power-loss mode**: lets the call happen, then the machine loses power: the call raises
  :class:`PowerLoss` (a ``BaseException`` toolswap never catches) and so does every later
  call of every thread. :meth:`FaultIO.lose_power` then rebuilds the directory tree with
  only what was durable: a file's bytes as of its last fsync (an unsynced change survives
  not at all, entirely, or torn at a page boundary: :class:`Survival`), and a name created,
  linked, renamed, unlinked or made a directory only if its directory was fsynced
  afterwards (the rest is undone in reverse order; an unlinked or replaced file is kept
  under a side hard link so it can come back). ``Survival.PROCESS`` is the milder crash:
  only the process dies and the page cache keeps everything. Everything that existed
  before the operation counts as durable.

Nothing here really calls fsync: the model decides what an fsync made durable, and the
exploration stays fast. Bytes written around the seam (the SQLite owner's own database,
which is trusted) are left as they are.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import stat
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from toolswap.testing import DurableIO

__all__ = [
    "CALL_NAMES",
    "Fault",
    "FaultIO",
    "PowerLoss",
    "Survival",
    "fault_applies",
]

PAGE = 4096

CALL_NAMES = (
    "open",
    "open+create",
    "close",
    "close+written",
    "write",
    "pwrite",
    "pread",
    "fsync",
    "ftruncate",
    "link",
    "rename",
    "unlink",
    "mkdir",
    "flock",
)


class PowerLoss(BaseException):
    """The simulated machine lost power: nothing after this call reaches the disk."""


class Fault(StrEnum):
    """What the n-th durable call does in error mode (and, for the ``*-stays`` kinds,
    every later call it can happen to, until the next operation: a disk that stays full,
    a device that stays dead, a process at its descriptor limit)."""

    ENOSPC = "ENOSPC"
    EIO = "EIO"
    EDQUOT = "EDQUOT"
    EMFILE = "EMFILE"
    EINTR = "EINTR"
    SHORT_WRITE = "short-write"
    FULL_DISK = "ENOSPC-stays"
    DEAD_DISK = "EIO-stays"
    FD_LIMIT = "EMFILE-stays"

    @property
    def sticky(self) -> bool:
        return self in _STICKY

    @property
    def base(self) -> Fault:
        """The error this fault raises (itself, for a transient fault)."""
        return _STICKY.get(self, self)


_STICKY = {Fault.FULL_DISK: Fault.ENOSPC, Fault.DEAD_DISK: Fault.EIO, Fault.FD_LIMIT: Fault.EMFILE}


class Survival(StrEnum):
    """How much of what was not synced survives the crash."""

    NONE = "none"
    """Power loss: no unsynced byte, no unsynced name."""
    ALL = "all"
    """Power loss: every unsynced byte (but no unsynced name)."""
    TORN = "torn"
    """Power loss: each unsynced change up to a page boundary inside it (half of an append
    with none); no unsynced name."""
    PROCESS = "process"
    """Only the process died (SIGKILL, OOM): the page cache keeps every byte and name."""


_ERRNO = {
    Fault.ENOSPC: errno.ENOSPC,
    Fault.EIO: errno.EIO,
    Fault.EDQUOT: errno.EDQUOT,
    Fault.EMFILE: errno.EMFILE,
    Fault.EINTR: errno.EINTR,
}
_ALLOCATING = frozenset({"write", "pwrite", "fsync", "link", "rename", "mkdir", "open+create"})


def fault_applies(fault: Fault, call: str) -> bool:
    """Whether a real system could fail ``call`` this way (``open+create``: an open that
    may create the file, ``close+written``: the close of a descriptor written to)."""
    fault = fault.base
    if fault in (Fault.ENOSPC, Fault.EDQUOT):
        return call in _ALLOCATING
    if fault is Fault.EMFILE:
        return call in ("open", "open+create")
    if fault is Fault.SHORT_WRITE:
        return call in ("write", "pwrite")
    if fault is Fault.EINTR:
        return not call.startswith("close")
    # EIO: anything that reaches the device; a close only after writes (NFS reports a
    # deferred write error there), never a lock.
    return call not in ("flock", "close")


Key = tuple[int, int]


def _key(st: os.stat_result) -> Key:
    return st.st_dev, st.st_ino


@dataclass
class _NameChange:
    """One change to a directory's names, undone at a power loss unless it was synced."""

    op: str
    directory: str
    dir_key: Key
    name: str
    source: str | None = None
    """The old name of a rename."""
    kept: str | None = None
    """A side hard link to the file this change removed (unlink, rename over a name)."""
    synced: bool = False


@dataclass
class _Tracked:
    """A file whose bytes changed during the operation."""

    durable: bytes
    """Its bytes as of its last fsync (or as of the operation's start)."""
    paths: set[str] = field(default_factory=set)
    """Every name it was seen under (one of them still reaches it after the undo)."""


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What :meth:`FaultIO.lose_power` did."""

    undone: tuple[str, ...]
    """The name changes undone, latest first (``op dir/name``)."""
    changed_files: tuple[str, ...]
    """Files whose unsynced bytes the chosen survival rule rewrote."""
    differs: dict[Survival, bool]
    """Whether each survival rule gives a state of its own (not one of ``NONE``'s or
    ``ALL``'s)."""


class FaultIO(DurableIO):
    """The durable-I/O seam with one fault planned (see the module docstring).

    Args:
        fail_at: the 1-based call that fails (error mode), with ``fault``.
        fail_on: or the first call of this kind on a file whose name contains this, e.g.
            ``("open+create", ".lock")``, or its n-th: ``("open", "tool-results", 2)`` (a
            regression test names the call it breaks).
        power_at: the 1-based call after which power is lost (power-loss mode).
        keep_dir: where unlinked files are kept for an undo (same file system as the
            session; power-loss mode only).
        armed: count and fault from the start (else only after :meth:`arm`).
        rng: picks where a torn change is cut (default: the first page boundary in it).
    """

    def __init__(
        self,
        *,
        fail_at: int | None = None,
        fail_on: tuple[str, str] | tuple[str, str, int] | None = None,
        fault: Fault | None = None,
        power_at: int | None = None,
        keep_dir: Path | None = None,
        armed: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        self.fail_at = fail_at
        self.fail_on = fail_on
        self._seen = 0
        self.fault = fault
        self.power_at = power_at
        self.keep_dir = keep_dir
        self.track = power_at is not None
        self.armed = armed
        self.rng = rng
        self.changed = False
        """Whether a call changed a file or a name (the tree is no longer the template)."""
        self.calls = 0
        self.trace: list[str] = []
        """The kind of every counted call, in order (``open+create`` for a creating open)."""
        self.names: list[str] = []
        """The name of the file each counted call was on."""
        self.injected: str | None = None
        """The fault that happened (None: the planned call never came or did not apply)."""
        self.lost = False
        self._lock = threading.RLock()
        self._open: dict[int, Key] = {}
        self._written: set[int] = set()
        self._tracked: dict[Key, _Tracked] = {}
        self._created: dict[Key, str] = {}
        self._changes: list[_NameChange] = []
        self._kept = 0

    # -- counting and faults ---------------------------------------------------------

    def arm(self) -> None:
        """Start counting (the operation's set-up before this point is not faulted)."""
        self.armed = True

    def _step(self, call: str, target: str | Path | int) -> Fault | None:
        """Count one call (on ``target``: a path or a descriptor); the fault to inject into
        it, if any (hold the lock)."""
        if self.lost:
            raise PowerLoss(f"power was lost before this {call}")
        if not self.armed:
            return None
        self.calls += 1
        self.trace.append(call)
        # Names cost a readlink: only a dry run and a fault planned by name record them.
        named = self.fail_on is not None or (self.fault is None and self.power_at is None)
        name = "" if not named else _fd_name(target) if isinstance(target, int) else _base(target)
        self.names.append(name)
        if self.fault is None:
            return None
        if self.fail_on is not None and self.fail_at is None:
            kind, suffix, *nth = self.fail_on
            if call == kind and suffix in name:
                self._seen += 1
                if self._seen == (nth[0] if nth else 1):
                    self.fail_at = self.calls
        if self.fail_at is None:
            return None
        due = self.calls == self.fail_at or (self.fault.sticky and self.calls > self.fail_at)
        if due and fault_applies(self.fault, call):
            if self.injected is None:
                self.injected = f"{self.fault} at call {self.calls} ({call} {name})"
            return self.fault
        return None

    def _done(self) -> None:
        """After the call took effect: lose power here if planned (hold the lock)."""
        if self.armed and self.calls == self.power_at and not self.lost:
            self.lost = True
            self.injected = f"power lost after call {self.calls} ({self.trace[-1]})"
            raise PowerLoss(self.injected)

    @staticmethod
    def _raise(fault: Fault, what: str) -> None:
        code = _ERRNO[fault.base]
        raise OSError(code, f"{os.strerror(code)} (injected)", what)

    # -- the system calls ------------------------------------------------------------

    def open(
        self, path: str | Path, flags: int, mode: int = 0o600, *, dir_fd: int | None = None
    ) -> int:
        creating = bool(flags & os.O_CREAT)
        with self._lock:
            fault = self._step("open+create" if creating else "open", path)
            if fault is not None:
                self._raise(fault, str(path))
            if flags & os.O_TRUNC:
                raise AssertionError("toolswap never opens with O_TRUNC; model it here")
            where = None
            if creating:
                with contextlib.suppress(FileNotFoundError):  # the open itself says so
                    where = self._locate(path, dir_fd)
            existed = where is None or os.path.lexists(os.path.join(where[0], where[2]))
            fd = super().open(path, flags, mode, dir_fd=dir_fd)
            st = os.fstat(fd)
            self._open[fd] = _key(st)
            self._written.discard(fd)
            self.changed |= not existed
            if self.track and where is not None and not existed and stat.S_ISREG(st.st_mode):
                self._change("create", where)
                # Nothing of it is durable yet, once the seam writes to it (bytes written
                # around the seam, as SQLite writes its database, are trusted).
                self._created[_key(st)] = os.path.join(where[0], where[2])
            self._done()
            return fd

    def close(self, fd: int) -> None:
        with self._lock:
            key = self._open.pop(fd, None)
            if self.lost:
                # The machine is off: closing changes nothing on disk (a descriptor closed
                # twice by code that kept running past the loss is not ours to judge).
                if key is not None and _still(fd, key):
                    os.close(fd)
                return
            written = fd in self._written
            self._written.discard(fd)
            # Only a descriptor that was written to can report a (deferred) write error.
            fault = self._step("close+written" if written else "close", fd)
            os.close(fd)  # Linux releases the descriptor even when close reports an error
            if fault is not None:
                self._raise(fault, f"fd {fd}")
            self._done()

    def write(self, fd: int, data: bytes | memoryview) -> int:
        with self._lock:
            fault = self._step("write", fd)
            if fault is not None and fault is not Fault.SHORT_WRITE:
                self._raise(fault, f"fd {fd}")
            self._before_change(fd)
            if fault is Fault.SHORT_WRITE:
                data = memoryview(data)[: len(data) // 2]
            written = os.write(fd, data)
            self._written.add(fd)
            self.changed = True
            self._done()
            return written

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        with self._lock:
            fault = self._step("pwrite", fd)
            if fault is not None and fault is not Fault.SHORT_WRITE:
                self._raise(fault, f"fd {fd}")
            self._before_change(fd)
            if fault is Fault.SHORT_WRITE:
                data = data[: len(data) // 2]
            written = os.pwrite(fd, data, offset)
            self._written.add(fd)
            self.changed = True
            self._done()
            return written

    def pread(self, fd: int, count: int, offset: int) -> bytes:
        with self._lock:
            fault = self._step("pread", fd)
            if fault is not None:
                self._raise(fault, f"fd {fd}")
            data = os.pread(fd, count, offset)
            self._done()
            return data

    def fsync(self, fd: int) -> None:
        with self._lock:
            fault = self._step("fsync", fd)
            if fault is not None:
                self._raise(fault, f"fd {fd}")
            if self.track:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    for change in self._changes:
                        if change.dir_key == _key(st):
                            change.synced = True
                elif _key(st) in self._tracked:
                    self._tracked[_key(st)].durable = _content(fd)
            # No real fsync: the model decides what it made durable (and stays fast).
            self._done()

    def ftruncate(self, fd: int, length: int) -> None:
        with self._lock:
            fault = self._step("ftruncate", fd)
            if fault is not None:
                self._raise(fault, f"fd {fd}")
            self._before_change(fd)
            os.ftruncate(fd, length)
            self._written.add(fd)
            self.changed = True
            self._done()

    def link(
        self,
        src: str | Path,
        dst: str | Path,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        with self._lock:
            fault = self._step("link", dst)
            if fault is not None:
                self._raise(fault, str(dst))
            super().link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            self.changed = True
            if self.track:
                where = self._locate(dst, dst_dir_fd)
                self._change("link", where)
                self._note_path(where)
            self._done()

    def rename(
        self,
        src: str | Path,
        dst: str | Path,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
    ) -> None:
        with self._lock:
            fault = self._step("rename", dst)
            if fault is not None:
                self._raise(fault, str(dst))
            kept = None
            if self.track:
                source = self._locate(src, src_dir_fd)
                where = self._locate(dst, dst_dir_fd)
                if source[1] != where[1]:
                    raise AssertionError("toolswap renames within one directory; model it here")
                kept = self._keep(os.path.join(where[0], where[2]))
            super().rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            self.changed = True
            if self.track:
                self._change("rename", where, source=source[2], kept=kept)
                self._note_path(where)
            self._done()

    def unlink(self, path: str | Path, *, dir_fd: int | None = None) -> None:
        with self._lock:
            fault = self._step("unlink", path)
            if fault is not None:
                self._raise(fault, str(path))
            kept = None
            if self.track:
                where = self._locate(path, dir_fd)
                kept = self._keep(os.path.join(where[0], where[2]))
            try:
                super().unlink(path, dir_fd=dir_fd)
            except BaseException:
                if kept is not None:
                    os.unlink(kept)
                raise
            self.changed = True
            if self.track:
                self._change("unlink", where, kept=kept)
            self._done()

    def mkdir(self, path: str | Path, mode: int = 0o700) -> None:
        with self._lock:
            fault = self._step("mkdir", path)
            if fault is not None:
                self._raise(fault, str(path))
            super().mkdir(path, mode)
            self.changed = True
            if self.track:
                self._change("mkdir", self._locate(path, None))
            self._done()

    def flock(self, fd: int, operation: int) -> None:
        with self._lock:
            fault = self._step("flock", fd)
            if fault is not None:
                self._raise(fault, f"fd {fd}")
            super().flock(fd, operation)
            self._done()

    # -- the power-loss model --------------------------------------------------------

    def _locate(self, path: str | Path, dir_fd: int | None) -> tuple[str, Key, str]:
        """(directory path, directory identity, name) of a path as a call names it."""
        if dir_fd is not None and not os.path.isabs(path):
            directory = os.readlink(f"/proc/self/fd/{dir_fd}")
            name = os.fspath(path)
            if "/" in name:
                raise AssertionError("toolswap names files in a directory by one component")
            return directory, _key(os.fstat(dir_fd)), name
        full = os.path.abspath(path)
        directory, name = os.path.split(full)
        return directory, _key(os.lstat(directory)), name

    def _change(
        self,
        op: str,
        where: tuple[str, Key, str],
        *,
        source: str | None = None,
        kept: str | None = None,
    ) -> None:
        directory, dir_key, name = where
        self._changes.append(_NameChange(op, directory, dir_key, name, source, kept))

    def _note_path(self, where: tuple[str, Key, str]) -> None:
        full = os.path.join(where[0], where[2])
        with contextlib.suppress(FileNotFoundError):
            tracked = self._tracked.get(_key(os.lstat(full)))
            if tracked is not None:
                tracked.paths.add(full)

    def _keep(self, full: str) -> str | None:
        """A side hard link to the file at ``full`` (None if there is none)."""
        assert self.keep_dir is not None, "power-loss mode needs a keep_dir"
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise AssertionError(f"toolswap removed a non-regular file {full}; model it here")
        self._kept += 1
        kept = str(self.keep_dir / f"kept-{self._kept}")
        os.link(full, kept)
        tracked = self._tracked.get(_key(st))
        if tracked is not None:
            tracked.paths.add(kept)
        return kept

    def _before_change(self, fd: int) -> None:
        """Remember a file's durable bytes before its first change in this operation."""
        if not self.track:
            return
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _key(st) in self._tracked:
            return
        paths = {os.readlink(f"/proc/self/fd/{fd}")}
        created = self._created.get(_key(st))
        if created is not None:
            self._tracked[_key(st)] = _Tracked(b"", paths | {created})
        else:
            self._tracked[_key(st)] = _Tracked(_content(fd), paths)

    def lose_power(self, survival: Survival) -> CrashReport:
        """Rebuild the tree with what was durable when power was lost (now, if it was
        not lost during the operation); ``survival`` decides what unsynced survives."""
        with self._lock:
            self.lost = True
            undone = []
            unsynced = [change for change in self._changes if not change.synced]
            for change in reversed(unsynced if survival is not Survival.PROCESS else []):
                _undo(change)
                undone.append(f"{change.op} {change.directory}/{change.name}")
            changed = []
            differs = {
                Survival.NONE: False,
                Survival.ALL: False,
                Survival.TORN: False,
                Survival.PROCESS: bool(unsynced),  # else the same state as ALL
            }
            for key, tracked in self._tracked.items():
                kept = str(self.keep_dir) + os.sep if self.keep_dir is not None else None
                path = _reach(key, {p for p in tracked.paths if not kept or not p.startswith(kept)})
                if path is None:
                    continue
                current = Path(path).read_bytes()
                if current == tracked.durable:
                    continue
                torn = _torn(tracked.durable, current, self.rng)
                differs[Survival.ALL] = True
                differs[Survival.TORN] |= torn not in (None, tracked.durable, current)
                target = {
                    Survival.NONE: tracked.durable,
                    Survival.ALL: current,
                    Survival.TORN: torn if torn is not None else tracked.durable,
                    Survival.PROCESS: current,
                }[survival]
                if target != current:
                    _rewrite(path, target)
                    changed.append(path)
            if self.keep_dir is not None:
                for name in os.listdir(self.keep_dir):
                    os.unlink(self.keep_dir / name)
            return CrashReport(tuple(undone), tuple(changed), differs)

    def close_leftovers(self) -> int:
        """Close the descriptors the operation opened and never closed (a power loss stops
        code before its ``finally`` closes them); returns how many there were."""
        with self._lock:
            leftovers = 0
            for fd, key in list(self._open.items()):
                with contextlib.suppress(OSError):
                    if _key(os.fstat(fd)) == key:
                        os.close(fd)
                        leftovers += 1
                del self._open[fd]
            return leftovers

    @property
    def open_descriptors(self) -> list[int]:
        """Descriptors opened through the seam and still open."""
        return [fd for fd, key in self._open.items() if _still(fd, key)]


def _base(path: str | Path) -> str:
    return os.path.basename(os.fspath(path))


def _fd_name(fd: int) -> str:
    """The name of the file open at ``fd`` (for traces and :attr:`FaultIO.fail_on`)."""
    try:
        return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return f"fd {fd}"


def _still(fd: int, key: Key) -> bool:
    try:
        return _key(os.fstat(fd)) == key
    except OSError:
        return False


def _content(fd: int) -> bytes:
    """Every byte of the file open at ``fd`` (even a write-only descriptor)."""
    rfd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        offset = 0
        while chunk := os.pread(rfd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(rfd)


def _reach(key: Key, paths: set[str]) -> str | None:
    for path in sorted(paths):
        with contextlib.suppress(FileNotFoundError):
            if _key(os.lstat(path)) == key:
                return path
    return None


def _undo(change: _NameChange) -> None:
    full = os.path.join(change.directory, change.name)
    if change.op in ("create", "link"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(full)
    elif change.op == "unlink":
        if change.kept is not None and not os.path.lexists(full):
            os.link(change.kept, full)
    elif change.op == "rename":
        assert change.source is not None
        os.rename(full, os.path.join(change.directory, change.source))
        if change.kept is not None:
            os.link(change.kept, full)
    elif change.op == "mkdir":
        shutil.rmtree(full, ignore_errors=True)
    else:  # pragma: no cover - every op above
        raise AssertionError(change.op)


def _torn(durable: bytes, current: bytes, rng: random.Random | None) -> bytes | None:
    """The file with its change kept up to a page boundary inside it (None: no such cut);
    ``rng`` picks the boundary (default: the first).

    An append (the durable bytes are a prefix) with no page boundary inside it is cut
    inside (in its middle, or where ``rng`` says): a record torn anywhere is what a
    journal's reader must survive. An overwrite is torn only at a page boundary (a smaller
    write is whole or absent)."""
    if current.startswith(durable) and len(current) > len(durable):
        start, end = len(durable), len(current)
        cuts = list(range((start // PAGE + 1) * PAGE, end, PAGE))
        if not cuts:
            cuts = [start + (end - start) // 2] if rng is None else [rng.randrange(start, end)]
        cut = cuts[0] if rng is None else rng.choice(cuts)
        return current[:cut] if start < cut < end else None
    first = next(
        (i for i, (a, b) in enumerate(zip(durable, current, strict=False)) if a != b),
        min(len(durable), len(current)),
    )
    cuts = list(range((first // PAGE + 1) * PAGE, max(len(durable), len(current)), PAGE))
    if not cuts:
        return None
    cut = cuts[0] if rng is None else rng.choice(cuts)
    return current[:cut] + durable[cut:]


def _rewrite(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
