"""What a forked child gets afresh (private).

A child forked while another thread of its parent held a lock inherits the lock held, by a
thread that is not in the child: the first time the child takes it, it waits forever. A
harness that forks (a ``multiprocessing`` pool's default start method on Linux) while one of
its threads captures would lose its child so. Every lock of toolswap is therefore made new
in the child: a module's (``renew_in_child``), or an object's (``track``: its ``_forked``
runs in the child, and gives it new locks, and forgets what its parent held, such as a
database connection: the parent's, never to be closed from here). The modules a capture
imports when it first runs are imported before a fork (``_before_fork``): a child waits on
no import its parent's other thread was in the middle of.
"""

from __future__ import annotations

import importlib
import os
import threading
import weakref
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

__all__ = ["CAPTURE_MODULES", "Forked", "expect_captures", "renew_in_child", "track"]


class Forked(Protocol):
    def _forked(self) -> None:
        """Called in a forked child: new locks, and nothing of the parent's held."""


def renew_in_child(
    namespace: MutableMapping[str, Any],
    *names: str,
    factory: Callable[[], object] = threading.Lock,
) -> None:
    """Give each of ``names`` in ``namespace`` (a module's globals) a new ``factory()`` in
    every child this process forks."""

    def renew() -> None:
        for name in names:
            namespace[name] = factory()

    os.register_at_fork(after_in_child=renew)


_TRACKED: weakref.WeakSet[Any] = weakref.WeakSet()


def track(obj: Forked) -> None:
    """Have ``obj._forked()`` called in every child this process forks, for as long as
    ``obj`` lives (it is held weakly)."""
    _TRACKED.add(obj)


def _after_fork_in_child() -> None:
    failed: Exception | None = None
    for obj in list(_TRACKED):
        try:
            obj._forked()
        except Exception as exc:  # the others still do theirs; the first is reported
            failed = failed or exc
    if failed is not None:
        raise failed  # (Python reports it as an exception ignored in the fork hook)


CAPTURE_MODULES = (
    "toolswap.artifact",
    "toolswap.capture",
    "toolswap.pointer",
    "toolswap.records",
    "toolswap._invocation",
    "toolswap.structured",
    "toolswap.structured.outline",
    "toolswap.structured.outline_process",
)
"""What ``ToolResultExternalizer`` imports at its first capture (not at start-up)."""


_OURS = frozenset({"toolswap", "msgspec", "ijson"})
_CAPTURES = [False]


def expect_captures() -> None:
    """This process made an externalizer: it may capture, in a child it forks too."""
    _CAPTURES[0] = True


def _before_fork() -> None:
    """Only where another thread may be importing: finish every import of toolswap's or
    of its parsers' in progress (a module whose code is running: never one of the
    harness's, whose code may run for as long as the harness does), and, in a process
    that captures, import what a capture imports on first use."""
    if threading.active_count() == 1:
        return
    import sys

    busy = [
        name
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in _OURS
        and getattr(getattr(module, "__spec__", None), "_initializing", False)
    ]
    for name in (*busy, *(CAPTURE_MODULES if _CAPTURES[0] else ())):
        try:
            importlib.import_module(name)
        except Exception:  # (its own importer sees the error; the fork goes on)
            continue


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
