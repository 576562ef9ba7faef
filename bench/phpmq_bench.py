"""The PHPMQ gateway's targets (issue 24), against a real gateway process, beside the api's
HTTP framed batch doing the same work, in alternating rounds on the disk given by ``--dir``
(not tmpfs: durability is the point; the figures of docs/benchmarks.md come from ext4 on a
loop device).

* **send**: the real client's pattern (``php-mq/client``: each 001 written in pieces of
  1,024 bytes, then ``shutdown`` and ``close``, nothing waited for, as PHPMQ has no reply)
  of 10,000 x 1 KB, timed from the connection to the moment the last message is visible
  (durable: in the default ``sync`` mode a message is visible only after its group's log
  flush). Also: how long after the client's close the last one became durable (what a
  kill -9 of the gateway at that moment would have lost). Beside it the api: the same
  messages in framed batches of 100 from one client, each batch answered once durable.
* **consume+ack**: 8 consumers of one consumer group, batches of 100 (a 002 window of 100,
  each message acked by its 004 as soon as it is read; the api: ``consume`` count=100 and
  one ``ack`` request for the batch), until every message of a prefilled queue is acked.

Every round checks what it measured: all messages there, once, in order, byte-exact;
every one delivered once and acked. Rates are medians and ranges over the rounds, with
the server's CPU per message. ``python -m bench.phpmq_bench [--rounds N] [--messages N]
[--consume N] [--dir DIR]`` (``make bench-phpmq``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench.context import PAYLOAD_1K
from tests.phpmq import wire
from tests.support.api_server import ApiServer
from tests.support.phpmq_gateway import GatewayProcess
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir, Outgoing, QueueStore, Upload
from zosciimq.core.groups import ConsumerGroups, GroupStats
from zosciimq.errors import QueueNotFound, TryAgain

GROUP = "phpmq"
TAG = 10  # a message's position as 10 ASCII digits starts its body: order is checkable
TAIL = PAYLOAD_1K[TAG:]
WRITE_CHUNK = 1024  # php-mq/client's ChunkSize::WRITE
CONSUMERS = 8
WINDOW = 100


def body(position: int) -> bytes:
    return b"%010d" % position + TAIL


@dataclass
class Figure:
    """One round's result of one contender."""

    messages: int
    seconds: float
    cpu: float  # the server's processes
    client_cpu: float  # the bench's own process: the clients
    closed_to_durable: float = 0.0  # send: from the client's close to the last one durable
    commits: int = 0  # send: the gateway's commits (log flushes) for the round

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_ms(self) -> float:
        return self.cpu / self.messages * 1000

    @property
    def client_cpu_ms(self) -> float:
        return self.client_cpu / self.messages * 1000


