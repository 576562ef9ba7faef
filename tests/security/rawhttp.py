"""HTTP spoken byte by byte over a socket: what requests will not send for us."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass


@dataclass
class RawReply:
    raw: bytes

    @property
    def status(self) -> int:
        return int(self.raw.split(b" ", 2)[1]) if self.raw.startswith(b"HTTP/") else 0

    @property
    def body(self) -> bytes:
        return self.raw.partition(b"\r\n\r\n")[2]

    def envelope(self) -> dict:
        return json.loads(self.body)


def connect(port: int, timeout: float = 30.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (or the socket's timeout)."""
    data = bytearray()
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return bytes(data)


def exchange(port: int, request: bytes, timeout: float = 30.0) -> RawReply:
    """Send one request with ``Connection: close`` semantics and read the whole reply."""
    with connect(port, timeout) as sock:
        sock.sendall(request)
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return RawReply(read_all(sock))
