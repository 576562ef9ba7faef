"""Publishes gathered on an event loop (zoscii_api.gather): shared commits, their order,
each caller's own outcome, the loop never blocked by a held lock, a caller that leaves."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.support.locks import held_by_another_process
from tests.support.queues import queue_contents, uploads_of
from zoscii_api.gather import MAX_CONTENDED, Gathered
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.group_commit import Steps
from zosciimq.core.locking import FileLock
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.wal import WriteAheadLog


class Recorded(QueueStore):
    """A QueueStore that records each commit's callers and the thread it started in
    (``publish_steps``: on the loop, or in a thread by ``publish_each``)."""

    def __init__(self, data_dir: DataDir) -> None:
        super().__init__(data_dir)
        self.commits: list[tuple[int, str]] = []  # (callers, thread name)

    def publish_steps(
        self, queue: str, callers: Sequence[Sequence[Outgoing]]
    ) -> Steps[list[list[PublishResult] | BaseException]]:
        self.commits.append((len(callers), threading.current_thread().name))
        return (yield from super().publish_steps(queue, callers))


class Flushes:
    """``WriteAheadLog.sync`` watched: the threads it ran in, and a gate it waits at."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, gate: bool = False) -> None:
        self.threads: list[str] = []
        self.started = threading.Event()
        self.gate = threading.Event()
        if not gate:
            self.gate.set()
        self.fail: OSError | None = None
        real = WriteAheadLog.sync

        def sync(wal: WriteAheadLog) -> None:
            self.threads.append(threading.current_thread().name)
            self.started.set()
            assert self.gate.wait(10)
            if self.fail is not None:
                failure, self.fail = self.fail, None
                raise failure
            real(wal)

        monkeypatch.setattr(WriteAheadLog, "sync", sync)


@pytest.fixture
def store(tmp_path: Path) -> Recorded:
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    return Recorded(data_dir)


def messages(store: QueueStore, *bodies: bytes, nonce: str | None = None) -> list[Outgoing]:
    return [Outgoing(u, 1, nonce) for u in uploads_of(store.data_dir, list(bodies))]


def released(outgoing: list[Outgoing]) -> None:
    for message in outgoing:
        message.upload.discard()


def test_publishes_that_arrive_together_share_a_commit_in_arrival_order(store: Recorded) -> None:
    gathered = Gathered(store)

    async def main() -> list[list[PublishResult]]:
        batches = [messages(store, b"m%d" % n) for n in range(20)]
        calls = [
            gathered.publish("q", batch, release=lambda b=batch: released(b)) for batch in batches
        ]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    gathered.close()
    names = [result.name for (result,) in results]
    assert names == sorted(names) and len(set(names)) == 20
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [
        b"m%d" % n for n in range(20)
    ]
    # All twenty were waiting when the loop came to commit: one commit, on the loop
    # (nothing else of this worker was waiting or committing).
    assert store.commits == [(20, threading.current_thread().name)]
    assert list(store.data_dir.temp.iterdir()) == []  # every upload released


def test_a_publish_is_committed_on_the_loop_and_behind_a_held_lock_in_a_thread(
    store: Recorded,
) -> None:
    gathered = Gathered(store)
    loop_thread = threading.current_thread().name
    holder = FileLock(store.data_dir.queue_lock_path("q"))

    async def main() -> None:
        alone = messages(store, b"alone")
        await gathered.publish("q", alone, release=lambda: released(alone))
        assert store.commits[-1] == (1, loop_thread)
        holder.acquire()  # someone else commits: the loop must not wait for the lock
        blocked = messages(store, b"behind a lock")
        waiting = asyncio.ensure_future(
            gathered.publish("q", blocked, release=lambda: released(blocked))
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the loop runs (this sleep ended); the commit waits
        assert store.commits[-1][1] != loop_thread
        holder.release()
        await waiting

    asyncio.run(main())
    gathered.close()
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"alone", b"behind a lock"]


