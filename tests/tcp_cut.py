"""TCP helpers a test can control: a forwarder it can cut, a server that never answers."""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["CuttableLink", "SilentServer"]


class CuttableLink:
    """Forwards 127.0.0.1:<port> to ``target``; :meth:`cut` drops every connection and
    refuses new ones until :meth:`restore`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._up = True
        self._drop_marker: bytes | None = None
        self.replies_lost = 0
        self._open: set[socket.socket] = set()
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._guard:
                if not self._up:
                    client.close()
                    continue
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
                self._open.update((client, upstream))
            dropping = threading.Event()
            for src, dst, requests in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(
                    target=self._pump, args=(src, dst, requests, dropping), daemon=True
                ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, requests: bool, dropping: threading.Event
    ) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if requests:
                    with self._guard:
                        marker = self._drop_marker
                        if marker is not None and marker in data:
                            self._drop_marker = None
                            self.replies_lost += 1
                            dropping.set()
                elif dropping.is_set():
                    break  # the server answered; the client never hears it
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def lose_reply_to(self, marker: bytes) -> None:
        """Forward the next request that contains ``marker``, then cut its connection
        before the reply reaches the client (the server did the work; the client may
        retry)."""
        with self._guard:
            self._drop_marker = marker

    def cut(self) -> None:
        with self._guard:
            self._up = False
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def restore(self) -> None:
        with self._guard:
            self._up = True

    def close(self) -> None:
        self.cut()
        self._listener.close()


class SilentServer:
    """Accepts every connection on 127.0.0.1:<port> and never answers (a hung store)."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)  # open, unread, unanswered

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            with contextlib.suppress(OSError):
                conn.close()
