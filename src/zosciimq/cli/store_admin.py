"""scan and identify: finding and marking unidentified (``-u``) store messages."""

from __future__ import annotations

from zosciimq.cli import exit_codes
from zosciimq.cli.context import Context
from zosciimq.core import parse_name
from zosciimq.errors import InvalidInput


def scan(ctx: Context) -> int:
    names = ctx.client.scan()
    if ctx.console.json:
        ctx.console.result(action="scan", count=len(names), names=names)
    else:
        for name in names:
            ctx.console.line(name)
        if not names:
            ctx.console.notice("no unidentified messages in the store")
    return exit_codes.OK if names else exit_codes.NOTHING_NEW


def identify(ctx: Context) -> int:
    """Exit 3 when a name was not renamed (no such file, or already identified), 4 when
    ``-`` brought no names at all."""
    names = _names(ctx)
    if not names:  # `zoscii scan | zoscii identify -` with nothing to identify
        if ctx.console.json:
            ctx.console.result(action="identify", names=[], not_renamed=[])
        ctx.console.notice("no names given on stdin")
        return exit_codes.NOTHING_NEW
    renamed = ctx.client.identify(names)
    missed = [name for name in names if _identified(name) not in renamed]
    if ctx.console.json:
        ctx.console.result(action="identify", names=renamed, not_renamed=missed)
    else:
        for name in renamed:
            ctx.console.line(name)
        for name in missed:
            ctx.console.warn(f"not renamed (not found, or not an unidentified name): {name}")
    return exit_codes.NOT_FOUND if missed else exit_codes.OK


def _names(ctx: Context) -> list[str]:
    names: list[str] = []
    for name in ctx.args.names:
        if name == "-":  # `zoscii scan | zoscii identify -`
            text = ctx.stdin.read().decode("utf-8", "replace")
            names += [line.strip() for line in text.splitlines() if line.strip()]
        else:
            names.append(name)
    return names


def _identified(name: str) -> str:
    """The name identify gives ``name`` (the core's rule); a name that does not parse is
    left as it is: the server refuses it, and it is reported as not renamed."""
    try:
        return str(parse_name(name).identified())
    except InvalidInput:
        return name
