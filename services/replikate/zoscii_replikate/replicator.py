"""One replication job: follow a source queue by pointer, write each batch locally.

Exactly once, batch by batch:

1. fetch the messages after the pointer, a batch of up to ``batch_count`` in one
   request where the source has batches (one per request against the original),
   streaming each into its own Upload on disk (checked on the way: a message name,
   strictly after the one before, the declared length, the size limit; anything
   wrong and nothing of that batch is written), then flushing them together;
2. write the whole batch, in order, in one call to the core: ``QueueStore.publish_many``
   (one group commit) with a nonce per message derived from the job and the source
   name (the core marks the nonces atomically with the publish), or
   ``DataStore.put_many`` under the source names with ``-u`` (a name that exists is
   not written again);
3. save the pointer once, atomically, to the batch's last source name.

A crash between 2 and 3 repeats step 2 for the same source names after a restart,
which the nonces or the existing names turn into a no-op message by message; so no
duplicate, no gap. Per batch instead of per message, because each step costs fsyncs:
one group commit and one pointer save for a hundred messages instead of a hundred.
A failing source costs an exponential back-off (per job, capped) and changes nothing.

With ``wait_seconds``, a run that has caught up stays a while: it long-polls the source
(the request is held until a message arrives) and replicates each arrival at once,
until the window (at most the interval, so runs do not overlap) is over.

What an operator sees is true while a run is in progress, not only when it ends: the
lag (now minus the moment up to which the copy is known complete: the newest name
replicated, or the last answer of the source that it had nothing newer), the last
success and the last contact move with every batch and every answer, and a fetch that
hears nothing from the source for ``stall_seconds`` is logged and counted as a stall at
once, not after the read timeout and the retries.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.pointer import job_lock, pointer_path
from zoscii_replikate.settings import JobConfig
from zosciimq.client import ReplyInfo, TransportOptions, TruncatedReply, ZosciiClient
from zosciimq.client.errors import ZosciiClientError
from zosciimq.core import DataDir, DataStore, QueueStore, Upload, parse_name
from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.states import read_pointer, write_pointer
from zosciimq.core.upload import remove_uploads, sync_uploads
from zosciimq.errors import InvalidInput, StorageFull, TooLarge, ZosciiError

log = logging.getLogger(__name__)

WAIT_SLICE_SECONDS = 5  # one long-poll at most: a stop takes effect within this
WAIT_MARGIN_SECONDS = 1.0  # the waiting ends this long before the next scheduled run
FALLBACK_POLL_SECONDS = 1.0  # pace of polls while waiting on a source that does not hold
WATCH_SECONDS = 0.5  # how often a run waiting for a fetch looks for a stall


class RunOutcome(StrEnum):
    """How a run ended; the value is the ``outcome`` label of the runs metric and the
    word in the logs."""

    CAUGHT_UP = "caught_up"  # the source has nothing newer
    CAPPED = "capped"  # max_messages_per_run reached; the next run goes on
    STOPPED = "stopped"  # a stop (SIGTERM) between two batches
    ERROR = "error"  # the source or the local write failed: back-off
    LOCKED = "locked"  # skipped: another process runs the job
    BACKOFF = "backoff"  # skipped: still backing off after a failure


@dataclass(frozen=True)
class RunResult:
    """What one run did; ``reason`` (the errors metric's label) and ``error`` on ERROR."""

    job: str
    outcome: RunOutcome
    messages: int = 0
    bytes: int = 0
    duplicates: int = 0
    pointer: str = ""
    reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not RunOutcome.ERROR


@dataclass(frozen=True)
class _Fetched:
    name: str
    size: int
    upload: Upload  # the message in queues/temp/, not yet anywhere a reader looks


def _discard(batch: list[_Fetched]) -> None:
    for fetched in batch:
        fetched.upload.discard()
    batch.clear()


@dataclass
class _Tally:
    """What a run has replicated so far; ``pointer`` is the last one saved."""

    pointer: str = ""
    messages: int = 0
    bytes: int = 0
    duplicates: int = 0

    def result(self, job: str, outcome: RunOutcome, **failure: str) -> RunResult:
        return RunResult(
            job,
            outcome,
            messages=self.messages,
            bytes=self.bytes,
            duplicates=self.duplicates,
            pointer=self.pointer,
            **failure,
        )


class _Ahead:
    """The one fetch in flight in the prefetch thread, if any.

    It holds its messages in temp Uploads only, so a run that ends before taking it
    just waits for it and deletes them (``drop``).
    """

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        fetch: Callable[[str, int, int], list[_Fetched]],
        monotonic: Callable[[], float],
        watch: Callable[[_Ahead], None] = lambda ahead: None,
    ) -> None:
        self._executor, self._fetch, self._monotonic = executor, fetch, monotonic
        self._watch = watch
        self._pending: Future[list[_Fetched]] | None = None
        self.wait = 0  # the long-poll seconds of the last fetch asked for
        self.asked_at = 0.0

    @property
    def busy(self) -> bool:
        return self._pending is not None

    def ask(self, after: str, count: int, wait: int = 0) -> None:
        self.wait, self.asked_at = wait, self._monotonic()
        self._pending = self._executor.submit(self._fetch, after, count, wait)

    def take(self) -> list[_Fetched]:
        """The fetch's messages (waiting for it, ``watch(self)`` every WATCH_SECONDS);
        its error, if it failed."""
        assert self._pending is not None
        pending = self._pending
        while True:
            try:
                result = pending.result(timeout=WATCH_SECONDS)
                break
            except FutureTimeout:
                self._watch(self)
            except BaseException:
                self._pending = None
                raise
        self._pending = None
        return result

    def drop(self) -> None:
        """Wait for a fetch the run will not use and delete what it fetched."""
        if self._pending is None:
            return
        try:
            batch = self.take()
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


