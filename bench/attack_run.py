"""An attack run against the api and the PHPMQ gateway, replaying what issue 27 broke
(items 2, 3, 4, 5 and 7), at the size of the outside run, and reporting its figures:
requests tried, faults injected, acknowledged messages lost, bypasses found.

* api (a real gunicorn, access control on: a partner, a reader, two partners sharing a
  queue): a reader's allowed fetch carrying a 200 MB message (multipart, form fields
  first, urlencoded), watched in queues/temp while it is sent; every action with hostile
  parameters by query, urlencoded and multipart (never a 500); one partner at another's
  consumer group and its dead letters; all the while a publisher whose every
  acknowledged message is checked by sha256 at the end.
* PHPMQ (the real gateway process, access control on): 8 connections without a token
  and 8 with a token lacking the write right, each sending a 16 MiB content packet minus
  its last byte (queues/temp watched); 1,000 idle connections from 40 addresses, then a
  real publisher and consumer, whose every acknowledged message must arrive.

A bypass is an attack that got what it wanted (bytes on disk, a lease of another's
group, a 500, a publisher locked out). ``--quick`` runs a tenth of it.

    .venv/bin/python -m bench.attack_run [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import socket
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import requests

from tests.phpmq import wire
from tests.support.api_server import running_api
from tests.support.phpmq_gateway import GatewayProcess
from zosciimq.client import ZosciiClient

PARTNER, READER, ALICE, BOB = (f"{who}-attack-token-0123456789" for who in ("p", "r", "a", "b"))


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


CLIENTS = f"""
[[clients]]
name = "partner"
token_sha256 = "{sha(PARTNER)}"
read = ["outbox_a", "inbox_a"]
write = ["inbox_a", "outbox_a", "in_*"]
groups = ["*"]

[[clients]]
name = "reader"
token_sha256 = "{sha(READER)}"
read = ["outbox_a", "in_*"]

[[clients]]
name = "alice"
token_sha256 = "{sha(ALICE)}"
read = ["shared*"]
write = ["shared"]

