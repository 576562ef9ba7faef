"""publish, fetch, store, retrieve: one message in or out."""

from __future__ import annotations

from pathlib import Path

from zosciimq.cli import exit_codes
from zosciimq.cli.batch_publish import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, publish_batch
from zosciimq.cli.console import b64
from zosciimq.cli.context import CliError, Context
from zosciimq.cli.inputs import open_message
from zosciimq.cli.sinks import stdout_sink
from zosciimq.client import DownloadResult


def publish(ctx: Context) -> int:
    args = ctx.args
    _check_batch_options(ctx)
    if args.batch is not None:
        return publish_batch(ctx)
    with open_message(ctx, f"publish {args.queue}") as (source, size):
        published = ctx.client.publish(
            args.queue, source, retention_days=args.retention, nonce=args.nonce
        )
    if ctx.console.json:
        ctx.console.result(
            action="publish",
            queue=args.queue,
            size=size,
            nonce=published.nonce,
            message=published.message,
        )
    else:
        ctx.console.notice(f"{args.queue}: {size} bytes, {published.message}")
    return exit_codes.OK


def _check_batch_options(ctx: Context) -> None:
    args = ctx.args
    if args.batch is None:
        given = [
            option
            for option, value in (
                ("--lines", args.lines),
                ("-z/--null", args.null),
                ("--batch-size", args.batch_size),
                ("--batch-bytes", args.batch_bytes),
            )
            if value not in (None, False)
        ]
        if given:
            raise CliError(f"{', '.join(given)}: only with --batch", exit_codes.USAGE)
        return
    if args.message is not None or args.file is not None:
        raise CliError(
            "with --batch the messages are the FILEs after it: no MESSAGE or --file",
            exit_codes.USAGE,
        )
    if args.lines and args.null:
        raise CliError("--lines or -z/--null, not both", exit_codes.USAGE)
    if args.batch_size is None:
        args.batch_size = DEFAULT_BATCH_SIZE
    if args.batch_bytes is None:
        args.batch_bytes = DEFAULT_BATCH_BYTES


def store(ctx: Context) -> int:
    args = ctx.args
    with open_message(ctx, "store") as (source, size):
        published = ctx.client.store(
            source, retention_days=args.retention, nonce=args.nonce, unidentified=args.unidentified
        )
    if ctx.console.json:
        ctx.console.result(
            action="store",
            name=published.name,
            size=size,
            nonce=published.nonce,
            message=published.message,
        )
    elif published.name is not None:
        ctx.console.line(published.name)
    else:  # the nonce was used before: stored then, nothing to name now
        ctx.console.notice(published.message)
    return exit_codes.OK


def fetch(ctx: Context) -> int:
    args, client, console = ctx.args, ctx.client, ctx.console
    if args.output not in (None, "-"):
        _check_output(args.output)
        bar = ctx.progress(f"fetch {args.queue}")
        try:
            result = client.download(
                args.queue, args.output, after=args.after, on_progress=bar.update
            )
        finally:
            bar.close()
        if result is None:
            return _nothing_new(ctx)
        _report_download(ctx, "fetch", result, queue=args.queue)
        return exit_codes.OK
    if console.json:
        message = client.fetch(args.queue, args.after)
        if message is None:
            return _nothing_new(ctx)
        console.result(
            action="fetch",
            queue=args.queue,
            name=message.name,
            size=len(message.data),
            data_base64=b64(message.data),
        )
        return exit_codes.OK
    bar = ctx.progress(f"fetch {args.queue}")
    try:
        received = client.fetch_into(args.queue, args.after, stdout_sink(ctx, bar.update))
    finally:
        console.flush()
        bar.close()
    return exit_codes.OK if received is not None else _nothing_new(ctx)


def retrieve(ctx: Context) -> int:
    args, client, console = ctx.args, ctx.client, ctx.console
    if args.output not in (None, "-"):
        _check_output(args.output)
        bar = ctx.progress("retrieve")
        try:
            result = client.download_stored(args.name, args.output, on_progress=bar.update)
        finally:
            bar.close()
        _report_download(ctx, "retrieve", result)
        return exit_codes.OK
    if console.json:
        message = client.retrieve(args.name)
        console.result(
            action="retrieve",
            name=message.name,
            size=len(message.data),
            data_base64=b64(message.data),
        )
        return exit_codes.OK
    bar = ctx.progress("retrieve")
    try:
        client.retrieve_into(args.name, stdout_sink(ctx, bar.update))
    finally:
        console.flush()
        bar.close()
    return exit_codes.OK


def _check_output(path: str) -> None:
    if Path(path).is_dir():
        raise CliError(f"-o {path} is a directory: give a file path", exit_codes.USAGE)


def _report_download(
    ctx: Context, action: str, result: DownloadResult, queue: str | None = None
) -> None:
    if ctx.console.json:
        extra = {"queue": queue} if queue is not None else {}
        ctx.console.result(
            action=action,
            **extra,
            name=result.name,
            size=result.size,
            path=str(result.path),
            resumed_from=result.resumed_from,
        )
        return
    ctx.console.notice(result.name)
    if result.resumed_from:
        ctx.console.notice(f"resumed at byte {result.resumed_from} of {result.size}")


def _nothing_new(ctx: Context) -> int:
    queue = ctx.args.queue
    if ctx.console.json:
        ctx.console.result(action="fetch", queue=queue, name=None)
    else:
        after = f" after {ctx.args.after}" if ctx.args.after else ""
        ctx.console.notice(f"no message in {queue}{after}")
    return exit_codes.NOTHING_NEW
