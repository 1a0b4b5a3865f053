"""Fault proxies: TCP forwarders in front of the real S3 and PostgreSQL servers of the
tests that count what passes through and fault the n-th request or statement.

- :class:`HttpFaultProxy` speaks just enough HTTP/1.1 (heads, ``Content-Length`` and
  chunked bodies, ``Expect: 100-continue``) to count requests; at the n-th it answers
  500 or 503 SlowDown itself, resets the connection before the request reaches the
  server, or forwards it and then resets the connection, holds the reply until the
  client gives up, or cuts the reply half way (:class:`S3Fault`).
- :class:`PgFaultProxy` forwards a TCP port to PostgreSQL's Unix socket and counts
  statements (a simple ``Query``, or an extended query's ``Sync``); at the n-th it drops
  the connection before the server sees the statement, or after the server ran it and
  before its reply reaches the client (:class:`PgFault`).

The ``*-stays`` kinds fault every later request or statement too (a store or database
that stays down). A plan (:meth:`arm`) holds until :meth:`reset`, which also closes every
connection, so each explored state starts from the same place.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from enum import StrEnum

__all__ = ["HttpFaultProxy", "PgFault", "PgFaultProxy", "S3Fault"]

_HOLD_MAX = 120.0
"""Seconds a held reply waits at most for its client to give up."""


class S3Fault(StrEnum):
    """What happens to the n-th HTTP request."""

    E500 = "500"
    """Answered ``500 InternalError`` by the proxy; the server never sees it."""
    SLOWDOWN = "503"
    """Answered ``503 SlowDown`` by the proxy; the server never sees it."""
    RESET = "reset"
    """The connection is reset before the request reaches the server."""
    RESET_AFTER = "reset-after"
    """The server applies the request; the connection is reset instead of its reply."""
    TIMEOUT = "timeout"
    """The server applies the request; its reply is held until the client gives up."""
    LOST_REPLY = "lost-reply"
    """The server applies the request; half of its reply arrives, then the connection
    closes."""
    DOWN = "reset-stays"
    """From the n-th request on, every request is reset before reaching the server."""
    THROTTLED = "503-stays"
    """From the n-th request on, every request is answered ``503 SlowDown``."""

    @property
    def sticky(self) -> bool:
        return self in (S3Fault.DOWN, S3Fault.THROTTLED)


class PgFault(StrEnum):
    """What happens to the connection at the n-th statement."""

    DROP = "drop"
    """Dropped before the statement reaches the server."""
    DROP_AFTER = "drop-after"
    """Dropped after the server ran the statement, before its reply arrives."""
    DOWN = "drop-stays"
    """Dropped before the n-th statement, and so is every later statement and every new
    connection (the database stays unreachable)."""

    @property
    def sticky(self) -> bool:
        return self is PgFault.DOWN


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (RST), not an orderly FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


def _close(*socks: socket.socket | None) -> None:
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class _Closed(Exception):
    """A peer closed its side."""


class _Plan:
    """Which index gets which fault (one, or from it on), shared by the proxies' threads."""

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.count = 0
        self.trace: list[str] = []
        self.at: int | None = None
        self.fault: object = None
        self.sticky = False
        self.injected: str | None = None

    def next(self, what: str) -> object:
        """Count ``what``; the fault it gets (None: none)."""
        with self.guard:
            self.count += 1
            self.trace.append(what)
            if self.at is None or self.count < self.at:
                return None
            if self.count == self.at or self.sticky:
                if self.injected is None:
                    self.injected = f"{self.fault} at #{self.count} {what}"
                return self.fault
            return None

    def down(self) -> bool:
        """Whether a sticky fault has started (a new connection is refused)."""
        with self.guard:
            return self.at is not None and self.sticky and self.injected is not None

    def arm(self, at: int | None, fault: object, sticky: bool) -> None:
        with self.guard:
            self.count, self.trace, self.injected = 0, [], None
            self.at, self.fault, self.sticky = at, fault, sticky


