"""Shared CLI plumbing: opening sessions, JSON output, error handling (private).

The options several commands share are in :mod:`toolswap.cli._options`. Nothing here loads
click: ``toolswap run`` uses this module without it (see :mod:`toolswap.cli._run`).
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ToolswapError
from ..externalizer import ToolResultExternalizer
from ..session import Session, legacy_workspace_slug, toolswap_home, workspace_slug

if TYPE_CHECKING:
    from typing import TextIO

    from ..artifact import ExternalizedToolResult
    from ..settings import ExternalizerSettings

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "SHOW_BYTES",
    "echo",
    "echo_json",
    "handle_errors",
    "is_tty",
    "open_externalizer",
    "resolve_session",
    "save_if_large",
    "session_for_source",
]

SHOW_BYTES = 64 << 10
"""The most a query or a record read prints; a larger result is saved as an artifact."""


def echo(message: str, *, err: bool = False) -> None:
    """Print ``message`` and a newline, as ``click.echo`` does, without loading click.

    A message with an escape sequence, or a stream that is not UTF-8, goes through
    ``click.echo`` itself, which strips escape sequences from what is not a terminal and
    re-encodes.
    """
    stream: TextIO | None = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if "\x1b" in message or not _is_utf8(stream):
        import click

        click.echo(message, err=err)
        return
    stream.write(message + "\n")
    stream.flush()


def _is_utf8(stream: TextIO) -> bool:
    try:
        return codecs.lookup(stream.encoding).name == "utf-8"
    except (AttributeError, TypeError, LookupError):
        return False


def echo_json(data: object) -> None:
    """Print ``data`` as JSON on one line."""
    echo(json.dumps(data, ensure_ascii=False, default=str))


def handle_errors(func: F) -> F:
    """Turn library errors into a clean message on stderr and exit status 1."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ToolswapError as exc:
            echo(f"toolswap: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def resolve_session(
    session_id: str, workspace: str | None, session_dir: Path | None, *, create: bool
) -> Session:
    if session_dir is not None:
        return Session.at(session_dir, create=create)
    if workspace is None:
        _note_legacy_workspace(session_id)
    return Session.open(session_id, workspace=workspace, create=create)


def _note_legacy_workspace(session_id: str) -> None:
    """Say so when this directory's session lives under the name toolswap 0.1 gave it."""
    try:
        projects = toolswap_home() / "projects"
        current, legacy = workspace_slug(), legacy_workspace_slug()
    except (ToolswapError, ValueError, OSError):
        return
    if legacy == current or (projects / current / session_id).exists():
        return
    if (projects / legacy / session_id).is_dir():
        echo(
            f"toolswap: note: session {session_id!r} of this directory from before the "
            f"workspace naming changed is in workspace {legacy!r}; new output goes to "
            f"{current!r}. Use --workspace {legacy} to keep using the old one "
            "(see `toolswap sessions`).",
            err=True,
        )


def open_externalizer(
    session_id: str,
    workspace: str | None,
    session_dir: Path | None,
    *,
    create: bool = True,
    read_hint: str = "cli",
) -> ToolResultExternalizer:
    session = resolve_session(session_id, workspace, session_dir, create=create)
    return ToolResultExternalizer(
        session,
        read_hint=read_hint,  # type: ignore[arg-type]
        settings=_one_shot_settings(),
    )


def _one_shot_settings() -> ExternalizerSettings:
    """The environment's settings for a command that captures once and exits: no outline
    helper process (it would start for the one output it can no longer serve)."""
    from dataclasses import replace

    from ..settings import ExternalizerSettings

    return replace(ExternalizerSettings.from_env(), outline_process=False)


def session_for_source(source_id: str, workspace: str | None, session_dir: Path | None) -> Session:
    """The session that holds ``source_id``: explicit, the cwd's workspace, or wherever the
    artifact is (the source ID's file name and digest pick it among same-named sessions)."""
    from ..artifact import parse_artifact_source_id
    from ..workspaces import find_session  # reads: not on the capture path

    parsed = parse_artifact_source_id(source_id)
    if session_dir is not None:
        return Session.at(session_dir, create=False)
    home = toolswap_home()
    prefer = home / "projects" / (workspace or workspace_slug()) / parsed.session
    return find_session(source_id, home=home, prefer=prefer)


def save_if_large(
    session: Session, text: str, *, truncated: bool, max_bytes: int, tool: str, summary: str
) -> ExternalizedToolResult | None:
    """``text`` saved as a new artifact of ``session`` when it is larger than ``max_bytes``
    or was cut (a query's results, a record), else None (print it)."""
    if not truncated and len(text.encode()) <= max_bytes:
        return None
    ext = ToolResultExternalizer(session, settings=_one_shot_settings())
    return ext.externalize(text, tool, summary=" ".join(summary.split())[:240])


def is_tty() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
