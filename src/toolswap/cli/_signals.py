"""Signals during ``toolswap run``: the command is stopped, its output is kept (private).

SIGTERM and SIGHUP are forwarded to the command; SIGINT is not, because a terminal's Ctrl-C
already reached it (it shares our process group) and a second SIGINT makes many programs
abort without cleaning up. Either way toolswap keeps reading until the command's output
ends, saves what arrived (the artifact is marked interrupted), prints it, and then exits the
way the first signal demands, so a shell or supervisor sees "killed by SIGINT/SIGTERM". A
second signal kills the command with SIGKILL.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import IO

__all__ = ["ReceivedSignal", "forward_signals", "pipe_chunks"]

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_FORWARDED = frozenset({signal.SIGTERM, signal.SIGHUP})


class ReceivedSignal:
    """The first stopping signal received while the command ran, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        """The command has started: a signal that came before is passed on now."""
        self.proc = proc
        if self.signum in _FORWARDED:
            _send(proc, self.signum)

    def exit_like_the_signal(self) -> None:
        """Die by the received signal (default action), as a well-behaved tool does."""
        if self.signum is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(self.signum, signal.SIG_DFL)
        os.kill(os.getpid(), self.signum)
        sys.exit(128 + self.signum)  # only reached if the default action does not end us


@contextmanager
def forward_signals() -> Iterator[ReceivedSignal]:
    """Handle SIGINT/SIGTERM/SIGHUP from before the command starts until it is done (see
    the module docstring); :meth:`ReceivedSignal.attach` names the command once started."""
    received = ReceivedSignal()

    def handler(signum: int, frame: FrameType | None) -> None:
        if received.signum is not None:
            if received.proc is not None:
                _send(received.proc, signal.SIGKILL)
            return
        received.signum = signum
        if signum in _FORWARDED and received.proc is not None:
            _send(received.proc, signum)

    previous = {sig: signal.signal(sig, handler) for sig in _HANDLED}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _send(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            proc.send_signal(signum)


_CHUNK = 1 << 20
_WAKE_SECONDS = 0.5


def pipe_chunks(pipe: IO[bytes]) -> Iterator[bytes]:
    """The bytes of ``pipe`` as they arrive, returning to Python at least twice a second.

    Python runs a signal handler only between bytecodes. A plain blocking ``read()`` on a
    pipe whose writer went quiet never returns, so a signal that arrived just before the
    read would wait for the next output, maybe forever: waiting in ``poll`` with a
    timeout bounds that delay.
    """
    fd = pipe.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        if not poller.poll(_WAKE_SECONDS * 1000):
            continue
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return
        yield chunk
