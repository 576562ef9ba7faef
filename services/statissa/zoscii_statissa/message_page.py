"""One message of a queue (``/queues/<q>/messages/<name>``): what its name and file say,
and its first bytes, read through the core (``zosciimq.core.browse.peek``: the queue
and the name checked by the core, the file opened without following links, nothing
written).

Reading contents is more than statistics: with access control on, the page needs the
queue's read right as well (``read`` patterns: what the api's fetch would need, so the
console shows nobody a message the api would not hand them). Without access control
anyone may fetch any message from the api, and so here.
"""

from __future__ import annotations

from typing import NamedTuple

from zoscii_statissa.report import environment
from zosciimq.core.browse import Peek

PEEK_BYTES = 256
HEX_WIDTH = 16

class Shown(NamedTuple):
    kind: str  # "text" or "hex"
    text: str


def show_bytes(head: bytes, *, complete: bool) -> Shown:
    """Printable UTF-8 as text (a character cut at the end of a partial read is dropped),
    anything else as a hex dump with offsets."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut = not complete and exc.reason == "unexpected end of data"
        text = head[: exc.start].decode("utf-8") if cut else ""
        if not cut:
            return Shown("hex", hex_dump(head))
    if all(c.isprintable() or c in "\n\r\t" for c in text):
        return Shown("text", text)
    return Shown("hex", hex_dump(head))


def hex_dump(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), HEX_WIDTH):
        row = data[offset : offset + HEX_WIDTH]
        left = " ".join(f"{b:02x}" for b in row[:8])
        right = " ".join(f"{b:02x}" for b in row[8:])
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{offset:08x}  {left:<23}  {right:<23}  |{ascii_}|")
    return "\n".join(lines)


class MessagePage:
    def __init__(self) -> None:
        self._template = environment().get_template("message.html")

    def render(self, queue: str, name: str, peek: Peek | None, *, error: str = "") -> str:
        shown = show_bytes(peek.head, complete=peek.complete) if peek else Shown("text", "")
        return self._template.render(
            queue=queue,
            name=name,
            peek=peek,
            info=peek.info if peek else None,
            kind=shown.kind,
            shown=shown.text,
            error=error,
        )
