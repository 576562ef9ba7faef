"""The ``zoscii`` command line: commands, options and the help that explains them."""

from __future__ import annotations

import argparse
import copy
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from zosciimq import __version__
from zosciimq.cli import exit_codes, messages, queue_admin, services, store_admin, tail, work
from zosciimq.cli.context import DEFAULT_URL

DESCRIPTION = """\
Talk to a ZOSCII MQ server: publish to and read from queues, put messages into the
data store and get them back, and run the services' one-shot jobs.

Results go to stdout (the message itself, a stored name, a list of names); which
message it was, notices and progress bars go to stderr. With --json, stdout carries
one JSON object per result instead (message bytes as base64), errors included.
Global options can come before or after the command."""

EXAMPLES = """\
examples:
  zoscii publish orders 'hello' -r 7         publish a text, kept 7 days
  zoscii publish orders --file order.pdf     publish a file (streamed from disk)
  zoscii publish orders --batch *.json       one message per file, 100 per request
  tar c dir | zoscii publish backups -       publish stdin
  zoscii fetch orders                        the first message, to stdout
  zoscii fetch orders --after NAME -o m.bin  the next message after NAME, to a file
  zoscii tail orders -f --pointer-file orders.ptr --exec './handle.sh'
  zoscii work orders --group shipping --exec './ship.sh'   competing workers
  zoscii dead replay orders --group shipping               retry the dead letters
  zoscii store --file report.csv -r 30       prints the stored name
  zoscii retrieve NAME -o report.csv         resumes an interrupted download
  zoscii scan | zoscii identify -            mark every unidentified message
  zoscii run claireup --dry-run              what the retention cleaner would delete

environment:
  ZOSCII_URL     server URL (default {url})
  ZOSCII_TOKEN   bearer token, when the server has access control

{codes}"""


class CommandParser(argparse.ArgumentParser):
    """A command's parser: options and arguments in any order (``publish q -r 7 text``).

    Plain argparse fills an optional MESSAGE before it sees ``-r 7`` and then has no
    place for ``text``; intermixed parsing does not have that problem. ``run`` keeps
    plain parsing: everything after the service name belongs to the service.
    """

    def __init__(self, *args: Any, intermixed: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intermixed = intermixed
        self._inside = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if not self.intermixed or self._inside:
            return super().parse_known_args(args, namespace)
        args = list(sys.argv[1:] if args is None else args)
        self._inside = True
        try:
            parsed, extras = self.parse_known_intermixed_args(args, copy.copy(namespace))
        finally:
            self._inside = False
        if extras and "--" in args:  # intermixed parsing loses a "--" right after options
            plain = super().parse_known_args(args, namespace)
            if not plain[1]:
                return plain
        return parsed, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zoscii",
        description=DESCRIPTION,
        epilog=EXAMPLES.format(url=DEFAULT_URL, codes=exit_codes.epilog()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"zoscii {__version__}")
    _global_options(parser, suppress=False)
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=CommandParser
    )
    add = _command_adder(commands)
    _publish(add)
    _fetch(add)
    _tail(add)
    _work(add)
    _dead(add)
    _store(add)
    _retrieve(add)
    _scan(add)
    _identify(add)
    _queues(add)
    _purge(add)
    _delete(add)
    _replay(add)
    _run(add)
    return parser


def _global_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Declared on the top parser with defaults, and on each command with none, so an
    option given after the command overrides and one not given there keeps the default."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--url",
        default=default(None),
        help=f"server URL, / or /index.php (default: $ZOSCII_URL or {DEFAULT_URL})",
    )
    group.add_argument(
        "--token",
        default=default(None),
        help="bearer token (default: $ZOSCII_TOKEN; prefer the variable, argv is visible in ps)",
    )
    group.add_argument(
        "--original",
        action="store_true",
        default=default(False),
        help="speak only what the original PHP server understands (urlencoded POST forms)",
    )
    group.add_argument(
        "--timeout",
        type=_positive_float,
        default=default(60.0),
        metavar="SECONDS",
        help="longest wait for the server on connect and on each read (default 60)",
    )
    group.add_argument(
        "--retries",
        type=_count,
        default=default(3),
        metavar="N",
        help="retries of a request that got no reply (default 3; publish/store are "
        "retried with the same nonce, so never duplicated)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print one JSON object per result on stdout, errors included",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="no notices or progress bars on stderr (errors still)",
    )


