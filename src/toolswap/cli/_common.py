"""Shared CLI plumbing: session options, JSON output, error handling (private)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from ..artifact import parse_artifact_source_id
from ..errors import SourceIdError, ToolswapError
from ..externalizer import ToolResultExternalizer
from ..session import Session, toolswap_home, workspace_slug

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "echo_json",
    "handle_errors",
    "open_externalizer",
    "session_for_source",
    "session_options",
    "source_options",
]


def echo_json(data: object) -> None:
    """Print ``data`` as JSON on one line."""
    click.echo(json.dumps(data, ensure_ascii=False, default=str))


def handle_errors(func: F) -> F:
    """Turn library errors into a clean message on stderr and exit status 1."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ToolswapError as exc:
            click.echo(f"toolswap: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def session_options(func: F) -> F:
    """``--session``, ``--workspace`` and ``--session-dir``."""
    func = click.option(
        "--session-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Use this session directory directly (overrides --session/--workspace).",
    )(func)
    func = click.option(
        "--workspace",
        envvar="TOOLSWAP_WORKSPACE",
        default=None,
        help="Workspace name under $TOOLSWAP_HOME/projects (default: derived from the cwd).",
    )(func)
    func = click.option(
        "--session",
        "session_id",
        envvar="TOOLSWAP_SESSION",
        default="default",
        show_default=True,
        help="Session ID ($TOOLSWAP_SESSION).",
    )(func)
    return func


def source_options(func: F) -> F:
    """``--workspace`` and ``--session-dir`` for commands that take a source ID."""
    func = click.option(
        "--session-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Session directory (default: found from the source ID).",
    )(func)
    func = click.option(
        "--workspace",
        envvar="TOOLSWAP_WORKSPACE",
        default=None,
        help="Workspace of the session.",
    )(func)
    return func


def resolve_session(
    session_id: str, workspace: str | None, session_dir: Path | None, *, create: bool
) -> Session:
    if session_dir is not None:
        return Session.at(session_dir, create=create)
    return Session.open(session_id, workspace=workspace, create=create)


def open_externalizer(
    session_id: str,
    workspace: str | None,
    session_dir: Path | None,
    *,
    create: bool = True,
    read_hint: str = "cli",
) -> ToolResultExternalizer:
    session = resolve_session(session_id, workspace, session_dir, create=create)
    return ToolResultExternalizer(session, read_hint=read_hint)  # type: ignore[arg-type]


def session_for_source(source_id: str, workspace: str | None, session_dir: Path | None) -> Session:
    """The session that holds ``source_id``: explicit, the cwd's workspace, or a unique match."""
    parsed = parse_artifact_source_id(source_id)
    if session_dir is not None:
        return Session.at(session_dir, create=False)
    base = toolswap_home() / "projects"
    ws = workspace or workspace_slug()
    if (base / ws / parsed.session).is_dir():
        return Session.open(parsed.session, workspace=ws, create=False)
    if workspace is None and base.is_dir():
        found = sorted(
            p for p in base.glob(f"*/{parsed.session}") if p.is_dir() and not p.is_symlink()
        )
        if len(found) == 1:
            return Session.at(found[0], create=False)
        if len(found) > 1:
            names = ", ".join(p.parent.name for p in found[:5])
            raise SourceIdError(
                f"session {parsed.session!r} exists in several workspaces ({names}); "
                "pass --workspace"
            )
    raise SourceIdError(
        f"no session {parsed.session!r} under {base}; pass --workspace or --session-dir"
    )


def is_tty() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
