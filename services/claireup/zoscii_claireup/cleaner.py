"""One retention run over a data directory (PROTOCOL.md 5), safe beside live services.

Why it cannot lose a publish or confuse a consumer:

* every decision is made per file from that file's own name (messages) or its own
  ``stat`` (nonce markers, upload leftovers), read just before it is unlinked, never from
  a listing taken earlier; names are unique, so a file that appears later is judged anew;
* directories are never removed: a publisher may be about to rename into one;
* after deleting from a queue, the queue's index is rebuilt under the queue lock
  (``QueueStore.rebuild_index``), and fetch finds "the first name after the pointer" by
  order, so a consumer whose pointer names a deleted message gets the next one;
* a nonce marker is deleted only if, under its nonce lock, it is still old: one rolled
  back and written anew since the listing is young again;
* a queue's index, write-ahead log and sidecars are deleted only when, under the queue lock, its
  directory is gone (nobody can be using them then; the rule is the core's,
  ``zosciimq.core.orphans``); never otherwise;
* lock files are never removed: a process waiting on the old inode would hold a lock
  that a newcomer, opening a fresh file, would hold as well;
* consumer-group state goes through the core (``ConsumerGroups.forget`` / ``tidy``),
  under each group's lock: the log of a group whose queue is gone is deleted only when,
  under the lock, the queue directory is still missing; a live group's log is rewritten
  without the history of messages deleted above, keeping every lease and count.

What each file *is* comes from the core (``zosciimq.core.walk``); this module only
decides what is due. The walks stream ``os.scandir`` (memory does not grow with the file
count) and a stop event is checked before every file, so SIGTERM ends a run within one
file and a rerun simply carries on: nothing is remembered between runs.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from zoscii_claireup.report import (
    AREA_GROUP,
    AREA_INDEX,
    AREA_NONCE,
    AREA_QUEUE,
    AREA_STORE,
    AREA_TEMP,
    RunReport,
    Tally,
)
from zoscii_claireup.retention import ExpiryRule, older_than
from zoscii_claireup.settings import Settings
from zosciimq.core import DataDir, DataStore, QueueStore, orphans, walk
from zosciimq.core.clock import utc_now
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.nonces import Nonces
from zosciimq.core.walk import Found, Kind
from zosciimq.errors import InvalidInput, QueueNotFound, ZosciiError

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# Called for each file a dry run would delete: (path, size in bytes).
DryRunSink = Callable[[str, int], None]
_DEFAULTS = Settings()  # the tuning knobs' defaults are the settings' own


class Interrupted(Exception):
    """The stop event was set (SIGTERM): the run ends after the current file."""


class Cleaner:
    def __init__(
        self,
        data_dir: DataDir,
        *,
        nonce_window_seconds: int,
        temp_max_age_seconds: int,
        clock: Clock = utc_now,
        stop: threading.Event | None = None,
        progress_every_files: int = _DEFAULTS.progress_every_files,
        progress_every_seconds: float = _DEFAULTS.progress_every_seconds,
        report_limit: int = _DEFAULTS.report_limit,
        dry_run_sink: DryRunSink | None = None,
        groups: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.groups = groups
        self.nonce_window_seconds = nonce_window_seconds
        self.temp_max_age_seconds = temp_max_age_seconds
        self.clock = clock
        self.stop = stop or threading.Event()
        self.progress_every_files = progress_every_files
        self.progress_every_seconds = progress_every_seconds
        self.report_limit = report_limit
        self.dry_run_sink = dry_run_sink

    def run(self, *, dry_run: bool = False) -> RunReport:
        """Delete (or, dry, list) everything due as of the clock's time at the start."""
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the clock returned a naive datetime; it must be timezone-aware")
        now = now.astimezone(UTC)
        run = _Run(self, now, dry_run)
        log.info(
            "claireup run starting%s: now=%s data_dir=%s",
            " (dry run)" if dry_run else "",
            now.isoformat(timespec="seconds"),
            self.data_dir.root,
        )
        started = time.monotonic()
        try:
            run.clean_queues()
            run.clean_store()
            run.clean_nonces()
            run.clean_temp()
            run.clean_indexes()
            if self.groups:
                run.clean_groups()  # last: the messages deleted above are gone by now
        except Interrupted:
            run.report.interrupted = True
            log.warning("claireup run interrupted; a rerun carries on where this one stopped")
        run.report.duration_seconds = time.monotonic() - started
        run.report.finished_at = self.clock().astimezone(UTC)
        return run.report


