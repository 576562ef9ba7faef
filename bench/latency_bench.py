"""Publish-to-consumer latency: a following consumer with long-poll, against polling once a second.

A real api under gunicorn on loopback (two workers, so a publish often lands in another
worker than the waiting fetch and wakes it through the index watcher, not in-process).
A publisher thread publishes one message at a time at random moments (uniform gaps, so
they do not line up with the poll ticks); a consumer thread follows the queue with the
client's ``consume(follow=True)``. Latency is from just before the publish request to
the moment the consumer holds the message. Prints one JSON line per mode with p50, p99
and max in milliseconds.

    .venv/bin/python -m bench.latency_bench [--messages 200] [--max-gap 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from tests.support.api_server import running_api
from zosciimq.client import MemoryPointerStore, ZosciiClient

MODES = {
    "long-poll": {"long_poll": True, "wait_seconds": 20.0, "poll_interval": 1.0},
    "poll every 1 s": {"long_poll": False, "poll_interval": 1.0},
}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure(url: str, queue: str, mode: str, messages: int, max_gap: float) -> dict[str, object]:
    rng = random.Random(1)
    sent: dict[int, float] = {}
    acked: dict[int, float] = {}
    received: dict[int, float] = {}
    stop = threading.Event()
    with ZosciiClient(url) as publisher:
        publisher.publish(queue, b"start")
        start = publisher.fetch(queue)
        assert start is not None

        def consume() -> None:
            with ZosciiClient(url) as client:
                pointer = MemoryPointerStore(start.name)
                for message in client.consume(
                    queue, pointer, follow=True, stop=stop, **MODES[mode]
                ):
                    received[int(message.data)] = time.perf_counter()
                    if len(received) == messages:
                        stop.set()

        consumer = threading.Thread(target=consume, name="consumer")
        consumer.start()
        time.sleep(1.5)  # the consumer is waiting (or polling) before the first publish
        for number in range(messages):
            time.sleep(rng.uniform(0, max_gap))
            sent[number] = time.perf_counter()
            publisher.publish(queue, b"%d" % number)
            acked[number] = time.perf_counter()
        consumer.join(timeout=120)
        stop.set()
    if len(received) != messages:
        raise RuntimeError(f"{mode}: the consumer got {len(received)} of {messages}")
    latency = [1000 * (received[n] - sent[n]) for n in range(messages)]
    publish = [1000 * (acked[n] - sent[n]) for n in range(messages)]
    return {
        "benchmark": "publish-to-consumer latency",
        "consumer": mode,
        "messages": messages,
        "p50_ms": round(percentile(latency, 0.50), 1),
        "p99_ms": round(percentile(latency, 0.99), 1),
        "max_ms": round(max(latency), 1),
        "publish_ack_p50_ms": round(percentile(publish, 0.50), 1),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--max-gap", type=float, default=0.5, help="seconds between publishes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zoscii-latency-") as tmp:
        with running_api(Path(tmp), workers=2) as url:
            for number, mode in enumerate(MODES):
                figures = measure(url, f"latency{number}", mode, args.messages, args.max_gap)
                print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
