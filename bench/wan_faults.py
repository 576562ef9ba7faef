"""Replication under WAN faults: the real replikate service (``python -m zoscii_replikate``,
its scheduler, its /metrics) following a real source api through a proxy that plays a
bad link (tests/support/wan_proxy.py). Eight scenarios, 20,000 messages each (issue 27):

    baseline      a healthy link
    loss          5 % of the pieces of data wait 200 ms (lost segments, retransmitted)
    partition     60 s of nothing either way, in the middle of the catch-up
    flapping      3 s down every 8 s for the whole run
    thin          1 Mbit/s each way
    resets        every open connection cut every 2 s
    grow          the source publishes through a 30 s partition, at 400 msg/s
    kill          kill -9 of the replicator during a partition, restarted after it

For each: lost, duplicated and reordered messages (target against source, bytes and
order), the pointer never ahead of what was written (sampled every 0.2 s), and what
/metrics said meanwhile: seconds from a partition's start to the first stall counted,
the highest lag seen during a partition, whether the last success moved during the
catch-up, APScheduler "maximum number of running instances" warnings, and the catch-up
time after the link came back.

    .venv/bin/python -m bench.wan_faults [--messages 20000] [--only partition,thin]
    make bench-faults   (this, then bench/attack_run.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support.api_server import running_api
from tests.support.queues import queue_contents
from tests.support.wan_proxy import WanProxy
from zosciimq.client import ZosciiClient
from zosciimq.core.states import read_pointer

SOURCE_QUEUE, TARGET_QUEUE = "outbox", "mirror"
SIZE = 200
METRIC = re.compile(r'^(zoscii_replikate_\w+)\{([^}]*)\} (\S+)$', re.M)


def written(target: Path) -> int:
    """Messages in the target queue, counted by name (cheap: sampled five times a second)."""
    try:
        return sum(1 for entry in os.scandir(target / "queues" / TARGET_QUEUE)
                   if entry.name.endswith(".bin"))  # fmt: skip
    except FileNotFoundError:
        return 0


def fill(url: str, count: int, tag: str, rate: float | None = None) -> None:
    """``count`` numbered messages (``<tag>-<n>`` then padding), in order, in batches."""
    with ZosciiClient(url) as client:
        batch = 100 if rate is None else max(1, int(rate / 10))
        for start in range(0, count, batch):
            began = time.monotonic()
            bodies = [
                f"{tag}-{n:06d}-".encode().ljust(SIZE, b".")
                for n in range(start, min(count, start + batch))
            ]
            client.publish_many(SOURCE_QUEUE, bodies, retention_days=1)
            if rate is not None:
                time.sleep(max(0.0, len(bodies) / rate - (time.monotonic() - began)))


class Replikate:
    """The service as a child process, its /metrics sampled, its log kept."""

    def __init__(self, work: Path, source_url: str) -> None:
        self.work = work
        self.config = work / "replikate.toml"
        self.config.write_text(
            "[defaults]\ninterval_seconds = 5\nconnect_timeout = 5\nread_timeout = 30\n"
            "retries = 2\nbackoff_initial_seconds = 1\nbackoff_max_seconds = 5\n"
            f'[jobs.wan]\nsource_url = "{source_url}"\nsource_queue = "{SOURCE_QUEUE}"\n'
            f'target_queue = "{TARGET_QUEUE}"\n'
        )
        self.log: list[str] = []
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> None:
        env = {
            **os.environ,
            "ZOSCII_DATA_DIR": str(self.work / "target"),
            "ZOSCII_REPLIKATE_CONFIG": str(self.config),
            "ZOSCII_REPLIKATE_METRICS_HOST": "127.0.0.1",
            "ZOSCII_REPLIKATE_METRICS_PORT": "0",
            "ZOSCII_LOG_LEVEL": "INFO",
        }
        self.port = 0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "zoscii_replikate"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.process is not None and self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line)
                if m := re.search(r"serving /healthz and /metrics on port (\d+)", line):
                    self.port = int(m[1])
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(30):
            raise RuntimeError("replikate did not start:\n" + "".join(self.log[-20:]))

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)

    def metrics(self) -> dict[str, float]:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2)
            body = text.read().decode()
        except OSError:
            return {}
        found = {}
        for name, labels, value in METRIC.findall(body):
            reason = re.search(r'reason="(\w+)"', labels)
            found[name + (f":{reason[1]}" if reason else "")] = float(value)
        return found


class Watch:
    """Samples /metrics and the pointer against the target every 0.2 s."""

    def __init__(self, replikate: Replikate, target: Path, source_names: Callable[[], list]):
        self.replikate, self.target, self.source_names = replikate, target, source_names
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.pointer_ahead = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index: dict[str, int] = {}
        while not self._stop.wait(0.2):
            self.samples.append((time.monotonic(), self.replikate.metrics()))
            pointers = list((self.target / "states").glob("replikate_state_*.txt"))
            if not pointers:
                continue
            pointer = read_pointer(pointers[0])
            if pointer and pointer not in index:
                index = {name: i for i, name in enumerate(self.source_names())}
            done = written(self.target)  # after the pointer: never fewer than it says
            if pointer and index.get(pointer, -1) + 1 > done:
                self.pointer_ahead += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> list[dict[str, float]]:
        return [m for t, m in self.samples if start <= t <= end and m]


def run_scenario(name: str, messages: int, tmp: Path) -> dict[str, Any]:
    work = tmp / name
    work.mkdir()
    with running_api(work / "source", workers=2, threads=8) as source_url:
        host = urlsplit(source_url)
        link = WanProxy((host.hostname or "127.0.0.1", host.port or 80))
        fill(source_url, messages, "m")
        source = lambda: [n for n, _ in queue_contents(work / "source", SOURCE_QUEUE)]  # noqa: E731
        replikate = Replikate(work, link.url)
        figures: dict[str, Any] = {"scenario": name, "messages": messages}
        partitions: list[tuple[float, float]] = []
        grower: threading.Thread | None = None

        def partition(seconds: float, during: Callable[[], None] | None = None) -> None:
            began = time.monotonic()
            link.partition()
            if during is not None:
                during()
            time.sleep(max(0.0, seconds - (time.monotonic() - began)))
            link.heal()
            partitions.append((began, time.monotonic()))

        if name == "loss":
            link.loss, link.loss_delay = 0.05, 0.2
        elif name == "thin":
            link.rate = 125_000
        elif name == "flapping":
            link.flap(up=5, down=3)
        replikate.start()
        target = work / "target"
        watch = Watch(replikate, target, source)
        started = time.monotonic()
        total = messages
        try:
            if name in ("partition", "kill", "grow"):
                while written(target) < messages // 4:
                    time.sleep(0.2)
            if name == "partition":
                partition(60)
            elif name == "grow":
                extra = 12_000
                total += extra
                grower = threading.Thread(target=fill, args=(source_url, extra, "g", 400.0))
                partition(30, grower.start)
            elif name == "kill":

                def kill_and_restart() -> None:
                    time.sleep(10)
                    replikate.kill()
                    figures["killed_at_written"] = written(target)
                    replikate.start()

                partition(30, lambda: threading.Thread(target=kill_and_restart).start())
            elif name == "resets":
                while written(target) < total:
                    time.sleep(2)
                    link.reset()
            healed = time.monotonic()
            if grower is not None:
                grower.join()
            deadline = time.monotonic() + 900
            while written(target) < total:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            done = time.monotonic()
            time.sleep(2)  # the source's "nothing newer" after the last batch: lag near 0
        finally:
            link.steady()
            watch.stop()
            replikate.stop()
            link.close()
        want = [body for _, body in queue_contents(work / "source", SOURCE_QUEUE)]
        got = [body for _, body in queue_contents(target, TARGET_QUEUE)]
        figures |= {
            "messages": total,
            "seconds": round(done - started, 1),
            "catch_up_after_link_back_s": round(done - healed, 1) if partitions else None,
            "lost": len(set(want) - set(got)),
            "duplicated": len(got) - len(set(got)),
            "reordered": int(got != [b for b in want if b in set(got)]),
            "pointer_ahead_samples": watch.pointer_ahead,
            "faults_injected": sum(link.faults.values()),
            "scheduler_warnings": sum(
                "maximum number of running instances" in line for line in replikate.log
            ),
        }
        last = [m for t, m in watch.samples if m and t > done]
        success_during = [
            m for m in watch.between(started, done)
            if m.get("zoscii_replikate_last_success_timestamp_seconds")
            and 0 < m.get("zoscii_replikate_messages_total", 0) < total
        ]  # fmt: skip
        figures["last_success_during_catch_up"] = bool(success_during)
        for number, (began, ended) in enumerate(partitions):
            during = watch.between(began, ended)
            stalled = [
                t - began for t, m in watch.samples
                if began <= t <= ended and m.get("zoscii_replikate_errors_total:stalled", 0)
                > (during[0].get("zoscii_replikate_errors_total:stalled", 0) if during else 0)
            ]  # fmt: skip
            figures[f"partition{number}_s"] = round(ended - began, 1)
            figures[f"partition{number}_stall_seen_after_s"] = (
                round(stalled[0], 1) if stalled else None
            )
            figures[f"partition{number}_max_lag_s"] = round(
                max((m.get("zoscii_replikate_lag_seconds", 0) for m in during), default=0), 1
            )
        final = last[-1].get("zoscii_replikate_lag_seconds", -1) if last else -1
        figures["final_lag_s"] = round(final, 1)
        return figures


SCENARIOS = ("baseline", "loss", "partition", "flapping", "thin", "resets", "grow", "kill")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    args = parser.parse_args()
    totals = {"messages": 0, "lost": 0, "duplicated": 0, "reordered": 0, "faults_injected": 0}
    with tempfile.TemporaryDirectory(prefix="zoscii-wan-") as tmp:
        for name in args.only.split(","):
            figures = run_scenario(name, args.messages, Path(tmp))
            print(json.dumps(figures), flush=True)
            for key in totals:
                totals[key] += figures[key]
    print(json.dumps({"scenario": "all", **totals}), flush=True)


if __name__ == "__main__":
    main()
