"""Capture commands: run (a command's output) and wrap (standard input).

This module is all that ``toolswap run`` imports of the CLI: keep it to the capture. The
usual ``toolswap run [OPTION...] -- COMMAND`` does not even import this module, nor click:
see :mod:`toolswap.cli._run`, which holds the command's options and body.
"""

from __future__ import annotations

import sys

import click

from ..errors import ArtifactWriteError
from ._common import handle_errors
from ._group import main
from ._options import Command, SessionOptions, click_option, session_options
from ._run import (
    JSON,
    RUN_OPTIONS,
    SESSION_OPTIONS,
    SUMMARY,
    TOOL,
    emit_result,
    emit_unsaved,
    run_command,
)

__all__: list[str] = []


def _run_options(func: Command) -> Command:
    """The options of :data:`RUN_OPTIONS`: the session's bundled as ``where``."""
    for spec in reversed(RUN_OPTIONS[len(SESSION_OPTIONS) :]):
        func = click_option(spec)(func)
    return session_options(func)


# Options end at the command's name: ``toolswap run grep --json x f`` runs grep with --json
# (click took it for toolswap's own, a review).
@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_run_options
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
    run_command(where.externalizer(), tool, summary, as_json, command)


@main.command()
@session_options
@click_option(TOOL, required=True, default=None, show_default=False)
@click_option(SUMMARY)
@click.option("--exit-code", type=int, default=None, help="Exit status to record, if any.")
@click_option(JSON, help="Print a JSON object instead of text.")
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
        emit_unsaved(exc, exit_code, as_json)
        sys.exit(1)
    emit_result(result, exit_code, as_json)