class Meter:
    """Wall time, the CPU of the server's processes and the bench's own, from ``start``."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.started = time.monotonic()
        self.cpu = self._server_cpu()
        self.own = time.process_time()

    def figure(self, messages: int, closed_to_durable: float = 0.0) -> Figure:
        seconds = time.monotonic() - self.started
        cpu, own = self._server_cpu() - self.cpu, time.process_time() - self.own
        return Figure(messages, seconds, cpu, own, closed_to_durable)

    def _server_cpu(self) -> float:
        total = 0.0
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                times = psutil.Process(pid).cpu_times()
                total += times.user + times.system
        return total


# --- checks -----------------------------------------------------------------------------------
def check_queue(data_dir: Path, queue: str, count: int) -> None:
    """Every message there once, in order, byte-exact."""
    store = QueueStore(DataDir(data_dir))
    try:
        position = 0
        for _, file in store.iter_after(queue, "", count + 1):
            with file:
                data = file.read()
            if data != body(position):
                raise AssertionError(f"{queue}: message {position} is {data[:TAG]!r}...")
            position += 1
        if position != count:
            raise AssertionError(f"{queue}: {position} messages, not {count}")
    finally:
        store.close()


def fill(data_dir: Path, queue: str, count: int) -> None:
    """``count`` tagged messages published through the core, 1,000 a commit."""
    store = QueueStore(DataDir(data_dir))
    try:
        for start in range(0, count, 1000):
            outgoing = []
            for position in range(start, min(count, start + 1000)):
                upload = Upload(store.data_dir)
                upload.write(body(position))
                outgoing.append(Outgoing(upload, None))
            try:
                while True:
                    try:
                        store.publish_many(queue, outgoing)
                        break
                    except TryAgain:  # 10,000 names a second on one queue: the next
                        time.sleep(0.05)
            finally:
                for message in outgoing:
                    message.upload.discard()
    finally:
        store.close()


def check_acked(data_dir: Path, queue: str, count: int, seen: list[int]) -> None:
    """Every message delivered once and acked for the group."""
    if sorted(seen) != list(range(count)):
        missing = count - len(set(seen))
        raise AssertionError(f"{queue}: {len(seen)} deliveries, {missing} missing")
    with group_stats(data_dir) as stats_of:
        stats = stats_of(queue)
    if stats.acked != count or stats.leased or stats.waiting or stats.dead_lettered:
        raise AssertionError(f"{queue}: group figures {stats}")


@contextlib.contextmanager
def group_stats(data_dir: Path) -> Iterator[Callable[[str], GroupStats]]:
    """The figures of a queue's ``phpmq`` group, as often as asked."""
    data = DataDir(data_dir)
    store = QueueStore(data)
    try:
        groups = ConsumerGroups(data, store)
        yield lambda queue: groups.stats(queue, GROUP)
    finally:
        store.close()


# --- PHPMQ ------------------------------------------------------------------------------------
def phpmq_send(gateway: GatewayProcess, queue: str, count: int) -> Figure:
    """The real client's send: every 001 written in 1 KB pieces, then shutdown + close."""
    frames = b"".join(wire.send(queue, body(i)) for i in range(count))
    store = QueueStore(DataDir(gateway.data_dir))
    commits = gateway.metric("zoscii_phpmq_commit_messages_count")
    meter = Meter(lambda: gateway_pids(gateway))
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    view = memoryview(frames)
    for at in range(0, len(frames), WRITE_CHUNK):
        sock.sendall(view[at : at + WRITE_CHUNK])
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    closed = time.monotonic()
    deadline = closed + 120
    while True:
        try:
            if store.depth(queue) >= count:
                break
        except QueueNotFound:  # not a message yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{queue}: not all {count} there after 120 s")
        time.sleep(0.002)
    figure = meter.figure(count, closed_to_durable=time.monotonic() - closed)
    store.close()
    figure.commits = int(gateway.metric("zoscii_phpmq_commit_messages_count") - commits)
    check_queue(gateway.data_dir, queue, count)
    return figure


def gateway_pids(gateway: GatewayProcess) -> list[int]:
    assert gateway.process is not None
    return [gateway.process.pid]


class PhpmqConsumer:
    """A consumer connection: a window of ``WINDOW``; every 003 read is acked at once
    (the acks of one read in one write). Lean, so the bench's two cores go to the
    gateway: a 003 is taken apart by its lengths, an ack is a prefix and the id."""

    def __init__(self, port: int, queue: str) -> None:
        self.queue = queue
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(wire.consume(queue, WINDOW))
        self.sock.setblocking(False)
        self.buffer = b""
        self.seen: list[int] = []
        name = queue.encode()
        # wire.ack(queue, id) up to the id: the header, the queue, the id's packet header.
        self.ack_prefix = b"H0100402P01%029d%sP03%029d" % (len(name), name, 32)

    def readable(self) -> int:
        data = self.sock.recv(1 << 20)
        if not data:
            raise AssertionError("the gateway closed a consumer")
        data = self.buffer + data
        at, end, acks = 0, len(data), []
        while True:  # 003: header, then queue, content, id, TTL packets
            packet = at + 8
            fields = []
            for _ in range(4):
                if end < packet + 32:
                    break
                length = int(data[packet + 3 : packet + 32])
                fields.append(packet + 32)
                packet += 32 + length
            if len(fields) < 4 or end < packet:
                break
            self.seen.append(int(data[fields[1] : fields[1] + TAG]))
            acks.append(self.ack_prefix + data[fields[2] : fields[2] + 32])
            at = packet
        self.buffer = data[at:]
        if acks:
            self.sock.setblocking(True)
            self.sock.sendall(b"".join(acks))
            self.sock.setblocking(False)
        return len(acks)


