"""Sessions across workspaces: listing them, and finding the one that holds a source ID.

Every directory gets its own workspace (``<home>/projects/<workspace>/``, named by
:func:`toolswap.session.workspace_slug`), and every workspace has a session called
``default``, so a session name alone does not say where an artifact is. A source ID
carries more than the name: the artifact's file name and the first 12 hex digits of its
SHA-256. :func:`find_session` uses them to pick the one session that holds the artifact,
so a source ID printed anywhere reads from anywhere by the same user.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ._json_form import fields_form
from .artifact import parse_artifact_source_id, validate_session_id
from .errors import (
    ArtifactAccessError,
    ArtifactNotFoundError,
    ConfigurationError,
    SourceIdError,
    ToolswapError,
)
from .layout import TOOL_RESULTS_DIR
from .reader import ArtifactReader
from .session import Session, session_location, toolswap_home

__all__ = ["SessionEntry", "find_session", "holds", "list_sessions", "session_dirs"]


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One session directory under ``<home>/projects``."""

    workspace: str
    session_id: str
    path: Path
    artifacts: int
    """Files in ``tool-results/`` (artifacts not collected yet)."""
    byte_size: int
    modified: datetime | None
    """When an artifact was last written (None when there is none)."""
    store: str | None = None
    """The shared store the session lives in (its directory then holds this host's
    replica: ``artifacts`` counts the copies here); None for a local session."""

    def to_dict(self) -> dict[str, object]:
        return {
            "workspace": self.workspace,
            "session": self.session_id,
            **fields_form(self, skip=("workspace", "session_id")),
        }


def session_dirs(home: Path, session_id: str | None = None) -> list[tuple[str, Path]]:
    """``(workspace, session directory)`` pairs: real directories owned by this user that
    hold a ``tool-results`` directory, sorted by workspace then session."""
    base = home / "projects"
    found: list[tuple[str, Path]] = []
    try:
        workspaces = sorted(base.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return found
    except OSError as exc:  # EMFILE, EIO: the sessions may be there, unseen
        raise ArtifactAccessError(f"cannot list {base}: {exc.strerror}; retry") from None
    uid = os.geteuid()
    for ws_dir in workspaces:
        if not _owned_dir(ws_dir, uid):
            continue
        try:
            validate_session_id(ws_dir.name)
        except ValueError:
            continue
        try:
            candidates = (
                [ws_dir / session_id] if session_id is not None else sorted(ws_dir.iterdir())
            )
        except OSError as exc:
            raise ArtifactAccessError(f"cannot list {ws_dir}: {exc.strerror}; retry") from None
        for sess_dir in candidates:
            if _owned_dir(sess_dir, uid) and _owned_dir(sess_dir / TOOL_RESULTS_DIR, uid):
                try:
                    validate_session_id(sess_dir.name)
                except ValueError:
                    continue
                found.append((ws_dir.name, sess_dir))
    return found


def _owned_dir(path: Path, uid: int) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


def list_sessions(home: Path | None = None) -> list[SessionEntry]:
    """Every session under ``<home>/projects`` (default ``$TOOLSWAP_HOME``), with the count,
    size and last write time of its artifacts. Reads directory entries only."""
    entries: list[SessionEntry] = []
    for workspace, path in session_dirs(home if home is not None else toolswap_home()):
        count = size = 0
        latest: float | None = None
        try:
            files = list(os.scandir(path / TOOL_RESULTS_DIR))
        except FileNotFoundError:  # removed since it was listed
            files = []
        except OSError as exc:  # EMFILE, EIO: its artifacts are there, unseen; never say 0
            raise ArtifactAccessError(
                f"cannot list {path / TOOL_RESULTS_DIR}: {exc.strerror}; retry"
            ) from None
        for entry in files:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or entry.name.startswith("."):
                continue
            count += 1
            size += st.st_size
            latest = st.st_mtime if latest is None else max(latest, st.st_mtime)
        entries.append(
            SessionEntry(
                workspace=workspace,
                session_id=path.name,
                path=path.absolute(),
                artifacts=count,
                byte_size=size,
                modified=datetime.fromtimestamp(latest, UTC) if latest is not None else None,
                store=_store_of(path),
            )
        )
    return entries


def _store_of(path: Path) -> str | None:
    try:
        return session_location(path)
    except ConfigurationError as exc:
        return f"? ({exc})"


def holds(session: Session, source_id: str) -> bool:
    """Whether ``session``'s manifest has this artifact (file name and digest prefix)."""
    try:
        parsed = parse_artifact_source_id(source_id)
        if parsed.session != session.session_id:
            return False
        ArtifactReader(session).reference(source_id)
    except ToolswapError:
        return False
    return True


def find_session(
    source_id: str,
    *,
    home: Path | None = None,
    workspace: str | None = None,
    prefer: Path | None = None,
) -> Session:
    """The session that holds ``source_id``.

    Args:
        source_id: ``artifact:<session>:<file>:<12 hex>``.
        home: the toolswap home (default ``$TOOLSWAP_HOME`` or ``~/.toolswap``).
        workspace: the workspace to try first (``--workspace``); the others are searched
            when its session does not hold the artifact.
        prefer: a session directory to try first when no workspace is named (the
            caller's own).

    Raises:
        SourceIdError: the ID is malformed, or no session of that name exists anywhere.
        ArtifactNotFoundError: sessions of that name exist, but none holds the artifact
            (the message names them).
    """
    parsed = parse_artifact_source_id(source_id.strip())
    base = home if home is not None else toolswap_home()
    if workspace is not None:
        prefer = base / "projects" / validate_session_id(workspace) / parsed.session
    if prefer is not None:
        try:
            # With TOOLSWAP_STORE set, a session another host started is replicated here.
            session = Session.at(prefer, create=False)
        except ArtifactAccessError:
            pass  # not here: searched below
        else:
            if holds(session, source_id.strip()):
                return session
    dirs = session_dirs(base, parsed.session)
    sessions = []
    for _, path in dirs:
        try:
            sessions.append(Session.at(path, create=False))
        except ToolswapError:
            continue  # one that cannot be opened here (another store, say) holds nothing

    holding = [s for s in sessions if holds(s, source_id.strip())]
    if holding:
        # Several only if the same bytes were saved under the same name and session in
        # two workspaces: any of them reads the same, verified content.
        return holding[0]
    if len(sessions) == 1:
        return sessions[0]  # its reader explains (collected, or never there)
    if not sessions:
        raise SourceIdError(
            f"no session {parsed.session!r} in any workspace under {base / 'projects'}; "
            "pass --session-dir if it lives elsewhere"
        )
    names = ", ".join(ws for ws, _ in dirs[:5]) + (", ..." if len(dirs) > 5 else "")
    raise ArtifactNotFoundError(
        f"no session named {parsed.session!r} holds {parsed.filename} with digest "
        f"{parsed.digest_prefix} (workspaces with that session: {names}); "
        "it may have been collected, or the source ID is mistyped"
    )