Adder = Callable[..., argparse.ArgumentParser]


def _command_adder(commands: Any) -> Adder:
    def add(
        name: str,
        handler: Callable[..., int],
        summary: str,
        description: str,
        examples: str,
        *,
        intermixed: bool = True,
    ) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(
            name,
            intermixed=intermixed,
            help=summary,
            description=f"{summary}.\n\n{textwrap.fill(description, 80)}",
            epilog=f"examples:\n{examples}\n\n{exit_codes.epilog()}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _global_options(sub, suppress=True)
        sub.set_defaults(handler=handler)
        return sub

    return add


def _message_options(sub: argparse.ArgumentParser, *, batch: bool = False) -> None:
    sub.add_argument(
        "message",
        nargs="?",
        metavar="MESSAGE",
        help="the message text, or - to read it from stdin (byte-exact)",
    )
    sub.add_argument("--file", metavar="PATH", help="send this file (streamed, any size)")
    sub.add_argument(
        "-r",
        "--retention",
        type=_days,
        metavar="DAYS",
        help="days to keep it, 0-9999 (default: the server's, or its queue policy's; 30 as "
        "shipped. 0 means deleted at the next cleanup run)",
    )
    sub.add_argument(
        "-n",
        "--nonce",
        metavar="NONCE",
        help="idempotency key [A-Za-z0-9_-]: a repeat with the same nonce does nothing "
        "(default: a fresh random one)"
        + ("; with --batch a prefix: message i (from 1) gets NONCE-i" if batch else ""),
    )


def _publish(add: Adder) -> None:
    sub = add(
        "publish",
        messages.publish,
        "Publish a message to a queue, or many with --batch",
        "The queue is created by its first message. Files and stdin are streamed, so "
        "messages of any size go through; over 4 MB a progress bar shows on a terminal. "
        "With --batch, every FILE is one message (with --lines or -z, every line or "
        "NUL-terminated record of it; - is stdin, one message per line unless -z), sent "
        "--batch-size at a time in few requests, each request all or nothing; one name "
        "per message is printed in order as soon as its request is acknowledged (- when "
        "the server gives none: a nonce used before, or a server without batches, the "
        "original, to which every message goes alone).",
        "  zoscii publish orders 'order 42' -r 7\n"
        "  zoscii publish images --file cat.jpg\n"
        "  printf '\\x00\\xff' | zoscii publish raw -\n"
        "  zoscii --json publish orders 'x' -n order-42   # retry-safe with the same nonce\n"
        "  zoscii publish invoices --batch inbox/*.pdf -r 30 > names.txt\n"
        "  zoscii publish invoices --batch inbox/*.pdf -n inbox-0107   # safe to run again\n"
        "  zoscii publish events --batch - < events.jsonl   # one message per line\n"
        "  printf 'a\\0b\\0' | zoscii --json publish q --batch - -z --batch-size 500",
    )
    sub.add_argument("queue", metavar="QUEUE", help="queue name: [a-z0-9_-]")
    _message_options(sub, batch=True)
    group = sub.add_argument_group("batch publish (many messages, few requests)")
    group.add_argument(
        "--batch",
        nargs="+",
        metavar="FILE",
        help="publish every FILE as one message, in order; - reads stdin, one message "
        "per line (see --lines, -z). Prints one name per message",
    )
    group.add_argument(
        "--lines",
        action="store_true",
        help="every line of each FILE is a message, without its newline (a \\r stays); "
        "the default for -",
    )
    group.add_argument(
        "-z",
        "--null",
        action="store_true",
        help="every NUL-terminated record of each FILE (and of -) is a message",
    )
    group.add_argument(
        "--batch-size",
        type=_positive_int,
        metavar="N",
        help="messages per request (default 100; the server takes up to its "
        "ZOSCII_MAX_BATCH_COUNT, 1000 as shipped)",
    )
    group.add_argument(
        "--batch-bytes",
        type=_byte_size,
        metavar="BYTES",
        help="message bytes per request, e.g. 16M (default 64M, the server's "
        "ZOSCII_MAX_BATCH_BYTES as shipped); a larger message goes alone",
    )


def _fetch(add: Adder) -> None:
    sub = add(
        "fetch",
        messages.fetch,
        "Fetch one message from a queue",
        "The first message whose name sorts after --after (or the first one). The bytes "
        "go to stdout (or -o PATH), the message name to stderr; with --json both go to "
        "stdout as one object. Exit 4 when there is no such message, so a script can "
        "loop. A download to a file that is interrupted resumes when run again.",
        "  zoscii fetch orders > first.bin\n"
        "  zoscii fetch orders --after 20250101120000000000-0007-...bin -o next.bin\n"
        "  zoscii --json fetch orders | jq -r .name",
    )
    sub.add_argument("queue", metavar="QUEUE")
    sub.add_argument("--after", default="", metavar="NAME", help="the last name already read")
    sub.add_argument(
        "-o", "--output", metavar="PATH", help="write to PATH (resumable) instead of stdout (-)"
    )


def _tail(add: Adder) -> None:
    sub = add(
        "tail",
        tail.tail,
        "Read a queue message by message, and with -f wait for new ones",
        "Starts after --after or the name in --pointer-file (or at the first message) "
        "and goes through every message in order. The pointer file is updated after "
        "each message is handled, so a restarted tail carries on where it stopped. Each "
        "message goes to stdout followed by a newline (--raw: nothing in between), or "
        "with --out-dir into DIR/<name> (the path printed), or with --exec on the "
        "command's stdin, with $ZOSCII_NAME, $ZOSCII_QUEUE, $ZOSCII_SIZE (and "
        "$ZOSCII_PATH with --out-dir) set; a command that fails stops the tail before "
        "that message (exit 1). With -f, network errors and a queue that does not exist "
        "yet are waited out; Ctrl-C stops after the message in hand. Without -f, exit "
        "4 when there was nothing to read.",
        "  zoscii tail logs -f\n"
        "  zoscii tail orders -f --pointer-file orders.ptr --out-dir inbox/\n"
        "  zoscii tail orders -f --pointer-file orders.ptr --exec 'handle-order \"$ZOSCII_NAME\"'\n"
        "  zoscii --json tail orders --max-messages 10",
    )
    sub.add_argument("queue", metavar="QUEUE")
    start = sub.add_mutually_exclusive_group()
    start.add_argument("--after", default="", metavar="NAME", help="start after this name")
    start.add_argument(
        "--pointer-file", metavar="PATH", help="read the start from, and save progress to, PATH"
    )
    sub.add_argument("-f", "--follow", action="store_true", help="keep polling for new messages")
    sub.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="seconds between polls with -f (default 1)",
    )
    sub.add_argument(
        "--max-messages", type=_positive_int, metavar="N", help="stop after N messages"
    )
    sub.add_argument("--out-dir", metavar="DIR", help="save each message as DIR/<name>")
    sub.add_argument(
        "--exec", metavar="CMD", help="run the shell command CMD for each message (on stdin)"
    )
    sub.add_argument("--raw", action="store_true", help="no newline after each message")


