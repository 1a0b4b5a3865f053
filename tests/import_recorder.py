"""Which modules a real ``toolswap`` process imported: the command line runs in a fresh
interpreter that writes ``sorted(sys.modules)`` to a file when it exits (the start-up
tests of the CLI and of the MCP server and proxy share it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["loaded", "modules_in", "recorder_argv"]

_RECORDER = (
    "import atexit, json, sys\n"
    "out = sys.argv.pop(1)\n"
    "def record():\n"
    "    with open(out, 'w', encoding='utf-8') as f:\n"
    "        json.dump(sorted(sys.modules), f)\n"
    "atexit.register(record)\n"
    "from toolswap.cli import main\n"
    "main(sys.argv[1:], prog_name='toolswap')\n"
)


def recorder_argv(out: Path, *args: str) -> list[str]:
    """``toolswap ARGS...`` as a command line that records its modules in ``out``."""
    return [sys.executable, "-c", _RECORDER, str(out), *args]


def modules_in(out: Path) -> set[str]:
    """The modules a recorded process had imported when it exited."""
    return set(json.loads(out.read_text(encoding="utf-8")))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules in ``modules`` that are ``names`` or inside them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))
