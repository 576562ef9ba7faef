"""A publishing process for crash and multi-process tests.

Usage: python -m tests.support.publisher DATA_DIR QUEUE COUNT TAG
Publishes COUNT messages through the core and prints "<name> <sha256>" for each one
*after* publish returned (that is, after it was acknowledged), flushing every line.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from zosciimq.core import DataDir, QueueStore, Upload


def payload(tag: str, number: int) -> bytes:
    seed = f"{tag}:{number}".encode()
    return seed + b"\x00\xff" + hashlib.sha256(seed).digest() * (number % 7)


def main() -> None:
    data_dir, queue, count, tag = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    layout = DataDir(data_dir)
    layout.ensure()
    queues = QueueStore(layout)
    for number in range(count):
        body = payload(tag, number)
        with Upload(layout) as upload:
            upload.write(body)
            result = queues.publish(queue, upload, retention_days=1)
        sys.stdout.write(f"{result.name} {hashlib.sha256(body).hexdigest()}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
