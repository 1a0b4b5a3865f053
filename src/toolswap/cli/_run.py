"""``toolswap run`` without click: its options, a reader of its usual command line, and the
run itself (private).

The options are declared once, in :data:`RUN_OPTIONS`: :mod:`toolswap.cli.capture` makes
the click command of them, and :func:`parse_run` reads the usual command line,
``toolswap run [OPTION...] -- COMMAND...``, by them without importing click, whose import
is a large part of the start-up that every command an agent runs through toolswap pays.
Anything else (``--help``, an unknown or short option, a value its check refuses, no
``--``, shell completion) is left to click, so usage errors and help stay click's own.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TextIO

from .._prewarm import prewarm, prewarming
from .._utf8 import escaped_bytes, lone_surrogate
from ..errors import ArtifactWriteError
from ._common import echo, echo_json, handle_errors, open_externalizer
from ._signals import dying_with_toolswap, forward_signals, pipe_chunks

if TYPE_CHECKING:
    from ..artifact import ExternalizedToolResult, InlineToolResult
    from ..externalizer import ToolResultExternalizer

__all__ = [
    "JSON",
    "RUN_OPTIONS",
    "SESSION",
    "SESSION_DIR",
    "SESSION_OPTIONS",
    "SUMMARY",
    "TOOL",
    "WORKSPACE",
    "OptionSpec",
    "RunArgs",
    "check_summary",
    "check_tool",
    "emit_result",
    "emit_unsaved",
    "fast_run",
    "parse_run",
    "run_command",
]


def check_tool(value: str) -> str:
    """``--tool``: a single non-blank line of at most 200 characters (ValueError if not)."""
    if not value.strip() or len(value) > 200 or any(c in value for c in "\r\n\x00"):
        raise ValueError("the tool name must be a single non-blank line of at most 200 characters")
    if lone_surrogate(value):
        raise ValueError("the tool name is not UTF-8 text")
    return value


def check_summary(value: str) -> str:
    """``--summary``: refused (ValueError) when blank, over-long or multi-line."""
    from ..pointer import validate_summary  # only when a summary is given: spill machinery

    checked = validate_summary(value)
    assert checked is not None
    return checked


class OptionSpec(NamedTuple):
    """One option: what click declares and what :func:`parse_run` reads.

    A NamedTuple, not a dataclass: the table is built at every start of ``toolswap run``.
    """

    flag: str
    dest: str
    """The command's parameter that receives the value."""
    help: str
    default: str | bool | None = None
    envvar: str | None = None
    """Read when the option is not given (an empty value counts as unset, as in click)."""
    is_flag: bool = False
    show_default: bool = False
    check: Callable[[str], str] | None = None
    """Returns the value to use or raises ValueError (click: a usage error, exit 2)."""
    directory: bool = False
    """A path where an existing regular file, or an unreadable entry, is refused."""


SESSION = OptionSpec(
    "--session",
    "session_id",
    "Session ID ($TOOLSWAP_SESSION).",
    default="default",
    envvar="TOOLSWAP_SESSION",
    show_default=True,
)
WORKSPACE = OptionSpec(
    "--workspace",
    "workspace",
    "Workspace name under $TOOLSWAP_HOME/projects (default: derived from the cwd).",
    envvar="TOOLSWAP_WORKSPACE",
)
SESSION_DIR = OptionSpec(
    "--session-dir",
    "session_dir",
    "Use this session directory directly (overrides --session/--workspace).",
    directory=True,
)
SESSION_OPTIONS = (SESSION, WORKSPACE, SESSION_DIR)
"""``--session``, ``--workspace`` and ``--session-dir``: every command that opens a session."""
TOOL = OptionSpec(
    "--tool",
    "tool",
    "Tool name recorded as provenance.",
    default="bash",
    show_default=True,
    check=check_tool,
)
SUMMARY = OptionSpec(
    "--summary",
    "summary",
    "Summary for the pointer, one line of at most 240 characters (default: generated).",
    check=check_summary,
)
JSON = OptionSpec("--json", "as_json", "Print a JSON object.", default=False, is_flag=True)
RUN_OPTIONS = (
    *SESSION_OPTIONS,
    TOOL,
    SUMMARY,
    JSON._replace(help="Print a JSON object instead of text."),
)
"""The options of ``toolswap run``, in the order ``--help`` lists them."""


