"""A worker for a consumer group: lease, run a handler, settle; the loop of rq and dramatiq.

    def handle(message: LeasedMessage) -> None:
        order = json.loads(message.data)
        if order.get("sku") is None:
            raise DeadLetter("no sku")  # can never work: to the dead letters, no retry
        ship(order)                     # any other exception: requeued, tried again

    with stop_on_signals() as stop:    # Ctrl-C / SIGTERM: stop after the message in hand
        stats = Worker(client, "orders", "shipping", handle, stop=stop).run()

Why it works the way it does:

* **Ack after the handler returned, never before.** A worker that dies mid-message
  leaves the message leased; the lease runs out and it is delivered again (at least
  once), so handlers must be idempotent. ``LeasedMessage.deliveries`` says when a
  message is back.
* **Failures are requeued with a delay that grows with the delivery count**
  (``backoff``), so a message that keeps failing does not spin through the workers;
  on its ``max_deliveries``-th delivery (the server's ``ZOSCII_MAX_DELIVERIES``, 5 as
  shipped) a failure dead-letters it at once instead: the server would bury it at
  its next lease anyway, after the delay. ``DeadLetter`` skips the retries: for input
  that no retry can fix.
* **A heartbeat extends the leases of the messages held** (every third of the lease),
  so the lease can stay short, and a crashed worker's messages come back soon, while
  a handler may still run for hours without its message going to someone else.
* **Stopping is cooperative**: ``stop`` (an event; ``stop_on_signals`` sets it on
  SIGINT/SIGTERM) takes effect between messages. The message in hand is finished and
  settled; messages of a batch (``count``) not begun are requeued at once for other
  workers, rather than left to their lease. A stop during a long-poll takes effect
  when that request returns (at most ``wait`` seconds).
* **Long-poll** (``wait``): an idle worker makes one request every ``wait`` seconds and
  still gets a new message the moment it is published.
* **The network is waited out**, with a growing pause: a server restart does not stop
  the workers. Errors that no waiting fixes (a bad group name, no access) do.
"""

from __future__ import annotations

import logging
import math
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from zosciimq.client.errors import (
    Fenced,
    QueueNotFound,
    TransportError,
    TruncatedReply,
    TryAgain,
    ZosciiClientError,
)
from zosciimq.client.work import LeasedMessage
from zosciimq.core.groups import DEFAULT_MAX_DELIVERIES  # the server's, as shipped

if TYPE_CHECKING:
    from zosciimq.client.client import ZosciiClient

log = logging.getLogger(__name__)

Handler = Callable[[LeasedMessage], object]
Settled = Literal["acked", "requeued", "dead-lettered", "lost"]
DEFAULT_LEASE = 30.0
DEFAULT_WAIT = 20.0
MAX_ERROR_PAUSE = 30.0
_TRANSIENT = (TransportError, TruncatedReply, TryAgain)


class DeadLetter(Exception):
    """Raise it from a handler when the message can never be handled (bad input): it goes
    to the group's dead letters now, without the retries any other exception gets."""


@dataclass
class WorkerStats:
    """What a worker did. ``lost``: messages it could not settle, because their lease
    had gone to another consumer (``Fenced``) or the server could not be reached;
    either way the message is delivered again, so the work may be done twice."""

    acked: int = 0
    requeued: int = 0
    dead_lettered: int = 0
    lost: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def handled(self) -> int:
        return self.acked + self.requeued + self.dead_lettered + self.lost

    def count(self, settled: Settled) -> None:
        with self._lock:
            if settled == "acked":
                self.acked += 1
            elif settled == "requeued":
                self.requeued += 1
            elif settled == "dead-lettered":
                self.dead_lettered += 1
            else:
                self.lost += 1


def exponential_backoff(base: float = 1.0, cap: float = 300.0) -> Callable[[int], float]:
    """The requeue delay after the ``n``-th delivery failed: ``base`` * 2^(n-1), at most
    ``cap`` seconds (1, 2, 4, ... by default)."""

    def delay(deliveries: int) -> float:
        return min(cap, base * 2.0 ** max(0, deliveries - 1))

    return delay