def _work(add: Adder) -> None:
    sub = add(
        "work",
        work.work,
        "Work through a queue as one of a consumer group's workers",
        "Leases messages of QUEUE for the consumer group --group (each message goes to "
        "one worker of the group at a time; groups are independent of each other and "
        "of fetch and tail) and runs the shell command CMD for each: the message on its "
        "stdin, and $ZOSCII_QUEUE, $ZOSCII_GROUP, $ZOSCII_NAME, $ZOSCII_RECEIPT, "
        "$ZOSCII_DELIVERIES (1 the first time), $ZOSCII_SIZE, $ZOSCII_LEASE_SECONDS and, "
        "for a message with a TTL, $ZOSCII_TTL in its environment. Exit 0 acks the "
        f"message; exit {work.DEAD_LETTER_EXIT} (--dead-letter-exit) sends it to the "
        "group's dead letters (see zoscii dead); any other exit requeues it, tried again "
        "after --retry-delay seconds, doubling each time, and dead-lettered when it "
        "fails on its --max-deliveries-th delivery. The lease is extended while CMD "
        "runs, so CMD may take longer than --lease. Runs until stopped: Ctrl-C or "
        "SIGTERM lets the commands running finish and settles their messages, then "
        "exits 0 (a second Ctrl-C ends the commands: their messages are requeued, exit "
        "130); or after --max-messages messages, or with --until-empty once nothing is "
        "left (exit 4 when there was nothing at all). Start as many as you like, on as "
        "many machines: they share the work.",
        "  zoscii work orders --group shipping --exec './ship.sh'\n"
        "  zoscii work orders --group shipping --exec 'cat >> orders.log' --until-empty\n"
        "  zoscii work images --group thumbs --concurrency 4 --lease 60 \\\n"
        "      --exec 'convert - -resize 200 \"thumbs/$ZOSCII_NAME.png\"'\n"
        "  zoscii --json work orders --group audit --exec ./check.sh --max-messages 100",
    )
    sub.add_argument("queue", metavar="QUEUE")
    sub.add_argument("--group", "-g", required=True, metavar="GROUP", help="consumer group name")
    sub.add_argument(
        "--exec", required=True, metavar="CMD", help="shell command run for each message"
    )
    sub.add_argument(
        "--lease",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="seconds a message stays with this worker unless extended (default 30; "
        "extended every third of it while CMD runs)",
    )
    sub.add_argument(
        "--count",
        type=_positive_int,
        default=1,
        metavar="N",
        help="messages leased per request, run one after the other (default 1)",
    )
    sub.add_argument(
        "--concurrency",
        "-c",
        type=_positive_int,
        default=1,
        metavar="N",
        help="commands run at the same time (default 1)",
    )
    sub.add_argument(
        "--wait",
        type=_seconds,
        default=20.0,
        metavar="SECONDS",
        help="seconds the server may hold a request until a message comes (long-poll, "
        "default 20; a stop while waiting takes effect when it returns)",
    )
    sub.add_argument(
        "--max-messages", type=_positive_int, metavar="N", help="stop after N messages"
    )
    sub.add_argument(
        "--until-empty", action="store_true", help="stop once there is nothing to lease"
    )
    sub.add_argument(
        "--retry-delay",
        type=_seconds,
        default=1.0,
        metavar="SECONDS",
        help="delay before a failed message is tried again, doubled on each failure up "
        f"to {work.MAX_RETRY_DELAY:g} (default 1; 0: at once)",
    )
    sub.add_argument(
        "--max-deliveries",
        type=_count,
        default=5,
        metavar="N",
        help="dead-letter a message that fails on its Nth delivery (default 5, the "
        "server's ZOSCII_MAX_DELIVERIES as shipped; 0: leave it to the server)",
    )
    sub.add_argument(
        "--dead-letter-exit",
        type=_count,
        default=work.DEAD_LETTER_EXIT,
        metavar="CODE",
        help=f"the exit code of CMD that dead-letters a message (default "
        f"{work.DEAD_LETTER_EXIT}, EX_DATAERR)",
    )
    sub.add_argument(
        "--consumer", metavar="NAME", help="this worker's name in the group (default host-pid)"
    )