class RunArgs(NamedTuple):
    """A ``toolswap run`` command line, read: the values click would pass to the command."""

    session_id: str
    workspace: str | None
    session_dir: Path | None
    tool: str
    summary: str | None
    as_json: bool
    command: tuple[str, ...]


class _Refused(Exception):
    """A value click would refuse (or convert in a way not copied here): click decides."""


def _directory(value: str) -> Path:
    # As click.Path(file_okay=False) converts it: a path that is missing or a readable
    # non-file passes as it is.
    try:
        st = os.stat(value)
    except OSError:
        return Path(value)
    if stat.S_ISREG(st.st_mode) or not os.access(value, os.R_OK):
        raise _Refused
    return Path(value)


def _value(spec: OptionSpec, given: str | bool | None, environ: Mapping[str, str]) -> object:
    if given is None and spec.envvar is not None:
        given = environ.get(spec.envvar) or None
    if given is None:
        return spec.default
    if isinstance(given, str):
        if spec.check is not None:
            try:
                given = spec.check(given)
            except ValueError:
                raise _Refused from None
        if spec.directory:
            return _directory(given)
    return given


def parse_run(args: Sequence[str], environ: Mapping[str, str]) -> RunArgs | None:
    """Read ``run [OPTION...] -- COMMAND...`` as click reads it, by :data:`RUN_OPTIONS`.

    Args:
        args: the command line after the program's name.
        environ: the environment the options' variables are read from.

    Returns:
        The values, or None for any other command line: click reads that one (and reports
        its usage errors).
    """
    if len(args) < 3 or args[0] != "run":
        return None
    if any(name.startswith("_") and name.endswith("_COMPLETE") for name in environ):
        return None  # click's shell completion
    options = {spec.flag: spec for spec in RUN_OPTIONS}
    given: dict[str, str | bool] = {}
    at = 1
    while True:
        if at >= len(args):
            return None  # no "--"
        arg = args[at]
        at += 1
        if arg == "--":
            break
        flag, equals, value = arg.partition("=")
        spec = options.get(flag)
        if spec is None:
            return None  # an argument, a short or unknown option, --help
        if spec.is_flag:
            if equals:
                return None  # click: "Option '--json' does not take a value."
            given[spec.dest] = True
            continue
        if not equals:
            if at >= len(args):
                return None
            value = args[at]  # whatever it looks like, as click takes it
            at += 1
        given[spec.dest] = value  # the last one counts, as in click
    command = tuple(args[at:])
    if not command:
        return None
    try:
        values = {spec.dest: _value(spec, given.get(spec.dest), environ) for spec in RUN_OPTIONS}
    except _Refused:
        return None
    return RunArgs(**values, command=command)  # type: ignore[arg-type]


def fast_run(args: Sequence[str], *, end_now: bool = False) -> None:
    """Run ``toolswap run`` without click when :func:`parse_run` reads ``args``; else return
    at once, having done nothing.

    What follows the command is what click's standalone mode does around it: an interrupt
    outside the command prints "Aborted!", a broken pipe exits 1 quietly.

    Args:
        end_now: the process is toolswap's own (the console script): once the command is
            done, end it without the interpreter's teardown when nothing needs that (see
            :func:`_end_now`) instead of raising SystemExit.
    """
    parsed = parse_run(args, os.environ)
    if parsed is None:
        return
    code: str | int | None = 0
    try:
        handle_errors(_run_parsed)(parsed)
    except SystemExit as stop:
        code = stop.code
    except (EOFError, KeyboardInterrupt):
        echo("", err=True)
        echo("Aborted!", err=True)
        sys.exit(1)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        # As click does: the reader went away, and the final flush must not say so.
        _silence(sys.stdout)
        _silence(sys.stderr)
        sys.exit(1)
    if end_now:
        _end_now(code)
    sys.exit(code)


def _end_now(code: str | int | None) -> None:
    """Exit with ``code`` at once, as ``sys.exit`` would, without the interpreter's teardown
    (which clears every loaded module, one by one: several ms of every command), when that
    teardown has nothing else to do: no atexit callback, no other thread, and both streams
    flushed. Returns when in doubt; ``sys.exit`` then ends the process the usual way.

    Everything a capture writes is written and fsynced through descriptors before this
    (:mod:`toolswap.durable`): no buffered file of ours is left for the teardown to flush.
    """
    if code is None:
        code = 0
    # (Imports ahead have nothing to finish; the count may briefly be -1 as they end.)
    others = threading.active_count() - 1 - prewarming()
    if not isinstance(code, int) or atexit._ncallbacks() or others > 0:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return  # the usual exit reports it (and exits 120), as before
    os._exit(code)