class _Run:
    """The state of one run; methods clean one area each."""

    def __init__(self, cleaner: Cleaner, now: datetime, dry_run: bool) -> None:
        self.cleaner = cleaner
        self.data_dir = cleaner.data_dir
        self.now = now
        self.dry_run = dry_run
        self.rule = ExpiryRule(now)
        self.report = RunReport(started_at=now, dry_run=dry_run)
        self.queues = QueueStore(cleaner.data_dir, clock=cleaner.clock)
        self.store = DataStore(cleaner.data_dir, clock=cleaner.clock)
        self.nonces = Nonces(cleaner.data_dir)
        self.groups = ConsumerGroups(cleaner.data_dir, self.queues)
        self.progress = _Progress(
            self.report, cleaner.progress_every_files, cleaner.progress_every_seconds
        )

    # --- queues ------------------------------------------------------------------------
    def clean_queues(self) -> None:
        tally = self.report.tally(AREA_QUEUE)  # entries of queues/ that are not queues
        for found in walk.iter_queue_dirs(self.data_dir, self._on_error(tally)):
            if found.kind is Kind.QUEUE and found.queue is not None:
                self.clean_queue(found.queue)
            else:
                self._unparsable(found.path, tally)
        if not tally.unparsable and not tally.errors:
            del self.report.tallies[(AREA_QUEUE, "")]

    def clean_queue(self, queue: str) -> None:
        tally = self.report.tally(AREA_QUEUE, queue)
        deleted_before = tally.deleted
        # Only names the queue's log checkpoint covers: a recovery after a crash redoes
        # the records after it, and would make a message deleted from them again.
        bound = self._checkpoint(queue, tally)
        try:
            for found in walk.iter_queue_files(self.data_dir, queue, self._on_error(tally)):
                self._tick(tally, f"queue {queue}")
                if bound is None or found.message is None or found.name <= bound:
                    self._consider_message(found, tally)
        finally:
            if tally.deleted > deleted_before and not self.dry_run:
                self._rebuild_index(queue, tally)

    def _checkpoint(self, queue: str, tally: Tally) -> str | None:
        """The highest name the queue's checkpoint covers, made now (None: a dry run,
        which deletes nothing)."""
        if self.dry_run:
            return None
        try:
            return self.queues.checkpoint(queue)
        except OSError as exc:
            tally.errors += 1
            log.error("could not checkpoint queue %s: %s; its messages are kept", queue, exc)
            return ""

    def _rebuild_index(self, queue: str, tally: Tally) -> None:
        """Drop deleted names from the index now, so consumers neither step over them
        nor pay for the rebuild themselves."""
        try:
            count = self.queues.rebuild_index(queue)
        except OSError as exc:
            tally.errors += 1
            log.error("could not rebuild the index of queue %s: %s", queue, exc)
            return
        log.info("queue %s: index rebuilt, %d messages left", queue, count)

    # --- store -------------------------------------------------------------------------
    def clean_store(self) -> None:
        tally = self.report.tally(AREA_STORE)
        # As for queues: not a file that a record after the store's checkpoint names.
        logged = None if self.dry_run else self._store_checkpoint(tally)
        for found in walk.iter_store_files(self.data_dir, self._on_error(tally)):
            self._tick(tally, "store")
            self._consider_message(found, tally, keep=logged)

    def _store_checkpoint(self, tally: Tally) -> Callable[[str], bool]:
        try:
            return self.store.checkpoint()
        except OSError as exc:
            tally.errors += 1
            log.error("could not checkpoint the store: %s; its messages are kept", exc)
            return lambda path: True

    # --- messages ----------------------------------------------------------------------
    def _consider_message(
        self, found: Found, tally: Tally, keep: Callable[[str], bool] | None = None
    ) -> None:
        """``keep(path)``: True for a file that must stay for now although it expired."""
        if found.message is None:  # malformed, or a stray: left alone and reported
            self._unparsable(found.path, tally)
        elif self.rule.expired(found.message) and (keep is None or not keep(found.path)):
            self._delete(found.entry, tally)

    # --- nonce markers -----------------------------------------------------------------
    def clean_nonces(self) -> None:
        tally = self.report.tally(AREA_NONCE)
        window = self.cleaner.nonce_window_seconds
        for found in walk.iter_nonce_markers(self.data_dir, self._on_error(tally)):
            self._tick(tally, "nonce")
            if found.kind is not Kind.NONCE:
                self._unparsable(found.path, tally)
                continue
            mtime = _mtime(found.entry)
            if mtime is None or not older_than(mtime, self.now, window):
                continue
            if self.dry_run:
                self._delete(found.entry, tally)
                continue
            # Under the nonce's lock, re-read the age: a marker rolled back and written
            # anew since the listing is young again and must stay.
            with self.nonces.lock(found.name):
                mtime = _mtime(found.entry, fresh=True)
                if mtime is not None and older_than(mtime, self.now, window):
                    self._delete(found.entry, tally)

    # --- upload leftovers --------------------------------------------------------------
    def clean_temp(self) -> None:
        """Uploads that crashed before commit; one in progress keeps its mtime fresh."""
        tally = self.report.tally(AREA_TEMP)
        for found in walk.iter_uploads(self.data_dir, self._on_error(tally)):
            self._tick(tally, "temp")
            if found.kind is not Kind.UPLOAD:
                self._unparsable(found.path, tally)
                continue
            self._delete_if_older(found, self.cleaner.temp_max_age_seconds, tally)

    # --- the core's own data -----------------------------------------------------------
    def clean_indexes(self) -> None:
        """Indexes, write-ahead logs and sidecars of queues that no longer exist, torn rewrites."""
        tally = self.report.tally(AREA_INDEX)
        for found in walk.iter_index_files(self.data_dir, self._on_error(tally)):
            self._tick(tally, "index")
            if found.kind is Kind.LEFTOVER:
                self._delete_if_older(found, self.cleaner.temp_max_age_seconds, tally)
            elif found.kind in orphans.QUEUE_FILES:
                self._forget_if_vanished(found, tally)
            # anything else is not ours to judge: the core may keep other files here

    def _forget_if_vanished(self, found: Found, tally: Tally) -> None:
        try:
            size = orphans.forget_if_vanished(self.data_dir, found, dry_run=self.dry_run)
        except OSError as exc:
            tally.errors += 1
            log.error("cannot delete %s: %s", found.path, exc)
            return
        if size is not None:
            self._count_deleted(found.path, size, tally)

    # --- consumer-group state ---------------------------------------------------------
    def clean_groups(self) -> None:
        """The state of groups whose queue is gone, and the history of live groups' logs
        about messages that are gone (see ``ConsumerGroups.forget`` and ``tidy``)."""
        tally = self.report.tally(AREA_GROUP)
        for queue in self.groups.queues_with_groups():
            vanished = not self.data_dir.queue_dir(queue).exists()
            for group in self.groups.groups_of(queue):
                self._tick(tally, f"groups of {queue}")
                try:
                    if vanished:
                        self._forget_group(queue, group, tally)
                    else:
                        self._tidy_group(queue, group, tally)
                except InvalidInput:  # a file name the core would not have written
                    self._unparsable(str(self.data_dir.group_log_path(queue, group)), tally)
                except QueueNotFound:
                    pass  # the queue went away meanwhile: the next run forgets its groups
                except (OSError, ZosciiError) as exc:
                    tally.errors += 1
                    log.error("consumer group %s/%s: %s", queue, group, exc)
            if vanished and not self.dry_run:
                try:
                    self.report.groups.dirs_removed += int(self.groups.drop_queue_dir(queue))
                except OSError as exc:
                    tally.errors += 1
                    log.error("cannot remove the group state directory of %s: %s", queue, exc)

    def _forget_group(self, queue: str, group: str, tally: Tally) -> None:
        removed = self.groups.forget(queue, group, dry_run=self.dry_run)
        for path, size in removed:
            self._count_deleted(path, size, tally)
        if removed and not self.dry_run:
            log.info("queue %s is gone: state of its consumer group %s deleted", queue, group)

    def _tidy_group(self, queue: str, group: str, tally: Tally) -> None:
        tidied = self.groups.tidy(queue, group, dry_run=self.dry_run)
        for path, size in tidied.leftovers:
            self._count_deleted(path, size, tally)
        if tidied.compacted:
            upkeep = self.report.groups
            upkeep.compacted += 1
            upkeep.lines_dropped += tidied.lines_dropped
            upkeep.bytes_reclaimed += max(0, tidied.bytes_before - tidied.bytes_after)
            upkeep.waiting_dropped += tidied.waiting_dropped
            upkeep.acks_dropped += tidied.acks_dropped

    def _count_deleted(self, path: str, size: int, tally: Tally) -> None:
        """A file the core deleted (or, dry, would) on claireup's behalf."""
        tally.deleted += 1
        tally.deleted_bytes += size
        if self.dry_run and self.cleaner.dry_run_sink is not None:
            self.cleaner.dry_run_sink(path, size)

    # --- helpers -----------------------------------------------------------------------
    def _on_error(self, tally: Tally) -> walk.OnError:
        """A directory that cannot be listed is counted and logged; the run goes on."""

        def listing_failed(path: str, exc: OSError) -> None:
            tally.errors += 1
            log.error("cannot list %s: %s", path, exc)

        return listing_failed

    def _tick(self, tally: Tally, where: str) -> None:
        if self.cleaner.stop.is_set():
            raise Interrupted
        tally.scanned += 1
        self.progress.tick(where)

    def _delete_if_older(self, found: Found, max_age: float, tally: Tally) -> None:
        mtime = _mtime(found.entry, fresh=True)
        if mtime is not None and older_than(mtime, self.now, max_age):
            self._delete(found.entry, tally)

    def _delete(self, entry: os.DirEntry[str], tally: Tally) -> None:
        try:
            size = entry.stat(follow_symlinks=False).st_size
        except FileNotFoundError:
            return  # gone already (another cleaner, or identify renamed it)
        except OSError as exc:
            tally.errors += 1
            log.error("cannot stat %s: %s", entry.path, exc)
            return
        if self.dry_run:
            if self.cleaner.dry_run_sink is not None:
                self.cleaner.dry_run_sink(entry.path, size)
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                return
            except OSError as exc:
                tally.errors += 1
                log.error("cannot delete %s: %s", entry.path, exc)
                return
        tally.deleted += 1
        tally.deleted_bytes += size

    def _unparsable(self, path: str, tally: Tally) -> None:
        tally.unparsable += 1
        if len(self.report.unparsable_sample) < self.cleaner.report_limit:
            self.report.unparsable_sample.append(path)
            log.warning("left alone, name does not parse: %s", path)
        elif len(self.report.unparsable_sample) == self.cleaner.report_limit:
            self.report.unparsable_sample.append("...")
            log.warning("more unparsable files; only their count is reported from here on")