class _Forwarder:
    """Accepts on 127.0.0.1:<port>; one thread per client connection."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self.plan = _Plan()
        self._open: set[socket.socket] = set()
        self._guard = threading.Lock()
        self._threads: set[threading.Thread] = set()
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    @property
    def count(self) -> int:
        """Requests or statements seen since the last :meth:`reset` or :meth:`arm`."""
        return self.plan.count

    @property
    def trace(self) -> list[str]:
        return list(self.plan.trace)

    @property
    def injected(self) -> str | None:
        """The fault injected since the last :meth:`arm` (None: none)."""
        return self.plan.injected

    def arm(self, at: int | None = None, fault: S3Fault | PgFault | None = None) -> None:
        """Count from zero again; fault the ``at``-th request or statement with ``fault``."""
        self.plan.arm(at, fault, bool(fault is not None and fault.sticky))

    def reset(self) -> None:
        """No fault, the count at zero, and every connection closed."""
        self.arm()
        self.close_connections()

    def open_connections(self) -> int:
        """Client connections still open (after the caller closed its pools: leaks)."""
        with self._guard:
            return len(self._threads)

    def close_connections(self) -> None:
        with self._guard:
            socks, self._open = list(self._open), set()
            threads = list(self._threads)
        _close(*socks)
        for thread in threads:
            thread.join(10)

    def close(self) -> None:
        self.close_connections()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._guard:
                self._open.add(client)
                self._threads.add(thread)
            thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._guard:
            self._open.add(sock)

    def _serve(self, client: socket.socket) -> None:
        try:
            self.serve(client)
        except (OSError, _Closed):
            pass
        finally:
            _close(client)
            with self._guard:
                self._open.discard(client)
                self._threads.discard(threading.current_thread())

    def serve(self, client: socket.socket) -> None:
        raise NotImplementedError


class _Reader:
    """Buffered reads from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise _Closed
        self.buf += data

    def until(self, marker: bytes) -> bytes:
        while (end := self.buf.find(marker)) < 0:
            self._more()
        end += len(marker)
        out = bytes(self.buf[:end])
        del self.buf[:end]
        return out

    def exactly(self, size: int) -> bytes:
        while len(self.buf) < size:
            self._more()
        out = bytes(self.buf[:size])
        del self.buf[:size]
        return out

    def rest(self) -> bytes:
        """Everything until the peer closes."""
        with contextlib.suppress(_Closed):
            while True:
                self._more()
        out = bytes(self.buf)
        self.buf.clear()
        return out


# -- HTTP ----------------------------------------------------------------------------------


