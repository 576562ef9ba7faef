"""The on-disk format: names, paths, locks, atomic writes, queues and the store.

Every service imports this package; nothing else touches the data directory's layout.
The layout is the one in PROTOCOL.md section 1, so the original PHP implementation
can serve a directory written here and the other way round. Its errors are
``zosciimq.errors``, shared with the HTTP layer and the client.
"""

from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, parse_name
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.queues import FetchResult, QueueStore
from zosciimq.core.store import DataStore, StoreResult
from zosciimq.core.upload import Upload, sync_uploads

__all__ = [
    "DataDir",
    "DataStore",
    "FetchResult",
    "MessageName",
    "Outgoing",
    "PublishResult",
    "QueueStore",
    "StoreResult",
    "Upload",
    "parse_name",
    "sync_uploads",
]
