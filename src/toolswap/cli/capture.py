"""Capture commands: run (a command's output) and wrap (standard input).

This module is all that ``toolswap run`` imports of the CLI: keep it to the capture.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import click

from ..errors import ArtifactWriteError
from ._common import echo_json, handle_errors
from ._group import main
from ._options import SessionOptions, json_option, session_options
from ._signals import forward_signals, pipe_chunks

if TYPE_CHECKING:
    from ..artifact import ExternalizedToolResult, InlineToolResult

__all__: list[str] = []


def _check_summary(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a blank, over-long or multi-line summary before the command runs (exit 2)."""
    if value is None:
        return None
    from ..pointer import validate_summary

    try:
        return validate_summary(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _check_tool(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and (
        not value.strip() or len(value) > 200 or any(c in value for c in "\r\n\x00")
    ):
        raise click.BadParameter(
            "the tool name must be a single non-blank line of at most 200 characters",
            ctx=ctx,
            param=param,
        )
    return value


def _emit_result(
    result: ExternalizedToolResult | InlineToolResult, exit_code: int | None, as_json: bool
) -> None:
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


@main.command(context_settings={"ignore_unknown_options": True})
@session_options
@click.option(
    "--tool",
    default="bash",
    show_default=True,
    callback=_check_tool,
    help="Tool name recorded as provenance.",
)
@click.option(
    "--summary",
    default=None,
    callback=_check_summary,
    help="Summary for the pointer, one line of at most 240 characters (default: generated).",
)
@json_option("Print a JSON object instead of text.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def run(
    where: SessionOptions,
    tool: str,
    summary: str | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND; print its output inline, or a pointer when it is large.

    Standard output and standard error are captured together, streamed to disk once the
    output passes the threshold. Exits with the command's exit status.

    Example: toolswap run -- pytest -v
    """
    ext = where.externalizer()
    # What can be checked before the command runs (and has side effects) is checked now.
    ext.check_ready()
    with forward_signals() as received:
        if received.signum is not None:
            received.exit_like_the_signal()  # stopped before the command started
        try:
            # Its own process group (off a terminal): a signal reaches all it started.
            proc = subprocess.Popen(
                list(command),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0 if received.own_group else None,
            )
        except OSError as exc:
            click.echo(f"toolswap: cannot run {command[0]!r}: {exc.strerror}", err=True)
            sys.exit(127)
        received.attach(proc)
        assert proc.stdout is not None
        try:
            result = ext.process(
                pipe_chunks(proc.stdout, received),
                tool,
                summary=summary,
                argv=list(command),
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
            if result is None:
                # The command ran: its status and what we can show of its output still count.
                _emit_unsaved(unsaved, code, as_json)
            else:
                _emit_result(result, code, as_json)
        except OSError as exc:  # stdout on a full device, or a reader that went away
            with contextlib.suppress(OSError):
                click.echo(f"toolswap: cannot print the result: {exc.strerror}", err=True)
            _silence_stdout()
    received.exit_like_the_signal()
    sys.exit(code if code >= 0 else 128 - code)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of a broken stdout
    cannot change the exit status."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _emit_unsaved(exc: ArtifactWriteError, exit_code: int | None, as_json: bool) -> None:
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
    click.echo(f"toolswap: {type(exc).__name__}: {exc}", err=True)


@main.command()
@session_options
@click.option(
    "--tool", required=True, callback=_check_tool, help="Tool name recorded as provenance."
)
@click.option(
    "--summary",
    default=None,
    callback=_check_summary,
    help="Summary for the pointer, one line of at most 240 characters (default: generated).",
)
@click.option("--exit-code", type=int, default=None, help="Exit status to record, if any.")
@json_option("Print a JSON object instead of text.")
@handle_errors
def wrap(
    where: SessionOptions,
    tool: str,
    summary: str | None,
    exit_code: int | None,
    as_json: bool,
) -> None:
    """Read a tool's output from standard input; print it inline or as a pointer.

    Example: some-tool | toolswap wrap --tool some-tool
    """
    ext = where.externalizer()
    try:
        result = ext.process(sys.stdin.buffer, tool, summary=summary, exit_code=exit_code)
    except ArtifactWriteError as exc:
        # The output was read from standard input, once: what can be shown of it still is.
        _emit_unsaved(exc, exit_code, as_json)
        sys.exit(1)
    _emit_result(result, exit_code, as_json)