def _head(raw: bytes) -> tuple[str, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _body(reader: _Reader, headers: dict[str, str]) -> bytes:
    """A message body framed by Content-Length or chunked (raw, as sent)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            line = reader.until(b"\r\n")
            out += line
            size = int(line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while (trailer := reader.until(b"\r\n")) != b"\r\n":
                    out += trailer
                out += b"\r\n"
                return bytes(out)
            out += reader.exactly(size + 2)
    return reader.exactly(int(headers.get("content-length", "0") or 0))


def _error_reply(status: int, code: str) -> bytes:
    reason = {500: "Internal Server Error", 503: "Slow Down"}[status]
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
        f"<Message>injected by the fault proxy</Message></Error>"
    ).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return head + body


class HttpFaultProxy(_Forwarder):
    """An HTTP/1.1 forwarder to 127.0.0.1:``upstream_port`` that faults the n-th request
    (see the module docstring).

    Args:
        before: called with ``(method, target)`` before each request goes on (a test
            makes another host's write land just then).
    """

    def __init__(
        self, upstream_port: int, *, before: Callable[[str, str], None] | None = None
    ) -> None:
        self.upstream_port = upstream_port
        self.before = before
        super().__init__()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def serve(self, client: socket.socket) -> None:
        reader = _Reader(client)
        upstream: socket.socket | None = None
        up: _Reader | None = None
        try:
            while True:
                try:
                    raw = reader.until(b"\r\n\r\n")
                except _Closed:
                    return
                line, headers = _head(raw)
                method, target = line.split(" ")[:2]
                fault = self.plan.next(f"{method} {target.split('?')[0]}")
                expect = headers.get("expect", "").lower() == "100-continue"
                if fault in (S3Fault.E500, S3Fault.SLOWDOWN, S3Fault.THROTTLED):
                    if not expect:
                        _body(reader, headers)
                    status, code = (
                        (500, "InternalError")
                        if fault is S3Fault.E500
                        else (
                            503,
                            "SlowDown",
                        )
                    )
                    client.sendall(_error_reply(status, code))
                    return
                if fault in (S3Fault.RESET, S3Fault.DOWN):
                    _reset(client)
                    return
                if self.before is not None:
                    self.before(method, target)
                if upstream is None:
                    upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                    self._track(upstream)
                    up = _Reader(upstream)
                assert up is not None
                upstream.sendall(raw)
                if expect:
                    interim = up.until(b"\r\n\r\n")
                    client.sendall(interim)
                    if b" 100 " not in interim.split(b"\r\n", 1)[0] + b" ":
                        reply_head = interim  # a final answer before the body
                    else:
                        upstream.sendall(_body(reader, headers))
                        reply_head = up.until(b"\r\n\r\n")
                else:
                    upstream.sendall(_body(reader, headers))
                    reply_head = up.until(b"\r\n\r\n")
                while reply_head.split(b" ", 2)[1].startswith(b"1"):  # interim replies
                    client.sendall(reply_head)
                    reply_head = up.until(b"\r\n\r\n")
                status_line, reply_headers = _head(reply_head)
                status = int(status_line.split(" ")[1])
                closes = reply_headers.get("connection", "").lower() == "close"
                if method == "HEAD" or status in (204, 304):
                    body = b""
                elif (
                    "content-length" in reply_headers
                    or "chunked" in reply_headers.get("transfer-encoding", "").lower()
                ):
                    body = _body(up, reply_headers)
                else:
                    body, closes = up.rest(), True
                reply = reply_head + body
                if fault is S3Fault.RESET_AFTER:
                    _reset(client)
                    return
                if fault is S3Fault.TIMEOUT:
                    client.settimeout(_HOLD_MAX)
                    with contextlib.suppress(OSError, _Closed):
                        reader.rest()  # until the client gives up and closes
                    return
                if fault is S3Fault.LOST_REPLY:
                    client.sendall(reply[: len(reply) // 2])
                    return
                client.sendall(reply)
                if closes:
                    return
        finally:
            _close(upstream)


# -- PostgreSQL ----------------------------------------------------------------------------


class PgFaultProxy(_Forwarder):
    """Forwards 127.0.0.1:<port> to the PostgreSQL server listening on the Unix socket
    ``socket_path`` and faults the n-th statement (see the module docstring)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        super().__init__()

    def dsn(self, dbname: str = "postgres") -> str:
        return (
            f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} "
            "sslmode=disable gssencmode=disable"
        )

    def serve(self, client: socket.socket) -> None:
        if self.plan.down():
            return  # refused: the database stays unreachable
        server = socket.socket(socket.AF_UNIX)
        self._track(server)
        try:
            server.connect(self.socket_path)
            conn = _PgConnection(self, client, server)
            replies = threading.Thread(target=conn.replies, daemon=True)
            replies.start()
            try:
                conn.requests()
            finally:
                _close(server, client)
                replies.join(10)
        finally:
            _close(server)


_STATEMENT_ENDS = frozenset(b"QS")
"""Client messages that make the server run what came before: a simple Query, a Sync."""


class _PgConnection:
    def __init__(self, proxy: PgFaultProxy, client: socket.socket, server: socket.socket):
        self.proxy = proxy
        self.client = client
        self.server = server
        self.drop_after = threading.Event()
        self.queries: dict[bytes, str] = {}

    def _statement(self, batch: list[tuple[int, bytes]]) -> str:
        text = ""
        for kind, payload in batch:
            if kind == ord("Q"):
                text = payload.rstrip(b"\0").decode(errors="replace")
            elif kind == ord("P"):
                name, rest = payload.split(b"\0", 1)
                text = rest.split(b"\0", 1)[0].decode(errors="replace")
                self.queries[name] = text
            elif kind == ord("B") and not text:
                _, rest = payload.split(b"\0", 1)
                text = self.queries.get(rest.split(b"\0", 1)[0], "?")
        return " ".join(text.split())[:60]

    def requests(self) -> None:
        reader = _Reader(self.client)
        size = struct.unpack("!i", reader.exactly(4))[0]
        self.server.sendall(struct.pack("!i", size) + reader.exactly(size - 4))  # startup
        batch: list[tuple[int, bytes]] = []
        raw = bytearray()
        while True:
            try:
                head = reader.exactly(5)
            except _Closed:
                return
            kind, size = head[0], struct.unpack("!i", head[1:])[0]
            payload = reader.exactly(size - 4)
            batch.append((kind, payload))
            raw += head + payload
            if kind == ord("X"):  # Terminate
                self.server.sendall(raw)
                return
            if kind not in _STATEMENT_ENDS:
                continue
            fault = self.proxy.plan.next(self._statement(batch))
            batch = []
            if fault in (PgFault.DROP, PgFault.DOWN):
                return  # neither this statement nor anything after reaches the server
            if fault is PgFault.DROP_AFTER:
                self.drop_after.set()
            self.server.sendall(raw)
            raw = bytearray()

    def replies(self) -> None:
        reader = _Reader(self.server)
        out = bytearray()
        with contextlib.suppress(OSError, _Closed):
            while True:
                head = reader.exactly(5)
                kind, size = head[0], struct.unpack("!i", head[1:])[0]
                message = head + reader.exactly(size - 4)
                if self.drop_after.is_set():
                    if kind == ord("Z"):  # the server ran it; the client never hears
                        _close(self.client, self.server)
                        return
                    continue
                out += message
                if kind == ord("Z") or not reader.buf:
                    self.client.sendall(out)
                    out = bytearray()