def phpmq_consume(gateway: GatewayProcess, queue: str, count: int) -> Figure:
    fill(gateway.data_dir, queue, count)
    meter = Meter(lambda: gateway_pids(gateway))
    consumers = [PhpmqConsumer(gateway.port, queue) for _ in range(CONSUMERS)]
    selector = selectors.DefaultSelector()
    for consumer in consumers:
        selector.register(consumer.sock, selectors.EVENT_READ, consumer)
    acked, deadline = 0, time.monotonic() + 120
    while acked < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{queue}: {acked} of {count} acked after 120 s")
        for key, _ in selector.select(1.0):
            acked += key.data.readable()
    # The last acks are settled after they arrive: wait for the group to say so.
    with group_stats(gateway.data_dir) as stats_of:
        while stats_of(queue).acked < count and time.monotonic() < deadline:
            time.sleep(0.002)
    figure = meter.figure(count)
    for consumer in consumers:
        selector.unregister(consumer.sock)
        consumer.sock.close()
    check_acked(gateway.data_dir, queue, count, [s for c in consumers for s in c.seen])
    return figure


# --- the api ----------------------------------------------------------------------------------
def api_pids(api: ApiServer) -> list[int]:
    assert api.process is not None
    return [api.process.pid, *api.worker_pids()]


def api_send(api: ApiServer, queue: str, count: int) -> Figure:
    """The same messages in framed batches of 100 from one client."""
    with ZosciiClient(api.url) as client:
        client.publish_many(queue + "warm", [b"a", b"b"])  # learns the framed body
        meter = Meter(lambda: api_pids(api))
        client.publish_many(queue, (body(i) for i in range(count)), batch_size=100)
        figure = meter.figure(count)
    check_queue(api.data_dir, queue, count)
    return figure


