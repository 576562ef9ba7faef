"""The console's live view of a queue in a real browser: headless Chromium.

statissa (the real gunicorn-served process, ``tests.statissa.served``) and the live
service (``python -m zoscii_live``) run on one data directory, on two ports: two origins,
so the page's EventSource is a cross-origin request that the live service allows by CORS
(``ZOSCII_CORS_ORIGINS`` = the console's origin). A message published while the page is
open appears on it; after a reload the page shows the same list and goes on with the
messages published meanwhile and after, none missing and none twice.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.browser import headless_chromium
from tests.statissa.served import start, wait_until
from tests.support.api_server import free_port
from tests.support.live_process import LiveProcess
from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore

QUEUE = "browser-live"


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    """Overrides tests/e2e's fixture: no container here (local processes)."""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, LiveProcess, QueueStore]]:
    root = tmp_path / "data"
    data_dir = DataDir(root)
    data_dir.ensure()
    queues = QueueStore(data_dir)
    publish_body(queues, QUEUE, b"before the page")
    live_port = free_port()
    live_url = f"http://127.0.0.1:{live_port}/"
    process, base = start(root, tmp_path / "statissa.log", ZOSCII_STATISSA_LIVE_URL=live_url)
    live = LiveProcess(root, ZOSCII_LIVE_PORT=str(live_port), ZOSCII_CORS_ORIGINS=base)
    try:
        live.start()
        wait_until(lambda: requests.get(f"{base}/stats.json", timeout=5).ok, 60, "first run")
        yield base, live, queues
    finally:
        _stop(process)
        live.kill()
        queues.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def listed(driver: Any) -> list[str]:
    return [
        item.get_attribute("data-name")
        for item in driver.find_elements("css selector", "#live ol li")
    ]


def wait_listed(driver: Any, count: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(names := listed(driver)) < count:
        if time.monotonic() > deadline:
            status = driver.find_element("css selector", ".live-status").text
            raise AssertionError(f"{names} ({status})")
        time.sleep(0.1)
    return names


def test_the_queue_page_follows_the_queue_live_and_resumes_after_a_reload(
    stack: tuple[str, LiveProcess, QueueStore],
) -> None:
    base, live, queues = stack
    with headless_chromium() as driver:
        driver.get(f"{base.rstrip('/')}/queues/{QUEUE}")
        deadline = time.monotonic() + 20
        while driver.find_element("css selector", ".live-status").text != "following":
            assert time.monotonic() < deadline, driver.page_source[-2000:]
            time.sleep(0.1)
        assert listed(driver) == []  # it starts after the newest message
        first = publish_body(queues, QUEUE, "published while open ü".encode()).name
        assert wait_listed(driver, 1) == [first]
        text = driver.find_element("css selector", "#live ol li .preview").text
        assert "published while open ü" in text
        binary = publish_body(queues, QUEUE, b"\xff\x00 binary").name
        assert wait_listed(driver, 2) == [first, binary]

        driver.refresh()
        meanwhile = publish_body(queues, QUEUE, b"during the reload").name
        names = wait_listed(driver, 3)
        after = publish_body(queues, QUEUE, b"after the reload").name
        names = wait_listed(driver, 4)
        assert names == [first, binary, meanwhile, after]  # none missing, none twice
        time.sleep(1.0)
        assert listed(driver) == names
    assert live.metric("zoscii_live_messages_fetched_total", queue=QUEUE) >= 4
    sys.stdout.write(live.log()[-1000:])
