"""A run beside live publishers and consumers: nothing acknowledged is lost or skipped."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.message_files import all_files, write_queue_message, write_store_message
from zoscii_claireup.cleaner import Cleaner
from zosciimq.core import DataStore, QueueStore, Upload
from zosciimq.core.index import IndexFile

QUEUES = ("alpha", "beta")
EXPIRED_PER_QUEUE = 3000


@pytest.mark.slow  # 8000 expired files deleted while five threads publish, store and read
@pytest.mark.timeout(120)
def test_concurrent_publishes_survive_a_run_and_consumers_see_them_in_order(data_dir):
    now = datetime.now(UTC)
    expired = set()
    for queue in QUEUES:
        for number in range(EXPIRED_PER_QUEUE):
            published = now - timedelta(days=2, seconds=EXPIRED_PER_QUEUE - number)
            expired.add(write_queue_message(data_dir, queue, published, 1))
    for number in range(2000):
        expired.add(write_store_message(data_dir, now - timedelta(days=3, seconds=number), 1))
    for queue in QUEUES:
        QueueStore(data_dir).rebuild_index(queue)

    acknowledged: dict[str, list[str]] = {queue: [] for queue in QUEUES}
    stored: list[str] = []
    during_run = [0]
    run_window = {"start": float("inf"), "end": float("inf")}
    stop_publishing = threading.Event()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def publisher(worker: int) -> None:
        queues = QueueStore(data_dir)
        try:
            while not stop_publishing.is_set():
                for queue in QUEUES:
                    with Upload(data_dir) as upload:
                        upload.write(b"worker %d" % worker)
                        name = queues.publish(queue, upload, retention_days=1).name
                    with lock:
                        acknowledged[queue].append(name)
                        if run_window["start"] <= time.monotonic() <= run_window["end"]:
                            during_run[0] += 1
        except BaseException as exc:
            errors.append(exc)

    def storer() -> None:
        store = DataStore(data_dir)
        try:
            while not stop_publishing.is_set():
                with Upload(data_dir) as upload:
                    upload.write(b"stored")
                    stored.append(store.store(upload, retention_days=1).name)
        except BaseException as exc:
            errors.append(exc)

    seen: dict[str, list[str]] = {queue: [] for queue in QUEUES}

    def consume_all(queues: QueueStore, queue: str) -> None:
        pointer = seen[queue][-1] if seen[queue] else ""
        while True:
            result = queues.fetch(queue, after=pointer)
            if result.file is None:
                return
            result.close()
            seen[queue].append(result.name)
            pointer = result.name

    def consumer() -> None:
        queues = QueueStore(data_dir)
        try:
            while not stop_publishing.is_set():
                for queue in QUEUES:
                    consume_all(queues, queue)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(3)]
    threads += [threading.Thread(target=storer), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    while sum(map(len, acknowledged.values())) < 20:  # publishing is under way
        time.sleep(0.01)

    with lock:
        run_window["start"] = time.monotonic()
    report = Cleaner(data_dir, nonce_window_seconds=300, temp_max_age_seconds=3600).run()
    with lock:
        run_window["end"] = time.monotonic()

    stop_publishing.set()
    for thread in threads:
        thread.join()
    assert not errors
    assert during_run[0] > 0, "no publish overlapped the run; the test proved nothing"

    assert report.outcome == "success"
    assert report.total().deleted == len(expired)
    queues = QueueStore(data_dir)
    for queue in QUEUES:
        on_disk = {path.name for path in all_files(data_dir.queue_dir(queue))}
        assert on_disk == set(acknowledged[queue])
        # a consumer that kept reading during the run saw every acknowledged message
        # once, in name order (it may also have read expired ones before they went)
        consume_all(queues, queue)
        assert seen[queue] == sorted(set(seen[queue]))
        assert set(acknowledged[queue]) <= set(seen[queue])
        with IndexFile.open(data_dir.index_path(queue)) as index:
            indexed = list(index.iter_from(0, index.header().committed))
        assert indexed == sorted(acknowledged[queue])
    for name in stored:
        DataStore(data_dir).retrieve(name)[1].close()
    assert not any(path.exists() for path in expired)