def _dead(add: Adder) -> None:
    sub = add(
        "dead",
        _dead_usage,
        "List or replay a consumer group's dead letters",
        "A message dead-lettered by a worker (or by the server, after too many "
        "deliveries or past its TTL) is copied to the queue QUEUE--GROUP--dead, where "
        "fetch and tail read it like any queue. 'dead list' prints the name and size of "
        "each one in it. 'dead replay' publishes them into QUEUE again, each once: a "
        "replayed dead letter is acked in the group 'replay' of the dead-letter queue, "
        "so replay never sends it twice (and a replay cut off half way is simply run "
        "again).",
        "  zoscii dead list orders --group shipping\n"
        "  zoscii dead replay orders --group shipping\n"
        "  zoscii dead replay orders --group shipping --name NAME --name NAME2",
        intermixed=False,
    )
    verbs = sub.add_subparsers(
        dest="dead_command", metavar="VERB", required=True, parser_class=CommandParser
    )
    add_verb = _command_adder(verbs)
    for verb, handler, summary, description, examples in (
        (
            "list",
            work.dead_list,
            "List the dead letters of a consumer group",
            "One line per dead letter in QUEUE--GROUP--dead, oldest first: its name in "
            "that queue and its size (with --json: one object each, reason null: the "
            "server does not keep why). Replayed ones are listed too, until the "
            "retention of the dead-letter queue removes them. Exit 4 when there are none.",
            "  zoscii dead list orders --group shipping\n"
            "  zoscii fetch orders--shipping--dead --after NAME   # the bytes of the next one",
        ),
        (
            "replay",
            work.dead_replay,
            "Publish a consumer group's dead letters into the queue again",
            "Each dead letter not replayed before is published into QUEUE (with the "
            "retention it had), then acked in the group 'replay' of QUEUE--GROUP--dead; "
            "prints the dead letter's name and the new name. With --name, only those "
            "(exit 3 when one is not waiting there); the others are leased and given "
            "back at once, which the server counts as a delivery: after "
            "ZOSCII_MAX_DELIVERIES (5) such runs a dead letter never replayed moves on "
            "to QUEUE--GROUP--dead--replay--dead. Exit 4 when there was nothing to replay.",
            "  zoscii dead replay orders --group shipping\n"
            "  zoscii dead replay orders --group shipping --name 2025...-0000-....bin",
        ),
    ):
        child = add_verb(verb, handler, summary, description, examples)
        child.add_argument("queue", metavar="QUEUE", help="the queue the group works on")
        child.add_argument(
            "--group", "-g", required=True, metavar="GROUP", help="consumer group name"
        )
        if verb == "replay":
            child.add_argument(
                "--name",
                action="append",
                metavar="NAME",
                help="replay only this dead letter (its name in the dead-letter queue); "
                "repeat for more",
            )


