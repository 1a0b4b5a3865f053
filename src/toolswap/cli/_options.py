"""Options several commands share: the session, the output format, the retention backend.

Each is declared once here; a command takes them with one decorator.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from ..retention import SessionRetention
    from ..session import Session

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "BackendOptions",
    "backend_options",
    "json_option",
    "session_options",
    "source_options",
]


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


def json_option(help: str = "Print a JSON object.") -> Callable[[F], F]:
    """``--json``, passed as ``as_json``: every read or list command can print JSON.

    Args:
        help: what the command prints with it.
    """
    return click.option("--json", "as_json", is_flag=True, help=help)


# -- the retention backend ---------------------------------------------------------------
# retention is imported when a command that takes these options is registered or run,
# never by the capture commands.


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """``--owner-db``, ``--database-url`` and ``--database-schema`` as one value.

    All None: the session's recorded choice, else its own files.
    """

    owner_db: Path | None = None
    database_url: str | None = None
    schema: str | None = None
    """None when not given (the session's recorded schema, else the default)."""

    def open(self, session: Session, *, require_owner: bool = False) -> SessionRetention:
        """The session's retention (see :func:`toolswap.retention.open_retention`)."""
        if self.owner_db is not None and self.database_url:
            raise click.UsageError("--owner-db and --database-url name two different owners")
        from ..retention import open_retention

        return open_retention(
            session,
            database_url=self.database_url or None,
            schema=self.schema,
            owner_db=self.owner_db,
            require_owner=require_owner,
        )


def backend_options(func: Callable[..., None]) -> Callable[..., None]:
    """``--owner-db``, ``--database-url`` and ``--database-schema``, passed to the command
    as one ``backend`` (:class:`BackendOptions`)."""
    from ..retention import DEFAULT_OWNER_FILENAME
    from ..retention.session_retention import (
        DATABASE_SCHEMA_ENV,
        DATABASE_URL_ENV,
        DEFAULT_SCHEMA,
    )

    @functools.wraps(func)
    def command(
        *args: Any,
        owner_db: Path | None,
        database_url: str | None,
        database_schema: str,
        **kwargs: Any,
    ) -> None:
        source = click.get_current_context().get_parameter_source("database_schema")
        given = source is not None and source is not ParameterSource.DEFAULT
        backend = BackendOptions(owner_db, database_url, database_schema if given else None)
        func(*args, backend=backend, **kwargs)

    decorated: Callable[..., None] = click.option(
        "--database-schema",
        envvar=DATABASE_SCHEMA_ENV,
        default=DEFAULT_SCHEMA,
        show_default=True,
        help=f"Schema of the PostgreSQL tables (env {DATABASE_SCHEMA_ENV}).",
    )(command)
    decorated = click.option(
        "--database-url",
        envvar=DATABASE_URL_ENV,
        default=None,
        help=(
            "PostgreSQL URL of a shared session's memory owner and lease journal "
            f"(env {DATABASE_URL_ENV}); replaces --owner-db."
        ),
    )(decorated)
    return click.option(
        "--owner-db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help=f"The memory owner's SQLite database (default: <session>/{DEFAULT_OWNER_FILENAME}).",
    )(decorated)
