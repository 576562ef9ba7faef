"""The errors the core raises (defined, with their statuses, in ``zosciimq.errors``)."""

from zosciimq.errors import (
    InvalidInput,
    MessageNotFound,
    QueueNotFound,
    StorageFull,
    TooLarge,
    TryAgain,
    ZosciiError,
)

__all__ = [
    "InvalidInput",
    "MessageNotFound",
    "QueueNotFound",
    "StorageFull",
    "TooLarge",
    "TryAgain",
    "ZosciiError",
]