def test_queues_that_commit_at_once_flush_side_by_side(
    store: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two queues' publishes at once are both committed on the loop, and their flushes
    run in threads at the same time: each waits at a barrier that only both together
    pass (on the loop, one after the other, the first would time out)."""
    both = threading.Barrier(2, timeout=10)
    real = WriteAheadLog.sync
    flushed_in: list[str] = []

    def sync(wal: WriteAheadLog) -> None:
        flushed_in.append(threading.current_thread().name)
        both.wait()
        real(wal)

    monkeypatch.setattr(WriteAheadLog, "sync", sync)
    gathered = Gathered(store)
    loop_thread = threading.current_thread().name

    async def main() -> list[list[PublishResult]]:
        first, second = messages(store, b"a"), messages(store, b"b")
        return await asyncio.gather(
            gathered.publish("qa", first, release=lambda: released(first)),
            gathered.publish("qb", second, release=lambda: released(second)),
        )

    results = asyncio.run(main())
    gathered.close()
    assert all(result[0].name for result in results)
    assert store.commits == [(1, loop_thread), (1, loop_thread)]
    assert len(flushed_in) == 2 and loop_thread not in flushed_in
    assert [b for _, b in queue_contents(store.data_dir, "qa")] == [b"a"]
    assert [b for _, b in queue_contents(store.data_dir, "qb")] == [b"b"]


def test_while_a_commit_flushes_the_loop_goes_on_and_nothing_is_visible_before_it(
    store: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With other requests in hand, the log's flush runs in a thread: the loop reads
    on, the next callers of the queue wait for the commit after it, and the group's
    messages are neither visible nor answered before the flush has returned."""
    flushes = Flushes(monkeypatch, gate=True)
    gathered = Gathered(store)
    gathered.requests = 3  # as the server counts them: others are being read
    loop_thread = threading.current_thread().name

    async def main() -> None:
        first = messages(store, b"first")
        committing = asyncio.ensure_future(
            gathered.publish("q", first, release=lambda: released(first))
        )
        while not flushes.started.is_set():
            await asyncio.sleep(0.01)  # the loop runs while the flush waits at the gate
        assert flushes.threads and flushes.threads[0] != loop_thread
        second = messages(store, b"second")
        next_one = asyncio.ensure_future(
            gathered.publish("q", second, release=lambda: released(second))
        )
        await asyncio.sleep(0.1)
        assert not committing.done() and not next_one.done()
        assert queue_contents(store.data_dir, "q") == []  # nothing before the flush
        assert not any(store.data_dir.queue_dir("q").iterdir())
        flushes.gate.set()
        (result,) = await committing
        (after,) = await next_one
        assert result.name and after.name and result.name < after.name

    asyncio.run(main())
    gathered.close()
    assert store.commits == [(1, loop_thread), (1, loop_thread)]
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"first", b"second"]


def test_a_flush_that_fails_in_its_thread_refuses_the_group_and_leaves_nothing(
    store: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes = Flushes(monkeypatch)
    flushes.fail = OSError(errno.EIO, "the device failed the flush")
    gathered = Gathered(store)
    gathered.requests = 2

    async def main() -> tuple[BaseException | list[PublishResult], list[PublishResult]]:
        lost = messages(store, b"never answered as published")
        (outcome,) = await asyncio.gather(
            gathered.publish("q", lost, release=lambda: released(lost)),
            return_exceptions=True,
        )
        after = messages(store, b"after")
        return outcome, await gathered.publish("q", after, release=lambda: released(after))

    outcome, after = asyncio.run(main())
    gathered.close()
    assert isinstance(outcome, OSError) and outcome.errno == errno.EIO
    assert after[0].name
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"after"]
    assert list(store.data_dir.temp.iterdir()) == []


