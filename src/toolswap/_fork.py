"""What a forked child gets afresh (private).

A child forked while another thread of its parent held a lock inherits the lock held, by a
thread that is not in the child: the first time the child takes it, it waits forever. A
harness that forks (a ``multiprocessing`` pool's default start method on Linux) while one of
its threads captures would lose its child so. Every module-level lock of toolswap is
therefore made new in the child (``renew_in_child``); the objects that hold a lock of their
own (the session locks, the manifest log) renew theirs, and forget what their parent knew
half-way, in hooks of their own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

__all__ = ["renew_in_child"]


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
