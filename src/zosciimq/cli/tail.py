"""tail: read a queue message by message from a pointer, and with -f keep polling.

Each message is handled (written to stdout, saved into --out-dir, or handed to
--exec on stdin) before the pointer moves past it, and the pointer is saved after
every message when --pointer-file is given: a tail that is killed and started again
goes on with the first message it had not finished (at least once, in name order).
Messages are streamed, never held in memory whole (except as base64 with --json).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
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
    TransportError,
    TruncatedReply,
    TryAgain,
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
        delivered, failures, waiting = 0, 0, False
        with _stop_on_signals(args.follow) as stop:
            while not stop.is_set() and (
                args.max_messages is None or delivered < args.max_messages
            ):
                try:
                    name = self.deliver_next(pointer)
                except QueueNotFound:
                    if not args.follow:
                        raise
                    if not waiting:
                        console.warn(f"queue {self.queue} does not exist (yet); waiting for it")
                        waiting = True
                    stop.wait(args.interval)
                    continue
                except (TransportError, TruncatedReply, TryAgain) as exc:
                    if not args.follow:
                        raise
                    failures += 1
                    delay = min(args.interval * 2**failures, MAX_BACKOFF)
                    console.warn(f"{exc} (trying again in {delay:g} s)")
                    stop.wait(delay)
                    continue
                failures, waiting = 0, False
                if name is None:
                    if not args.follow:
                        break
                    stop.wait(args.interval)
                    continue
                pointers.save(name)
                pointer = name
                delivered += 1
        if delivered == 0 and not args.follow:
            console.notice(f"no new message in {self.queue}")
            return exit_codes.NOTHING_NEW
        return exit_codes.OK

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


def _stop_on_signals(enabled: bool) -> AbstractContextManager[threading.Event]:
    """With -f, Ctrl-C or SIGTERM stop after the message in hand (a second Ctrl-C: now)."""
    return stop_on_signals() if enabled else nullcontext(threading.Event())
