"""A loopback TCP proxy for tests: relays bytes, and can lose replies or go down.

``drop_replies = n`` makes the next n connections forward the request, wait for the
server's reply to start, then hang up on the client without relaying it: the server
did the work, the client saw a connection die (what a retry must survive).
``stop()``/``start()`` take the listening port down and bring it back (a source that is
down for a while).
"""

from __future__ import annotations

import socket
import threading


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.drop_replies = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listener and every relayed connection: the port refuses connections."""
        if self._listener is not None:
            _close(self._listener)  # shutdown first: a blocked accept() would go on otherwise
            self._listener = None
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            _close(sock)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                drop = self.drop_replies > 0
                if drop:
                    self.drop_replies -= 1
            threading.Thread(target=self._serve, args=(client, drop), daemon=True).start()

    def _serve(self, client: socket.socket, drop: bool) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            _close(client)
            return
        with self._lock:
            self._open += [client, server]
        if drop:
            threading.Thread(target=_pipe, args=(client, server), daemon=True).start()
            try:
                server.recv(1)  # the server has answered: it did the work
            except OSError:
                pass
            _close(client)
            _close(server)
            return
        threading.Thread(target=_pipe, args=(client, server), daemon=True).start()
        _pipe(server, client)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(1 << 16)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