def api_consume(api: ApiServer, queue: str, count: int) -> Figure:
    """8 threads: ``consume`` count=100, then one ``ack`` request for the batch."""
    fill(api.data_dir, queue, count)
    seen: list[int] = []
    failures: list[BaseException] = []
    lock = threading.Lock()
    acked = [0]

    def work() -> None:
        try:
            with ZosciiClient(api.url) as client:
                while True:
                    with lock:
                        if acked[0] >= count:
                            return
                    batch = client.lease(queue, GROUP, count=WINDOW)
                    if not batch:
                        continue
                    tags = []
                    for message in batch:
                        with message:
                            tags.append(int(message.data[:TAG]))
                    client.ack_many(queue, GROUP, batch)
                    with lock:
                        seen.extend(tags)
                        acked[0] += len(tags)
        except BaseException as exc:  # reported by the round
            failures.append(exc)

    meter = Meter(lambda: api_pids(api))
    threads = [threading.Thread(target=work) for _ in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    figure = meter.figure(count)
    if failures:
        raise failures[0]
    check_acked(api.data_dir, queue, count, seen)
    return figure


# --- the run ----------------------------------------------------------------------------------
def summary(values: list[float], unit: str = "", digits: int = 0) -> str:
    return (
        f"{statistics.median(values):,.{digits}f}{unit} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def timed(figures: list[Figure]) -> str:
    return (
        f"{summary([f.seconds for f in figures], ' s', 3)}, "
        f"{summary([f.rate for f in figures], ' msg/s')}, "
        f"CPU server {summary([f.cpu_ms for f in figures], '', 3)}, "
        f"clients {summary([f.client_cpu_ms for f in figures], '', 3)}"
    )


@contextlib.contextmanager
def servers(root: Path) -> Iterator[tuple[GatewayProcess, ApiServer]]:
    """The gateway and the api on data directories under ``root``, where their temporary
    files go too (the api's metrics and log), so nothing outlives the run."""
    tempdir, env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = os.environ["TMPDIR"] = str(root)
    gateway = GatewayProcess(root / "phpmq", ZOSCII_LOG_LEVEL="INFO").start()
    api = ApiServer(root / "api")
    try:
        api.start()
        yield gateway, api
    finally:
        api.stop()
        gateway.terminate()
        gateway.kill()
        tempfile.tempdir = tempdir
        if env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=10_000, help="sent per round")
    parser.add_argument("--consume", type=int, default=30_000, help="consumed per round")
    parser.add_argument("--dir", type=Path, default=None, help="the disk to measure")
    args = parser.parse_args()
    results: dict[str, list[Figure]] = {}
    with tempfile.TemporaryDirectory(prefix="zoscii-phpmq-bench-", dir=args.dir) as tmp:
        with servers(Path(tmp)) as (gateway, api):
            api.wait_for_workers(2)
            runs: list[tuple[str, Callable[[str], Figure]]] = [
                ("phpmq send", lambda q: phpmq_send(gateway, q, args.messages)),
                ("api send", lambda q: api_send(api, q, args.messages)),
                ("phpmq consume+ack", lambda q: phpmq_consume(gateway, q, args.consume)),
                ("api consume+ack", lambda q: api_consume(api, q, args.consume)),
            ]
            for number in range(args.rounds):
                # Each pair alternates which goes first from round to round.
                order = runs if number % 2 == 0 else [runs[1], runs[0], runs[3], runs[2]]
                for label, run in order:
                    figure = run(f"b{number}{label.replace(' ', '').replace('+', '')}")
                    results.setdefault(label, []).append(figure)
                    commits = f", {figure.commits} commits" if figure.commits else ""
                    print(
                        f"round {number + 1} {label}: {figure.messages:,} in "
                        f"{figure.seconds:.3f} s, {figure.rate:,.0f} msg/s, CPU ms/msg "
                        f"server {figure.cpu_ms:.3f} clients {figure.client_cpu_ms:.3f}"
                        f"{commits}",
                        flush=True,
                    )
    report(results, args)


def report(results: dict[str, list[Figure]], args: argparse.Namespace) -> None:
    send, api_send_ = results["phpmq send"], results["api send"]
    consume, api_consume_ = results["phpmq consume+ack"], results["api consume+ack"]
    cycle = [f.seconds / f.commits * 1000 for f in send]
    print(
        f"\n{args.rounds} rounds, median (range); CPU: ms per message, of the server's "
        "processes and of the bench's (the clients)"
    )
    print(f"send {args.messages:,} x 1 KB until durable (target: under 2 s)")
    print(f"  phpmq, the real client's pattern: {timed(send)}")
    print(
        f"    commits (log flushes): {summary([f.commits for f in send])}, one read and "
        f"committed every {summary(cycle, ' ms', 1)}"
    )
    print(
        "    from the client's close to the last one durable (what it had sent and the "
        f"gateway not yet read): {summary([f.closed_to_durable * 1000 for f in send], ' ms')}"
    )
    print(f"  api, framed batches of 100, 1 client: {timed(api_send_)}")
    print(
        f"consume+ack {args.consume:,} x 1 KB, {CONSUMERS} consumers, batches of {WINDOW} "
        "(target: >= 10,000 msg/s)"
    )
    print(f"  phpmq: {timed(consume)}")
    print(f"  api:   {timed(api_consume_)}")


if __name__ == "__main__":
    main()
