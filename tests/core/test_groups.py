"""Group commit and publish_many: shared commits, order, all or nothing, crashes mid-group."""

from __future__ import annotations

import bisect
import errno
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.lanes import arrive_while_locked
from tests.support.publisher import payload
from tests.support.queues import publish_many, queue_contents, uploads_of, wal_records
from zosciimq.core import DataDir, QueueStore
from zosciimq.core import commit as commit_module
from zosciimq.core import index as idx
from zosciimq.core import queues as queues_module
from zosciimq.core.checkpoint import Durability, Mode
from zosciimq.core.locking import FileLock
from zosciimq.core.nonces import Nonces
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.policy import QueueRule
from zosciimq.core.upload import INLINE_BYTES
from zosciimq.core.wal import WriteAheadLog
from zosciimq.errors import QueueFull, StorageFull, TryAgain

REPO = Path(__file__).resolve().parents[2]


def test_a_batch_gets_contiguous_increasing_names_in_its_order(data_dir, queues) -> None:
    before = publish_many(queues, data_dir, "q", [b"x"])[0].name
    bodies = [b"m%d" % i for i in range(50)] + [bytes(range(256))]
    results = publish_many(queues, data_dir, "q", bodies)
    after = publish_many(queues, data_dir, "q", [b"y"])[0].name
    names = [r.name for r in results]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert before < names[0] and names[-1] < after
    assert queue_contents(data_dir, "q") == [
        (before, b"x"),
        *zip(names, bodies, strict=True),
        (after, b"y"),
    ]
    counters = [int(name[14:18]) for name in names]
    assert counters == list(range(counters[0], counters[0] + len(names))), "not contiguous"


def test_each_message_has_its_own_nonce_and_retention(data_dir, queues) -> None:
    uploads = uploads_of(data_dir, [b"a", b"b", b"c", b"d"])
    messages = [
        Outgoing(uploads[0], 7, "n-a"),
        Outgoing(uploads[1], 30, None),
        Outgoing(uploads[2], 0, "n-a"),  # the same nonce twice in one call: stored once
        Outgoing(uploads[3], 9999, "n-d"),
    ]
    results = queues.publish_many("q", messages)
    assert [r.duplicate for r in results] == [False, False, True, False]
    assert [r.name[19:23] for r in results if r.name] == ["0007", "0030", "9999"]
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"a", b"b", b"d"]

    repeat = publish_many(queues, data_dir, "q", [b"a", b"d"], nonces=["n-a", "n-d"])
    assert all(r.duplicate and r.name is None for r in repeat), "a retried batch stored again"
    assert len(queue_contents(data_dir, "q")) == 3


@pytest.mark.parametrize(
    "fail_at", ["index records", "log flush", "third rename", "third nonce marker"]
)
def test_a_batch_that_fails_midway_leaves_nothing(data_dir, queues, monkeypatch, fail_at) -> None:
    """No space at any step: a 507 for the batch, nothing of it visible, on disk or in
    the log (a recovery would otherwise make it again), and its retry stores it."""
    first = publish_many(queues, data_dir, "q", [b"kept"])[0].name
    full = OSError(errno.ENOSPC, "No space left on device")
    calls = []

    def third(real):
        def fail_third(*args, **kwargs):
            calls.append(args)
            if len(calls) == 3:
                raise full
            return real(*args, **kwargs)

        return fail_third

    def fail(*args, **kwargs):
        raise full

    if fail_at == "index records":
        monkeypatch.setattr(idx.IndexFile, "write_records", fail)
    elif fail_at == "log flush":
        monkeypatch.setattr(WriteAheadLog, "sync", fail)
    elif fail_at == "third rename":
        monkeypatch.setattr(os, "rename", third(os.rename))
    else:
        monkeypatch.setattr(Nonces, "_create", third(Nonces._create))
    with pytest.raises(StorageFull):
        publish_many(queues, data_dir, "q", [b"1", b"2", b"3", b"4"], nonces=list("abcd"))
    monkeypatch.undo()
    assert sorted(os.listdir(data_dir.queue_dir("q"))) == [first]
    assert not any(data_dir.nonce_path(n).exists() for n in "abcd")
    assert os.listdir(data_dir.temp) == []
    logged = [b for r in wal_records(data_dir, "q") for b in r]
    assert not {b"1", b"2", b"3", b"4"} & set(logged), "the failed batch is left in the log"
    retry = publish_many(queues, data_dir, "q", [b"1", b"2", b"3", b"4"], nonces=list("abcd"))
    assert not any(r.duplicate for r in retry)
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"kept", b"1", b"2", b"3", b"4"]