def _dead_usage(ctx: Any) -> int:  # argparse requires a verb: never called
    return exit_codes.USAGE


def _store(add: Adder) -> None:
    sub = add(
        "store",
        messages.store,
        "Put a message into the data store",
        "Prints the stored name, which is what retrieve needs. With -u the message is "
        "stored as unidentified, for a consumer to find with scan.",
        "  zoscii store 'some text' -r 30\n"
        "  zoscii store --file report.csv\n"
        "  name=$(zoscii store - < data.bin)",
    )
    _message_options(sub)
    sub.add_argument(
        "-u", "--unidentified", action="store_true", help="store with the -u suffix (see scan)"
    )


def _retrieve(add: Adder) -> None:
    sub = add(
        "retrieve",
        messages.retrieve,
        "Get a stored message by name",
        "The bytes go to stdout, or to -o PATH: written to PATH.part first, so an "
        "interrupted download resumes where it stopped when run again.",
        "  zoscii retrieve 20250101120000000000-0030-...bin > report.csv\n"
        "  zoscii retrieve 20250101120000000000-0030-...bin -o report.csv",
    )
    sub.add_argument("name", metavar="NAME", help="the name store printed")
    sub.add_argument(
        "-o", "--output", metavar="PATH", help="write to PATH (resumable) instead of stdout (-)"
    )


def _scan(add: Adder) -> None:
    add(
        "scan",
        store_admin.scan,
        "List the unidentified (-u) messages in the store",
        "One name per line. Exit 4 when there are none.",
        "  zoscii scan\n  zoscii --json scan | jq -r '.names[]'",
    )


def _identify(add: Adder) -> None:
    sub = add(
        "identify",
        store_admin.identify,
        "Mark unidentified store messages as identified",
        "Renames NAME-u.bin to NAME.bin on the server and prints the new names. Exit 3 "
        "when a name was not renamed (no such message, or already identified).",
        "  zoscii identify 20250101120000000000-0000-...-u.bin\n  zoscii scan | zoscii identify -",
    )
    sub.add_argument("names", nargs="+", metavar="NAME", help="store names, or - for stdin")


ADMIN_NOTE = (
    "Needs the server's 'admin' right (with access control) or an address in its "
    "ZOSCII_ADMIN_ALLOW (without; loopback by default)."
)


