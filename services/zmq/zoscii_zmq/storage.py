"""The core as the gateway's sockets use it: one store, one set of consumer groups, and a
thread pool for their blocking calls (file locks, fsyncs), so the event loop never waits
for the disk.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from zoscii_zmq.settings import Settings
from zosciimq.core import Outgoing, Upload
from zosciimq.errors import TryAgain
from zosciimq.service.stores import open_stores

T = TypeVar("T")
PUBLISH_RETRIES = 20  # a queue's 10,000 names of one second used up: wait for the next


class Storage:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        stores = open_stores(settings.core, settings.policy, settings.max_deliveries)
        self.data_dir, self.queues, self.groups = stores.data_dir, stores.queues, stores.groups
        self.pool = ThreadPoolExecutor(settings.threads, thread_name_prefix="zmq-core")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` in the thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    def publish(self, queue: str, contents: Sequence[bytes]) -> list[str]:
        """Publish ``contents`` in order under contiguous names (thread pool); durable
        when this returns, with the gateway's retention. All or nothing."""
        uploads = []
        try:
            for content in contents:
                upload = Upload(self.data_dir, self.settings.chunk_limit)
                uploads.append(upload)
                upload.write(content)
            outgoing = [Outgoing(u, self.settings.retention_days) for u in uploads]
            for attempt in itertools.count():
                try:
                    results = self.queues.publish_many(queue, outgoing)
                    return [r.name or "" for r in results]
                except TryAgain:
                    if attempt >= PUBLISH_RETRIES:
                        raise
                    time.sleep(0.05)
            raise AssertionError("unreachable")
        finally:
            for upload in uploads:
                upload.discard()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.queues.close()