def test_a_batch_over_the_per_second_limit_asks_to_try_again(data_dir, queues, monkeypatch):
    monkeypatch.setattr(commit_module, "MAX_COUNTER", 5)
    with pytest.raises(TryAgain):
        publish_many(queues, data_dir, "q", [b"%d" % i for i in range(7)])
    assert os.listdir(data_dir.queue_dir("q")) == []
    assert len(publish_many(queues, data_dir, "q", [b"%d" % i for i in range(6)])) == 6


def test_concurrent_publishers_share_commits_and_keep_ack_order(data_dir, queues, monkeypatch):
    """16 threads x 40 publishes: fewer log flushes than messages (groups formed),
    every message visible the moment its publish returns, and a publish that started
    after another returned always has the higher name."""
    flushes = _count_log_flushes(monkeypatch)
    spans: list[tuple[float, float, str]] = []
    invisible: list[str] = []
    start = threading.Barrier(16)

    def worker(number: int) -> None:
        start.wait()
        for i in range(40):
            began = time.monotonic()
            name = publish_many(queues, data_dir, "q", [b"%d-%d" % (number, i)])[0].name
            spans.append((began, time.monotonic(), name))
            if not _visible_now(data_dir, "q", name):
                invisible.append(name)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not invisible, f"acknowledged but not visible: {invisible[:3]}"
    names = [name for _, _, name in spans]
    assert len(set(names)) == 640
    assert [n for n, _ in queue_contents(data_dir, "q")] == sorted(names)
    assert flushes[0] < 640, "no two publishers ever shared a commit"
    by_end = sorted(spans, key=lambda span: span[1])
    ends = [ended for _, ended, _ in by_end]
    highest = list(itertools.accumulate((name for _, _, name in by_end), max))
    for began, _, name in spans:
        done_before = bisect.bisect_left(ends, began)  # publishes answered before this began
        if done_before:
            assert highest[done_before - 1] < name, "a later publish got a lower name"


def _count_log_flushes(monkeypatch) -> list[int]:
    """Counts write-ahead log flushes: one per group commit."""
    flushes = [0]
    real_sync = WriteAheadLog.sync

    def sync(self) -> None:
        flushes[0] += 1
        real_sync(self)

    monkeypatch.setattr(WriteAheadLog, "sync", sync)
    return flushes


LARGE_B = b"B" * (INLINE_BYTES + 1)  # flushed on its own before it joins a group


