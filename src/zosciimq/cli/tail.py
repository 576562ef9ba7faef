"""tail: read a queue message by message from a pointer, and with -f follow it live.

Each message is handled (written to stdout, saved into --out-dir, or handed to
--exec on stdin) before the pointer moves past it, and the pointer is saved after
every message when --pointer-file is given: a tail that is killed and started again
goes on with the first message it had not finished (at least once, in name order).

Without -f, messages are fetched one by one and streamed, never held in memory whole
(except as base64 with --json). With -f the queue is followed over the server's stream
(``client.stream_events``: Server-Sent Events of the live service, or long-poll where
there is none): a message comes in the event (up to the server's inline limit, 1 MiB by
default), a larger one is fetched and streamed as without -f. The stream is read by a
thread of its own, one message ahead at most, so a signal stops the tail at once, after
the message in hand.
"""

from __future__ import annotations

import os
import queue as queue_module
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import BinaryIO

from zosciimq.cli import exit_codes
from zosciimq.cli.console import b64
from zosciimq.cli.context import CliError, Context
from zosciimq.cli.sinks import ProgressSink, stdout_sink
from zosciimq.client import (
    FilePointerStore,
    MemoryPointerStore,
    PointerStore,
    QueueNotFound,
    Streamed,
    TransportError,
    TruncatedReply,
    TryAgain,
    ZosciiClient,
    stop_on_signals,
)
from zosciimq.core.durable import fsync_dir

MAX_BACKOFF = 30.0


def tail(ctx: Context) -> int:
    return Tail(ctx).run()


