"""One replication job: follow a source queue by pointer, write each message locally.

Exactly once, message by message:

1. fetch the messages after the pointer, a batch of up to ``batch_count`` in one
   request where the source has batches (one per request against the original),
   streaming each into its own Upload on disk (checked on the way: a message name,
   strictly after the one before, the declared length, the size limit; anything
   wrong and nothing of that batch is written);
2. write each, in order, locally through the core: ``QueueStore.publish`` with a nonce
   derived from the job and the source name (the core marks the nonce atomically with
   the publish), or ``DataStore.put`` under the source name with ``-u`` (refuses a
   name that exists);
3. save the pointer atomically after every message.

A crash between 2 and 3 repeats step 2 for the same source name after a restart,
which the nonce or the existing name turns into a no-op; so no duplicate, no gap.
A failing source costs an exponential back-off (per job, capped) and changes nothing.

With ``wait_seconds``, a run that has caught up stays a while: it long-polls the source
(the request is held until a message arrives) and replicates each arrival at once,
until the window (at most the interval, so runs do not overlap) is over.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.pointer import job_lock, pointer_path
from zoscii_replikate.settings import JobConfig
from zosciimq.client import ReplyInfo, TransportOptions, TruncatedReply, ZosciiClient
from zosciimq.client.errors import ZosciiClientError
from zosciimq.core import DataDir, DataStore, QueueStore, Upload, parse_name
from zosciimq.core.errors import InvalidInput, StorageFull, TooLarge, ZosciiError
from zosciimq.core.states import read_pointer, write_pointer

log = logging.getLogger("zoscii.replikate")

WAIT_SLICE_SECONDS = 5  # one long-poll at most: a stop takes effect within this
WAIT_MARGIN_SECONDS = 1.0  # the waiting ends this long before the next scheduled run
FALLBACK_POLL_SECONDS = 1.0  # pace of polls while waiting on a source that does not hold

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RunResult:
    job: str
    outcome: str  # caught_up, capped, stopped, error, locked, backoff
    messages: int = 0
    bytes: int = 0
    duplicates: int = 0
    pointer: str = ""
    reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome != "error"


@dataclass(frozen=True)
class _Fetched:
    name: str
    size: int
    upload: Upload  # the message in queues/temp/, not yet anywhere a reader looks


def _discard(batch: list[_Fetched]) -> None:
    for fetched in batch:
        fetched.upload.discard()
    batch.clear()


def _drop(pending: Future[list[_Fetched]] | None) -> None:
    """Wait for a prefetch the run will not use and delete what it fetched."""
    if pending is None:
        return
    try:
        batch = pending.result()
    except Exception:  # its error is not this run's: the next run fetches it again
        return
    _discard(batch)


class _RunFailed(Exception):
    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason


def build_client(job: JobConfig) -> ZosciiClient:
    options = TransportOptions(
        connect_timeout=job.connect_timeout,
        read_timeout=job.read_timeout,
        deadline=job.deadline_seconds,
        retries=job.retries,
        verify=job.verify,
        pool_size=2,
        user_agent="zoscii-replikate/1.0",
    )
    return ZosciiClient(
        job.source_url,
        mode="original" if job.mode == "original" else "default",
        options=options,
        headers=job.headers,
        auth=job.basic_auth,
        max_message_bytes=job.max_message_bytes,
    )


def replication_nonce(job: JobConfig, source_name: str) -> str:
    """The same for every attempt at one source message in one job, and only for it."""
    key = f"{job.name}\n{job.target_queue or ''}\n{source_name}".encode()
    return "rk-" + hashlib.sha256(key).hexdigest()[:40]


class Replicator:
    def __init__(
        self,
        job: JobConfig,
        data_dir: DataDir,
        metrics: ReplikateMetrics,
        *,
        client: ZosciiClient | None = None,
        clock: Clock = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
    ) -> None:
        self.job = job
        self.data_dir = data_dir
        self.metrics = metrics
        self.client = client or build_client(job)
        self.clock = clock
        self.monotonic = monotonic
        self.stop = stop or threading.Event()
        self.queues = QueueStore(data_dir, clock=clock)
        self.store = DataStore(data_dir, clock=clock)
        self.pointer_file = pointer_path(data_dir, job)
        self.lock = job_lock(data_dir, job)
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which a run is skipped (back-off)
        self.last_result: RunResult | None = None
        self.last_success: datetime | None = None
        for outcome in ("caught_up", "capped", "stopped", "error", "locked", "backoff"):
            metrics.runs.labels(job.name, outcome)
        metrics.messages.labels(job.name)
        metrics.bytes.labels(job.name)
        metrics.fetches.labels(job.name)
        metrics.batch_support.labels(job.name).set(0 if job.mode == "original" else -1)

    def close(self) -> None:
        self.client.close()

    # --- one run ---------------------------------------------------------------------------
    def run(self, *, ignore_backoff: bool = False) -> RunResult:
        """Follow the source to its end (or the per-run cap); never raises for a bad source."""
        name = self.job.name
        if not ignore_backoff and self.monotonic() < self.not_before:
            return self._record(RunResult(name, "backoff"))
        if not self.lock.try_acquire():
            log.info(
                "job %s: already running elsewhere (lock %s held); skipped", name, self.lock.path
            )
            return self._record(RunResult(name, "locked"))
        try:
            result = self._follow()
        finally:
            self.lock.release()
        return self._record(result)

    def _follow(self) -> RunResult:
        """The run's loop, with the next batch fetched while this one is written.

        Fetching needs only the previous name, so batch N+1 travels over the network
        while the messages of batch N are written and their pointers saved. Writes stay
        strictly sequential, in the main thread; a prefetched message is only ever in a
        temp Upload until its turn, and discarded if the run ends first.
        """
        job, counts = self.job, {"messages": 0, "bytes": 0, "duplicates": 0}
        cap, pointer, batch = job.max_messages_per_run, "", list[_Fetched]()
        started = self.monotonic()
        with ThreadPoolExecutor(1, thread_name_prefix=f"replikate-{job.name}") as prefetch:
            pending: Future[list[_Fetched]] | None = None
            asked_wait, asked_at = 0, started  # the long-poll of the pending fetch, if any
            try:
                pointer = self._read_pointer()
                pending = prefetch.submit(self._fetch, pointer, self._wanted(cap))
                while True:
                    if counts["messages"] >= cap:
                        outcome = "capped"
                        break
                    if self.stop.is_set() or pending is None:
                        outcome = "stopped"
                        break
                    batch, pending = pending.result(), None
                    if not batch:
                        if asked_wait:  # a long-poll came back empty: keep a polling pace
                            spent = self.monotonic() - asked_at
                            self.stop.wait(max(0.0, FALLBACK_POLL_SECONDS - spent))
                        asked_wait = self._wait_slice(started)
                        if not asked_wait:
                            outcome = "caught_up"
                            break
                        if not self.stop.is_set():
                            asked_at = self.monotonic()
                            pending = prefetch.submit(
                                self._fetch,
                                pointer,
                                self._wanted(cap - counts["messages"]),
                                asked_wait,
                            )
                        continue
                    asked_wait = 0
                    left = cap - counts["messages"] - len(batch)
                    if left > 0:
                        pending = prefetch.submit(self._fetch, batch[-1].name, self._wanted(left))
                    while batch and not self.stop.is_set():
                        fetched = batch.pop(0)
                        duplicate = self._store(fetched)
                        pointer = fetched.name
                        counts["messages"] += 1
                        counts["bytes"] += fetched.size
                        counts["duplicates"] += duplicate
            except _RunFailed as failure:
                return RunResult(
                    job.name,
                    "error",
                    pointer=pointer,
                    reason=failure.reason,
                    error=str(failure),
                    **counts,
                )
            finally:
                _discard(batch)
                _drop(pending)
        return RunResult(job.name, outcome, pointer=pointer, **counts)

    def _wanted(self, left: int) -> int:
        """Messages to ask for: a batch, within ``left`` of the per-run cap."""
        return max(1, min(self.job.batch_count, left))

    def _wait_slice(self, started: float) -> int:
        """Seconds the next fetch may long-poll; 0 when the run should end now.

        The waiting window is ``wait_seconds`` from the start of the run, at most the
        interval (minus a margin) so that a run ends before the next one is due.
        """
        job = self.job
        if job.wait_seconds <= 0:
            return 0
        window = job.wait_seconds if job.cron else min(job.wait_seconds, job.interval_seconds)
        left = started + window - WAIT_MARGIN_SECONDS - self.monotonic()
        return max(0, min(WAIT_SLICE_SECONDS, int(left)))

    def _fetch(self, pointer: str, count: int, wait: int = 0) -> list[_Fetched]:
        """Up to ``count`` messages after ``pointer``, checked and each on disk in a temp
        Upload; [] when there is none. ``wait``: long-poll seconds."""
        uploads: list[Upload] = []

        def open_sink(info: ReplyInfo) -> Upload:
            upload = Upload(self.data_dir, self.job.max_message_bytes)
            uploads.append(upload)
            return upload

        source, held = self.job.source_queue, wait or None
        try:
            self.metrics.fetches.labels(self.job.name).inc()
            if count > 1:
                received = self.client.fetch_batch_into(
                    source,
                    pointer,
                    open_sink,
                    count=count,
                    max_bytes=self.job.batch_bytes,
                    wait=held,
                )
                support = self.client.batch_support
                if support is not None:
                    self.metrics.batch_support.labels(self.job.name).set(int(support))
            else:
                one = self.client.fetch_into(source, pointer, open_sink, wait=held)
                received = [] if one is None else [one]
            batch = []
            for part, upload in zip(received, uploads, strict=True):
                if part.offset != 0 or (
                    part.total_length is not None and part.size != part.total_length
                ):
                    error = TruncatedReply(f"{part.name}: got only part of the message")
                    raise _RunFailed(error.reason, f"source: {error}")
                upload.sync()  # the slow fsync of the content, off the write path
                batch.append(_Fetched(part.name, part.size, upload))
            return batch
        except BaseException as exc:
            for upload in uploads:
                upload.discard()
            if isinstance(exc, ZosciiClientError):
                raise _RunFailed(exc.reason, f"source: {exc}") from exc
            if isinstance(exc, TooLarge):
                raise _RunFailed("too_large", f"source: {exc}") from exc
            if isinstance(exc, StorageFull):
                raise _RunFailed("storage_full", f"local: {exc}") from exc
            if isinstance(exc, OSError):
                raise _RunFailed("local_io", f"local: {exc}") from exc
            raise

    def _store(self, fetched: _Fetched) -> bool:
        """Write a fetched message locally, then save the pointer; True for a repeat."""
        try:
            duplicate = self._write_local(fetched.name, fetched.upload)
        finally:
            fetched.upload.discard()
        try:
            write_pointer(self.pointer_file, fetched.name)
        except OSError as exc:
            raise _RunFailed("local_io", f"saving the pointer: {exc}") from exc
        self.metrics.messages.labels(self.job.name).inc()
        self.metrics.bytes.labels(self.job.name).inc(fetched.size)
        if duplicate:
            self.metrics.duplicates.labels(self.job.name).inc()
            log.info(
                "job %s: %s was already written (a repeat); pointer moved on",
                self.job.name,
                fetched.name,
            )
        else:
            log.debug("job %s: replicated %s (%d bytes)", self.job.name, fetched.name, fetched.size)
        return duplicate

    def _write_local(self, source_name: str, upload: Upload) -> bool:
        """Write through the core; True when it had been written before (a repeat)."""
        name = parse_name(source_name)
        try:
            if self.job.target_queue:
                result = self.queues.publish(
                    self.job.target_queue,
                    upload,
                    retention_days=name.retention_days,
                    nonce=replication_nonce(self.job, source_name),
                )
                return result.duplicate
            return not self.store.put(upload, name.unidentified_variant())
        except StorageFull as exc:
            raise _RunFailed("storage_full", f"local: {exc}") from exc
        except ZosciiError as exc:
            raise _RunFailed("local", f"local: {exc}") from exc
        except OSError as exc:
            raise _RunFailed("local_io", f"local: {exc}") from exc

    def _read_pointer(self) -> str:
        try:
            return read_pointer(self.pointer_file)
        except InvalidInput as exc:
            raise _RunFailed(
                "pointer", f"pointer file {self.pointer_file}: {exc} (fix it with 'pointer reset')"
            ) from exc
        except OSError as exc:
            raise _RunFailed("local_io", f"pointer file {self.pointer_file}: {exc}") from exc

    # --- bookkeeping -----------------------------------------------------------------------
    def _record(self, result: RunResult) -> RunResult:
        job, m = self.job.name, self.metrics
        m.runs.labels(job, result.outcome).inc()
        if result.outcome in ("locked", "backoff"):
            return result
        self.last_result = result
        if result.outcome == "error":
            self.failures += 1
            delay = min(
                self.job.backoff_initial_seconds * 2 ** (self.failures - 1),
                self.job.backoff_max_seconds,
            )
            self.not_before = self.monotonic() + delay
            m.errors.labels(job, result.reason or "error").inc()
            m.backoff.labels(job).set(delay)
            log.warning(
                "job %s: run failed after %d message(s) [%s] %s; next try in %.0f s or later",
                job,
                result.messages,
                result.reason,
                result.error,
                delay,
            )
        else:
            self.failures = 0
            self.not_before = 0.0
            self.last_success = self.clock()
            m.backoff.labels(job).set(0)
            m.last_success.labels(job).set(self.last_success.timestamp())
        if result.outcome == "caught_up":
            m.lag.labels(job).set(0)
        elif result.pointer and result.messages:
            lag = self.clock() - parse_name(result.pointer).published_at
            m.lag.labels(job).set(max(0.0, lag.total_seconds()))
        if result.outcome != "error" and (result.messages or result.outcome != "caught_up"):
            log.info(
                "job %s: %s, %d message(s), %d byte(s) from %s queue %s into %s%s",
                job,
                result.outcome.replace("_", " "),
                result.messages,
                result.bytes,
                self.job.source_url,
                self.job.source_queue,
                self.job.target_label,
                f", {result.duplicates} repeat(s)" if result.duplicates else "",
            )
        return result