class _BehindAFlush:
    """B (a large message) publishes first and its upload flush is held (or made to
    fail) until ``finish``; then A publishes to the same queue. Counts log flushes: one
    per group commit. ``results``: each one's name (or error) and its seconds."""

    def __init__(self, monkeypatch, queues: QueueStore, data_dir: DataDir) -> None:
        self.queues, self.data_dir = queues, data_dir
        self.entered, self.release = threading.Event(), threading.Event()
        self.fail = False
        self.results: dict[str, object] = {}
        real_sync = queues_module.sync_uploads

        def sync_uploads(uploads, **kwargs) -> None:
            if any(u.size == len(LARGE_B) for u in uploads):
                self.entered.set()
                assert self.release.wait(30)
                if self.fail:
                    raise OSError(errno.EIO, "injected upload flush failure")
            real_sync(uploads, **kwargs)

        monkeypatch.setattr(queues_module, "sync_uploads", sync_uploads)
        self.flushes = _count_log_flushes(monkeypatch)

    def start(self) -> None:
        self.slow = self._publish("B", LARGE_B)
        assert self.entered.wait(10)
        self.fast = self._publish("A", b"A")

    def finish(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.release.set()
        self.fast.join(30)
        self.slow.join(30)

    def lingering(self) -> bool:
        """Whether A's commit waits for B (polled for up to 10 s)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.queues._open.use("q") as files:
                if files.lane.lingerer is not None:
                    return True
            time.sleep(0.005)
        return False

    def _publish(self, label: str, body: bytes) -> threading.Thread:
        def run() -> None:
            began = time.monotonic()
            try:
                self.results[label] = publish_many(self.queues, self.data_dir, "q", [body])[0].name
            except OSError as exc:
                self.results[label] = exc
            self.results[label + " seconds"] = time.monotonic() - began

        thread = threading.Thread(target=run)
        thread.start()
        return thread


def test_a_leader_waits_for_a_publisher_still_flushing_its_upload(data_dir, monkeypatch):
    """B is still flushing when A could commit alone: A waits for B (not for the whole
    linger), and one commit, one log flush, covers both, in arrival order."""
    queues = QueueStore(data_dir, group_linger=20.0)
    publish_many(queues, data_dir, "q", [b"first"])  # the queue's directory exists
    race = _BehindAFlush(monkeypatch, queues, data_dir)
    race.start()
    assert race.lingering(), "A committed without waiting for B"
    race.finish()
    assert race.flushes[0] == 1, "A and B were not committed together"
    assert race.results["A"] < race.results["B"], "names out of arrival order"
    assert race.results["A seconds"] < 10, "A waited out the linger instead of B's arrival"
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"first", b"A", LARGE_B]


def test_a_leader_waits_no_longer_than_the_linger(data_dir, monkeypatch):
    queues = QueueStore(data_dir, group_linger=0.05)
    race = _BehindAFlush(monkeypatch, queues, data_dir)
    race.start()
    race.fast.join(30)
    name = race.results["A"]
    assert not race.fast.is_alive() and isinstance(name, str), "A waited for B's flush"
    assert _visible_now(data_dir, "q", name), "A answered before it was visible"
    race.finish()
    assert name < race.results["B"]
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"A", LARGE_B]


def test_a_publisher_whose_flush_fails_releases_the_lingering_leader(data_dir, monkeypatch):
    queues = QueueStore(data_dir, group_linger=20.0)
    race = _BehindAFlush(monkeypatch, queues, data_dir)
    race.start()
    assert race.lingering()
    race.finish(fail=True)
    assert isinstance(race.results["B"], OSError)
    assert race.results["A seconds"] < 10, "A waited out the linger for a publisher that failed"
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"A"]
    assert not os.listdir(data_dir.temp), "the failed upload was left behind"


@pytest.mark.parametrize(
    ("arrivals", "cap", "flushes_expected"),
    [
        ((("B", None), ("C", None), ("D", None)), None, 1),
        # E's nonce lock is not the leader's: E waits, and F behind it too (arrival order)
        ((("E", "nonce-e"), ("F", None)), None, 2),
        # a group of at most two messages: B joins A, C waits for the next commit
        ((("B", None), ("C", None)), 2, 2),
    ],
)
def test_publishers_arriving_while_the_leader_waits_for_the_lock_join_its_group(
    data_dir, queues, monkeypatch, arrivals, cap, flushes_expected
):
    """Another process commits (it holds the queue's lock): this process's leader waits
    for the lock, and the publishers that arrive meanwhile go into its group rather than
    wait for one more commit, so one log flush covers them all, in arrival order."""
    if cap is not None:
        monkeypatch.setattr(commit_module, "MAX_GROUP_MESSAGES", cap)
    publish_many(queues, data_dir, "q", [b"first"])
    flushes = _count_log_flushes(monkeypatch)

    def publish(label: str, nonce: str | None = None):
        nonces = [nonce] if nonce else None
        return lambda: publish_many(queues, data_dir, "q", [label.encode()], nonces)[0].name

    names = arrive_while_locked(
        *_lock_and_lane(queues), publish("A"), [publish(label, nonce) for label, nonce in arrivals]
    )
    assert flushes[0] == flushes_expected
    assert all(isinstance(name, str) for name in names), names
    assert names == sorted(names), "names out of arrival order"
    assert [body for _, body in queue_contents(data_dir, "q")] == [
        b"first",
        b"A",
        *(label.encode() for label, _ in arrivals),
    ]


def _visible_now(data_dir: DataDir, queue: str, name: str) -> bool:
    """Whether a consumer arriving now finds ``name`` (its pointer just below it)."""
    just_below = name[:-5]  # a prefix of the name sorts right before it
    for found, file in QueueStore(data_dir).iter_after(queue, just_below, 1):
        file.close()
        return found == name
    return False


def test_a_process_killed_among_batching_threads_loses_and_splits_nothing(tmp_path) -> None:
    """kill -9 of 8 threads publishing batches of 5: every acknowledged message is there,
    and every batch is there whole or not at all (nobody was answered for a partial one)."""
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    count, threads, batch = 20_000, 8, 5
    publisher = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.publisher",
            str(data_dir.root),
            "q",
            str(count),
            "g",
            str(threads),
            str(batch),
        ],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    acked: dict[str, str] = {}
    assert publisher.stdout is not None
    for line in publisher.stdout:
        name, digest = line.decode().split()
        acked[name] = digest
        if len(acked) >= 600:
            publisher.send_signal(signal.SIGKILL)
            break
    rest, _ = publisher.communicate()
    for line in rest.decode().splitlines():
        if len(line.split()) == 2:
            name, digest = line.split()
            acked[name] = digest

    seen = queue_contents(data_dir, "q")
    names = [name for name, _ in seen]
    assert names == sorted(names) and len(names) == len(set(names))
    assert set(acked) <= set(names), "an acknowledged message was lost"
    numbers = []
    for name, body in seen:
        number = int(body.split(b"\x00")[0].split(b":")[1])
        assert body == payload("g", number), "a torn or foreign message is visible"
        if name in acked:
            assert hashlib.sha256(body).hexdigest() == acked[name]
        numbers.append(number)

    def batch_of(number: int) -> tuple[int, int]:
        return number % threads, (number // threads) // batch

    members: dict[tuple[int, int], int] = {}
    for number in numbers:
        members[batch_of(number)] = members.get(batch_of(number), 0) + 1
    partial = {key: size for key, size in members.items() if size != batch}
    assert not partial, f"batches only partly visible after the crash: {partial}"
    on_disk = {p.name for p in data_dir.queue_dir("q").iterdir()}
    assert on_disk == set(names), "a message file exists that consumers cannot see"


class Died(BaseException):
    """A process dying right there: nothing unwinds that catches only Exception."""


def test_a_group_cut_before_its_record_is_logged_is_dropped_by_the_next(
    data_dir, queues, monkeypatch
):
    kept = publish_many(queues, data_dir, "q", [b"kept"])[0].name

    def die(*args, **kwargs):
        raise Died

    monkeypatch.setattr(WriteAheadLog, "append", die)
    with pytest.raises(Died):
        publish_many(queues, data_dir, "q", [b"1", b"2", b"3"], nonces=list("xyz"))
    monkeypatch.undo()
    # Nobody was answered and nothing was renamed: the next one to look drops the group.
    assert queue_contents(data_dir, "q") == [(kept, b"kept")]
    assert sorted(os.listdir(data_dir.queue_dir("q"))) == [kept]
    assert not any(data_dir.nonce_path(n).exists() for n in "xyz")
    retry = publish_many(queues, data_dir, "q", [b"1", b"2", b"3"], nonces=list("xyz"))
    assert not any(r.duplicate for r in retry)
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"kept", b"1", b"2", b"3"]


@pytest.mark.parametrize("renamed", [0, 2, 5])
def test_a_group_cut_after_its_record_is_logged_is_finished_by_the_next(
    data_dir, queues, monkeypatch, renamed
):
    """Logged means durable: the next one to look (here a reader) redoes the group
    whole, from the log, whichever of its renames were done, and marks its nonces (a
    retry is a duplicate)."""
    kept = publish_many(queues, data_dir, "q", [b"kept"])[0].name
    real_rename = os.rename
    renames = []

    def dying_rename(*args, **kwargs):
        if len(renames) == renamed:
            raise Died
        renames.append(args)
        return real_rename(*args, **kwargs)

    def die(*args, **kwargs):
        raise Died

    if renamed < 5:
        monkeypatch.setattr(os, "rename", dying_rename)
    else:  # every rename done, dies marking the nonces
        monkeypatch.setattr(Nonces, "mark_many", die)
    bodies = [b"1", b"2", b"3", b"4", b"5"]
    with pytest.raises(Died):
        publish_many(queues, data_dir, "q", bodies, nonces=list("vwxyz"))
    monkeypatch.undo()
    assert len(os.listdir(data_dir.queue_dir("q"))) == 1 + renamed
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"kept", *bodies]
    assert all(data_dir.nonce_path(n).exists() for n in "vwxyz")
    assert not [p for p in data_dir.temp.iterdir()], "an upload was left behind"
    retry = publish_many(queues, data_dir, "q", bodies, nonces=list("vwxyz"))
    assert all(r.duplicate for r in retry), "the retry of a finished group stored it again"
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"kept", *bodies]
    after = publish_many(queues, data_dir, "q", [b"after"])[0].name
    assert after > max(n for n, _ in queue_contents(data_dir, "q")[:-1]) and kept < after


# --- several callers gathered by one thread (an event loop's) -------------------------------


def _callers(data_dir: DataDir, bodies: list[list[bytes]], nonces=None) -> list[list[Outgoing]]:
    nonces = nonces or [[None] * len(b) for b in bodies]
    return [
        [Outgoing(u, 1, n) for u, n in zip(uploads_of(data_dir, b), ns, strict=True)]
        for b, ns in zip(bodies, nonces, strict=True)
    ]


def test_callers_gathered_by_one_thread_share_a_flush_and_keep_their_own_outcomes(
    data_dir, monkeypatch
) -> None:
    """publish_each: one commit for all of them, in their order, and each caller's own
    outcome: a used nonce is that caller's duplicate, a full queue refuses only the
    caller that does not fit; the others are published."""
    queues = QueueStore(data_dir, rules=lambda queue: QueueRule(max_messages=5))
    publish_many(queues, data_dir, "q", [b"before"], nonces=["used"])
    flushes = _count_log_flushes(monkeypatch)
    callers = _callers(
        data_dir,
        [[b"a"], [b"b"], [b"c", b"d"], [b"e", b"f"]],
        nonces=[[None], ["used"], [None, None], [None, None]],
    )
    outcomes = queues.publish_each("q", callers)
    assert flushes[0] == 1
    a, b, cd, ef = outcomes
    assert isinstance(a, list) and isinstance(cd, list)
    assert b == [PublishResult(name=None, duplicate=True)]
    assert isinstance(ef, QueueFull), "5 messages at most: e and f do not fit"
    names = [r.name for r in [*a, *cd]]
    assert names == sorted(names)
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"before", b"a", b"c", b"d"]
    for caller in callers:
        for message in caller:
            message.upload.discard()


def test_a_full_volume_is_every_gathered_callers_507_and_leaves_nothing(
    data_dir, queues, monkeypatch
) -> None:
    monkeypatch.setattr(WriteAheadLog, "sync", _raise(OSError(errno.ENOSPC, "full")))
    outcomes = queues.publish_each("q", _callers(data_dir, [[b"1"], [b"2", b"3"]]))
    assert [type(o) for o in outcomes] == [StorageFull, StorageFull]
    monkeypatch.undo()
    assert queue_contents(data_dir, "q") == []


def test_publish_steps_pause_at_the_flush_with_nothing_visible_and_the_lock_held(
    data_dir, queues
) -> None:
    """``sync``: the steps pause once, at the log's flush, with the group's record
    written but nothing of it visible: no file under its name, no name in the index,
    and the queue's lock held (another caller of the process waits). The steps given the
    flush's return go on and answer; a flush that failed (thrown in) is taken back."""
    callers = _callers(data_dir, [[b"one"], [b"two"]])
    steps = queues.publish_steps("q", callers)
    flush = next(steps)
    assert flush.__self__.path.endswith(".wal")  # the queue's log's sync
    assert queue_contents(data_dir, "q") == []
    assert not any(data_dir.queue_dir("q").iterdir())
    assert queues.is_busy("q") == "here"
    assert len(wal_records(data_dir, "q")) == 1  # written, not flushed yet
    flush()
    with pytest.raises(StopIteration) as done:
        steps.send(None)
    one, two = done.value.value
    assert isinstance(one, list) and isinstance(two, list) and one[0].name < two[0].name
    assert queues.is_busy("q") == ""
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"one", b"two"]

    failing = _callers(data_dir, [[b"lost"]])
    steps = queues.publish_steps("q", failing)
    next(steps)
    with pytest.raises(StopIteration) as done:
        steps.throw(OSError(errno.EIO, "the flush failed"))
    (outcome,) = done.value.value
    assert isinstance(outcome, OSError) and queues.is_busy("q") == ""
    publish_many(queues, data_dir, "q", [b"after"])
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"one", b"two", b"after"]
    for caller in [*callers, *failing]:
        for message in caller:
            message.upload.discard()


