"""The trusted session root: where a session's files live, and its exclusive lock.

The names inside a session directory are in :mod:`toolswap.layout`.

Only this module turns a session ID into a path. Source IDs and memory references never
carry paths that anything trusts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import durable
from ._artifact_names import validate_session_id
from .backends.base import LocalBackend, SessionBackend
from .durable import ensure_private_dir, not_ours
from .errors import ArtifactAccessError, ConfigurationError, SourceIdError
from .layout import (
    JOURNAL_NAME,
    LOCK_NAME,
    MANIFEST_CHECKED_NAME,
    MANIFEST_HEAD_NAME,
    MANIFEST_NAME,
    STORE_BINDING_NAME,
    STORE_ENV,
    TOOL_RESULTS_DIR,
)

if TYPE_CHECKING:
    # The store code is imported only by a session that is (or is being) bound to a store:
    # a local session's start-up never loads it.
    from .backends.store import StoreBinding

__all__ = [
    "Session",
    "legacy_workspace_slug",
    "session_location",
    "session_lock",
    "toolswap_home",
    "workspace_slug",
]


def toolswap_home() -> Path:
    """``$TOOLSWAP_HOME`` (an empty value means unset), or ``~/.toolswap``.

    The home is the user's own choice, so a symlink to it (or in its parents) is followed
    once, here: everything below it must then be real directories.

    Raises:
        ConfigurationError: the home exists but is not a directory.
    """
    value = os.environ.get("TOOLSWAP_HOME", "").strip()
    home = Path(value).expanduser() if value else Path.home() / ".toolswap"
    origin = f"TOOLSWAP_HOME={value}" if value else str(home)
    try:
        home = home.absolute().resolve()
        is_file = home.exists() and not home.is_dir()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a component that is a file
        raise ConfigurationError(
            f"{origin} cannot be used ({exc}); point TOOLSWAP_HOME at a directory (or unset it)"
        ) from None
    if is_file:
        raise ConfigurationError(
            f"{origin} is not a directory; point TOOLSWAP_HOME at a directory (or unset it)"
        )
    return home


_SLUG_TAIL = 48
"""Characters of the readable part of a derived workspace name (the path's end)."""
_SLUG_HASH = 10
"""Hex digits of the real path's SHA-256 in a derived workspace name."""


def _slug(path: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", path).strip("-.") or "root"
    return slug.replace("..", "-")


def workspace_slug(path: Path | str | None = None) -> str:
    """A single path component naming a workspace: ``$TOOLSWAP_WORKSPACE`` or the cwd.

    A directory's name is the end of its real path made readable, then a short hash of
    the real path: ``/tmp/a-b`` and ``/tmp/a/b`` (or ``my project`` and ``my-project``)
    read alike but get different names (``tmp-a-b-3f5c0e9a21`` and ``tmp-a-b-8d01b2c4f7``).
    """
    env = os.environ.get("TOOLSWAP_WORKSPACE")
    if path is None and env:
        return validate_session_id(env)
    import hashlib  # here: OpenSSL's load is not paid by a session named explicitly

    real = os.path.realpath(Path(path) if path is not None else Path.cwd())
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:_SLUG_HASH]
    readable = _slug(real)[-_SLUG_TAIL:].lstrip("-.") or "root"
    return validate_session_id(f"{readable}-{digest}")


def legacy_workspace_slug(path: Path | str | None = None) -> str:
    """The name toolswap 0.1 gave a directory's workspace (different paths could share it).

    Kept to find sessions written before the naming changed; nothing new is written there.
    """
    resolved = str(Path(path) if path is not None else Path.cwd().resolve())
    return validate_session_id(_slug(resolved)[-128:].lstrip("-.") or "root")


@dataclass(frozen=True, slots=True)
class Session:
    """A session directory the caller trusts; every other path is derived from it."""

    root: Path
    session_id: str
    backend: SessionBackend = field(default_factory=LocalBackend, compare=False)
    """Where the session's names, records and bytes really live (chosen by :meth:`at`)."""

    @classmethod
    def at(cls, session_dir: Path | str, *, create: bool = True) -> Session:
        """Use ``session_dir`` as the session root; its last component is the session ID.

        This is where a session's backend is chosen, once: with ``TOOLSWAP_STORE`` set, a
        new session is bound to that store and the directory becomes its local replica
        (:class:`~toolswap.backends.replica.ReplicaBackend`); a session already bound keeps
        its store whatever the environment says; any other session is local.

        Raises:
            ConfigurationError: the session is bound to another store than
                ``TOOLSWAP_STORE`` names, or was started without a store.
        """
        root = Path(session_dir).expanduser().absolute()
        session_id = validate_session_id(root.name)
        # The caller chose the parent; a symlink there is followed once. The root itself
        # must be a real directory.
        try:
            root = root.parent.resolve() / root.name
        except (OSError, RuntimeError) as exc:  # a symlink loop, an unreadable component
            raise ArtifactAccessError(f"cannot use {root.parent}: {exc}") from None
        session = cls(root=root, session_id=session_id)
        url = os.environ.get(STORE_ENV, "").strip()
        if url:
            from .backends.store import canonical_store_url

            url = canonical_store_url(url)
        if not create and url and not os.path.lexists(root):
            # A replica of a session another host started is made on first use.
            create = _binding_for(root, session_id, url).store.session_exists(
                root.parent.name, session_id
            )
        if create:
            ensure_private_dir(root)
            ensure_private_dir(session.tool_results_dir)
        else:
            try:
                st = os.lstat(root)
            except FileNotFoundError:
                raise ArtifactAccessError(
                    f"session {session_id!r} does not exist at {root}"
                ) from None
            except OSError as exc:
                raise ArtifactAccessError(f"cannot open {root}: {exc.strerror}") from None
            refusal = not_ours(st, directory=True)
            if refusal is not None:
                raise ArtifactAccessError(f"session root {root} {refusal}")
        binding = _bind(session, url)
        if binding is None:
            return session
        from .backends.replica import ReplicaBackend  # only a bound session needs it

        return cls(root=root, session_id=session_id, backend=ReplicaBackend(binding, root))

    @classmethod
    def open(
        cls,
        session_id: str,
        *,
        workspace: str | None = None,
        home: Path | None = None,
        create: bool = True,
    ) -> Session:
        """Open ``<home>/projects/<workspace>/<session_id>``."""
        validate_session_id(session_id)
        ws = validate_session_id(workspace) if workspace is not None else workspace_slug()
        base = home.absolute().resolve() if home is not None else toolswap_home()
        # Below the home nothing is followed: refuse before anything is created.
        for inner in (base / "projects", base / "projects" / ws):
            if os.path.islink(inner) or (os.path.lexists(inner) and not inner.is_dir()):
                raise ArtifactAccessError(
                    f"{inner} must be a real directory, not a symlink or a file; move it aside"
                )
        return cls.at(base / "projects" / ws / session_id, create=create)

    @property
    def key(self) -> str:
        """The name shared services (a memory owner, a database journal) know this session
        by: ``<workspace>/<session>``, after its store's URL when it lives in one (two
        stores may hold sessions of the same names)."""
        return self.backend.key(self.root.parent.name, self.session_id)

    @property
    def tool_results_dir(self) -> Path:
        return self.root / TOOL_RESULTS_DIR

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def manifest_head_path(self) -> Path:
        return self.root / MANIFEST_HEAD_NAME

    @property
    def manifest_checked_path(self) -> Path:
        return self.root / MANIFEST_CHECKED_NAME

    @property
    def journal_path(self) -> Path:
        return self.root / JOURNAL_NAME

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_NAME

    def lock(self) -> AbstractContextManager[None]:
        """The session's exclusive lock (re-entrant in one thread, exclusive across processes)."""
        return session_lock(self.lock_path)


def session_location(root: Path) -> str | None:
    """Where the session directory ``root`` keeps its artifacts: None when the directory is
    the session, else its store's URL (this host's directory is a replica of it).

    Raises:
        ConfigurationError: the binding file is unreadable, not ours, or malformed.
    """
    from .backends.store import read_binding

    bound = read_binding(root)
    return bound.url if bound is not None else None


def _binding_for(root: Path, session_id: str, url: str) -> StoreBinding:
    from .backends.store import StoreBinding

    try:
        workspace = validate_session_id(root.parent.name)
    except SourceIdError:
        raise ConfigurationError(
            f"{STORE_ENV} is set but {root.parent.name!r} cannot name a workspace in the "
            "store; open the session by ID with a valid workspace name"
        ) from None
    return StoreBinding(url, workspace, session_id)


def _holds_anything(session: Session) -> bool:
    """Whether the directory holds anything of a local session (a manifest with records,
    its head file, a lease journal, or any file in tool-results/)."""
    try:
        if os.lstat(session.manifest_path).st_size > 0:
            return True
    except FileNotFoundError:
        pass
    if os.path.lexists(session.manifest_head_path) or os.path.lexists(session.journal_path):
        return True
    try:
        return bool(os.listdir(session.tool_results_dir))
    except FileNotFoundError:
        return False


def _bind(session: Session, url: str) -> StoreBinding | None:
    """The session's store binding: the one it has, or a new one when ``url`` is set."""
    if not url and not os.path.lexists(session.root / STORE_BINDING_NAME):
        return None  # a local session: read_binding would say so, after importing the store
    from .backends.store import read_binding, write_binding

    bound = read_binding(session.root)
    if bound is not None:
        if url and url != bound.url:
            raise ConfigurationError(
                f"session {session.session_id!r} lives in {bound.url}, but {STORE_ENV}={url}; "
                "a session never moves between stores"
            )
        if bound.session != session.session_id:
            raise ConfigurationError(f"{session.root / 'store.json'} names another session")
        return bound
    if not url:
        return None
    if _holds_anything(session):
        raise ConfigurationError(
            f"session {session.session_id!r} was started without a store and keeps its "
            f"artifacts here; unset {STORE_ENV} to use it, or start a new session"
        )
    binding = _binding_for(session.root, session.session_id, url)
    binding.store.check_conditional_writes()  # once per session and host, before binding
    return write_binding(session.root, binding)


class _LockState:
    __slots__ = ("depth", "fd", "rlock")

    def __init__(self) -> None:
        self.rlock = threading.RLock()
        self.fd: int | None = None
        self.depth = 0


_LOCKS: dict[str, _LockState] = {}
_LOCKS_GUARD = threading.Lock()
_OPENING = threading.RLock()
"""Held from a lock file's ``open`` until its descriptor is in its ``_LockState``: a fork
waits for it, so no child gets a copy of the descriptor that ``_after_fork`` does not
know of (re-entrant: a fork from the opening thread itself, a test's, goes on)."""


def _before_fork() -> None:
    _OPENING.acquire()


def _after_fork_in_parent() -> None:
    _OPENING.release()


def _after_fork() -> None:
    """In a forked child: its parent's session locks are not its own (a thread that held
    one is not here; a held ``flock`` is its parent's). Each is taken afresh: a new
    in-process lock, and a ``flock`` of its own, which waits for the parent's. The copy of a
    held lock's descriptor is closed, never unlocked: that would unlock the parent's."""
    global _LOCKS, _LOCKS_GUARD, _OPENING
    for state in _LOCKS.values():
        fd, state.fd = state.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _LOCKS, _LOCKS_GUARD, _OPENING = {}, threading.Lock(), threading.RLock()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork
)


