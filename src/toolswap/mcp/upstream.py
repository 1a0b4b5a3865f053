"""The upstream MCP server's process for ``toolswap mcp proxy``, started before the rest of
the proxy loads (standard library only).

An upstream server takes a second or more to start (an SDK server imports the SDK); the
proxy starts it as soon as its own options and session are known, and imports its event
loop and rewriting machinery while the upstream boots, so it adds little to that start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["host_environment", "say", "spawn_upstream"]

_INITIAL_ENVIRON = "/proc/self/environ"


def host_environment() -> dict[str, str]:
    """The environment this process was started with, as the host gave it.

    Python changes its own environment at startup (under the C locale it sets
    ``LC_CTYPE=C.UTF-8``, PEP 538), and an upstream started with ``os.environ`` would see
    that change. Linux keeps the environment the process was executed with in
    ``/proc/self/environ``; elsewhere ``os.environ`` is the best there is.
    """
    try:
        with open(_INITIAL_ENVIRON, "rb") as f:
            raw = f.read()
    except OSError:
        return dict(os.environ)
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def spawn_upstream(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start the upstream with pipes for stdin/stdout; its stderr is the proxy's.

    Args:
        argv: the upstream's command line.
        env: its environment (default: the host's, see :func:`host_environment`).

    Raises:
        OSError: the command cannot be started.
    """
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env=dict(env) if env is not None else host_environment(),
    )


def say(message: str) -> None:
    """A line on the proxy's stderr (the host's log)."""
    print(f"toolswap mcp proxy: {message}", file=sys.stderr, flush=True)
