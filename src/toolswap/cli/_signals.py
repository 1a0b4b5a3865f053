"""Signals during ``toolswap run``: the command is stopped, its output is kept (private).

The command runs in its own process group, so everything it starts (``sh -c 'a & wait'``)
is reached: SIGINT, SIGTERM and SIGHUP are passed on to the whole group, each followed by
SIGCONT (a stopped group acts on a signal only once it runs again). When toolswap is the
terminal's foreground job (standard input a tty whose foreground group is toolswap's), the
command stays in that group instead, so it can still read the terminal and Ctrl-C reaches
all of it directly; SIGTERM and SIGHUP are then passed to the command. toolswap keeps
reading until the command's output ends, saves what arrived (the artifact is marked
interrupted only if the signal came before the output ended), prints it, and then exits the
way the first signal demands, so a shell or supervisor sees "killed by SIGINT/SIGTERM".

What holds the output after the command exited may never let it end: a ``setsid`` daemon,
a job ``sh`` started with ``&`` (which ignores SIGINT), a child a SIGTERM to the command
alone did not reach. After a signal, reading stops once the command's group is gone and
the output is quiet, or ``_DRAIN_SECONDS`` after the command exited, whatever is still
writing. A second signal kills the group with SIGKILL and stops reading at once.

A command in its own group that reads the terminal (standard input not the terminal, but a
controlling terminal: a harness run from one, and a sudo, ssh or git prompt) is a
background job, stopped by SIGTTIN until a signal ends it: toolswap says so on stderr
(also after ``toolswap run ... &`` and ``fg``: the command's group stays in the background).
Signals toolswap was started ignoring (``nohup``) are left ignored, for the command too.
Keeping every such command in the terminal's group made a harness's SIGINT to toolswap
(taken for Ctrl-C) never reach it, and its SIGTERM miss the command's children (a review).

A signal nobody can catch, SIGKILL to toolswap (a harness's timeout: ``subprocess.run``
kills its child so, and a kill of toolswap's group misses the command's), cannot be passed
on: on Linux a command in its own group is then killed by the kernel too
(``PR_SET_PDEATHSIG``, :func:`dying_with_toolswap`), as it would have been had the harness
run it directly. What the command started is not reached that way. A command in the
terminal's group shares toolswap's, which a kill of the group reaches.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import IO

__all__ = ["ReceivedSignal", "dying_with_toolswap", "forward_signals", "pipe_chunks"]

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
        self.stop_noted = False
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

    def group_gone(self) -> bool:
        """After a signal: the command and every process of its own group have exited
        (what still holds the output escaped the group)."""
        if self.signum is None or self.proc is None or not self.own_group:
            return False
        if self.proc.poll() is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

    def drained(self) -> bool:
        """After a signal: the command exited ``_DRAIN_SECONDS`` ago, and whatever still
        writes to its output is not waited for."""
        if self.signum is None or self.proc is None or self.proc.poll() is None:
            return False
        now = time.monotonic()
        if self._exited_at is None:
            self._exited_at = now
        return now - self._exited_at > _DRAIN_SECONDS

    def note_stopped(self) -> None:
        """Say once on stderr when the command is stopped to read the terminal (SIGTTIN) or
        write to it (SIGTTOU) from its own, background, process group."""
        if self.stop_noted or self.proc is None or not self.own_group:
            return
        try:
            state = os.waitid(os.P_PID, self.proc.pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, OSError):
            return
        if state is None or state.si_status not in (signal.SIGTTIN, signal.SIGTTOU):
            return
        self.stop_noted = True
        print(
            "toolswap: the command is stopped: it wants the terminal, which it cannot "
            "have from its own process group (toolswap was not the terminal's "
            "foreground job when it started); stop it with a signal to toolswap, or run "
            "toolswap in the foreground with the terminal as its standard input",
            file=sys.stderr,
        )

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

    # A signal toolswap was started ignoring (nohup's SIGHUP, SIGINT for a job a script
    # started with &) stays ignored, for the command too: caught, it ended a nohup'd
    # command when the terminal closed (a review).
    previous = {
        sig: signal.signal(sig, handler)
        for sig in _HANDLED
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


_PR_SET_PDEATHSIG = 1


def dying_with_toolswap() -> Callable[[], None] | None:
    """A ``preexec_fn`` for the command: the kernel sends it SIGKILL when toolswap dies,
    however it dies (a SIGKILL it could not pass on, the OOM killer). None off Linux, or
    where libc's ``prctl`` cannot be called: the command then outlives such a death, as
    before.

    The death is the spawning thread's (``toolswap run`` spawns from its main thread,
    which lives until the end), and the kernel forgets it when the command executes a
    set-user-ID program (``sudo``).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # (3-4 ms on every run; libc's prctl has no other door in 3.11)

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    toolswap = os.getpid()
    kill = int(signal.SIGKILL)

    def set_death_signal() -> None:
        # (Runs in the forked child before exec: nothing here takes a lock.)
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != toolswap:  # toolswap died before the signal was set
            os.kill(os.getpid(), kill)

    return set_death_signal


def _terminal_foreground() -> bool:
    """Whether toolswap is the terminal's foreground job: standard input is a tty whose
    foreground process group is toolswap's (a harness that hands its tools its pty as
    standard input, from a session or group of its own, is not)."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _send_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the command's process group: what it started, even after it exited."""
    try:
        os.killpg(proc.pid, signum)
        if signum != signal.SIGKILL:
            os.killpg(proc.pid, signal.SIGCONT)  # (a stopped group acts on it only now)
    except (ProcessLookupError, PermissionError):
        _send(proc, signum)


def _send(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            proc.send_signal(signum)


_CHUNK = 1 << 20
_WAKE_SECONDS = 0.5
_QUIET_SECONDS = 0.1
_DRAIN_SECONDS = 5.0


def pipe_chunks(
    pipe: IO[bytes],
    received: ReceivedSignal | None = None,
    quiet: Callable[[], Callable[[], None] | None] | None = None,
) -> Iterator[bytes]:
    """The bytes of ``pipe`` as they arrive, returning to Python at least twice a second.

    ``quiet()`` is called if nothing arrives for the first ``_QUIET_SECONDS``; what it
    returns, if anything, is called once the first bytes arrive, or the output ends.

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
    quieted: Callable[[], None] | None = None
    try:
        while True:
            if received is not None and (received.abandoned or received.drained()):
                return  # what arrived is kept, marked interrupted
            try:
                if not poller.poll((_WAKE_SECONDS if quiet is None else _QUIET_SECONDS) * 1000):
                    if quiet is not None:
                        on_quiet = quiet
                        quiet = None  # (once)
                        quieted = on_quiet()
                    # Quiet for a moment: nothing is left in the pipe that the command's
                    # group wrote.
                    if received is not None:
                        if received.group_gone():
                            return
                        received.note_stopped()
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
            quiet = None  # (only before the first bytes)
            if quieted is not None:
                quieted()
                quieted = None
            if not chunk:
                return
            yield chunk
    finally:
        if quieted is not None:
            quieted()
        if received is not None:
            received.output_ended = True
