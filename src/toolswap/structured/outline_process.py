"""Outlines computed in a helper process, on another core, while the capture goes on.

The outline is Python that holds the GIL (0.5 us a value: 40 ms for `npm ls --all --json`'s
840 KB), so on a thread it adds its whole time to the capture's. One helper process per
Python process (``OUTLINES``) takes it beside the capture instead: the capture hands it the
output's file descriptor as soon as the output is written, and goes on with its failure
lines, its fsync and its record meanwhile. The helper (``_outline_worker``) runs the same
``inspect_output``, so the outline is the same text either way.

It is started once the first structured output's outline is done on the capture's thread
(``warm``: not sooner, where it would compete with that capture for the cores) and serves
the outputs after it; a process that captures once (``toolswap run``) does not start it.
When it is not ready, is busy with another capture's outline, cannot start or has died,
``submit`` says so and the capture outlines on its thread, as without it; one that dies or
is stopped mid-outline leaves the waiting capture to outline the output itself. It runs in
a session of its own (a terminal's Ctrl-C is not for it), in ``/`` with this process's path
(never the working directory's modules), and ends when its socket closes (this process
exits or is killed; a forked child closes its copy and starts its own) or its parent is
gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._cores import usable_cores
from .._threads import start_helper_thread
from ._outline_worker import ANSWER, HEADER, MAX_REQUEST, NUMBER, READY

__all__ = ["OUTLINES", "SERVICE_THREAD", "OutlineProcess"]

SERVICE_THREAD = "toolswap-outline-process"
"""The name of the thread that starts the helper and takes its answers: it lives as long as
the helper does, not as long as one capture."""

_DEADLINE = 60.0
"""Seconds an outline may take in the helper before it is stopped (it is then stuck: the
largest part an outline parses takes a few seconds) and the capture outlines on its own."""
_MAX_STARTS = 3
"""Helpers one process starts at most: one that keeps dying is not started again."""
_MAX_ANSWER = 1 << 20


class _Pending:
    """One outline asked of the helper: its text once answered, or ``gone`` (the helper
    died or was stopped first: the capture outlines the output itself)."""

    __slots__ = ("done", "gone", "number", "text")

    def __init__(self, number: int) -> None:
        self.number = number
        self.done = threading.Event()
        self.gone = False
        self.text = ""

    def answer(self, text: str) -> None:
        self.text = text
        self.done.set()

    def lose(self) -> None:
        self.gone = True
        self.done.set()


class OutlineProcess:
    """The helper process that outlines structured outputs (see the module's text)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0
        """The process that started the helper (a forked child does not use it)."""
        self._ready = False
        self._pending: _Pending | None = None
        """The outline in flight: one at a time (a second capture outlines on its thread)."""
        self._starts = 0
        self._number = 0
        """The last request's number (answers carry theirs)."""
        self._copies: list[weakref.finalize[Any, Any]] = []
        """What closes each copy of a capture's descriptor kept for an outline asked of the
        helper (see ``submit``): a forked child closes those it inherited."""
        self.served = 0
        """Outlines the helpers of this process answered."""

    @property
    def ready(self) -> bool:
        """Whether the helper runs here and has started (it may still be busy)."""
        with self._lock:
            return self._own() and self._ready

    def warm(self) -> None:
        """Start the helper, unless it runs here already, is starting, or cannot help (one
        core, no interpreter to start, or it died ``_MAX_STARTS`` times)."""
        with self._lock:
            if self._own() or self._starts >= _MAX_STARTS or not _worth_starting():
                return
            self._starts += 1
            try:
                parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            except OSError:
                return
            self._sock, self._pid, self._ready, self._proc = parent, os.getpid(), False, None
        try:
            # (Started and read on a thread of its own: the capture does not wait for it.)
            start_helper_thread(lambda: self._serve(parent, child), SERVICE_THREAD)
        except RuntimeError:
            child.close()
            self._forget(parent)

    def submit(self, head: bytes, fd: int, size: int) -> Callable[[], str] | None:
        """Hand the outline of the output in ``fd`` (``size`` bytes, its first bytes
        ``head``) to the helper: return what waits for the outline's text, or None when the
        helper cannot take it now (the caller outlines it itself). If the helper dies or is
        stopped before it answers, the waiting caller outlines it after all (from its own
        copy of the descriptor)."""
        with self._lock:
            sock = self._sock
            if sock is None or not self._own() or not self._ready or self._pending is not None:
                return None
            if HEADER.size + len(head) > MAX_REQUEST:
                return None
            try:
                own = os.dup(fd)
            except OSError:
                return None
            self._number += 1
            pending = _Pending(self._number)
            self._pending = pending  # (before the send: an answer is never unclaimed)
            try:
                socket.send_fds(sock, [HEADER.pack(pending.number, size, len(head)) + head], [fd])
            except OSError as exc:
                self._pending = None
                os.close(own)
                if exc.errno != errno.EMSGSIZE:  # (a head past the socket's buffer: not it)
                    self._close(sock)  # the helper is gone
                return None

        def wait() -> str:
            # (The copy is closed once the text is had: a wait cut short by an interrupt
            # may be asked again, and reads it then.)
            if not pending.done.wait(_DEADLINE):
                with self._lock:
                    if self._sock is sock:
                        self._close(sock)  # stuck: stopped (its socket closes, it ends)
                pending.lose()
            if not pending.gone:
                release()
                return pending.text
            from . import inspect_output

            try:
                text = inspect_output(head, lambda count, at: os.pread(own, count, at), size)
            except Exception:  # (as on the capture's thread)
                text = ""
            release()
            return text

        # The copy is closed once the outline is had, or with ``wait`` (a capture that failed
        # after handing its outline over never waits for it).
        release = weakref.finalize(wait, os.close, own)
        with self._lock:
            self._copies = [copy for copy in self._copies if copy.alive]
            self._copies.append(release)
        return wait

    def _own(self) -> bool:
        return self._sock is not None and self._pid == os.getpid()

    def _serve(self, parent: socket.socket, child: socket.socket) -> None:
        """Start the helper, then take its answers until its socket closes."""
        # The helper imports what this process would: this toolswap first, then the rest of
        # this process's path (where its parsers were found), never a module of the working
        # directory (``-m`` would put it first: a checkout's toolswap, a stray json.py).
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        path = [os.path.abspath(entry) for entry in sys.path if entry]  # (it runs in /)
        env["PYTHONPATH"] = os.pathsep.join([root, *path])
        try:
            with child:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-P",  # (not the working directory first on its path: see below)
                        "-m",
                        "toolswap.structured._outline_worker",
                        str(child.fileno()),
                        str(sys.hexversion),
                    ],
                    pass_fds=(child.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    env=env,
                    cwd="/",  # (it opens no file by name, and holds no directory busy)
                )
        except (OSError, ValueError, subprocess.SubprocessError):
            self._forget(parent)
            return
        with self._lock:
            if self._sock is parent:
                self._proc = proc
        try:
            while message := parent.recv(_MAX_ANSWER):
                number = NUMBER.unpack_from(message, 1)[0] if len(message) > NUMBER.size else 0
                with self._lock:
                    if message == READY and not self._ready:
                        self._ready = True
                        continue
                    pending = self._pending
                    if pending is None or message[:1] != ANSWER or number != pending.number:
                        continue  # (not this request's answer)
                    self._pending = None
                    self.served += 1
                pending.answer(message[1 + NUMBER.size :].decode("utf-8", "surrogateescape"))
        except OSError:
            pass
        finally:
            self._forget(parent)
            proc.wait()

    def _forget(self, sock: socket.socket) -> None:
        """The helper behind ``sock`` is gone: its outline in flight gets none."""
        with self._lock:
            pending = None
            if self._sock is sock:
                pending, self._pending = self._pending, None
                self._sock, self._ready = None, False
        sock.close()
        if pending is not None:
            pending.lose()

    def _close(self, sock: socket.socket) -> None:
        """Stop the helper behind ``sock`` (the lock is held): its reader sees the end, and
        the outline in flight gets none."""
        pending, self._pending = self._pending, None
        self._sock, self._ready = None, False
        with contextlib.suppress(OSError):  # (already closed)
            sock.shutdown(socket.SHUT_RDWR)
        if self._proc is not None:
            self._proc.kill()
        if pending is not None:
            pending.lose()


def _worth_starting() -> bool:
    """A helper needs another core to run on (``usable_cores``) and an interpreter to
    start."""
    return usable_cores() >= 2 and bool(sys.executable)


OUTLINES = OutlineProcess()
"""This process's helper."""


def _after_fork() -> None:
    global OUTLINES
    inherited = OUTLINES._sock
    copies = OUTLINES._copies
    OUTLINES = OutlineProcess()  # (the parent's is the parent's: its lock may be held)
    for copy in copies:
        # A copy of a capture's file, kept while its outline is asked: held here, it would
        # keep the file's blocks after the artifact is collected, for as long as this child
        # lives. (A finalizer is dead before it closes its copy: one alive was open.)
        detached = copy.detach()
        if detached is not None:
            with contextlib.suppress(OSError):
                os.close(detached[2][0])
    if inherited is not None:
        # This copy of the parent's end would keep the helper's socket open after the parent
        # is gone (closed, not shut down: that would cut the parent's too).
        with contextlib.suppress(OSError):
            inherited.close()


os.register_at_fork(after_in_child=_after_fork)
