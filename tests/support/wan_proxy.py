"""A loopback TCP proxy that plays a bad wide-area link between a client and a real
server, for replication under faults (tests/replikate/test_wan.py, bench/wan_faults.py).

What a test can do to the link, at any moment:

* ``partition()`` / ``heal()``: nothing gets through either way; bytes in flight and new
  connections wait (accepted, not answered), as when a router drops every packet, and
  go through once healed, as TCP's retransmissions would;
* ``rate``: bytes per second each way, shared by every connection (a thin link);
* ``flap(up, down)``: partitions that come and go, ``down`` seconds every ``up + down``;
* ``loss``: the chance that a piece of data waits ``loss_delay`` seconds first (a lost
  segment and its retransmission; TCP never loses bytes, it delays them);
* ``reset()``: every open connection cut (an RST from a middlebox).

It counts what it did in ``faults`` (partitions, resets, delayed pieces), for reports.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter

CHUNK = 16 << 10


class WanProxy:
    def __init__(self, upstream: tuple[str, int], *, seed: int = 27) -> None:
        self.upstream = upstream
        self.rate: float | None = None  # bytes per second each way; None: no limit
        self.loss = 0.0
        self.loss_delay = 0.2
        self.faults: Counter[str] = Counter()
        self._up = threading.Event()
        self._up.set()
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._next_send = {"up": 0.0, "down": 0.0}  # the shared link, per direction
        self._open: list[socket.socket] = []
        self._closing = False
        self._flapper: threading.Thread | None = None
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="wan-accept").start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    # --- faults ---------------------------------------------------------------------------
    def partition(self) -> None:
        if self._up.is_set():
            self.faults["partitions"] += 1
        self._up.clear()

    def heal(self) -> None:
        self._up.set()

    @property
    def partitioned(self) -> bool:
        return not self._up.is_set()

    def flap(self, up: float, down: float) -> None:
        """Partitions of ``down`` seconds after each ``up`` seconds, until ``steady()``."""
        self._flapping = True

        def run() -> None:
            while self._flapping and not self._closing:
                time.sleep(up)
                if not self._flapping:
                    break
                self.partition()
                time.sleep(down)
                self.heal()

        self._flapper = threading.Thread(target=run, daemon=True, name="wan-flap")
        self._flapper.start()

    def steady(self) -> None:
        self._flapping = False
        if self._flapper is not None:
            self._flapper.join()
        self.heal()

    def reset(self) -> None:
        self._cut()
        self.faults["resets"] += 1

    def close(self) -> None:
        self._closing = True
        self._flapping = False
        self.heal()
        self.listener.close()
        self._cut()

    def _cut(self) -> None:
        with self._lock:
            sockets, self._open = self._open, []
        for sock in sockets:
            _abort(sock)

    def __enter__(self) -> WanProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- relaying -------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._up.wait()  # a new connection through a partition waits for it to end
        try:
            server = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            _abort(client)
            return
        server.settimeout(None)
        with self._lock:
            self._open += [client, server]
        threading.Thread(target=self._pipe, args=(client, server, "up"), daemon=True).start()
        self._pipe(server, client, "down")

    def _pipe(self, source: socket.socket, sink: socket.socket, direction: str) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                self._up.wait()
                if self.loss and self._random.random() < self.loss:
                    self.faults["delayed pieces"] += 1
                    time.sleep(self.loss_delay)
                self._pace(direction, len(data))
                self._up.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _abort(source)
            _abort(sink)

    def _pace(self, direction: str, size: int) -> None:
        rate = self.rate
        if not rate:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_send[direction])
            self._next_send[direction] = start + size / rate
        if start > now:
            time.sleep(start - now)


def _abort(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
