"""A Python client for the ZOSCII MQ HTTP API (this project's and the original's).

    from pathlib import Path
    from zosciimq.client import ZosciiClient, FilePointerStore

    with ZosciiClient("http://mq.example.com/") as mq:
        mq.publish("orders", b"...", retention_days=7)
        with mq.consume("orders", FilePointerStore("orders.pointer")) as consumer:
            for message in consumer:
                handle(message.name, message.data)

        names = [p.name for p in mq.publish_many("orders", [b"a", b"b", Path("c.pdf")])]

        # work queues: the consumers of a group share a queue, each message to one
        for message in mq.lease("orders", "shipping", count=10, lease=60, wait=20):
            ship(message.data)
            mq.ack("orders", "shipping", message)
        Worker(mq, "orders", "shipping", ship_one).run()  # the loop, see worker.py

Errors are typed (``zosciimq.client.errors``); binary payloads stay byte-exact.
``fetch_batch`` reads many messages per request and ``wait=`` long-polls where the server
has them (this project's api), falling back to single fetches against the original;
``publish_many`` sends many messages per request the same way, falling back to single
publishes.
"""

from zosciimq.client.capabilities import Capabilities
from zosciimq.client.client import Message, Mode, ZosciiClient, new_nonce
from zosciimq.client.consumer import Consumer
from zosciimq.client.download import DownloadResult
from zosciimq.client.errors import (
    BadHeaders,
    BadMessageName,
    DeadlineExceeded,
    Fenced,
    Forbidden,
    InternalServerError,
    InvalidInput,
    MessageNotFound,
    NotFound,
    NotZosciiReply,
    OutOfOrder,
    ProtocolError,
    QueueFull,
    QueueNotFound,
    RangeNotSatisfiable,
    ReplyTooLarge,
    ServerError,
    StorageFull,
    Timeout,
    TooLarge,
    TransportError,
    TruncatedReply,
    TryAgain,
    Unauthenticated,
    ZosciiClientError,
)
from zosciimq.client.fetch_batch import BatchMessage
from zosciimq.client.payload import PayloadTooLarge
from zosciimq.client.pointers import FilePointerStore, MemoryPointerStore, PointerStore
from zosciimq.client.publish_batch import BatchItem, PublishProgress
from zosciimq.client.replies import Envelope, Published, Received, ReplyInfo
from zosciimq.client.stream import Streamed
from zosciimq.client.transport import TransportOptions
from zosciimq.client.work import LeasedMessage, Outcome, dead_letter_queue
from zosciimq.client.worker import (
    DeadLetter,
    Worker,
    WorkerStats,
    exponential_backoff,
    stop_on_signals,
)

__all__ = [
    "BadHeaders",
    "BadMessageName",
    "BatchItem",
    "BatchMessage",
    "Capabilities",
    "Consumer",
    "DeadLetter",
    "DeadlineExceeded",
    "DownloadResult",
    "Envelope",
    "Fenced",
    "FilePointerStore",
    "Forbidden",
    "InternalServerError",
    "InvalidInput",
    "LeasedMessage",
    "MemoryPointerStore",
    "Message",
    "MessageNotFound",
    "Mode",
    "NotFound",
    "NotZosciiReply",
    "OutOfOrder",
    "Outcome",
    "PayloadTooLarge",
    "PointerStore",
    "ProtocolError",
    "PublishProgress",
    "Published",
    "QueueFull",
    "QueueNotFound",
    "RangeNotSatisfiable",
    "Received",
    "ReplyInfo",
    "ReplyTooLarge",
    "ServerError",
    "StorageFull",
    "Streamed",
    "Timeout",
    "TooLarge",
    "TransportError",
    "TransportOptions",
    "TruncatedReply",
    "TryAgain",
    "Unauthenticated",
    "Worker",
    "WorkerStats",
    "ZosciiClient",
    "ZosciiClientError",
    "dead_letter_queue",
    "exponential_backoff",
    "new_nonce",
    "stop_on_signals",
]