class _Progress:
    """A log line every N files or every S seconds, whichever comes first."""

    def __init__(self, report: RunReport, every_files: int, every_seconds: float) -> None:
        self.report = report
        self.every_files = every_files
        self.every_seconds = every_seconds
        self.files = 0
        self.started = self.last = time.monotonic()

    def tick(self, where: str) -> None:
        self.files += 1
        if self.files % self.every_files and time.monotonic() - self.last < self.every_seconds:
            return
        self.last = time.monotonic()
        total = self.report.total()
        elapsed = self.last - self.started
        log.info(
            "progress: %d files scanned, %d %s, %d unparsable, at %s (%.0f files/s)",
            self.files,
            total.deleted,
            "would be deleted" if self.report.dry_run else "deleted",
            total.unparsable,
            where,
            self.files / elapsed if elapsed > 0 else 0.0,
        )


def _mtime(entry: os.DirEntry[str], *, fresh: bool = False) -> float | None:
    """The entry's mtime; ``fresh`` skips scandir's cached stat for a just-now reading."""
    try:
        if fresh:
            return os.stat(entry.path, follow_symlinks=False).st_mtime
        return entry.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return None


def print_would_delete(path: str, size: int) -> None:
    """A dry run's list on stdout, one ``<bytes>\\t<path>`` a line, ready for sort or awk."""
    sys.stdout.write(f"{size}\t{path}\n")


def build_cleaner(
    settings: Settings,
    stop: threading.Event,
    *,
    clock: Clock = utc_now,
    dry_run_sink: DryRunSink | None = print_would_delete,
) -> Cleaner:
    """The cleaner these settings describe (for a one-shot run and the service alike)."""
    return Cleaner(
        DataDir(settings.data_dir),
        nonce_window_seconds=settings.core.nonce_window_seconds,
        temp_max_age_seconds=settings.temp_max_age_seconds,
        clock=clock,
        stop=stop,
        progress_every_files=settings.progress_every_files,
        progress_every_seconds=settings.progress_every_seconds,
        report_limit=settings.report_limit,
        dry_run_sink=dry_run_sink,
        groups=settings.groups,
    )
