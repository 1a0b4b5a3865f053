"""MCP commands: ``toolswap mcp serve`` and ``toolswap mcp proxy`` (the ``toolswap[mcp]`` extra).

Neither imports the MCP SDK (they speak JSON-RPC themselves, see :mod:`toolswap.mcp`); they
need ``anyio``, which the extra installs.
"""

from __future__ import annotations

import importlib.util
import sys

import click

from ..settings import ToolThreshold, parse_threshold
from ._common import handle_errors
from ._group import main
from ._options import SessionOptions, session_options

__all__: list[str] = []


def _threshold_option(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> ToolThreshold | None:
    if value is None:
        return None
    try:
        return parse_threshold(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _require_anyio() -> None:
    """Exit 1 telling the user how to install the extra, when ``anyio`` is missing (found,
    not imported: the proxy starts its upstream first)."""
    if importlib.util.find_spec("anyio") is None:
        click.echo(
            "toolswap: the MCP commands need the mcp extra (no module named 'anyio'); install "
            "it with: pip install '.[mcp]' in the toolswap checkout (docs/configuration.md)",
            err=True,
        )
        sys.exit(1)


@main.group(name="mcp")
def mcp_group() -> None:
    """Serve artifacts to MCP hosts, or proxy an MCP server (needs toolswap[mcp]).

    `serve` offers read_artifact, read_artifact_bytes, grep_artifact and list_artifacts
    over stdio. `proxy` wraps another stdio MCP server: its tools are offered unchanged,
    plus those four, and its large results come back as pointers.
    """


@mcp_group.command()
@session_options
@handle_errors
def serve(where: SessionOptions) -> None:
    """Run an MCP server (stdio) with the artifact read and grep tools.

    Example MCP host entry: {"command": "toolswap", "args": ["mcp", "serve"]}
    """
    _require_anyio()
    import anyio

    from ..mcp.serve import run_server

    ext = where.externalizer(read_hint="mcp")
    anyio.run(run_server, ext)


@mcp_group.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@session_options
@click.option(
    "--threshold",
    default=None,
    callback=_threshold_option,
    metavar="SIZE",
    help=(
        "Externalize results over SIZE: bytes (20000), 50kb, 1mb, 30000chars or never "
        "(default: 50kb, or $TOOLSWAP_THRESHOLD_KB; TOOLSWAP_TOOL_THRESHOLDS rules still apply "
        "per tool)."
    ),
)
@click.option(
    "--resource-threshold",
    default=None,
    callback=_threshold_option,
    metavar="SIZE",
    help=(
        "Externalize resources/read contents over SIZE (default: as --threshold); "
        "'never' passes resources through whole."
    ),
)
@click.argument("upstream", nargs=-1, required=True, type=click.UNPROCESSED)
@handle_errors
def proxy(
    where: SessionOptions,
    threshold: ToolThreshold | None,
    resource_threshold: ToolThreshold | None,
    upstream: tuple[str, ...],
) -> None:
    """Run UPSTREAM (a stdio MCP server) behind a proxy that externalizes large results.

    The host sees the upstream's tools unchanged plus read_artifact, read_artifact_bytes,
    grep_artifact and list_artifacts. Small results pass through byte for byte; large
    text, structured content, images, task results (tasks/result) and resource reads are
    saved as artifacts and replaced by pointers, one per result. The upstream gets
    exactly the environment the proxy was started with.

    Example: toolswap mcp proxy --threshold 20kb -- npx -y @modelcontextprotocol/server-everything
    """
    _require_anyio()
    ext = where.externalizer(read_hint="mcp")
    from ..mcp.upstream import say, spawn_upstream

    # The upstream boots (a second or more) while the event loop and the proxy load.
    try:
        process = spawn_upstream(upstream)
    except OSError as exc:
        say(f"cannot start the upstream MCP server {upstream[0]!r}: {exc.strerror or exc}")
        sys.exit(127)
    try:
        import anyio

        from ..mcp.proxy import run_proxy

        status = anyio.run(
            lambda: run_proxy(
                list(upstream),
                ext,
                threshold=threshold,
                resource_threshold=resource_threshold,
                process=process,
            )
        )
    finally:
        if process.poll() is None:  # the proxy stops it; this is for a failure before that
            process.kill()
            process.wait()
    sys.exit(status)
