"""The floor under a fan-out: one event written to each of N TCP sockets, from one loop.

What the live service does per message and per stream reader, with nothing else: a
Python loop that ``send``s the same 100-byte SSE event to each of N loopback
connections, whose other ends sit in another process's epoll (woken as a reader is). It
prints, per round, the wall time and this process's CPU time, per round and per socket.
The live service's own figure is ``bench.fanout``'s "CPU per message: live" (through the
compose stack's bridge, one hop more per send).

``python -m bench.send_bound [N] [rounds]`` (default 10,000 sockets, 5 rounds; the soft
``ulimit -n`` must allow 2 N + 100).
"""

from __future__ import annotations

import os
import resource
import select
import socket
import sys
import time

EVENT = b"id: 202611270000000000-0001-00000000-0000-0000-0000-000000000000.bin\ndata: "
EVENT += b"x" * (100 - len(EVENT) - 2) + b"\n\n"


def _hold(port: int, count: int, ready: int) -> None:
    """The readers' side (child process): connect, then read whatever comes."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    poll = select.epoll()
    for sock in socks:
        sock.setblocking(False)
        poll.register(sock.fileno(), select.EPOLLIN)
    os.write(ready, b"x")
    while True:
        for fd, _ in poll.poll():
            try:
                os.read(fd, 65536)
            except BlockingIOError:
                pass


def main(count: int, rounds: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * count + 100
    if hard != resource.RLIM_INFINITY:
        wanted = min(hard, wanted)
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4096)
    port = server.getsockname()[1]
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        server.close()
        _hold(port, count, ready_w)
        os._exit(0)
    try:
        accepted = [server.accept()[0] for _ in range(count)]
        for sock in accepted:
            sock.setblocking(False)
        os.read(ready_r, 1)
        for _ in range(rounds):
            time.sleep(1.0)
            wall, cpu = time.perf_counter(), time.process_time()
            for sock in accepted:
                sock.send(EVENT)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(
                f"{count} sockets: {1000 * wall:.0f} ms wall ({1e6 * wall / count:.1f} us each), "
                f"{1000 * cpu:.0f} ms CPU ({1e6 * cpu / count:.1f} us each); "
                f"load {os.getloadavg()[0]:.1f}"
            )
    finally:
        os.kill(child, 9)
        os.waitpid(child, 0)


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 10_000,
        int(sys.argv[2]) if len(sys.argv) > 2 else 5,
    )