def test_a_queue_locked_by_a_purge_of_this_process_is_busy_here(data_dir, queues) -> None:
    """A purge (``core.admin``) or an orphan cleanup (``core.orphans``) holds the queue's
    lock through an instance of its own: the event loop's hint must still say "here"
    (this process will let it go), not "elsewhere" (another process, which would mark
    the queue contended and flush its commits on the loop for a second)."""
    publish_many(queues, data_dir, "q", [b"one"])
    with FileLock(data_dir.queue_lock_path("q")):
        assert queues.is_busy("q") == "here"
    assert queues.is_busy("q") == ""


def test_publish_steps_never_pause_in_interval_durability(data_dir) -> None:
    queues = QueueStore(data_dir, durability=Durability(mode=Mode.INTERVAL))
    callers = _callers(data_dir, [[b"at once"]])
    with pytest.raises(StopIteration) as done:
        next(queues.publish_steps("q", callers))
    (results,) = done.value.value
    assert isinstance(results, list) and results[0].name
    assert [b for _, b in queue_contents(data_dir, "q")] == [b"at once"]
    callers[0][0].upload.discard()


def test_gathered_callers_arriving_while_the_leader_waits_for_the_lock_join_its_group(
    data_dir, queues, monkeypatch
) -> None:
    """Another process holds the queue's lock and a thread of this one leads a commit:
    the gathered callers wait in its lane (never beside it), join its group, share its
    flush and are woken with it, in their order after it."""
    publish_many(queues, data_dir, "q", [b"first"])
    flushes = _count_log_flushes(monkeypatch)

    led, gathered = arrive_while_locked(
        *_lock_and_lane(queues),
        lambda: publish_many(queues, data_dir, "q", [b"A"]),
        [lambda: queues.publish_each("q", _callers(data_dir, [[b"x"], [b"y", b"z"]]))],
        sizes=[2],
    )
    assert flushes[0] == 1
    assert isinstance(led, list) and isinstance(gathered, list)
    assert all(isinstance(o, list) for o in gathered), gathered
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"first", b"A", b"x", b"y", b"z"]


def _lock_and_lane(queues: QueueStore, queue: str = "q"):
    """Queue ``queue``'s lock and lane, as ``arrive_while_locked`` asks for them."""

    def lock():
        with queues._open.use(queue) as files:
            return files.lock

    def lane():
        with queues._open.use(queue) as files:
            return files.lane

    return lock, lane


def _raise(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail
