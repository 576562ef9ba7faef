"""Publishes gathered on an event loop (zoscii_api.gather): shared commits, their order,
each caller's own outcome, the loop never blocked by a held lock, a caller that leaves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.queues import queue_contents, uploads_of
from zoscii_api.gather import Gathered
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.locking import FileLock
from zosciimq.core.outgoing import Outgoing, PublishResult


class Recorded(QueueStore):
    """A QueueStore that records each ``publish_each``: its callers and its thread."""

    def __init__(self, data_dir: DataDir) -> None:
        super().__init__(data_dir)
        self.commits: list[tuple[int, str]] = []  # (callers, thread name)

    def publish_each(
        self, queue: str, callers: Sequence[Sequence[Outgoing]]
    ) -> list[list[PublishResult] | BaseException]:
        self.commits.append((len(callers), threading.current_thread().name))
        return super().publish_each(queue, callers)


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


def test_queues_that_commit_at_once_commit_in_threads(store: Recorded) -> None:
    """Two queues' publishes at once: on the loop their flushes would follow each other;
    in threads they overlap."""
    gathered = Gathered(store)
    loop_thread = threading.current_thread().name

    async def main() -> None:
        first, second = messages(store, b"a"), messages(store, b"b")
        await asyncio.gather(
            gathered.publish("qa", first, release=lambda: released(first)),
            gathered.publish("qb", second, release=lambda: released(second)),
        )

    asyncio.run(main())
    gathered.close()
    assert len(store.commits) == 2
    assert all(thread != loop_thread for _, thread in store.commits)


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