class Tail:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.args = ctx.args
        self.queue: str = ctx.args.queue
        self.out_dir = Path(ctx.args.out_dir) if ctx.args.out_dir else None

    def run(self) -> int:
        args, console = self.args, self.ctx.console
        pointers: PointerStore = (
            FilePointerStore(args.pointer_file)
            if args.pointer_file
            else MemoryPointerStore(args.after or "")
        )
        pointer = pointers.load()
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        if args.follow:
            return self.follow(pointers, pointer)
        delivered = 0
        while args.max_messages is None or delivered < args.max_messages:
            name = self.deliver_next(pointer)
            if name is None:
                break
            pointers.save(name)
            pointer = name
            delivered += 1
        if delivered == 0:
            console.notice(f"no new message in {self.queue}")
            return exit_codes.NOTHING_NEW
        return exit_codes.OK

    def follow(self, pointers: PointerStore, pointer: str) -> int:
        """-f: every message from the stream, each saved as the pointer once handled."""
        args, console = self.args, self.ctx.console
        delivered, failures, waiting = 0, 0, False
        with _stop_on_signals(True) as stop:
            while not stop.is_set():
                feed = _Feed(self.ctx.client, self.queue, pointer, stop)
                try:
                    for event in feed:
                        if event.name <= pointer:  # a large one's fetch went past it
                            continue
                        name = self.deliver_streamed(event)
                        if name is None:
                            continue  # deleted before it could be read
                        pointers.save(name)
                        pointer = name
                        delivered += 1
                        failures, waiting = 0, False
                        if args.max_messages is not None and delivered >= args.max_messages:
                            return exit_codes.OK
                except QueueNotFound:
                    if not waiting:
                        console.warn(f"queue {self.queue} does not exist (yet); waiting for it")
                        waiting = True
                    stop.wait(args.interval)
                except (TransportError, TruncatedReply, TryAgain) as exc:  # a large one's fetch
                    failures += 1
                    delay = min(args.interval * 2**failures, MAX_BACKOFF)
                    console.warn(f"{exc} (trying again in {delay:g} s)")
                    stop.wait(delay)
                finally:
                    feed.close()
        return exit_codes.OK

    def deliver_streamed(self, event: Streamed) -> str | None:
        """A message of the stream: from its bytes, or fetched when it came by name only."""
        if event.data is None:
            name = self.deliver_next(event.previous)
            if name is not None and name != event.name:
                self.ctx.console.notice(f"{event.name} was deleted before it was read")
            return name
        console, data, name = self.ctx.console, event.data, event.name
        if console.json and not self.args.exec and self.out_dir is None:
            console.result(
                action="tail", queue=self.queue, name=name, size=len(data), data_base64=b64(data)
            )
            return name
        if self.out_dir is not None:
            path = self.out_dir / name
            incoming = (
                self.out_dir / f".zoscii-incoming-{re.sub(r'[^A-Za-z0-9_-]', '_', self.queue)}"
            )
            with open(incoming, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(incoming, path)
            fsync_dir(self.out_dir)
            if self.args.exec:
                console.notice(name)
                with open(path, "rb") as stdin:
                    self._run_command(name, len(data), stdin, path)
            if console.json:
                console.result(
                    action="tail", queue=self.queue, name=name, size=len(data), path=str(path)
                )
            elif not self.args.exec:
                console.line(str(path))
            return name
        if self.args.exec:
            with tempfile.TemporaryFile(prefix="zoscii-tail-") as spool:
                spool.write(data)
                spool.seek(0)
                console.notice(name)
                self._run_command(name, len(data), spool, None)
            if console.json:
                console.result(action="tail", queue=self.queue, name=name, size=len(data))
            return name
        console.data(data)
        if not self.args.raw:
            console.data(b"\n")
        console.flush()
        return name

    def deliver_next(self, pointer: str) -> str | None:
        """Handle the message after ``pointer``; its name, or None when there is none."""
        if self.out_dir is not None:
            return self._to_directory(pointer, self.out_dir)
        if self.args.exec:
            return self._to_command(pointer)
        return self._to_stdout(pointer)

    def _to_directory(self, pointer: str, out_dir: Path) -> str | None:
        """Download (resumable) under a fixed name, then rename to the message name."""
        incoming = out_dir / f".zoscii-incoming-{re.sub(r'[^A-Za-z0-9_-]', '_', self.queue)}"
        bar = self.ctx.progress(f"tail {self.queue}")
        try:
            result = self.ctx.client.download(
                self.queue, incoming, after=pointer, on_progress=bar.update
            )
        finally:
            bar.close()
        if result is None:
            return None
        path = out_dir / result.name
        os.replace(incoming, path)
        fsync_dir(out_dir)
        console = self.ctx.console
        if self.args.exec:
            console.notice(result.name)
            with open(path, "rb") as stdin:
                self._run_command(result.name, result.size, stdin, path)
        if console.json:
            console.result(
                action="tail", queue=self.queue, name=result.name, size=result.size, path=str(path)
            )
        elif not self.args.exec:
            console.line(str(path))
        return result.name

    def _to_command(self, pointer: str) -> str | None:
        bar = self.ctx.progress(f"tail {self.queue}")
        with tempfile.TemporaryFile(prefix="zoscii-tail-") as spool:
            try:
                received = self.ctx.client.fetch_into(
                    self.queue, pointer, lambda info: ProgressSink(spool, bar.update, info)
                )
            finally:
                bar.close()
            if received is None:
                return None
            spool.seek(0)
            self.ctx.console.notice(received.name)
            self._run_command(received.name, received.size, spool, None)
        if self.ctx.console.json:
            self.ctx.console.result(
                action="tail", queue=self.queue, name=received.name, size=received.size
            )
        return received.name

    def _to_stdout(self, pointer: str) -> str | None:
        console, client = self.ctx.console, self.ctx.client
        if console.json:
            message = client.fetch(self.queue, pointer)
            if message is None:
                return None
            console.result(
                action="tail",
                queue=self.queue,
                name=message.name,
                size=len(message.data),
                data_base64=b64(message.data),
            )
            return message.name
        bar = self.ctx.progress(f"tail {self.queue}")
        try:
            received = client.fetch_into(self.queue, pointer, stdout_sink(self.ctx, bar.update))
            if received is not None and not self.args.raw:
                console.data(b"\n")
        finally:
            console.flush()
            bar.close()
        return received.name if received is not None else None

    def _run_command(self, name: str, size: int, stdin: BinaryIO, path: Path | None) -> None:
        """The shell command gets the message on stdin and its name in the environment."""
        env = {
            **self.ctx.env,
            "ZOSCII_QUEUE": self.queue,
            "ZOSCII_NAME": name,
            "ZOSCII_SIZE": str(size),
        }
        if path is not None:
            env["ZOSCII_PATH"] = str(path)
        self.ctx.console.flush()
        code = subprocess.run(self.args.exec, shell=True, stdin=stdin, env=env).returncode
        if code != 0:
            raise CliError(
                f"--exec command exited with {code} on {name}; the pointer stays before it",
                exit_codes.ERROR,
                "exec_failed",
            )


class _Feed:
    """The stream, read by a thread of its own one message ahead: the main thread waits
    for the next one or for a signal, whichever comes first."""

    def __init__(self, client: ZosciiClient, queue: str, after: str, stop: threading.Event) -> None:
        self.stop = stop
        self.halt = threading.Event()  # this feed's end: a signal, or the caller's close
        self.items: queue_module.Queue[Streamed | BaseException | None] = queue_module.Queue(1)
        self.events = client.stream_events(queue, after, stop=self.halt)
        self.thread = threading.Thread(target=self._read, name="tail-stream", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.events:
                while not self._put(event):
                    if self.halt.is_set():
                        return
            self._put(None)
        except BaseException as exc:  # handed to the main thread
            self._put(exc)

    def _put(self, item: Streamed | BaseException | None) -> bool:
        try:
            self.items.put(item, timeout=0.2)
        except queue_module.Full:
            return False
        return True

    def __iter__(self) -> Iterator[Streamed]:
        while not self.stop.is_set():
            try:
                item = self.items.get(timeout=0.2)
            except queue_module.Empty:
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Ends the thread at its next event or heartbeat (a daemon: a read it is blocked
        in does not keep the process)."""
        self.halt.set()


def _stop_on_signals(enabled: bool) -> AbstractContextManager[threading.Event]:
    """With -f, Ctrl-C or SIGTERM stop after the message in hand (a second Ctrl-C: now)."""
    return stop_on_signals() if enabled else nullcontext(threading.Event())