class _Heard:
    """A sink that notes, as each piece of a message arrives, that the source is alive."""

    __slots__ = ("heard", "upload")

    def __init__(self, upload: Upload, heard: Callable[[], None]) -> None:
        self.upload, self.heard = upload, heard

    def write(self, chunk: bytes) -> None:
        self.heard()
        self.upload.write(chunk)


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
        queues: QueueStore | None = None,
        store: DataStore | None = None,
    ) -> None:
        """``queues``, ``store``: the process's (the service shares one of each between
        its jobs); a replicator of its own (a test, ``--once``) makes its own."""
        self.job = job
        self.data_dir = data_dir
        self.metrics = metrics
        self.client = client or build_client(job)
        self.clock = clock
        self.monotonic = monotonic
        self.stop = stop or threading.Event()
        self.queues = queues or QueueStore(data_dir, clock=clock)
        self.store = store or DataStore(data_dir, clock=clock)
        self.pointer_file = pointer_path(data_dir, job)
        self.lock = job_lock(data_dir, job)
        self.failures = 0
        self.not_before = 0.0  # monotonic time before which a run is skipped (back-off)
        self.last_result: RunResult | None = None
        self.last_success: datetime | None = None
        # Unix time up to which the copy is known to hold all the source had (the lag's
        # base); until the first pointer or answer, since this replicator started.
        self.complete_as_of = time.time()
        self._complete_known = False
        self.heard_at = 0.0  # monotonic: the last byte or answer from the source
        self.heard_wall = 0.0  # the same as Unix time (0: never)
        self._stalled_fetch = -1.0  # asked_at of the fetch last counted as a stall
        for outcome in RunOutcome:
            metrics.runs.labels(job.name, outcome)
        metrics.messages.labels(job.name)
        metrics.bytes.labels(job.name)
        metrics.fetches.labels(job.name)
        metrics.errors.labels(job.name, "stalled")
        metrics.batch_support.labels(job.name).set(0 if job.mode == "original" else -1)
        metrics.lag.labels(job.name).set_function(self.lag_seconds)
        metrics.last_contact.labels(job.name).set_function(lambda: self.heard_wall)

    def lag_seconds(self) -> float:
        """How far behind the source the copy may be, now (read at every scrape)."""
        return max(0.0, time.time() - self.complete_as_of)

    def _complete_up_to(self, moment: float) -> None:
        if moment > self.complete_as_of or not self._complete_known:
            self.complete_as_of = moment
            self._complete_known = True

    def _heard(self) -> None:
        self.heard_at, self.heard_wall = self.monotonic(), time.time()

    def _succeeded(self) -> None:
        """A batch written, or the source's answer that it has nothing newer."""
        self.last_success = self.clock()
        self.metrics.last_success.labels(self.job.name).set(self.last_success.timestamp())

    def close(self) -> None:
        self.client.close()

    # --- one run ---------------------------------------------------------------------------
    def run(self, *, ignore_backoff: bool = False) -> RunResult:
        """Follow the source to its end (or the per-run cap); never raises for a bad source."""
        name = self.job.name
        if not ignore_backoff and self.monotonic() < self.not_before:
            return self._record(RunResult(name, RunOutcome.BACKOFF))
        if not self.lock.try_acquire():
            log.info(
                "job %s: already running elsewhere (lock %s held); skipped", name, self.lock.path
            )
            return self._record(RunResult(name, RunOutcome.LOCKED))
        try:
            self._remove_leftovers()
            result = self._follow()
        except Exception as exc:  # a bug or a surprise: counted, backed off, never fatal
            log.exception("job %s: unexpected error", name)
            result = RunResult(
                name, RunOutcome.ERROR, reason="unexpected", error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            self.lock.release()
        return self._record(result)

    @property
    def upload_prefix(self) -> str:
        """This job's temp files start so: a killed run's are found and removed."""
        return f"replikate-{self.job.name}-"

    def _remove_leftovers(self) -> None:
        """Temp files a killed run of this job left (job lock held: none is in use)."""
        removed = remove_uploads(self.data_dir, self.upload_prefix)
        if removed:
            log.info(
                "job %s: removed %d temp file(s) of a run that was killed", self.job.name, removed
            )

    def _follow(self) -> RunResult:
        """The run's loop: write one batch while the next one is fetched.

        Fetching needs only the previous name, so batch N+1 travels over the network
        (into temp Uploads) while batch N is written and the pointer saved. Writes stay
        in this thread, a whole batch at a time: a stop ends the run between batches,
        never inside one.
        """
        job, tally, batch = self.job, _Tally(), list[_Fetched]()
        cap = job.max_messages_per_run or math.inf
        started = self.monotonic()
        with ThreadPoolExecutor(1, thread_name_prefix=f"replikate-{job.name}") as executor:
            ahead = _Ahead(executor, self._fetch, self.monotonic, self._watch)
            try:
                tally.pointer = self._read_pointer()
                if tally.pointer and not self._complete_known:
                    self._complete_up_to(parse_name(tally.pointer).published_timestamp)
                ahead.ask(tally.pointer, self._wanted(cap))
                while True:
                    if tally.messages >= cap:
                        outcome = RunOutcome.CAPPED
                        break
                    if not ahead.busy:  # a stop came while waiting for new messages
                        outcome = RunOutcome.STOPPED
                        break
                    batch = ahead.take()
                    if self.stop.is_set():
                        outcome = RunOutcome.STOPPED
                        break
                    if not batch:
                        self._complete_up_to(time.time())  # the source had nothing newer
                        self._succeeded()
                        if not self._poll_again(ahead, tally, started):
                            outcome = RunOutcome.CAUGHT_UP
                            break
                        continue
                    left = cap - tally.messages - len(batch)
                    if left > 0:
                        ahead.ask(batch[-1].name, self._wanted(left))
                    self._commit(batch, tally)
            except _RunFailed as failure:
                return tally.result(
                    job.name, RunOutcome.ERROR, reason=failure.reason, error=str(failure)
                )
            finally:
                _discard(batch)
                ahead.drop()
        return tally.result(job.name, outcome)

    def _poll_again(self, ahead: _Ahead, tally: _Tally, started: float) -> bool:
        """After an empty answer: long-poll again while the waiting window lasts.

        False when the run should end, caught up. A long-poll that came back empty
        early (a source that does not hold requests, the original) is paced to one
        request a second, so the waiting does not turn into a busy loop.
        """
        if ahead.wait:
            spent = self.monotonic() - ahead.asked_at
            self.stop.wait(max(0.0, FALLBACK_POLL_SECONDS - spent))
        wait = self._wait_slice(started)
        if not wait:
            return False
        if not self.stop.is_set():  # else ``ahead`` stays idle and the run ends "stopped"
            left = (self.job.max_messages_per_run or math.inf) - tally.messages
            ahead.ask(tally.pointer, self._wanted(left), wait)
        return True

    def _wanted(self, left: float) -> int:
        """Messages to ask for: a batch, within ``left`` of the per-run cap."""
        return max(1, int(min(self.job.batch_count, left)))

    def _watch(self, ahead: _Ahead) -> None:
        """While the run waits for a fetch: a stall (no byte from the source for
        ``stall_seconds`` beyond the long-poll it asked for) is logged and counted once
        per fetch, at once; the fetch goes on until the transport gives up."""
        silent = self.monotonic() - max(self.heard_at, ahead.asked_at + ahead.wait)
        if silent < self.job.stall_seconds or self._stalled_fetch == ahead.asked_at:
            return
        self._stalled_fetch = ahead.asked_at
        self.metrics.errors.labels(self.job.name, "stalled").inc()
        log.warning(
            "job %s: no answer from %s for %.0f s (stall_seconds %g): the source or the "
            "link is stalled; still waiting (read timeout %g s, %d retries)",
            self.job.name,
            self.job.source_url,
            silent,
            self.job.stall_seconds,
            self.job.read_timeout,
            self.job.retries,
        )

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

        def open_sink(info: ReplyInfo) -> _Heard:
            self._heard()
            upload = Upload(self.data_dir, self.job.max_message_bytes, prefix=self.upload_prefix)
            uploads.append(upload)
            return _Heard(upload, self._heard)

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
                support = self.client.capabilities.batch_fetch
                if support is not None:
                    self.metrics.batch_support.labels(self.job.name).set(int(support))
            else:
                one = self.client.fetch_into(source, pointer, open_sink, wait=held)
                received = [] if one is None else [one]
            self._heard()
            batch = []
            horizon = self.clock().timestamp() + self.job.max_future_seconds
            for part, upload in zip(received, uploads, strict=True):
                if part.offset != 0 or (
                    part.total_length is not None and part.size != part.total_length
                ):
                    error = TruncatedReply(f"{part.name}: got only part of the message")
                    raise _RunFailed(error.reason, f"source: {error}")
                if parse_name(part.name).published_timestamp > horizon:
                    raise _RunFailed(
                        "future_name",
                        f"source: {part.name} is dated more than "
                        f"{self.job.max_future_seconds:g} s ahead of this clock; not taken",
                    )
                batch.append(_Fetched(part.name, part.size, upload))
            sync_uploads(uploads)  # the slow flush of the contents, off the write path
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

    def _commit(self, batch: list[_Fetched], tally: _Tally) -> None:
        """Write the batch in one core call, then save the pointer once, to its last name.

        A crash in between repeats the whole batch after a restart, which the nonces
        (or the existing store names) turn into a no-op message by message.
        """
        last, count, size = batch[-1].name, len(batch), sum(f.size for f in batch)
        try:
            repeats = sum(self._write_local(batch))
        finally:
            _discard(batch)  # the temp files of repeats; the others were renamed
        self._save_pointer(last)
        self._complete_up_to(parse_name(last).published_timestamp)
        self._succeeded()
        tally.pointer = last
        tally.messages += count
        tally.bytes += size
        tally.duplicates += repeats
        name, m = self.job.name, self.metrics
        m.messages.labels(name).inc(count)
        m.bytes.labels(name).inc(size)
        if repeats:
            m.duplicates.labels(name).inc(repeats)
            log.info(
                "job %s: %d of %d message(s) up to %s were already written (a repeat after "
                "a crash); pointer moved on",
                name,
                repeats,
                count,
                last,
            )
        log.debug("job %s: replicated %d message(s) up to %s (%d bytes)", name, count, last, size)

    def _write_local(self, batch: list[_Fetched]) -> list[bool]:
        """Write a batch through the core, in order; True for each one written before.

        One group commit (queue) or one flush per directory (store) for the batch. A
        message written before is one whose nonce was used or whose store name exists:
        a repeat after a crash between the write and the pointer save.
        """
        job = self.job
        names = [parse_name(fetched.name) for fetched in batch]
        try:
            if job.target_queue:
                outgoing = [
                    Outgoing(f.upload, n.retention_days, replication_nonce(job, f.name))
                    for f, n in zip(batch, names, strict=True)
                ]
                return [r.duplicate for r in self.queues.publish_many(job.target_queue, outgoing)]
            items = [
                (f.upload, n.unidentified_variant()) for f, n in zip(batch, names, strict=True)
            ]
            return [not written for written in self.store.put_many(items)]
        except StorageFull as exc:
            raise _RunFailed("storage_full", f"local: {exc}") from exc
        except ZosciiError as exc:
            raise _RunFailed("local", f"local: {exc}") from exc
        except OSError as exc:
            raise _RunFailed("local_io", f"local: {exc}") from exc

    def _save_pointer(self, pointer: str) -> None:
        """Atomically (a crash leaves the old name or the new one), only the name in the
        file, as the original's, so either replicator can take over."""
        try:
            write_pointer(self.pointer_file, pointer)
        except OSError as exc:
            raise _RunFailed("local_io", f"saving the pointer: {exc}") from exc

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
        if result.outcome in (RunOutcome.LOCKED, RunOutcome.BACKOFF):
            return result
        self.last_result = result
        if result.outcome is RunOutcome.ERROR:
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
            m.backoff.labels(job).set(0)
        if result.ok and (result.messages or result.outcome is not RunOutcome.CAUGHT_UP):
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
