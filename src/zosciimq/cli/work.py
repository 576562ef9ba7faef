"""work, dead list, dead replay: a consumer group's worker, and its dead letters.

``zoscii work`` runs a shell command per message (the client's ``Worker``): the message
on its stdin, its name, receipt and delivery count in the environment; exit 0 acks it,
``DEAD_LETTER_EXIT`` dead-letters it, anything else requeues it with a growing delay.

Dead letters of a group are the queue ``<queue>--<group>--dead``. ``dead list`` reads
it by pointer (nothing changes); ``dead replay`` leases them in the group ``replay`` of
that queue, publishes each into the queue again, then acks it there, so a dead letter
is replayed once however often replay runs. The publish carries a nonce made from the
dead letter's name: a replay interrupted between its publish and its ack does not
publish twice when it runs again (within the server's nonce window, a day as shipped).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import threading

from zosciimq.cli import exit_codes
from zosciimq.cli.context import CliError, Context
from zosciimq.client import (
    BatchItem,
    DeadLetter,
    LeasedMessage,
    QueueNotFound,
    Worker,
    ZosciiClientError,
    dead_letter_queue,
    exponential_backoff,
    stop_on_signals,
)
from zosciimq.client.worker import Settled
from zosciimq.core.names import parse_name

DEAD_LETTER_EXIT = 65  # EX_DATAERR (sysexits.h): the input was bad, do not retry
REPLAY_GROUP = "replay"
REPLAY_LEASE = 300.0
REPLAY_BATCH = 1000  # the server's largest batch as shipped: one lease sees them all
MAX_RETRY_DELAY = 300.0


class CommandFailed(Exception):
    """The --exec command exited non-zero (not the dead-letter code): try again later."""


def work(ctx: Context) -> int:
    args, console = ctx.args, ctx.console
    runner = _Exec(ctx)
    with stop_on_signals(on_second=runner.abort) as stop:
        worker = Worker(
            ctx.client,
            args.queue,
            args.group,
            runner,
            count=args.count,
            concurrency=args.concurrency,
            lease=args.lease,
            wait=args.wait,
            consumer=args.consumer,
            backoff=exponential_backoff(args.retry_delay, MAX_RETRY_DELAY),
            max_deliveries=args.max_deliveries or None,
            max_messages=args.max_messages,
            stop_when_idle=args.until_empty,
            stop=stop,
            on_settled=runner.report,
        )
        stats = worker.run()
    if console.json:  # the last line, after one per message
        console.result(
            action="work",
            summary=True,
            queue=args.queue,
            group=args.group,
            acked=stats.acked,
            requeued=stats.requeued,
            dead_lettered=stats.dead_lettered,
            lost=stats.lost,
        )
    else:
        console.notice(
            f"{args.queue}/{args.group}: {stats.acked} acked, {stats.requeued} requeued, "
            f"{stats.dead_lettered} dead-lettered, {stats.lost} lost"
        )
    if runner.aborted:
        return exit_codes.INTERRUPTED
    if args.until_empty and not stats.handled:
        return exit_codes.NOTHING_NEW
    return exit_codes.OK


class _Exec:
    """The handler: run CMD with the message on stdin, in a process group of its own so
    a Ctrl-C at the terminal reaches only zoscii (which stops after it), not CMD."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.command: str = ctx.args.exec
        self.dead_code: int = ctx.args.dead_letter_exit
        self.aborted = False
        self._running: set[subprocess.Popen[bytes]] = set()
        self._codes: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, message: LeasedMessage) -> None:
        args = self.ctx.args
        env = {
            **self.ctx.env,
            "ZOSCII_QUEUE": message.queue,
            "ZOSCII_GROUP": message.group,
            "ZOSCII_NAME": message.name,
            "ZOSCII_RECEIPT": message.receipt,
            "ZOSCII_DELIVERIES": str(message.deliveries),
            "ZOSCII_SIZE": str(message.size),
            "ZOSCII_LEASE_SECONDS": f"{args.lease:g}",
        }
        if message.ttl is not None:
            env["ZOSCII_TTL"] = f"{message.ttl:g}"
        self.ctx.console.notice(f"{message.name} (delivery {message.deliveries})")
        self.ctx.console.flush()
        code = self._run(message, env)
        with self._lock:
            self._codes[message.receipt] = code
        if code == 0:
            return
        if code == self.dead_code:
            raise DeadLetter(f"--exec exited with {code}")
        raise CommandFailed(f"--exec exited with {code}")

    def _run(self, message: LeasedMessage, env: dict[str, str]) -> int:
        source = message.open()
        in_memory = source.getvalue() if isinstance(source, io.BytesIO) else None
        spooled = in_memory is None
        process = subprocess.Popen(
            self.command,
            shell=True,
            stdin=source if spooled else subprocess.PIPE,
            env=env,
            process_group=0,
        )
        with self._lock:
            self._running.add(process)
        try:
            process.communicate(in_memory)
            return process.returncode
        finally:
            with self._lock:
                self._running.discard(process)

    def abort(self) -> None:
        """A second Ctrl-C or SIGTERM: end the commands now (their messages are requeued)."""
        self.aborted = True
        with self._lock:
            running = list(self._running)
        for process in running:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def report(self, message: LeasedMessage, settled: Settled) -> None:
        console = self.ctx.console
        with self._lock:
            code = self._codes.pop(message.receipt, None)
        if console.json:
            console.result(
                action="work",
                queue=message.queue,
                group=message.group,
                name=message.name,
                size=message.size,
                deliveries=message.deliveries,
                exit_code=code,
                result=settled,
            )
        else:
            console.notice(f"{message.name}: {settled}")


