"""The fan-out bench's publisher: a failed attempt is sent again, with its nonce, before
the next message, so a late commit of the first attempt cannot reorder the queue."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from bench.fanout import Publisher
from bench.fanout_readers import SseReader, Tally, parse_payload, payload


class FlakyApi(ThreadingHTTPServer):
    """Stores each nonce's body once; the first attempt at sequence 2 is stored but never
    answered (the connection is dropped, as a timeout or a reset looks to a client)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.stored: list[int] = []
        self.nonces: set[str] = set()
        self.attempts: list[tuple[str, int]] = []
        self.dropped = False
        self.lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FlakyApi

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        nonce = parse_qs(urlsplit(self.path).query)["n"][0]
        sequence, _ = parse_payload(body)
        api = self.server
        with api.lock:
            api.attempts.append((nonce, sequence))
            if nonce not in api.nonces:
                api.nonces.add(nonce)
                api.stored.append(sequence)
            drop = sequence == 2 and not api.dropped
            api.dropped = api.dropped or drop
        if drop:
            self.close_connection = True
            self.connection.close()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_failed_publish_is_sent_again_with_its_nonce_before_the_next() -> None:
    api = FlakyApi()
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        publisher = Publisher("127.0.0.1", "q", port=api.server_address[1], timeout=5)
        sent = publisher.run(rate=50.0, seconds=0.08)  # 4 messages
    finally:
        api.shutdown()
        api.server_close()
    assert sent == [1, 2, 3, 4]
    assert api.stored == [1, 2, 3, 4]  # once each, in order
    assert publisher.failures == 1
    sequences = [sequence for _, sequence in api.attempts]
    assert sequences == [1, 2, 2, 3, 4]  # 3 only once 2's outcome was known
    assert api.attempts[1][0] == api.attempts[2][0]  # the same nonce
    assert len(publisher.latencies) == 4


def test_an_sse_reader_decodes_a_proxys_chunks_wherever_they_fall() -> None:
    """nginx sends a stream's body in chunks; when several events come together a chunk
    boundary falls inside an event, which a reader must not take for the event's bytes."""
    tally = Tally(1)
    tally.measuring = True
    reader = SseReader(tally, "h", "q", "0", asyncio.new_event_loop())
    reader.transport = _Sink()
    reader.start()
    events = b"".join(b"id: n%03d\ndata: %s\n\n" % (i, payload(i)) for i in range(1, 60))
    chunks = [events[i : i + 333] for i in range(0, len(events), 333)]
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body
    for start in range(0, len(stream), 97):  # reads that cut lines and sizes too
        reader.feed(stream[start : start + 97], time.time())
    assert tally.errors == [] and tally.order_errors == 0 and tally.gaps == 0
    assert reader.received == 59 and tally.reached_all(list(range(1, 60))) == 59


class _Sink(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass
