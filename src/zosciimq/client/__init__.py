"""A Python client for the ZOSCII MQ HTTP API (this project's and the original's).

    from pathlib import Path
    from zosciimq.client import ZosciiClient, FilePointerStore

    with ZosciiClient("http://mq.example.com/") as mq:
        mq.publish("orders", b"...", retention_days=7)
        with mq.consume("orders", FilePointerStore("orders.pointer")) as consumer:
            for message in consumer:
                handle(message.name, message.data)

        names = [p.name for p in mq.publish_many("orders", [b"a", b"b", Path("c.pdf")])]

Errors are typed (``zosciimq.client.errors``); binary payloads stay byte-exact.
``fetch_batch`` reads many messages per request and ``wait=`` long-polls where the server
has them (this project's api), falling back to single fetches against the original;
``publish_many`` sends many messages per request the same way, falling back to single
publishes.
"""

from zosciimq.client.batch import BatchMessage
from zosciimq.client.client import Message, Mode, ZosciiClient, new_nonce
from zosciimq.client.consumer import Consumer
from zosciimq.client.download import DownloadResult
from zosciimq.client.errors import (
    BadHeaders,
    BadMessageName,
    DeadlineExceeded,
    Forbidden,
    InternalServerError,
    InvalidInput,
    MessageNotFound,
    NotFound,
    NotZosciiReply,
    OutOfOrder,
    ProtocolError,
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
from zosciimq.client.payload import PayloadTooLarge
from zosciimq.client.pointers import FilePointerStore, MemoryPointerStore, PointerStore
from zosciimq.client.publish_batch import BatchItem, PublishProgress
from zosciimq.client.replies import Envelope, Published, Received, ReplyInfo
from zosciimq.client.transport import TransportOptions

__all__ = [
    "BadHeaders",
    "BadMessageName",
    "BatchItem",
    "BatchMessage",
    "Consumer",
    "DeadlineExceeded",
    "DownloadResult",
    "Envelope",
    "FilePointerStore",
    "Forbidden",
    "InternalServerError",
    "InvalidInput",
    "MemoryPointerStore",
    "Message",
    "MessageNotFound",
    "Mode",
    "NotFound",
    "NotZosciiReply",
    "OutOfOrder",
    "PayloadTooLarge",
    "PointerStore",
    "ProtocolError",
    "PublishProgress",
    "Published",
    "QueueNotFound",
    "RangeNotSatisfiable",
    "Received",
    "ReplyInfo",
    "ReplyTooLarge",
    "ServerError",
    "StorageFull",
    "Timeout",
    "TooLarge",
    "TransportError",
    "TransportOptions",
    "TruncatedReply",
    "TryAgain",
    "Unauthenticated",
    "ZosciiClient",
    "ZosciiClientError",
    "new_nonce",
]