def _run_parsed(parsed: RunArgs) -> None:
    ext = open_externalizer(parsed.session_id, parsed.workspace, parsed.session_dir)
    run_command(ext, parsed.tool, parsed.summary, parsed.as_json, parsed.command)


def run_command(
    ext: ToolResultExternalizer,
    tool: str,
    summary: str | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """``toolswap run``: run ``command`` and capture its output into ``ext``'s session;
    print the output or a pointer, and exit with the command's status."""
    # What can be checked before the command runs (and has side effects) is checked now.
    ext.check_ready()
    with forward_signals() as received:
        if received.signum is not None:
            received.exit_like_the_signal()  # stopped before the command started
        try:
            # Its own process group (off a terminal): a signal reaches all it started. Out
            # of the group a harness kills, it dies with toolswap instead.
            own = received.own_group
            proc = subprocess.Popen(
                list(command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0 if own else None,
                preexec_fn=dying_with_toolswap() if own else None,
            )
        except OSError as exc:
            echo(f"toolswap: cannot run {command[0]!r}: {exc.strerror}", err=True)
            # As a shell says it: 127 for a command not found, 126 for one found that
            # cannot be run (not executable, a directory; a script whose interpreter is
            # missing gives ENOENT, 127, as in bash).
            sys.exit(127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126)
        received.attach(proc)
        assert proc.stdout is not None
        settings = ext.settings
        quiet = (
            functools.partial(prewarm, structured=settings.structured_outline)
            if settings.prewarm
            else None
        )
        try:
            result = ext.process(
                pipe_chunks(proc.stdout, received, quiet),
                tool,
                summary=summary,
                # (A byte that is not UTF-8, as in a Latin-1 file name, recorded as \xNN.)
                argv=[escaped_bytes(arg) for arg in command],
                exit_code=proc.wait,
                interrupted=lambda: received.interrupted,
            )
        except ArtifactWriteError as exc:
            result = None
            unsaved = exc
        finally:
            proc.stdout.close()
        code = proc.wait()
        try:
            if sys.stdout is None:  # started with standard output closed (>&-)
                raise OSError(errno.EBADF, "standard output is closed")
            if result is None:
                # The command ran: its status and what we can show of its output still count.
                emit_unsaved(unsaved, code, as_json)
            else:
                emit_result(result, code, as_json)
        except OSError as exc:  # stdout on a full device, or a reader that went away
            with contextlib.suppress(OSError):
                echo(f"toolswap: cannot print the result: {exc.strerror}", err=True)
            if sys.stdout is not None:
                _silence(sys.stdout)
    received.exit_like_the_signal()
    sys.exit(code if code >= 0 else 128 - code)


def _silence(stream: TextIO) -> None:
    """Point ``stream`` at /dev/null, so the interpreter's final flush of a broken stdout
    (or stderr) cannot change the exit status."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def emit_result(
    result: ExternalizedToolResult | InlineToolResult, exit_code: int | None, as_json: bool
) -> None:
    """Print a capture's result: its context text, or with ``as_json`` a JSON object."""
    artifact = result.artifact
    text = result.context_text
    if as_json:
        echo_json(
            {
                "externalized": artifact is not None,
                "context_text": text,
                "artifact": artifact.to_dict() if artifact else None,
                "exit_code": exit_code,
            }
        )
        return
    sys.stdout.write(text)
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def emit_unsaved(exc: ArtifactWriteError, exit_code: int | None, as_json: bool) -> None:
    """Print what can be shown of an output that could not be saved, and why not."""
    if as_json:
        echo_json(
            {
                "externalized": False,
                "saved": False,
                "context_text": exc.preview,
                "artifact": None,
                "exit_code": exit_code,
                "error": f"{type(exc).__name__}: {exc}",
            }
        )
    else:
        sys.stdout.write(exc.preview)
        sys.stdout.flush()
    echo(f"toolswap: {type(exc).__name__}: {exc}", err=True)
