"""Helper threads that never take a process signal (private).

Linux hands a process-directed signal (SIGINT, SIGTERM, ...) to any thread that does not
block it, and Python runs the handler only when the main thread next runs Python code. A
signal taken by a helper thread while the main thread waits in a blocking read is
therefore not handled until that read returns, which may be never. Helper threads block
every signal, so the kernel always picks the main thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ["start_helper_thread"]


def start_helper_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start a daemon thread running ``target`` with every signal blocked in it."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    # The new thread inherits the mask of the thread that starts it; a signal that arrives
    # meanwhile stays pending and is delivered as soon as the old mask is back.
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread
