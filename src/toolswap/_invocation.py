"""How a shell in this process's environment runs this toolswap (for the commands that
pointers and messages name).

A pointer that says ``toolswap read ID`` is useless where ``toolswap`` is not on PATH (the
Claude Code hook runs the venv's command by its full path): the model gets ``command not
found`` and runs the slow tool again. So the pointer names the command that runs here.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from ._utf8 import shell_word

__all__ = ["cli_command"]

_NAME = "toolswap"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _our_script() -> str | None:
    """The ``toolswap`` console script of this installation: the one running, if it is
    one, else the one in this interpreter's scripts directory."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == _NAME and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    try:
        scripts = sysconfig.get_path("scripts")
    except KeyError:
        return None
    candidate = os.path.join(scripts, _NAME)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return None


def cli_command() -> str:
    """Shell words that run this toolswap here: ``toolswap`` when that name on PATH is this
    installation's command, else that command by its full path, else
    ``<this interpreter> -m toolswap``."""
    ours = _our_script()
    if ours is not None:
        on_path = shutil.which(_NAME)
        if on_path is not None and _same_file(on_path, ours):
            return _NAME
        return shell_word(ours)
    if sys.executable:
        return f"{shell_word(sys.executable)} -m {_NAME}"
    return _NAME  # an embedded interpreter: nothing better is known
