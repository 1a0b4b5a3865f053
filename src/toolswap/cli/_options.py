"""Options several commands share: the session, the output format, the retention backend.

Each is declared once, here or (those ``toolswap run`` takes) as an
:class:`~toolswap.cli._run.OptionSpec` in :mod:`toolswap.cli._run`; a command takes them
with one decorator.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from ._common import open_externalizer, resolve_session, session_for_source
from ._run import JSON, SESSION_DIR, SESSION_OPTIONS, WORKSPACE, OptionSpec

if TYPE_CHECKING:
    from ..externalizer import ToolResultExternalizer
    from ..retention import SessionRetention
    from ..session import Session

F = TypeVar("F", bound=Callable[..., Any])
Command = Callable[..., None]
Decorator = Callable[[Command], Command]

__all__ = [
    "BackendOptions",
    "SessionOptions",
    "SourceOptions",
    "backend_options",
    "bundled",
    "click_option",
    "json_option",
    "session_options",
    "source_options",
]


def bundled(name: str, build: Callable[..., object], *options: Decorator) -> Decorator:
    """Click options whose values reach the command as one value, ``name=build(...)``.

    Args:
        name: the command's parameter that receives the value.
        build: makes the value; its parameters are the options' names.
        options: the options, in the order ``--help`` lists them.
    """
    keys = tuple(inspect.signature(build).parameters)

    def decorate(func: Command) -> Command:
        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> None:
            values = {key: kwargs.pop(key) for key in keys}
            func(*args, **{name: build(**values)}, **kwargs)

        decorated: Command = command
        for option in reversed(options):
            decorated = option(decorated)
        return decorated

    return decorate


def click_option(spec: OptionSpec, **overrides: Any) -> Callable[[F], F]:
    """The click option of ``spec``; ``overrides`` replace its settings for one command."""
    settings: dict[str, Any] = {
        "default": spec.default,
        "show_default": spec.show_default,
        "help": spec.help,
    }
    if spec.envvar is not None:
        settings["envvar"] = spec.envvar
    if spec.is_flag:
        settings["is_flag"] = True
    if spec.directory:
        settings["type"] = click.Path(file_okay=False, path_type=Path)
    if spec.check is not None:
        settings["callback"] = _checked(spec.check)
    settings.update(overrides)
    if settings["default"] is None:
        del settings["default"]  # click: None given is a default, and satisfies required=True
    return click.option(spec.flag, spec.dest, **settings)


def _checked(
    check: Callable[[str], str],
) -> Callable[[click.Context, click.Parameter, str | None], str | None]:
    """A click callback that runs ``check``: a value it refuses is a usage error (exit 2),
    refused before the command runs."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return check(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return callback


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """``--session``, ``--workspace`` and ``--session-dir`` as one value."""

    session_id: str
    workspace: str | None = None
    session_dir: Path | None = None
    """Overrides the session ID and the workspace."""

    def session(self, *, create: bool = False) -> Session:
        """The session they name."""
        return resolve_session(self.session_id, self.workspace, self.session_dir, create=create)

    def externalizer(
        self, *, create: bool = True, read_hint: str = "cli"
    ) -> ToolResultExternalizer:
        """An externalizer of the session they name (created unless ``create=False``)."""
        return open_externalizer(
            self.session_id, self.workspace, self.session_dir, create=create, read_hint=read_hint
        )


session_options = bundled("where", SessionOptions, *map(click_option, SESSION_OPTIONS))
"""``--session``, ``--workspace`` and ``--session-dir``, passed as ``where``
(:class:`SessionOptions`)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """``--workspace`` and ``--session-dir`` of a command that takes a source ID."""

    workspace: str | None = None
    session_dir: Path | None = None

    def session(self, source_id: str) -> Session:
        """The session that holds ``source_id`` (see :func:`session_for_source`)."""
        return session_for_source(source_id, self.workspace, self.session_dir)


source_options = bundled(
    "where",
    SourceOptions,
    click_option(WORKSPACE, help="Workspace of the session."),
    click_option(SESSION_DIR, help="Session directory (default: found from the source ID)."),
)
"""``--workspace`` and ``--session-dir`` for commands that take a source ID, passed as
``where`` (:class:`SourceOptions`)."""


def json_option(help: str = "Print a JSON object.") -> Callable[[F], F]:
    """``--json``, passed as ``as_json``: every read or list command can print JSON.

    Args:
        help: what the command prints with it.
    """
    return click_option(JSON, help=help)


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

        retention = open_retention(
            session,
            database_url=self.database_url or None,
            schema=self.schema,
            owner_db=self.owner_db,
            require_owner=require_owner,
        )
        # The command's connections close when it ends, not whenever the collector runs.
        click.get_current_context().call_on_close(retention.close)
        return retention


def _backend(
    owner_db: Path | None, database_url: str | None, database_schema: str
) -> BackendOptions:
    source = click.get_current_context().get_parameter_source("database_schema")
    given = source is not None and source is not ParameterSource.DEFAULT
    return BackendOptions(owner_db, database_url, database_schema if given else None)


def backend_options(func: Command) -> Command:
    """``--owner-db``, ``--database-url`` and ``--database-schema``, passed to the command
    as one ``backend`` (:class:`BackendOptions`)."""
    from ..retention import DEFAULT_OWNER_FILENAME
    from ..retention.session_retention import (
        DATABASE_SCHEMA_ENV,
        DATABASE_URL_ENV,
        DEFAULT_SCHEMA,
    )

    return bundled(
        "backend",
        _backend,
        click.option(
            "--owner-db",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help=(
                f"The memory owner's SQLite database (default: <session>/{DEFAULT_OWNER_FILENAME})."
            ),
        ),
        click.option(
            "--database-url",
            envvar=DATABASE_URL_ENV,
            default=None,
            help=(
                "PostgreSQL URL of a shared session's memory owner and lease journal "
                f"(env {DATABASE_URL_ENV}); replaces --owner-db."
            ),
        ),
        click.option(
            "--database-schema",
            envvar=DATABASE_SCHEMA_ENV,
            default=DEFAULT_SCHEMA,
            show_default=True,
            help=f"Schema of the PostgreSQL tables (env {DATABASE_SCHEMA_ENV}).",
        ),
    )(func)
