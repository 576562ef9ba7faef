"""``main()``: parse, run the command, and turn every failure into a message and an exit code."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence

from zosciimq.cli import exit_codes
from zosciimq.cli.console import Console
from zosciimq.cli.context import CliError, Context
from zosciimq.cli.parser import build_parser
from zosciimq.client import TransportError, ZosciiClientError


def main(argv: Sequence[str] | None = None) -> int:
    """The ``zoscii`` command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else exit_codes.USAGE
    console = Console.from_sys(json=args.json, quiet=args.quiet)
    ctx = Context(args=args, console=console, stdin=sys.stdin.buffer, env=dict(os.environ))
    try:
        handler: Callable[[Context], int] = args.handler
        return handler(ctx)
    except CliError as exc:
        return _fail(console, str(exc), exc.reason, exc.exit_code)
    except ZosciiClientError as exc:
        return _fail(console, _describe(exc, ctx), exc.reason, exit_codes.exit_code_for(exc))
    except KeyboardInterrupt:
        return _fail(console, "interrupted", "interrupted", exit_codes.INTERRUPTED)
    except BrokenPipeError:
        _silence_stdout()
        return exit_codes.BROKEN_PIPE
    except OSError as exc:  # a local file: -o into a missing directory, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(console, f"{where}{exc.strerror or exc}", "local", exit_codes.ERROR)
    finally:
        ctx.close()


def _describe(exc: ZosciiClientError, ctx: Context) -> str:
    text = str(exc) or type(exc).__name__
    status = getattr(exc, "status", None)
    if isinstance(exc, TransportError):
        return f"{ctx.url}: {_network_reason(text)}"
    if status == 401:
        return f"{text} (give a token with --token or $ZOSCII_TOKEN)"
    return text


def _network_reason(text: str) -> str:
    """Turn urllib3's nested wrapper texts into 'cannot connect (Connection refused)'."""
    head = text.split(":", 1)[0]
    errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    return f"{head} ({errno.group(1).strip()})" if errno else head


def _fail(console: Console, text: str, reason: str, code: int) -> int:
    try:
        console.error(text, reason=reason, exit_code=code)
    except BrokenPipeError:
        _silence_stdout()
    return code


def _silence_stdout() -> None:
    """The reader of stdout is gone: keep Python from failing again when it flushes at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