def default_consumer_name() -> str:
    """host-pid, in the characters the server keeps (for its logs and stats)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", f"{socket.gethostname()}-{os.getpid()}")
    return name[-64:]


class Worker:
    def __init__(
        self,
        client: ZosciiClient,
        queue: str,
        group: str,
        handler: Handler,
        *,
        count: int = 1,
        concurrency: int = 1,
        lease: float = DEFAULT_LEASE,
        wait: float = DEFAULT_WAIT,
        consumer: str | None = None,
        backoff: Callable[[int], float] | None = None,
        max_deliveries: int | None = DEFAULT_MAX_DELIVERIES,
        max_messages: int | None = None,
        stop_when_idle: bool = False,
        extend_leases: bool = True,
        poll_interval: float = 1.0,
        stop: threading.Event | None = None,
        on_settled: Callable[[LeasedMessage, Settled], None] | None = None,
    ) -> None:
        """``handler(message)`` is called for each message; returning acks it.

        ``count``: messages leased per request (handled one after the other).
        ``concurrency``: loops in threads, sharing ``client`` (keep it within the
        client's connection pool, 10 by default). ``lease``: seconds per lease (whole);
        ``extend_leases`` keeps extending it while a message is held. ``wait``:
        long-poll seconds (the server caps it, 30 as shipped). ``backoff(deliveries)``:
        seconds before a failed message is tried again (default: 1, 2, 4, ... up to
        300, ``exponential_backoff``). ``max_deliveries``: dead-letter
        a failure on that delivery instead of requeueing it (None: leave it to the
        server). ``max_messages``: stop after handling that many. ``stop_when_idle``:
        stop when a lease finds nothing. ``on_settled(message, how)`` is called after
        each message (output, metrics); it must not raise.
        """
        if count < 1 or concurrency < 1:
            raise ValueError("count and concurrency must be at least 1")
        if lease < 1:
            raise ValueError("lease must be at least 1 second")
        self.client = client
        self.queue = queue
        self.group = group
        self.handler = handler
        self.count = count
        self.concurrency = concurrency
        self.lease = float(math.ceil(lease))
        self.wait = wait
        self.consumer = consumer or default_consumer_name()
        self.backoff = backoff or exponential_backoff()
        self.max_deliveries = max_deliveries
        self.stop_when_idle = stop_when_idle
        self.poll_interval = poll_interval
        self.stop_event = stop or threading.Event()
        self.on_settled = on_settled
        self.stats = WorkerStats()
        self._budget = _Budget(max_messages)
        self._heartbeat = _Heartbeat(client, self.lease) if extend_leases else None
        self._failure: BaseException | None = None

    def stop(self) -> None:
        """Stop after the message in hand (from any thread, or a signal handler)."""
        self.stop_event.set()

    def run(self) -> WorkerStats:
        """Work until stopped, ``max_messages`` handled, or (``stop_when_idle``) idle.

        Raises what no waiting fixes (``InvalidInput``, ``Forbidden``, ...), after the
        other loops finished the messages in their hands."""
        where = f"{self.queue}/{self.group}"
        log.info(
            "worker %s on %s: count %d, concurrency %d, lease %g s",
            self.consumer,
            where,
            self.count,
            self.concurrency,
            self.lease,
        )
        if self._heartbeat is not None:
            self._heartbeat.start()
        try:
            if self.concurrency == 1:
                self._loop()  # in the caller's thread: signals interrupt its waits
            else:
                threads = [
                    threading.Thread(target=self._guarded_loop, name=f"zoscii-worker-{i}")
                    for i in range(self.concurrency)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                if self._failure is not None:
                    raise self._failure
        finally:
            if self._heartbeat is not None:
                self._heartbeat.close()
        log.info("worker %s on %s stopped: %s", self.consumer, where, self.stats)
        return self.stats

    # --- the loop -------------------------------------------------------------------------
    def _guarded_loop(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self._failure = self._failure or exc
            self.stop_event.set()  # the others finish what they hold and stop too

    def _loop(self) -> None:
        failures, missing = 0, False
        while not self.stop_event.is_set():
            take = self._budget.take(self.count)
            if not take:
                return
            started = time.monotonic()
            try:
                messages = self.client.lease(
                    self.queue,
                    self.group,
                    count=take,
                    lease=self.lease,
                    wait=self.wait or None,
                    consumer=self.consumer,
                )
            except QueueNotFound:  # not published to yet: wait for it
                self._budget.give_back(take)
                if self.stop_when_idle:
                    return
                if not missing:
                    log.warning("queue %s does not exist (yet); waiting for it", self.queue)
                    missing = True
                self.stop_event.wait(max(self.poll_interval, self.wait))
                continue
            except _TRANSIENT as exc:
                self._budget.give_back(take)
                failures += 1
                pause = min(MAX_ERROR_PAUSE, self.poll_interval * 2**failures)
                log.warning("lease from %s failed: %s (again in %g s)", self.queue, exc, pause)
                self.stop_event.wait(pause)
                continue
            failures, missing = 0, False
            self._budget.give_back(take - len(messages))
            if messages:
                self._work(messages)
                continue
            if self.stop_when_idle:
                return
            # A server that does not hold the request (or answers at once) is polled at
            # this pace, not in a tight loop.
            self.stop_event.wait(max(0.0, self.poll_interval - (time.monotonic() - started)))

    def _work(self, messages: list[LeasedMessage]) -> None:
        """Handle a leased batch in order; on a stop, give back what was not begun."""
        heartbeat = self._heartbeat
        if heartbeat is not None:
            heartbeat.hold(messages)
        left = list(messages)
        try:
            while left and not self.stop_event.is_set():
                message = left.pop(0)
                try:
                    self._handle(message)
                finally:
                    if heartbeat is not None:
                        heartbeat.release(message)
                    message.close()
        finally:
            if left:
                self._release(left)

    def _handle(self, message: LeasedMessage) -> None:
        started = time.monotonic()
        try:
            self.handler(message)
        except DeadLetter as exc:
            self._settle(message, "dead-lettered", f"dead letter: {exc}")
        except Exception as exc:
            last = self.max_deliveries is not None and message.deliveries >= self.max_deliveries
            if last:
                self._settle(
                    message, "dead-lettered", f"failed {message.deliveries} times: {exc!r}"
                )
            else:
                delay = self.backoff(message.deliveries)
                self._settle(message, "requeued", f"failed: {exc!r}; again in {delay:g} s", delay)
        except BaseException:
            self._release([message])  # Ctrl-C twice, SystemExit: back to the queue now
            raise
        else:
            self._settle(message, "acked", f"done in {time.monotonic() - started:.3f} s")

    def _settle(
        self, message: LeasedMessage, settled: Settled, why: str, delay: float = 0.0
    ) -> None:
        client, queue, group = self.client, self.queue, self.group
        if self._heartbeat is not None:
            # Before the ack leaves: a beat that refuses it from now on knows it was ours.
            self._heartbeat.release(message)
        try:
            if settled == "acked":
                client.ack(queue, group, message)
            elif settled == "requeued":
                client.requeue(queue, group, message, delay=delay)
            else:
                client.dead_letter(queue, group, message)
        except Fenced:
            log.warning(
                "%s/%s: %s was leased to another consumer before it was %s (%s)",
                queue,
                group,
                message.name,
                settled,
                why,
            )
            settled = "lost"
        except _TRANSIENT as exc:
            log.warning(
                "%s/%s: %s could not be %s (%s): %s; it comes back when its lease runs out",
                queue,
                group,
                message.name,
                settled,
                why,
                exc,
            )
            settled = "lost"
        else:
            level = logging.INFO if settled == "acked" else logging.WARNING
            log.log(
                level,
                "%s/%s: %s %s, delivery %d (%s)",
                queue,
                group,
                message.name,
                settled,
                message.deliveries,
                why,
            )
        self.stats.count(settled)
        if self.on_settled is not None:
            self.on_settled(message, settled)

    def _release(self, messages: list[LeasedMessage]) -> None:
        """Requeue messages not begun, so others need not wait for their lease to end."""
        for message in messages:
            if self._heartbeat is not None:
                self._heartbeat.release(message)
            message.close()
        self._budget.give_back(len(messages))
        try:
            self.client.requeue_many(self.queue, self.group, messages)
        except ZosciiClientError as exc:
            log.warning("could not give back %d message(s): %s", len(messages), exc)
        else:
            log.info(
                "%s/%s: gave back %d message(s) not begun", self.queue, self.group, len(messages)
            )


class _Budget:
    """``max_messages`` shared by the loops: taken before a lease, the unused part given
    back after it."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit
        self._lock = threading.Lock()

    def take(self, wanted: int) -> int:
        with self._lock:
            if self.left is None:
                return wanted
            taken = min(wanted, self.left)
            self.left -= taken
            return taken

    def give_back(self, count: int) -> None:
        with self._lock:
            if self.left is not None:
                self.left += count


class _Heartbeat:
    """Extends the lease of every message held, every third of the lease, in a thread."""

    def __init__(self, client: ZosciiClient, lease: float) -> None:
        self.client = client
        self.lease = lease
        self.interval = max(0.2, lease / 3)
        self._held: dict[str, LeasedMessage] = {}
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zoscii-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        self._thread.join()

    def hold(self, messages: list[LeasedMessage]) -> None:
        with self._lock:
            self._held.update((m.receipt, m) for m in messages)

    def release(self, message: LeasedMessage) -> None:
        with self._lock:
            self._held.pop(message.receipt, None)

    def holds(self, message: LeasedMessage) -> bool:
        with self._lock:
            return self._held.get(message.receipt) is message

    def _run(self) -> None:
        while not self._done.wait(self.interval):
            with self._lock:
                held = list(self._held.values())
            for message in held:
                try:
                    message.lease_until = self.client.extend_lease(
                        message.queue, message.group, message, self.lease
                    )
                except Fenced:
                    if not self.holds(message):
                        # Settled while this beat was on its way (the worker lets go of
                        # a message before it acks it): the refusal is that ack's.
                        log.debug("%s: settled during a heartbeat", message.name)
                        continue
                    log.warning(
                        "%s/%s: %s was leased to another consumer (its lease ran out); "
                        "the work on it will not count",
                        message.queue,
                        message.group,
                        message.name,
                    )
                    self.release(message)
                except ZosciiClientError as exc:  # the next beat tries again
                    log.warning("could not extend the lease of %s: %s", message.name, exc)


@contextmanager
def stop_on_signals(
    stop: threading.Event | None = None, *, on_second: Callable[[], None] | None = None
) -> Iterator[threading.Event]:
    """An event set by SIGINT or SIGTERM: give it to ``Worker(stop=...)`` to stop after
    the message in hand. A second signal calls ``on_second`` (default: a second
    Ctrl-C raises KeyboardInterrupt, to stop now). Outside the main thread signals
    cannot be caught: the event is then only set by the caller."""
    stop = stop or threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: object) -> None:
        if stop.is_set():
            if on_second is not None:
                on_second()
            elif signum == signal.SIGINT:
                raise KeyboardInterrupt
            return
        log.info("signal %d: stopping after the message in hand", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
