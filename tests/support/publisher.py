"""A publishing process for crash and multi-process tests.

Usage: python -m tests.support.publisher DATA_DIR QUEUE COUNT TAG [THREADS [BATCH]]

Publishes COUNT messages through the core from THREADS threads (default 1), BATCH at a
time per call (default 1: ``publish``; more: ``publish_many``), and prints
"<name> <sha256>" for each one *after* its call returned (that is, after it was
acknowledged), flushing every line. Payloads say who sent them (see ``payload``), so a
test can tell which call, and so which batch, a message belonged to.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
from pathlib import Path

from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.outgoing import Outgoing

REPO = Path(__file__).resolve().parents[2]
_print_lock = threading.Lock()


def payload(tag: str, number: int) -> bytes:
    seed = f"{tag}:{number}".encode()
    return seed + b"\x00\xff" + hashlib.sha256(seed).digest() * (number % 7)


def _publish_share(
    queues: QueueStore, layout: DataDir, queue: str, tag: str, numbers: list[int], batch: int
) -> None:
    for start in range(0, len(numbers), batch):
        chunk = numbers[start : start + batch]
        uploads = []
        try:
            for number in chunk:
                upload = Upload(layout)
                uploads.append(upload)
                upload.write(payload(tag, number))
            messages = [Outgoing(u, 1) for u in uploads]
            if batch == 1:
                results = [queues.publish(queue, uploads[0], retention_days=1)]
            else:
                results = queues.publish_many(queue, messages)
        finally:
            for upload in uploads:
                upload.discard()
        lines = "".join(
            f"{r.name} {hashlib.sha256(payload(tag, n)).hexdigest()}\n"
            for r, n in zip(results, chunk, strict=True)
        )
        with _print_lock:
            sys.stdout.write(lines)
            sys.stdout.flush()


def publish_from_another_process(data_dir: Path, queue: str, tag: str) -> str:
    """Publish one message through the core in a process of its own; its name."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.publisher", str(data_dir), queue, "1", tag],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout.decode().split()[0]


def main() -> None:
    data_dir, queue, count, tag = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    batch = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    layout = DataDir(data_dir)
    layout.ensure()
    queues = QueueStore(layout)
    shares = [list(range(i, count, threads)) for i in range(threads)]
    workers = [
        threading.Thread(target=_publish_share, args=(queues, layout, queue, tag, share, batch))
        for share in shares
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
