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

from markupsafe import Markup

from zoscii_statissa.report import environment
from zosciimq.core.browse import Peek

PEEK_BYTES = 256
HEX_WIDTH = 16

TEMPLATE = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ name }} &middot; {{ queue }} &middot; ZOSCII MQ console</title>
<style>{{ style }}{{ page_style }}</style>
</head>
<body>
<header>
  <h1><a href="../../../">ZOSCII MQ console</a> / <a href="../../{{ queue|urlencode }}"
    class="qname">{{ queue }}</a> / message</h1>
  <div class="meta qname" id="name">{{ name }}</div>
</header>
<main>
{% if error %}<div class="banner bad" role="alert" id="error">{{ error }}</div>
{% else %}
<section>
<h2>Metadata</h2>
<dl class="meta-list">
  <dt>Name</dt><dd>{{ name }}</dd>
  <dt>Published (UTC)</dt><dd id="published">{{ info.published_at.strftime("%Y-%m-%d %H:%M:%S") }}
    <span class="muted">(sequence {{ info.message.counter }} in that second)</span></dd>
  <dt>Retention</dt><dd id="retention">{{ info.retention_days }} d
    <span class="muted">(claireup deletes it from {{
    info.expires_at.strftime("%Y-%m-%d %H:%M:%S") }})</span></dd>
  <dt>Size</dt><dd id="size">{{ num(info.size) }} bytes ({{ size(info.size) }})</dd>
  <dt>Written here (UTC)</dt><dd>{{ info.modified_at.strftime("%Y-%m-%d %H:%M:%S") }}</dd>
  <dt>GUID</dt><dd>{{ info.message.guid }}</dd>
</dl>
</section>
<section>
<h2>First bytes</h2>
<p class="pad muted" id="shown">{% if info.size == 0 %}The message is empty.{% else %}{{
  "All" if peek.complete else "The first" }} {{ num(peek.head|length) }} of {{
  num(info.size) }} bytes, {{ "as UTF-8 text" if kind == "text" else "in hex" }}.{% endif %}</p>
{% if info.size %}<pre id="head" class="{{ kind }}">{{ shown }}</pre>{% endif %}
</section>
{% endif %}
<footer><a href="../../{{ queue|urlencode }}">Back to {{ queue }}</a> &middot;
  <a href="../../../">All queues</a> &middot; times are UTC</footer>
</main>
</body>
</html>
"""

PAGE_STYLE = """\
  dl.meta-list { display:grid; grid-template-columns:max-content 1fr; gap:4px 16px;
                 padding:12px 16px; margin:0; }
  dl.meta-list dt { color:var(--muted); }
  dl.meta-list dd { margin:0; overflow-wrap:anywhere; }
  pre#head { margin:0 16px 16px; padding:10px 12px; background:#f2f4f7; border-radius:6px;
             overflow-x:auto; white-space:pre-wrap; overflow-wrap:anywhere; font-size:12px; }
  pre#head.hex { white-space:pre; overflow-wrap:normal; }
"""


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
        env = environment(page_style=Markup(PAGE_STYLE))
        self._template = env.from_string(TEMPLATE)

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
