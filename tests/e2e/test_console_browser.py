"""statissa's console in a real browser: headless Chromium driven by Selenium.

statissa runs as the real gunicorn-served process (``python -m tests.statissa.served``:
the production server and app exactly, computing with the plain scan instead of Spark,
so no JVM and no container image are needed; the figures are the same, see
test_figures). Messages are published into its data directory through the core, it
computes twice (the scheduled first run and a ``POST /refresh``), then the browser
opens the console: the page loads, the depth chart of the published queue has one
marker per history point, the queue page lists the latest names, and at a phone's
width (390 px) neither page scrolls sideways.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
``selenium`` (requirements-dev.txt); without them the test is skipped with the reason.
Selenium is given the driver's path: it never downloads one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.statissa.served import start, wait_until
from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore

QUEUE = "browser-orders"
OTHER = "browser-logs"
PHONE_WIDTH = 390
MIN_SPACING = 10.0  # zoscii_statissa.history.MIN_SPACING_SECONDS: points closer are dropped


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    """Overrides tests/e2e's fixture of the same name: this test starts no container
    (statissa runs as a local gunicorn process), so it needs no Docker engine."""


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
        pytest.skip(
            f"{' and '.join(missing)} not installed: apt-get install chromium chromium-driver "
            "(.ci/run does)"
        )
    return chromium, driver


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, list[str]]:
    """A data directory with two queues; the names published to QUEUE, in order."""
    root = tmp_path / "data"
    data_dir = DataDir(root)
    data_dir.ensure()
    queues = QueueStore(data_dir)
    names = [publish_body(queues, QUEUE, f"order {i}".encode()).name for i in range(12)]
    for i in range(3):
        publish_body(queues, OTHER, b"log line %d" % i)
    queues.close()
    return root, names


@pytest.fixture
def statissa(tmp_path: Path, published: tuple[Path, list[str]]) -> Iterator[str]:
    root, _ = published
    log = tmp_path / "statissa.log"
    # the first run, then our POST /refresh (the next scheduled run is an hour away)
    process, base = start(root, log)
    try:
        wait_until(
            lambda: requests.get(f"{base}/stats.json", timeout=5).ok, 60, "first computation"
        )
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        sys.stdout.write(log.read_text(errors="replace")[-2000:])


@pytest.fixture
def browser() -> Iterator[Any]:
    chromium, driver_path = _browser_paths()
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium not installed (requirements-dev.txt)"
    )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _compute_again(base: str) -> list[dict[str, Any]]:
    """A second computation, far enough from the first to be kept; the history points."""
    first = requests.get(f"{base}/stats.json", timeout=5).json()["generated_at"]
    time.sleep(max(0.0, first + MIN_SPACING + 0.5 - time.time()))
    assert requests.post(f"{base}/refresh", timeout=60).status_code == 200
    points: list[dict[str, Any]] = requests.get(f"{base}/history.json?range=1h", timeout=5).json()[
        "points"
    ]
    return points


def _overflow(driver: Any) -> int:
    """How many CSS pixels the page is wider than the viewport (0: no sideways scroll)."""
    return int(
        driver.execute_script(
            "return Math.max(document.documentElement.scrollWidth,"
            " document.body.scrollWidth) - window.innerWidth"
        )
    )


def _phone(driver: Any) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": PHONE_WIDTH, "height": 844, "deviceScaleFactor": 3, "mobile": True},
    )


def test_the_console_in_a_real_browser(
    statissa: str, published: tuple[Path, list[str]], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    _, names = published
    points = _compute_again(statissa)
    assert len(points) == 2, points
    assert [p["queues"][QUEUE][0] for p in points] == [12, 12]

    browser.get(f"{statissa}/?range=1h")
    assert "ZOSCII MQ" in browser.title
    assert browser.find_element(By.TAG_NAME, "h1").text == "ZOSCII MQ console"
    series = browser.find_element(
        By.CSS_SELECTOR, f'svg[data-metric="depth"] g.series[data-queue="{QUEUE}"]'
    )
    assert series.get_attribute("data-points") == str(len(points))
    assert len(series.find_elements(By.TAG_NAME, "circle")) == len(points)
    assert len(series.find_elements(By.TAG_NAME, "path")) == 1
    rate = browser.find_element(
        By.CSS_SELECTOR, f'svg[data-metric="rate"] g.series[data-queue="{QUEUE}"]'
    )
    assert rate.get_attribute("data-points") == str(len(points) - 1)
    assert _overflow(browser) <= 0
    browser.save_screenshot(str(tmp_path / "console-1280.png"))

    browser.find_element(By.CSS_SELECTOR, f'td.name a[href="queues/{QUEUE}"]').click()
    wait_until(lambda: browser.current_url.endswith(f"/queues/{QUEUE}"), 10, "the queue page")
    latest = browser.find_element(By.CSS_SELECTOR, "table.latest").text
    assert names[-1] in latest and names[0] in latest  # 12 names: all of them, newest first
    assert latest.index(names[-1]) < latest.index(names[0])
    assert browser.find_element(By.ID, "depth").text == "12"
    assert browser.find_element(By.ID, "actions").is_displayed()  # kept for admin actions
    queue_series = browser.find_element(
        By.CSS_SELECTOR, f'svg[data-metric="depth"] g.series[data-queue="{QUEUE}"]'
    )
    assert len(queue_series.find_elements(By.TAG_NAME, "circle")) == len(points)

    _phone(browser)
    browser.get(f"{statissa}/queues/{QUEUE}?range=1h")
    assert browser.execute_script("return window.innerWidth") == PHONE_WIDTH
    assert _overflow(browser) <= 0, "the queue page scrolls sideways at 390 px"
    browser.save_screenshot(str(tmp_path / "queue-390.png"))
    browser.get(f"{statissa}/?range=1h")
    assert _overflow(browser) <= 0, "the front page scrolls sideways at 390 px"
    chart = browser.find_element(By.CSS_SELECTOR, 'svg[data-metric="depth"]')
    assert 0 < chart.size["width"] <= PHONE_WIDTH
    browser.save_screenshot(str(tmp_path / "console-390.png"))
