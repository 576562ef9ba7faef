"""queues, purge, delete, replay: operators' commands on whole queues.

They need the server's ``admin`` right: the operator's token (``make up`` prints it;
``--token`` or ``$ZOSCII_TOKEN``) or a client's token with that right. purge and delete
cannot be undone, so on a terminal they ask first; a script must say ``--yes``, and
without either they refuse (exit 2) rather than guess.
"""

from __future__ import annotations

from typing import Any

from zosciimq.cli import exit_codes
from zosciimq.cli.console import is_terminal
from zosciimq.cli.context import CliError, Context
from zosciimq.client.pointers import FilePointerStore


def queues(ctx: Context) -> int:
    found = ctx.client.queues(ctx.args.queue)
    if ctx.console.json:
        ctx.console.result(action="queues", queues=found)
        return exit_codes.OK
    ctx.console.line(f"{'QUEUE':<32} {'MESSAGES':>9} {'BYTES':>12}  {'OLDEST':<20}  NEWEST")
    for queue in found:
        ctx.console.line(
            f"{queue['queue']:<32} {queue['messages']:>9} {queue['bytes']:>12}  "
            f"{queue['oldest_at'] or '-':<20}  {queue['newest_at'] or '-'}"
        )
        for group in queue["groups"]:
            ctx.console.line(
                f"  group {group['group']}: lag {group['lag']} "
                f"(waiting {group['waiting']}, leased {group['leased']}, "
                f"dead-lettered {group['dead_lettered']})"
            )
    if not found:
        ctx.console.notice("no queues")
    return exit_codes.OK


def purge(ctx: Context) -> int:
    queue, before = ctx.args.queue, ctx.args.before
    what = (
        f"the messages of {queue} published before {before}"
        if before
        else (f"every message of {queue}")
    )
    _confirm(ctx, f"Delete {what}?")
    result = ctx.client.purge(queue, before)
    _report(ctx, "purge", result, f"{result['purged']} message(s) purged from {queue}")
    return exit_codes.OK


def delete(ctx: Context) -> int:
    queue = ctx.args.queue
    _confirm(ctx, f"Delete queue {queue} with all its messages and consumer groups?")
    result = ctx.client.delete_queue(queue)
    text = f"queue {queue} deleted ({result['messages']} message(s))"
    _report(ctx, "delete", result, text)
    return exit_codes.OK


def replay(ctx: Context) -> int:
    """Prints the pointer (an empty line: from the start); --pointer-file saves it."""
    result = ctx.client.replay(ctx.args.queue, ctx.args.since)
    pointer = str(result["pointer"])
    if ctx.args.pointer_file:
        FilePointerStore(ctx.args.pointer_file).save(pointer)
    if ctx.console.json:
        ctx.console.result(action="replay", **result)
    else:
        ctx.console.line(pointer)
        first = result["first"] or "none yet"
        ctx.console.notice(f"next message: {first} ({result['waiting']} waiting)")
    return exit_codes.OK


def _report(ctx: Context, action: str, result: dict[str, Any], text: str) -> None:
    if ctx.console.json:
        ctx.console.result(action=action, **result)
    else:
        ctx.console.notice(text)


def _confirm(ctx: Context, question: str) -> None:
    if ctx.args.yes:
        return
    if not is_terminal(ctx.stdin):
        raise CliError(
            "refusing to delete without confirmation: not a terminal; add --yes",
            exit_codes.USAGE,
            "unconfirmed",
        )
    ctx.console.stderr.write(f"{question} [y/N] ")
    ctx.console.stderr.flush()
    answer = ctx.stdin.readline().decode("utf-8", "replace").strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("not confirmed: nothing deleted", exit_codes.ERROR, "unconfirmed")
