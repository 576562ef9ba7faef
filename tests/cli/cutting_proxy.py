"""A loopback proxy that relays the request whole and the reply only up to a byte limit,
then hangs up: a download that dies mid-body, at a known point, every time."""

from __future__ import annotations

import socket
import threading


class CuttingProxy:
    def __init__(self, upstream: tuple[str, int], reply_limit: int) -> None:
        self.upstream = upstream
        self.reply_limit = reply_limit
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/"

    def __enter__(self) -> CuttingProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            try:
                server = socket.create_connection(self.upstream)
            except OSError:  # the api is gone: the client sees its connection die
                return
            with server:
                threading.Thread(target=_relay, args=(client, server, None), daemon=True).start()
                _relay(server, client, self.reply_limit)


def _relay(source: socket.socket, sink: socket.socket, limit: int | None) -> None:
    sent = 0
    try:
        while limit is None or sent < limit:
            data = source.recv(min(1 << 16, limit - sent) if limit is not None else 1 << 16)
            if not data:
                break
            sink.sendall(data)
            sent += len(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
