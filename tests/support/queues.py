"""Queues as the tests name, fill and read them: on a server through the client library,
or on a data directory through the core."""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from pathlib import Path

from zosciimq.client import QueueNotFound, ZosciiClient
from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.wal import WriteAheadLog


def queue_name(prefix: str = "q") -> str:
    """A queue of its own for one test on a server that several tests share."""
    return prefix + uuid.uuid4().hex[:12]


def read_queue(
    server: str | ZosciiClient, queue: str, *, count: int = 1
) -> list[tuple[str, bytes]]:
    """Every message of ``queue`` in order, as (name, bytes); [] when there is no queue.

    ``server`` is a URL or a client; one message a request (single fetches), or ``count``
    a request (batch fetches) where reading thousands back is not the point of a test.
    """
    out: list[tuple[str, bytes]] = []
    pointer = ""
    with ZosciiClient(server) if isinstance(server, str) else nullcontext(server) as client:
        try:
            if count == 1:
                while (message := client.fetch(queue, pointer)) is not None:
                    out.append((message.name, message.data))
                    pointer = message.name
            else:
                while batch := client.fetch_batch(queue, pointer, count):
                    for message in batch:
                        with message:
                            out.append((message.name, message.data))
                    pointer = batch[-1].name
        except QueueNotFound:
            pass
    return out


def publish_body(
    queues: QueueStore, queue: str, body: bytes, retention_days: int = 1, nonce: str | None = None
) -> PublishResult:
    """One message through the core, as the api publishes one: an Upload, then publish."""
    with Upload(queues.data_dir) as upload:
        upload.write(body)
        return queues.publish(queue, upload, retention_days=retention_days, nonce=nonce)


def queue_contents(data_dir: Path | DataDir, queue: str) -> list[tuple[str, bytes]]:
    """Everything in a queue on disk, in name order, as a consumer arriving now sees it
    (a fresh QueueStore: no cached state); [] when there is no such queue."""
    layout = data_dir if isinstance(data_dir, DataDir) else DataDir(data_dir)
    if not layout.queue_dir(queue).exists():
        return []
    out = []
    for name, file in QueueStore(layout).iter_after(queue, "", limit=10**9):
        with file:
            out.append((name, file.read()))
    return out


def wal_records(data_dir: Path | DataDir, queue: str) -> list[list[bytes]]:
    """The bodies of each record after the checkpoint of a queue's write-ahead log (what
    a recovery would redo); [] when it has none."""
    layout = data_dir if isinstance(data_dir, DataDir) else DataDir(data_dir)
    log = WriteAheadLog.open(str(layout.wal_path(queue)), create=False)
    if log is None:
        return []
    try:
        return [
            [entry.data or b"" for entry in record.entries]
            for record in log.records(log.header())
        ]
    finally:
        log.close()


def uploads_of(data_dir: DataDir, bodies: list[bytes]) -> list[Upload]:
    uploads = []
    for body in bodies:
        upload = Upload(data_dir)
        upload.write(body)
        uploads.append(upload)
    return uploads


def publish_many(queues: QueueStore, data_dir: DataDir, queue: str, bodies, nonces=None, days=1):
    """``bodies`` in one group commit (``QueueStore.publish_many``); their results."""
    uploads = uploads_of(data_dir, bodies)
    try:
        nonces = nonces or [None] * len(bodies)
        messages = [Outgoing(u, days, n) for u, n in zip(uploads, nonces, strict=True)]
        return queues.publish_many(queue, messages)
    finally:
        for upload in uploads:
            upload.discard()
