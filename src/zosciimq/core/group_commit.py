"""Group commit: callers of one process that want the same slow commit share it.

A commit's cost is mostly fixed (a lock across processes, one flush of the device), so
callers that arrive while one is running wait, and when it ends one of them, the leader,
commits everything that waited as one group. Nobody is answered before the commit that
covers them. Used for a queue's publishers (``core.queues``), the store's
(``core.store``) and a consumer group's settlements (``core.groups``).

A ``Lane`` is one key's queue of waiting callers. Each caller waits on a condition of its
own (over the lane's lock), so a commit wakes the callers it answered and the next
leader, not every waiting thread. A caller that has announced itself (``arriving``) but
is still doing its own slow part (flushing a large upload) is waited for by a leader, at
most ``linger`` seconds, so one commit covers it too. And a leader that had to wait for
its lock (another process committing) takes in, once it holds it, the callers that came
meanwhile (``join``).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Generic, TypeAlias, TypeVar

W = TypeVar("W")  # what a caller brings
R = TypeVar("R")  # what it gets back
T = TypeVar("T")

Flush: TypeAlias = Callable[[], None]
# Work that pauses where it would wait for the device: it yields the flush to run (a
# write-ahead log's fdatasync) and goes on once that has returned, or meets what the flush
# raised (thrown in). A thread runs the flush itself (``run_flushes``); an event loop
# runs it in a thread and goes on with other requests meanwhile. Locks stay held across
# a pause. The value returned at the end is the work's.
Steps: TypeAlias = Generator[Flush, None, T]


class Submission(Generic[W, R]):
    """One caller's work, waiting for the commit that covers it."""

    __slots__ = ("_turn", "done", "error", "result", "wake", "work")

    def __init__(self, work: W, turn: threading.Lock) -> None:
        self.work = work
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False
        self._turn = turn
        # Made when the caller first has to wait: a caller alone commits at once, and a
        # condition (a lock each wait) costs more than the rest of the hand-over.
        self.wake: threading.Condition | None = None

    def fail(self, error: BaseException) -> None:
        self.error, self.done = error, True

    def sleep(self, timeout: float | None = None) -> None:
        """Wait to be woken (the lane's lock held)."""
        if self.wake is None:
            self.wake = threading.Condition(self._turn)
        self.wake.wait(timeout)

    def rouse(self) -> None:
        """Wake it if it waits (the lane's lock held)."""
        if self.wake is not None:
            self.wake.notify()


# A group's commit: it leaves every submission of the group done, at once (returning
# None) or by the end of the steps it returns.
Commit: TypeAlias = Callable[[list[Submission[W, R]]], Steps[None] | None]


class Lane(Generic[W, R]):
    """The callers of one key in this process, and whether one of them commits now."""

    __slots__ = ("arriving", "committing", "lingerer", "turn", "waiting")

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.waiting: list[Submission[W, R]] = []
        self.arriving = 0  # callers doing their own slow part, about to submit
        self.lingerer: Submission[W, R] | None = None  # a leader waiting for them
        self.committing = False

    def arrive(self) -> None:
        """A caller will submit soon (after its own slow part): a leader may wait for it."""
        with self.turn:
            self.arriving += 1

    def left(self) -> None:
        """A caller that arrived will not submit after all (its slow part failed)."""
        with self.turn:
            self._joined()

    def _joined(self) -> None:
        self.arriving -= 1
        if self.lingerer is not None and not self.arriving:
            self.lingerer.rouse()

    def join(
        self,
        group: list[Submission[W, R]],
        fits: Callable[[Submission[W, R]], bool] | None = None,
    ) -> None:
        """Move the callers that came while ``group``'s leader waited for its locks into
        ``group``: from the front of the line, while ``fits`` (default: all) says yes,
        so none overtakes another. Called by a commit function once it holds its locks.

        A leader often waits for its lock while another process commits; the callers
        that arrive meanwhile would otherwise wait for that commit and then one more.
        ``submit`` finishes and rouses them with the rest of the group."""
        with self.turn:
            count = 0
            for submission in self.waiting:
                if fits is not None and not fits(submission):
                    break
                count += 1
            if count:
                group.extend(self.waiting[:count])
                del self.waiting[:count]

    def submit(
        self,
        work: W,
        commit: Commit[W, R],
        *,
        arrived: bool = False,
        linger: float = 0.0,
        take: Callable[[list[Submission[W, R]]], int] | None = None,
    ) -> R:
        """Wait for the commit that covers ``work``, leading one when it is our turn.

        ``commit(group)`` must leave every submission of the group done (a result or an
        error); an exception it raises is given to those it did not finish. ``take``
        says how many of the waiting submissions (at least one) the next group holds;
        default all. ``arrived``: this caller announced itself with ``arrive``.
        """
        steps = self.submit_steps([work], commit, arrived=arrived, linger=linger, take=take)
        (submission,) = run_flushes(steps)
        if submission.error is not None:
            raise submission.error
        return submission.result  # type: ignore[return-value]

    def submit_steps(
        self,
        works: Sequence[W],
        commit: Commit[W, R],
        *,
        arrived: bool = False,
        linger: float = 0.0,
        take: Callable[[list[Submission[W, R]]], int] | None = None,
    ) -> Steps[list[Submission[W, R]]]:
        """``submit`` for several callers that one thread gathered (an event loop's
        requests): each ``works`` item is a submission of its own, in line one after
        the other, and ends done with its own result or error (returned, not raised).
        Pauses where a commit it leads waits for the device (``Steps``): a thread runs
        them with ``run_flushes``; an event loop runs the flush elsewhere meanwhile."""
        if not works:
            return []
        mine: list[Submission[W, R]] = [Submission(work, self.turn) for work in works]
        first, last = mine[0], mine[-1]  # the line keeps its order: the last done, all are

        def sleep(timeout: float | None = None) -> None:
            if first.wake is None and len(mine) > 1:  # one condition, roused by any of ours
                wake = threading.Condition(self.turn)
                for submission in mine:
                    submission.wake = wake
            first.sleep(timeout)

        with self.turn:
            self.waiting.extend(mine)
            if arrived:
                self._joined()
            lingered = False
            while not last.done:
                if self.committing or self.lingerer is not None:
                    sleep()  # done, or the next leader
                    continue
                if self.arriving and not lingered and linger > 0:
                    lingered, self.lingerer = True, first
                    deadline = time.monotonic() + linger
                    try:
                        while self.arriving and (left := deadline - time.monotonic()) > 0:
                            sleep(left)
                    finally:
                        self.lingerer = None
                    continue
                count = max(1, take(self.waiting)) if take is not None else len(self.waiting)
                group, self.waiting = self.waiting[:count], self.waiting[count:]
                self.committing = True
                self.turn.release()
                try:
                    yield from _run(commit, group)
                finally:
                    self.turn.acquire()
                    self.committing = False
                    for answered in group:
                        answered.rouse()
                    if self.waiting:
                        self.waiting[0].rouse()  # leads the next commit
        return mine


def _run(commit: Commit[W, R], group: list[Submission[W, R]]) -> Steps[None]:
    try:
        steps = commit(group)
        if steps is not None:
            yield from steps
    except BaseException as exc:
        first = True
        for submission in group:
            if not submission.done:
                submission.fail(exc if first else copy.copy(exc))
                first = False
    for submission in group:
        submission.done = True


def run_flushes(steps: Steps[T]) -> T:
    """Run ``steps`` to their end, each flush in this thread, as it comes."""
    try:
        flush = next(steps)
        while True:
            try:
                flush()
            except BaseException as exc:
                flush = steps.throw(exc)
            else:
                flush = steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