def _queues(add: Adder) -> None:
    sub = add(
        "queues",
        queue_admin.queues,
        "List the queues with their depth, size, ages and consumer groups' lag",
        "One line per queue: messages, bytes, oldest and newest publish time (UTC), then "
        "a line per consumer group with its lag (waiting + leased). " + ADMIN_NOTE,
        "  zoscii queues\n  zoscii --json queues | jq '.queues[] | {queue, messages}'",
    )
    sub.add_argument("queue", nargs="?", metavar="QUEUE", help="only this queue")


def _confirmable(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "-y", "--yes", action="store_true", help="do not ask (needed without a terminal)"
    )


def _purge(add: Adder) -> None:
    sub = add(
        "purge",
        queue_admin.purge,
        "Delete a queue's messages (all, or those before a time)",
        "The queue stays, and so do messages published while it runs. Asks on a "
        "terminal; without one it needs --yes (else exit 2). " + ADMIN_NOTE,
        "  zoscii purge orders\n  zoscii purge orders --before 2025-01-01T00:00:00Z --yes",
    )
    sub.add_argument("queue", metavar="QUEUE")
    sub.add_argument(
        "--before",
        metavar="TIME",
        help="ISO-8601 time with a zone (2025-01-01T00:00:00Z), or a message name",
    )
    _confirmable(sub)


def _delete(add: Adder) -> None:
    sub = add(
        "delete",
        queue_admin.delete,
        "Delete a queue with its messages and consumer groups",
        "A publish after it makes the queue anew (pointers into the old one must be "
        "reset). Asks on a terminal; without one it needs --yes (else exit 2). " + ADMIN_NOTE,
        "  zoscii delete old-orders\n  zoscii delete old-orders --yes",
    )
    sub.add_argument("queue", metavar="QUEUE")
    _confirmable(sub)


def _replay(add: Adder) -> None:
    sub = add(
        "replay",
        queue_admin.replay,
        "Print the pointer that makes a reader start at a point in time",
        "The pointer is the last message name published before --since (an empty line "
        "when there is none: start from the beginning); fetching after it gives the "
        "first message at or after that time (whole seconds, UTC). " + ADMIN_NOTE,
        "  zoscii replay orders --since 2025-01-01T14:00:00Z\n"
        "  zoscii replay orders --since 2025-01-01T14:00:00Z --pointer-file orders.ptr\n"
        "  zoscii tail orders -f --pointer-file orders.ptr",
    )
    sub.add_argument("queue", metavar="QUEUE")
    sub.add_argument(
        "--since", required=True, metavar="TIME", help="ISO-8601 with a zone, e.g. ...Z"
    )
    sub.add_argument("--pointer-file", metavar="PATH", help="also write the pointer to PATH")


def _run(add: Adder) -> None:
    sub = add(
        "run",
        services.run_service,
        "Run a service's one-shot job (replikate, claireup, statissa)",
        "Runs `python -m zoscii_<service> --once ARGS...` when that service is "
        "installed or on PYTHONPATH; it works on the data directory ($ZOSCII_DATA_DIR "
        "or --data-dir), not through --url. The exit code is the service's own.",
        "  zoscii run replikate --job partner-a\n"
        "  zoscii run claireup --dry-run --data-dir /data\n"
        "  zoscii run statissa --data-dir /data > stats.json",
        intermixed=False,
    )
    sub.add_argument(
        "service",
        choices=services.SERVICES,
        metavar="SERVICE",
        help="replikate, claireup or statissa",
    )
    sub.add_argument(
        "service_args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed to the service"
    )


def _days(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 9999:
        raise argparse.ArgumentTypeError(f"{text} days: use 0 to 9999")
    return value


def _count(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text}: use 0 or more")
    return value


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: use 1 or more")
    return value


def _seconds(text: str) -> float:
    """0 or more seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: use 0 or more seconds")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: use a number above 0")
    return value


def _byte_size(text: str) -> int:
    """Bytes, with an optional K, M or G (powers of 1024)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    unit = units.get(text[-1:].lower(), 1)
    value = _int(text[:-1] if unit > 1 else text) * unit
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: use 1 or more bytes")
    return value


def _int(text: str) -> int:
    if not (text.isascii() and text.strip().isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)