# --- dead letters ------------------------------------------------------------------------
def dead_list(ctx: Context) -> int:
    args, console, client = ctx.args, ctx.console, ctx.client
    queue = _dead_queue(args.queue, args.group)
    found, pointer = 0, ""
    try:
        while batch := client.fetch_batch(queue, pointer, 100):
            for message in batch:
                with message:
                    if console.json:
                        console.result(
                            action="dead",
                            queue=args.queue,
                            group=args.group,
                            dead_letter_queue=queue,
                            name=message.name,
                            size=message.size,
                            reason=None,  # not kept with the message: see docs/cli.md
                        )
                    else:
                        console.line(f"{message.name}\t{message.size}")
                pointer = message.name
                found += 1
    except QueueNotFound:
        pass  # nothing was ever dead-lettered
    if not found:
        console.notice(f"no dead letters in {queue}")
        return exit_codes.NOTHING_NEW
    return exit_codes.OK


def dead_replay(ctx: Context) -> int:
    args, console, client = ctx.args, ctx.console, ctx.client
    queue = _dead_queue(args.queue, args.group)
    wanted = set(args.name or [])
    done: set[str] = set()
    seen: set[str] = set()
    while True:
        try:
            batch = client.lease(
                queue,
                REPLAY_GROUP,
                count=REPLAY_BATCH,
                lease=REPLAY_LEASE,
                consumer="zoscii-replay",
            )
        except QueueNotFound:
            batch = []
        fresh = [m for m in batch if m.name not in seen]
        seen.update(m.name for m in batch)
        take = [m for m in batch if not wanted or m.name in wanted]
        skip = [m for m in batch if m not in take]
        try:
            if take:
                _replay(ctx, queue, take)
                done.update(m.name for m in take)
        except BaseException:
            try:  # all back now rather than after the lease (a rerun is safe)
                client.requeue_many(queue, REPLAY_GROUP, batch)
            except ZosciiClientError:
                pass
            raise
        else:
            if skip:  # not asked for: straight back (see docs/cli.md on --name)
                client.requeue_many(queue, REPLAY_GROUP, skip)
        finally:
            for message in batch:
                message.close()
        if not fresh or len(batch) < REPLAY_BATCH or (wanted and wanted <= done):
            break
    missing = sorted(wanted - done)
    for name in missing:
        console.warn(f"{name}: not a dead letter waiting in {queue}")
    if missing:
        return exit_codes.NOT_FOUND
    if not done:
        console.notice(f"no dead letters to replay in {queue}")
        return exit_codes.NOTHING_NEW
    return exit_codes.OK


def _replay(ctx: Context, dead_queue: str, messages: list[LeasedMessage]) -> None:
    """Publish into the queue (all or nothing), then ack in the replay group."""
    args, console, client = ctx.args, ctx.console, ctx.client
    published = client.publish_many(
        args.queue,
        [
            BatchItem(
                m.data, nonce=f"replay-{m.name.removesuffix('.bin')}", retention_days=_days(m)
            )
            for m in messages
        ],
    )
    client.ack_many(dead_queue, REPLAY_GROUP, messages)
    for message, result in zip(messages, published, strict=True):
        if console.json:
            console.result(
                action="replay",
                queue=args.queue,
                group=args.group,
                dead_letter=message.name,
                name=result.name,
                duplicate=result.duplicate,
            )
        else:
            console.line(f"{message.name}\t{result.name or '-'}")
            if result.duplicate:
                console.notice(f"{message.name}: had been replayed already")


def _days(message: LeasedMessage) -> int:
    """The dead letter keeps the original's retention (RRRR of its name): so does the replay."""
    return parse_name(message.name).retention_days


def _dead_queue(queue: str, group: str) -> str:
    try:
        return dead_letter_queue(queue, group)
    except ValueError as exc:
        raise CliError(str(exc), exit_codes.INVALID, "invalid") from None
