"""Imports ahead of a capture, while the command is still running (private).

A process that captures once (``toolswap run``) imports what a capture needs when the
command's output first asks for it: the capture, the failure-line vocabulary, the pointer
(about 25 ms), and for JSON msgspec and the outline (about 20 ms more). Most tools that
print much take a while before they print anything (a build, a test run, ``npm ls``,
``pip inspect``; JSON tools print everything at the end): those imports then wait for the
output and add their time to the command's. ``prewarm`` takes them on a helper thread once
the command has been quiet for a while before its first output (``toolswap run`` calls it
then), where a second core can take them (``usable_cores``: on one, they would only take
the command's time). They stop, between two modules, when the output arrives (``_stop``,
which ``prewarm`` returns): from then on the capture imports what it needs itself, and an
output that turns out small imports nothing more. A failed import is left for the capture's
own import to raise.

msgspec is imported as a package, as every reader of it does (``import msgspec``): its
``__init__`` imports its submodules, and one thread importing ``msgspec.json`` while
another imports ``msgspec`` can meet that cycle from both ends.

A fork waits for the imports to stop (``_before_fork``): a child must not inherit a module
lock held by this thread, which is not in the child.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable

from ._cores import usable_cores
from ._fork import CAPTURE_MODULES
from ._threads import start_helper_thread

__all__ = ["PREWARM_THREAD", "prewarm", "prewarming"]

PREWARM_THREAD = "toolswap-prewarm"
_TEXT = tuple(name for name in CAPTURE_MODULES if not name.startswith("toolswap.structured"))
"""What a capture's first spill imports (the structured package itself loads at start)."""
_STRUCTURED = ("toolswap.structured.outline", "msgspec")
"""What a structured output's outline imports on first use, beside ``_TEXT``."""
_JOIN_SECONDS = 5.0
_STARTED: list[threading.Thread] = []
_STOP = [False]


def prewarm(*, structured: bool = True) -> Callable[[], None] | None:
    """Import, on a helper thread, what a capture imports on first use (and what an outline
    does, if ``structured``); once a process, and only where a second core can take it.

    Returns:
        What stops the imports between two modules (None: none were started).
    """
    if _STARTED:
        return None
    modules = _TEXT + (_STRUCTURED if structured else ())
    try:
        if usable_cores() < 2:
            return None
        _STARTED.append(start_helper_thread(lambda: _import(modules), PREWARM_THREAD))
    except Exception:  # (no thread, a surprise in /proc: the capture imports them itself)
        return None
    return _stop


def _stop() -> None:
    """Import no further module ahead (the one being imported is finished)."""
    _STOP[0] = True


def prewarming() -> bool:
    """Whether the imports are still running (an exit need not wait for them: they hold
    nothing of the capture's; at most a bytecode cache file they were writing is left
    half-written under a temporary name, as after any kill)."""
    return bool(_STARTED) and _STARTED[0].is_alive()


def _import(modules: tuple[str, ...]) -> None:
    for name in modules:
        if _STOP[0]:
            return
        try:
            importlib.import_module(name)
        except Exception:  # (the capture's own import raises it where it matters)
            continue


def _before_fork() -> None:
    if prewarming():
        _stop()
        _STARTED[0].join(_JOIN_SECONDS)


os.register_at_fork(before=_before_fork)