def test_a_queue_another_process_committed_to_lately_flushes_on_the_loop(
    store: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock seen held by another process: for a second the queue's flushes stay on
    the loop, so the lock is let go as soon as the flush returns, not once the loop
    comes back to the commit (the other process waits for it meanwhile). The queues
    remembered as contended stay bounded: the stale ones go when there are too many."""
    flushes = Flushes(monkeypatch)
    gathered = Gathered(store)
    gathered.requests = 3  # others in hand: without the rule, the flush would go to a thread
    gathered._contention.update({f"gone{i}": 0.0 for i in range(MAX_CONTENDED)})
    loop_thread = threading.current_thread().name

    async def main(let_go: Callable[[], None]) -> None:
        blocked = messages(store, b"behind a lock")
        waiting = asyncio.ensure_future(
            gathered.publish("q", blocked, release=lambda: released(blocked))
        )
        await asyncio.sleep(0.1)
        let_go()
        await waiting
        after = messages(store, b"after")
        await gathered.publish("q", after, release=lambda: released(after))

    try:
        with held_by_another_process(store.data_dir.queue_lock_path("q")) as let_go:
            asyncio.run(main(let_go))
    finally:
        gathered.close()
    first, second = flushes.threads
    assert first != loop_thread  # the commit that waited for the lock, in its thread
    assert second == loop_thread
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"behind a lock", b"after"]
    assert set(gathered._contention) == {"q"}


def test_a_request_alone_flushes_on_the_loop(
    store: Recorded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One client: no other request to read meanwhile, so no hand-over to a thread."""
    flushes = Flushes(monkeypatch)
    gathered = Gathered(store)
    gathered.requests = 1
    loop_thread = threading.current_thread().name

    async def main() -> None:
        for body in (b"one", b"two"):
            batch = messages(store, body)
            await gathered.publish("q", batch, release=lambda b=batch: released(b))

    asyncio.run(main())
    gathered.close()
    assert flushes.threads == [loop_thread, loop_thread]


def test_each_caller_gets_its_own_outcome(store: Recorded) -> None:
    gathered = Gathered(store)

    async def main() -> list[list[PublishResult] | BaseException]:
        first = messages(store, b"first", nonce="n1")
        again = messages(store, b"again", nonce="n1")  # the nonce is used by the first
        other = messages(store, b"other")
        calls = [
            gathered.publish("q", batch, release=lambda b=batch: released(b))
            for batch in (first, again, other)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    first, again, other = asyncio.run(main())
    gathered.close()
    assert isinstance(first, list) and first[0].name and not first[0].duplicate
    assert isinstance(again, list) and again[0].duplicate and again[0].name is None
    assert isinstance(other, list) and other[0].name
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"first", b"other"]


def test_a_commit_that_fails_answers_each_caller_and_the_next_goes_on(store: Recorded) -> None:
    """An error in a group's commit (here a temp file gone: the file system's) refuses
    every caller of that group, none of their messages is written, and the loop commits
    what comes next."""
    gathered = Gathered(store)

    async def main() -> tuple[list[list[PublishResult] | BaseException], list[PublishResult]]:
        good = messages(store, b"good")
        broken = messages(store, b"broken")
        broken[0].upload.discard()  # its temp file is gone: the commit cannot take it
        calls = [
            gathered.publish("q", batch, release=lambda b=batch: released(b))
            for batch in (good, broken)
        ]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        after = messages(store, b"after")
        return outcomes, await gathered.publish("q", after, release=lambda: released(after))

    outcomes, after = asyncio.run(main())
    gathered.close()
    assert all(isinstance(outcome, FileNotFoundError) for outcome in outcomes)
    assert after[0].name
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"after"]


def test_a_caller_that_leaves_is_published_and_its_uploads_released_after(
    store: Recorded,
) -> None:
    gathered = Gathered(store)
    holder = FileLock(store.data_dir.queue_lock_path("q"))
    freed: list[str] = []

    async def main() -> None:
        holder.acquire()  # the commit waits in its thread until the lock is free
        leaving = messages(store, b"left before the answer")

        def release() -> None:
            freed.append("released")
            released(leaving)

        task = asyncio.ensure_future(gathered.publish("q", leaving, release=release))
        await asyncio.sleep(0.1)
        task.cancel()  # the client left while its commit waited
        await asyncio.sleep(0.05)
        assert freed == []  # its upload is still the commit's
        holder.release()
        for _ in range(100):
            if freed:
                break
            await asyncio.sleep(0.02)
        assert task.cancelled()

    asyncio.run(main())
    gathered.close()
    assert freed == ["released"]
    assert [body for _, body in queue_contents(store.data_dir, "q")] == [b"left before the answer"]
    assert list(store.data_dir.temp.iterdir()) == []
