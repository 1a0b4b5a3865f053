"""Imports ahead of a capture, while the command is still running (private).

A process that captures once (``toolswap run``) imports what a capture needs when the
command's output first asks for it: the capture, the failure-line vocabulary, the pointer
(about 25 ms), and for JSON msgspec and the outline (about 20 ms more). Most tools that
print much take a while before they do (a build, a test run, ``npm ls``, ``pip inspect``),
and JSON tools print everything at the end: those imports then wait for the output and
add their time to the command's. ``prewarm`` takes them on a helper thread as soon as the
command has been quiet for a moment (``toolswap run`` calls it then), on a core of its own:
where fewer than two cores can be used (``usable_cores``), it does nothing, as the
imports would only take the command's time. An output that stays small never needs them:
their cost was spent on a core that was idle. A failed import is left for the capture's own
import to raise.
"""

from __future__ import annotations

import importlib
import threading

from ._cores import usable_cores
from ._fork import CAPTURE_MODULES
from ._threads import start_helper_thread

__all__ = ["PREWARM_THREAD", "prewarm", "prewarming"]

PREWARM_THREAD = "toolswap-prewarm"
_PARSERS = ("msgspec",)
"""What a structured output's outline imports on first use, beside ``CAPTURE_MODULES``."""
_STARTED: list[threading.Thread] = []


def prewarm(*, structured: bool = True) -> None:
    """Import, on a helper thread, what a capture imports on first use (and what an outline
    does, if ``structured``); once a process, and only where a second core can take it."""
    if _STARTED:
        return
    modules = CAPTURE_MODULES + (_PARSERS if structured else ())
    try:
        if usable_cores() < 2:
            return
        _STARTED.append(start_helper_thread(lambda: _import(modules), PREWARM_THREAD))
    except RuntimeError:  # no thread can be started: the capture imports them itself
        return


def prewarming() -> bool:
    """Whether the imports are still running (an exit need not wait for them: they write
    nothing)."""
    return bool(_STARTED) and _STARTED[0].is_alive()


def _import(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # (the capture's own import raises it where it matters)
            continue
