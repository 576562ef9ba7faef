"""The same work through the core in this process, without HTTP: where the api's time goes.

A figure, its core-only twin and its ceiling split a request's cost three ways: the
file system (ceiling), the core's bookkeeping (locks, index, names) and everything HTTP
adds (client, loopback, gunicorn, Flask, parameter parsing).
"""

from __future__ import annotations

from bench.client import BenchError
from bench.harness import Operation, OperationFactory
from zosciimq.core import DataDir, QueueStore, Upload


def publish_factory(data_dir: DataDir, queue: str, payload: bytes) -> OperationFactory:
    data_dir.ensure()
    queues = QueueStore(data_dir)

    def factory(number: int) -> Operation:
        def publish() -> None:
            with Upload(data_dir) as upload:
                upload.write(payload)
                queues.publish(queue, upload, retention_days=0)

        return publish

    return factory


def consume_factory(data_dir: DataDir, queue: str, pointer: list[str]) -> OperationFactory:
    """QueueStore.fetch after ``pointer[0]``, read the message, move the pointer on."""
    queues = QueueStore(data_dir)

    def factory(number: int) -> Operation:
        def consume_one() -> None:
            result = queues.fetch(queue, pointer[0])
            if result.file is None:
                raise BenchError(f"queue ended early after {pointer[0]}")
            try:
                result.file.read()
            finally:
                result.close()
            pointer[0] = result.name

        return consume_one

    return factory