@contextmanager
def session_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``.

    Re-entrant within a thread (``publish_reference`` holds it while ``prepare`` takes it
    again); other threads of this process wait on an in-process lock, other processes on
    the ``flock``. The lock file is opened without following symlinks.

    A forked child holds none of its parent's session locks, even inside a ``with`` its
    parent entered: it takes the lock afresh where it needs it, and waits for its parent to
    leave (a parent that waits for its child inside the lock waits forever, as with any
    lock held across a fork).
    """
    key = os.path.abspath(path)
    with _LOCKS_GUARD:
        state = _LOCKS.setdefault(key, _LockState())
    with state.rlock:
        if state.depth == 0:
            io = durable.current()
            # The session's from the moment it is open: a child forked before the flock
            # returns closes its copy too (kept, it would hold the lock this process takes
            # next, after this process is gone).
            with _OPENING:
                try:
                    fd = io.open(
                        key,
                        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                        0o600,
                    )
                except OSError as exc:
                    raise ArtifactAccessError(
                        f"cannot open session lock {key}: {exc.strerror}"
                    ) from exc
                state.fd = fd
            try:
                st = os.fstat(fd)
                if not_ours(st, directory=False) is not None:
                    raise ArtifactAccessError(
                        f"session lock {key} is not a regular file owned by this user; "
                        "move it aside"
                    )
                try:
                    io.flock(fd, fcntl.LOCK_EX)
                except OSError as exc:
                    raise ArtifactAccessError(
                        f"cannot lock session lock {key}: {exc.strerror} (a file system "
                        "without working locks, such as NFS without a lock daemon?)"
                    ) from exc
            except BaseException:
                state.fd = None
                durable.close_unwritten(fd)
                raise
        state.depth += 1
        try:
            yield
        finally:
            state.depth -= 1
            if state.depth == 0 and state.fd is not None:
                fd, state.fd = state.fd, None
                try:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                finally:
                    durable.close_unwritten(fd)
