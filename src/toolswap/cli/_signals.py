"""Signals during ``toolswap run``: the command is stopped, its output is kept (private).

The command runs in its own process group, so everything it starts (``sh -c 'a & wait'``)
is reached: SIGINT, SIGTERM and SIGHUP are passed on to the whole group. When toolswap is
in the foreground group of a controlling terminal, the command stays in that group instead
(its own group would be a background one, stopped by SIGTTIN as soon as it reads the
terminal, as sudo, ssh and git prompts do, whether or not standard input is the terminal):
it can read the terminal and Ctrl-C reaches all of it directly; SIGTERM and SIGHUP are then
passed to the command. toolswap keeps reading until the command's output ends, saves what
arrived (the artifact is marked interrupted only if the signal came before the output
ended), prints it, and then exits the way the first signal demands, so a shell or
supervisor sees "killed by SIGINT/SIGTERM". Once the command has exited after a signal, its
output gets ``_DRAIN_SECONDS`` more to end: what still holds it then escaped the group
(``setsid``), and reading stops. A second signal kills the group with SIGKILL and stops
reading at once.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import IO

__all__ = ["ReceivedSignal", "forward_signals", "pipe_chunks"]

_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ReceivedSignal:
    """The first stopping signal received while the command ran, if any."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.own_group = not _terminal_foreground()
        """Whether the command gets its own process group (see the module docstring)."""
        self.abandoned = False
        """A second signal came: stop reading the output now."""
        self._exited_at: float | None = None
        self.output_ended = False
        self.cut_output = False
        """Whether the signal came while the command's output was still arriving."""

    @property
    def name(self) -> str | None:
        return None if self.signum is None else signal.Signals(self.signum).name

    @property
    def interrupted(self) -> str | None:
        """The signal that cut the output short (None: the output ended on its own)."""
        return self.name if self.cut_output else None

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        """The command has started (as a process group leader): a signal that came before
        is passed on now."""
        self.proc = proc
        if self.signum is not None:
            self.cut_output = True
            self.pass_on(self.signum)

    def pass_on(self, signum: int) -> None:
        """Send ``signum`` to the command's group (or to the command, on a terminal, where
        the terminal's own SIGINT already reached it)."""
        if self.proc is None:
            return
        if self.own_group:
            _send_group(self.proc, signum)
        elif signum != signal.SIGINT:
            _send(self.proc, signum)

    def stop_reading(self) -> bool:
        """Whether to stop reading the command's output although it has not ended: a
        second signal came, or the command exited after a signal ``_DRAIN_SECONDS`` ago
        and something outside its group still holds the output open."""
        if self.abandoned:
            return True
        if self.signum is None or self.proc is None or self.proc.poll() is None:
            return False
        now = time.monotonic()
        if self._exited_at is None:
            self._exited_at = now
        return now - self._exited_at > _DRAIN_SECONDS

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
                if received.own_group:
                    _send_group(received.proc, signal.SIGKILL)
                else:
                    _send(received.proc, signal.SIGKILL)
            received.abandoned = True
            return
        received.signum = signum
        received.cut_output = not received.output_ended
        received.pass_on(signum)

    previous = {sig: signal.signal(sig, handler) for sig in _HANDLED}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _terminal_foreground() -> bool:
    """Whether this process is in the foreground group of its controlling terminal (the
    terminal's, not standard input's: a harness in a terminal gives its tools a pipe or
    /dev/null as input, and they still prompt on /dev/tty)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:  # ENXIO: no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _send_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the command's process group: what it started, even after it exited."""
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        _send(proc, signum)


def _send(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            proc.send_signal(signum)


_CHUNK = 1 << 20
_WAKE_SECONDS = 0.5
_DRAIN_SECONDS = 2.0


def pipe_chunks(pipe: IO[bytes], received: ReceivedSignal | None = None) -> Iterator[bytes]:
    """The bytes of ``pipe`` as they arrive, returning to Python at least twice a second.

    Python runs a signal handler only between bytecodes. A plain blocking ``read()`` on a
    pipe whose writer went quiet never returns, so a signal that arrived just before the
    read would wait for the next output, maybe forever: waiting in ``poll`` with a
    timeout bounds that delay. A ``poll`` that fails (ENOMEM) falls back to a blocking
    read: slower to notice a signal, but nothing is lost. A read that fails ends the output
    there (what arrived is kept) and says so on stderr.
    """
    fd = pipe.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    try:
        while True:
            if received is not None and received.signum is not None and received.stop_reading():
                return  # (what arrived is kept, marked interrupted)
            try:
                if not poller.poll(_WAKE_SECONDS * 1000):
                    continue
            except InterruptedError:
                continue
            except OSError:
                pass  # cannot wait with a timeout now: read, blocking
            try:
                chunk = os.read(fd, _CHUNK)
            except InterruptedError:
                continue
            except OSError as exc:
                print(
                    f"toolswap: reading the command's output failed ({exc.strerror}); "
                    "what arrived before is kept",
                    file=sys.stderr,
                )
                return
            if not chunk:
                return
            yield chunk
    finally:
        if received is not None:
            received.output_ended = True
