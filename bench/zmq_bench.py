"""The ZeroMQ gateway's targets (issue 26), measured against a real gateway process on a
temporary directory of the disk (not tmpfs: durability is the point).

* zpipes, 1 KB chunks, one writer and one reader: chunks/s durable, the writer keeping
  256 WRITEs in flight (the seed's pipelining) and one at a time (the real clients'
  request-reply), beside request-reply publishes of 1 KB to a queue (REQ, one in flight);
* PUB/SUB: 100 subscribers of one queue, messages published at 1,000/s: the share each
  subscriber received;
* memory: the gateway's RSS with 0 pipes, then 1,000 open, closed, open again and
  closed again: flat means the second 1,000 cost what the first did, and closing them
  gives the memory back to the gateway (its RSS does not climb from cycle to cycle).

Rounds alternate the scenarios; medians and ranges are printed. ``python -m bench.zmq_bench
[--rounds N] [--seconds S] [--dir DIR]`` (``--dir``: the disk measured; default build/ of
the checkout when there is one, else the temporary directory).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
import zmq

from tests.support.zmq_gateway import Gateway
from tests.zmq import wire

CHUNK = b"x" * 1024


def zpipes_rate(gateway: Gateway, context: zmq.Context, seconds: float, window: int) -> float:
    name = b"bench" + str(time.monotonic_ns()).encode()
    writer = wire.Pipe(context, gateway.ipc, 30_000)
    reader = wire.Pipe(context, gateway.ipc, 30_000)
    reader.open_reader(name)
    writer.open_writer(name)
    received = [0]

    def read() -> None:
        while True:
            reply, data = reader.read(64 * 1024, 1000)
            if reply == "READ_OK":
                received[0] += len(data)
            elif reply == "READ_END":
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    sent = acked = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        while sent - acked < window:
            writer.send(wire.write(CHUNK, 0))
            sent += 1
        assert writer.reply()[0] == "WRITE_OK"
        acked += 1
    while acked < sent:
        assert writer.reply()[0] == "WRITE_OK"
        acked += 1
    elapsed = time.monotonic() - started
    writer.call(wire.CLOSE)
    thread.join(60)
    assert received[0] == acked * len(CHUNK), (received[0], acked)
    writer.close()
    reader.close()
    return acked / elapsed


def request_rate(gateway: Gateway, context: zmq.Context, seconds: float) -> float:
    req = context.socket(zmq.REQ)
    req.connect(gateway.endpoint("request"))
    count, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        req.send_multipart([b"publish", b"benchreq", CHUNK])
        assert req.recv_multipart()[0] == b"ok"
        count += 1
    req.close(linger=0)
    return count / (time.monotonic() - started)


def pubsub_share(gateway: Gateway, context: zmq.Context, seconds: float, subscribers: int) -> float:
    queue = b"benchpub" + str(time.monotonic_ns()).encode()
    subs = []
    for _ in range(subscribers):
        sub = context.socket(zmq.SUB)
        sub.rcvhwm = 0
        sub.connect(gateway.endpoint("pub"))
        sub.subscribe(queue)
        subs.append(sub)
    gateway.wait_for_log(f"pub: following {queue.decode()} after", 10)
    time.sleep(0.5)
    req = context.socket(zmq.REQ)
    req.connect(gateway.endpoint("request"))
    total = int(seconds * 1000)
    started = time.monotonic()
    for i in range(total):  # 1,000/s, in batches of 10 every 10 ms
        if i % 10 == 0:
            time.sleep(max(0.0, started + i / 1000 - time.monotonic()))
        req.send_multipart([b"publish", queue, b"m%d" % i])
        req.recv_multipart()
    counts = []
    poller = zmq.Poller()
    for sub in subs:
        poller.register(sub, zmq.POLLIN)
    got = dict.fromkeys(subs, 0)
    deadline = time.monotonic() + 10
    while min(got.values()) < total and time.monotonic() < deadline:
        for sock, _ in poller.poll(200):
            while True:
                try:
                    sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                got[sock] += 1
    counts = list(got.values())
    for sub in subs:
        sub.close(linger=0)
    req.close(linger=0)
    return min(counts) / total


def rss_with_pipes(gateway: Gateway, context: zmq.Context, pipes: int) -> list[float]:
    """The gateway's RSS in MiB: before, then with ``pipes`` open and after closing them,
    twice."""
    process = psutil.Process(gateway.process.pid)  # type: ignore[union-attr]
    figures = [process.memory_info().rss / 2**20]
    for cycle in range(2):
        clients = []
        for i in range(pipes):
            client = wire.Pipe(context, gateway.ipc, 10_000)
            client.open_writer(b"mem%d-%d" % (cycle, i))
            clients.append(client)
        figures.append(process.memory_info().rss / 2**20)
        for client in clients:
            client.call(wire.CLOSE)
            client.close()
        time.sleep(0.5)  # the gateway forgets a closed pipe as its CLOSE is handled
        figures.append(process.memory_info().rss / 2**20)
    return figures


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):,.0f}  range {min(values):,.0f}-{max(values):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", type=Path, default=None, help="the disk measured")
    args = parser.parse_args()
    context = zmq.Context()
    build = Path.cwd() / "build"
    with tempfile.TemporaryDirectory(
        dir=args.dir or (build if build.is_dir() else None)
    ) as tmp:
        gateway = Gateway(
            Path(tmp), ZOSCII_ZPIPES_MAX_SESSIONS="5000", ZOSCII_LOG_LEVEL="INFO"
        ).start()
        try:
            piped, serial, request, share = [], [], [], []
            for _ in range(args.rounds):
                piped.append(zpipes_rate(gateway, context, args.seconds, 256))
                serial.append(zpipes_rate(gateway, context, args.seconds, 1))
                request.append(request_rate(gateway, context, args.seconds))
                share.append(pubsub_share(gateway, context, args.seconds, 100) * 100)
            memory = rss_with_pipes(gateway, context, 1000)
        finally:
            gateway.terminate()
    print(f"zpipes 1 KB, 256 WRITEs in flight, chunks/s durable: {summary(piped)}")
    print(f"zpipes 1 KB, one WRITE in flight (the clients), chunks/s: {summary(serial)}")
    print(f"request-reply publish 1 KB, one in flight, msg/s:        {summary(request)}")
    print(f"PUB/SUB 100 subscribers at 1,000 msg/s, % the worst got:  {summary(share)}")
    print(
        "RSS MiB: no pipe {:.1f}; 1,000 open {:.1f}, closed {:.1f}; "
        "1,000 open again {:.1f}, closed {:.1f}".format(*memory)
    )
    context.destroy(linger=0)


if __name__ == "__main__":
    main()
