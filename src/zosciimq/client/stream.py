"""Following a queue live: ``ZosciiClient.stream`` and ``stream_events``.

The stream is the live service's Server-Sent Events (``action=stream``, PROTOCOL.md
"Streams"), read with the client's own session (its credentials, TLS and proxies). Every
event carries its message's name; the iterator remembers the last name it yielded and,
when the connection ends for any reason (the server stopping, a proxy, a slow-reader
cut, a network error), connects again right after it: no gap, no repeat.

A server without streams (an api reached directly, the original PHP server) answers the
first request with 400 (or a binary or JSON reply it means as a fetch): the iterator then
follows the queue by long-poll ``fetch`` instead (``wait=``; the original ignores it and
answers at once, so the iterator waits ``poll_interval`` between empty answers).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests
import urllib3

from zosciimq.client.errors import TransportError, TryAgain

if TYPE_CHECKING:
    from zosciimq.client.client import ZosciiClient

EVENT_STREAM = "text/event-stream"
LONG_POLL_SECONDS = 30
MAX_BACKOFF = 30.0
READ_SIZE = 1 << 16


@dataclass(frozen=True)
class Streamed:
    """One message of a stream. ``data`` None: the message is over the server's inline
    limit and was announced by name and size only; ``previous`` is the name before it in
    the stream, the pointer that fetches it (``client.fetch(queue, previous)``)."""

    name: str
    size: int
    data: bytes | None
    previous: str


class Follow:
    """The iterator behind ``ZosciiClient.stream_events``."""

    def __init__(
        self,
        client: ZosciiClient,
        queue: str,
        after: str,
        *,
        stop: threading.Event | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        self.client = client
        self.queue = queue
        self.last = after
        self.stop = stop or threading.Event()
        self.poll_interval = poll_interval
        self.streams: bool | None = None  # None: not known yet
        self.failures = 0

    def __iter__(self) -> Iterator[Streamed]:
        while not self.stop.is_set():
            try:
                if self.streams is False:
                    yield from self._long_poll()
                else:
                    yield from self._events()
                self.failures = 0
            except (TransportError, TryAgain, requests.RequestException,
                    urllib3.exceptions.HTTPError, OSError):  # fmt: skip
                self.failures += 1
                self.stop.wait(min(MAX_BACKOFF, 0.5 * 2**self.failures))

    def _events(self) -> Iterator[Streamed]:
        """One connection's events; returns when it ends (then the caller reconnects)."""
        client = self.client
        params = {"action": "stream", "q": self.queue}
        if self.last:
            params["after"] = self.last
        options = client.options
        response = client.session.get(
            client.url,
            params=params,
            headers={"Accept": EVENT_STREAM},
            stream=True,
            timeout=(options.connect_timeout, options.read_timeout + LONG_POLL_SECONDS),
            allow_redirects=False,
        )
        with response:
            kind = response.headers.get("Content-Type", "")
            if response.status_code == 200 and kind.startswith(EVENT_STREAM):
                self.streams = True
                yield from self._read(response)
                return
            no_streams = response.status_code == 200 or (
                self.streams is None and response.status_code in (400, 405)
            )
            if no_streams:
                # no streams here (an api without the live service, the original): its
                # error is read, and a missing queue raised, by the long-poll's fetch
                self.streams = False
                return
            client._envelope(response)  # raises the typed error
            raise TryAgain(
                f"HTTP {response.status_code} for a stream",
                status=response.status_code,
                envelope={},
            )

    def _read(self, response: requests.Response) -> Iterator[Streamed]:
        fields: dict[str, str] = {}
        data: list[str] = []
        pending = b""
        while not self.stop.is_set():
            # whatever has arrived (an event stream has no length to wait for)
            chunk = response.raw.read1(READ_SIZE, decode_content=True)
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8")
                if line:
                    if not line.startswith(":"):
                        key, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if key == "data":
                            data.append(value)
                        else:
                            fields[key] = value
                    continue
                event = self._event(fields, data)
                fields, data = {}, []
                if event is None:
                    continue
                if isinstance(event, str):  # the server ends the stream: resume
                    return
                self.last = event.name
                yield event
                self.failures = 0

    def _event(self, fields: dict[str, str], data: list[str]) -> Streamed | str | None:
        name = fields.get("id")
        kind = fields.get("event", "message")
        text = "\n".join(data)
        if kind == "disconnect":
            return "disconnect"
        if not name:
            return None
        previous = self.last
        if kind == "large":
            document = json.loads(text)
            return Streamed(name, int(document["size"]), None, previous)
        payload = base64.b64decode(text) if kind == "binary" else text.encode("utf-8")
        return Streamed(name, len(payload), payload, previous)

    def _long_poll(self) -> Iterator[Streamed]:
        client = self.client
        message = client.fetch(self.queue, self.last, wait=LONG_POLL_SECONDS)
        if message is None:
            if client.original:
                self.stop.wait(self.poll_interval)
            return
        previous, self.last = self.last, message.name
        yield Streamed(message.name, len(message.data), message.data, previous)


def resolve(
    client: ZosciiClient, queue: str, event: Streamed, stop: threading.Event | None = None
) -> bytes | None:
    """A large message's bytes (fetched after the one before it, again after a network
    error), or None when it is gone (deleted by retention or a purge before it was read)
    or ``stop`` was set."""
    if event.data is not None:
        return event.data
    failures = 0
    while stop is None or not stop.is_set():
        try:
            message = client.fetch(queue, event.previous)
        except (TransportError, TryAgain):
            failures += 1
            if stop is None:
                stop = threading.Event()
            stop.wait(min(MAX_BACKOFF, 0.5 * 2**failures))
            continue
        if message is None or message.name != event.name:
            return None
        return message.data
    return None