[[clients]]
name = "bob"
token_sha256 = "{sha(BOB)}"
read = ["shared"]
groups = ["billing"]
"""
TALLY: Counter[str] = Counter()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def temp_bytes(data_dir: Path) -> int:
    temp = data_dir / "queues" / "temp"
    total = 0
    for path in temp.iterdir() if temp.exists() else ():
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


class TempWatch:
    """The most bytes seen in queues/temp while it runs (sampled every 20 ms)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir, self.most = data_dir, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.most = max(self.most, temp_bytes(self.data_dir))

    def __enter__(self) -> TempWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Publisher(threading.Thread):
    """Publishes numbered messages while the attacks run; keeps the acknowledged ones."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.acked, self.stop = url, {}, threading.Event()

    def run(self) -> None:
        with ZosciiClient(self.url, headers=bearer(PARTNER)) as client:
            number = 0
            while not self.stop.is_set():
                body = b"order %d " % number + bytes(range(256)) * 4
                try:
                    client.publish("inbox_a", body)
                except Exception:
                    TALLY["api: publishes refused under attack"] += 1
                else:
                    self.acked[hashlib.sha256(body).hexdigest()] = body
                TALLY["requests tried"] += 1
                number += 1
                time.sleep(0.01)


def big_body(size: int, content_type: str) -> tuple[Any, dict[str, str]]:
    """A generator of ``size`` bytes of a 200 MB ``msg`` for a fetch, in pieces."""
    piece = b"x" * (1 << 20)
    if content_type == "multipart":
        head = (
            b'--b\r\nContent-Disposition: form-data; name="action"\r\n\r\nfetch\r\n'
            b'--b\r\nContent-Disposition: form-data; name="q"\r\n\r\noutbox_a\r\n'
            b'--b\r\nContent-Disposition: form-data; name="msg"; filename="m"\r\n\r\n'
        )
        tail, kind = b"\r\n--b--\r\n", "multipart/form-data; boundary=b"
    else:
        head, tail, kind = b"action=fetch&q=outbox_a&msg=", b"", "application/x-www-form-urlencoded"

    def body():  # type: ignore[no-untyped-def]
        yield head
        for _ in range(size >> 20):
            yield piece
        yield tail

    return body(), {"Content-Type": kind, **bearer(READER)}


def api_attacks(url: str, data_dir: Path, scale: float) -> None:
    # Item 4: a read action carrying a message.
    for shape in ("multipart", "urlencoded"):
        with TempWatch(data_dir) as watch:
            body, headers = big_body(int(200 * scale) << 20, shape)
            try:
                reply = requests.post(url, data=body, headers=headers, timeout=120)
                status = reply.status_code
            except requests.RequestException:  # refused and closed mid-body: fine
                status = 0
        TALLY["requests tried"] += 1
        if watch.most or status == 200:
            TALLY["bypasses: a reader's fetch stored a body"] += 1
        TALLY[f"api: reader's 200 MB fetch ({shape}): most bytes in temp"] = watch.most
    # Item 7: hostile parameters on every action.
    actions = ["publish", "fetch", "store", "retrieve", "scan", "identify", "consume", "ack",
               "requeue", "deadletter", "extend", "queues", "purge", "delete", "replay",
               "x"]  # fmt: skip
    values = ["[" * 100_001, "0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59",
              "9" * 40, "-1", "../../etc/passwd", "a\x00b", "\r\nX: 1", "{" * 5000,
              '["' + "a" * 900 + '"]', "é", "*", ""]  # fmt: skip
    params = ["q", "receipts", "receipt", "since", "before", "names", "count", "wait",
              "lease", "group", "after", "name", "ttl", "n", "r"]  # fmt: skip
    session = requests.Session()
    rounds = max(1, int(3 * scale))
    for _ in range(rounds):
        for action in actions:
            for param in params:
                for value in values:
                    fields = {"action": action, "q": "outbox_a", "group": "partner", param: value}
                    for how in ("get", "form", "multipart"):
                        if how == "get":
                            reply = session.get(url, params=fields, headers=bearer(PARTNER))
                        elif how == "form":
                            reply = session.post(url, data=fields, headers=bearer(PARTNER))
                        else:
                            files = {k: (None, v) for k, v in fields.items()}
                            reply = session.post(url, files=files, headers=bearer(PARTNER))
                        TALLY["requests tried"] += 1
                        if reply.status_code == 500:
                            TALLY["bypasses: 500 Internal server error"] += 1
    # Item 5: one partner at another's group.
    with ZosciiClient(url, headers=bearer(ALICE)) as alice:
        alice.publish_many("shared", [b"invoice %d" % i for i in range(5)])
    for action in ("consume", "ack", "requeue", "deadletter", "extend"):
        fields = {"action": action, "q": "shared", "group": "billing", "count": "5",
                  "receipt": "x:" + "0" * 32}  # fmt: skip
        reply = session.post(url, data=fields, headers=bearer(ALICE))
        TALLY["requests tried"] += 1
        if reply.status_code < 400:
            TALLY["bypasses: another partner's group"] += 1
    reply = session.get(url, params={"action": "fetch", "q": "shared--billing--dead"},
                        headers=bearer(ALICE))  # fmt: skip
    TALLY["requests tried"] += 1
    if reply.status_code < 400:
        TALLY["bypasses: another partner's dead letters"] += 1


def phpmq_attacks(data_dir: Path, scale: float) -> None:
    gateway = GatewayProcess(data_dir, ZOSCII_AUTH_CLIENTS=CLIENTS).start()
    try:
        # Item 2: content before the token, and without the right (zz_attck: a queue the
        # partner may not write).
        size = 16 << 20
        head = b"H0100103" + b"P01%029d" % 8 + b"zz_attck" + b"P02%029d" % size
        sockets = []
        with TempWatch(data_dir) as watch:
            for number in range(16):
                sock = socket.create_connection(("127.0.0.1", gateway.port))
                before = wire.authenticate(PARTNER) if number >= 8 else b""
                with contextlib.suppress(OSError):
                    sock.sendall(before + head + b"x" * (size - 1))
                sockets.append(sock)
                TALLY["phpmq connections"] += 1
            time.sleep(0.5)
        for sock in sockets:
            sock.close()
        TALLY["phpmq: content of refused 001s, most bytes in temp"] = watch.most
        if watch.most:
            TALLY["bypasses: phpmq content on disk before the right"] += 1
        # Item 3: idle connections, then a real publisher and consumer.
        idle = []
        for number in range(int(1000 * scale)):
            with contextlib.suppress(OSError):
                source = (f"127.0.1.{2 + number % 40}", 0)
                idle.append(socket.create_connection(("127.0.0.1", gateway.port), 5, source))
            TALLY["phpmq connections"] += 1
            TALLY["faults injected"] += 1  # an idle connection is the fault here
        sent = {}
        try:
            with gateway.connect() as consumer, gateway.connect() as publisher:
                consumer.send(wire.authenticate(READER) + wire.consume("in_attack", 10))
                publisher.send(wire.authenticate(PARTNER))
                for number in range(100):
                    body = b"phpmq %d" % number
                    publisher.send(wire.send("in_attack", body))
                    sent[hashlib.sha256(body).hexdigest()] = body
                TALLY["phpmq connections"] += 2
                got = set()
                for _ in range(100):
                    message = consumer.read(timeout=20)
                    got.add(hashlib.sha256(message.content).hexdigest())
                    consumer.send(wire.ack("in_attack", message.id))
        except Exception as exc:
            TALLY["bypasses: a real client locked out by idle connections"] += 1
            print(f"phpmq: the real client failed: {exc!r}")
            got = set()
        finally:
            for sock in idle:
                sock.close()
        TALLY["phpmq: sent and never delivered"] += len(set(sent) - got)
        TALLY["phpmq: messages through the flood"] += len(got)
        TALLY["phpmq: evicted"] += int(gateway.metric("zoscii_phpmq_connections_total",
                                                      result="evicted"))  # fmt: skip
    finally:
        gateway.terminate()
        gateway.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    with tempfile.TemporaryDirectory(prefix="zoscii-attack-") as tmp:
        api_dir = Path(tmp, "api")
        env = {"ZOSCII_AUTH_CLIENTS": CLIENTS, "ZOSCII_MAX_MESSAGE_BYTES": str(300 << 20)}
        with running_api(api_dir, env=env) as url:
            publisher = Publisher(url)
            publisher.start()
            try:
                api_attacks(url, api_dir, scale)
            finally:
                publisher.stop.set()
                publisher.join()
            with ZosciiClient(url, headers=bearer(PARTNER)) as client:
                stored = set()
                pointer = ""
                while batch := client.fetch_batch("inbox_a", pointer, 500):
                    for message in batch:
                        with message:
                            stored.add(hashlib.sha256(message.data).hexdigest())
                    pointer = batch[-1].name
            TALLY["api: acknowledged publishes checked"] += len(publisher.acked)
            TALLY["acknowledged messages lost"] += len(set(publisher.acked) - stored)
        phpmq_attacks(Path(tmp, "phpmq"), scale)
    TALLY.setdefault("faults injected", 0)
    for key in ("acknowledged messages lost",):
        TALLY.setdefault(key, 0)
    TALLY["bypasses found"] = sum(v for k, v in TALLY.items() if k.startswith("bypasses:"))
    print(json.dumps(dict(sorted(TALLY.items())), indent=1))


if __name__ == "__main__":
    main()
