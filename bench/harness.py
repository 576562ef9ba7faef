"""The one measuring loop shared by figures and ceilings, so both pay the same overhead.

A figure (an HTTP request) and its ceiling (the raw file-system work behind it) are
timed by the same threads, the same clock and the same bookkeeping; what differs is
only the operation, so their ratio is the cost of everything the api adds.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

Operation = Callable[[], object]
OperationFactory = Callable[[int], Operation]  # thread number -> one operation per call


@dataclass
class Timing:
    operations: int
    seconds: float
    latencies: list[float] = field(repr=False)

    @property
    def rate(self) -> float:
        return self.operations / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        return percentile(self.latencies, q)


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that really occurred."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def merge(timings: list[Timing]) -> Timing:
    """Several runs of the same operation as one."""
    return Timing(
        operations=sum(t.operations for t in timings),
        seconds=sum(t.seconds for t in timings),
        latencies=[value for t in timings for value in t.latencies],
    )


def run_clients(
    concurrency: int,
    factory: OperationFactory,
    *,
    seconds: float | None = None,
    count: int | None = None,
) -> Timing:
    """Call operations from ``concurrency`` threads until ``seconds`` pass or ``count`` are done.

    Each thread builds its operation first (a keep-alive session, an open directory),
    then all start together. The first error stops every thread and is raised here.
    """
    if (seconds is None) == (count is None):
        raise ValueError("give exactly one of seconds or count")
    operations = [factory(number) for number in range(concurrency)]
    tickets = itertools.count()  # next() on it is atomic under the GIL
    start_line = threading.Barrier(concurrency + 1)
    stop = threading.Event()
    per_thread: list[list[float]] = [[] for _ in range(concurrency)]
    errors: list[BaseException] = []
    deadline = 0.0

    def client(number: int) -> None:
        operation, latencies = operations[number], per_thread[number]
        start_line.wait()
        try:
            while not stop.is_set():
                if count is not None and next(tickets) >= count:
                    return
                began = time.perf_counter()
                operation()
                ended = time.perf_counter()
                latencies.append(ended - began)
                if seconds is not None and ended >= deadline:
                    return
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=client, args=(n,), name=f"bench-client-{n}", daemon=True)
        for n in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = began + (seconds or 0.0)
    start_line.wait()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        stop.set()
        raise
    elapsed = time.perf_counter() - began
    if errors:
        raise errors[0]
    latencies = [value for samples in per_thread for value in samples]
    return Timing(operations=len(latencies), seconds=elapsed, latencies=latencies)


def time_once(operation: Operation) -> float:
    began = time.perf_counter()
    operation()
    return time.perf_counter() - began


class PeakRss:
    """Samples the resident memory of some processes until stopped; keeps each one's peak.

    ``pids`` is asked again every second, so workers that gunicorn restarts are followed.
    """

    def __init__(self, pids: Callable[[], list[int]], interval: float = 0.02) -> None:
        self._pids, self._interval = pids, interval
        self.peaks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="bench-rss", daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_bytes(self) -> int:
        return max(self.peaks.values(), default=0)

    def _sample(self) -> None:
        processes: dict[int, psutil.Process] = {}
        pids: list[int] = []
        asked = 0.0
        while not self._stop.is_set():
            if time.monotonic() - asked >= 1.0:
                pids, asked = self._pids(), time.monotonic()
            for pid in pids:
                try:
                    process = processes.get(pid) or processes.setdefault(pid, psutil.Process(pid))
                    rss = process.memory_info().rss
                except psutil.Error:
                    continue
                self.peaks[pid] = max(self.peaks.get(pid, 0), rss)
            self._stop.wait(self._interval)
