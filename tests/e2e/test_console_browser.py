"""statissa's console in a real browser: headless Chromium driven by Selenium.

statissa runs as the real gunicorn-served process (``python -m tests.statissa.served``:
the production server and app exactly, computing with the plain scan instead of Spark,
so no JVM and no container image are needed; the figures are the same, see
test_figures). Messages are published into its data directory through the core, it
computes twice (the scheduled first run and a ``POST /refresh``), then the browser
opens the console: the page loads, the depth chart of the published queue has one
marker per history point, the queue page lists the latest names, and at a phone's
width (390 px) neither page scrolls sideways.

The admin actions run against a real api as well (gunicorn, ``tests.support.api_server``)
on the same data directory, both with access control on: the browser sends an
operator's token (Chrome DevTools' extra headers, as a browser sends remembered Basic
credentials), clicks purge, confirms by typing the queue name, and the api then reports
the queue empty; a message's page shows the bytes that were published; an operator
without the admin right is offered no button and the api refuses the steps.

The browser is ``tests.e2e.browser``'s headless Chromium (skipped, with the reason,
where it is not installed); test_compose opens the same console in the real stack.
"""

from __future__ import annotations

import hashlib
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
from tests.support.api_server import ApiServer
from tests.support.queues import publish_body
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir, QueueStore

QUEUE = "browser-orders"
OTHER = "browser-logs"
PHONE_WIDTH = 390
MIN_SPACING = 10.0  # zoscii_statissa.history.MIN_SPACING_SECONDS: points closer are dropped
ADMIN = "browser-admin-" + "a" * 24  # statistics, admin, reads every queue
VIEWER = "browser-viewer-" + "v" * 24  # statistics only
CLIENTS = "\n".join(
    f'[[clients]]\nname = "{name}"\ntoken_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"'
    f"\nread = {read}\nactions = {actions}\n"
    for name, token, read, actions in (
        ("ops", ADMIN, '["*"]', '["statistics", "admin", "metrics"]'),
        ("viewer", VIEWER, "[]", '["statistics"]'),
    )
)


@pytest.fixture(autouse=True)
def _require_engine() -> None:
    """Overrides tests/e2e's fixture of the same name: this test starts no container
    (statissa runs as a local gunicorn process), so it needs no Docker engine."""


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
        _stop(process, log)


def _stop(process: subprocess.Popen[bytes], log: Path) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    sys.stdout.write(log.read_text(errors="replace")[-2000:])


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def admin_stack(tmp_path: Path, published: tuple[Path, list[str]]) -> Iterator[tuple[str, str]]:
    """The api and statissa on the published data directory, access control on in both,
    statissa relaying its admin actions to the api: (statissa's URL, the api's URL)."""
    root, _ = published
    api = ApiServer(root, workers=1, threads=4, env={"ZOSCII_AUTH_CLIENTS": CLIENTS}).start()
    log = tmp_path / "statissa.log"
    process, base = start(
        root,
        log,
        ZOSCII_AUTH_CLIENTS=CLIENTS,
        ZOSCII_STATISSA_API_URL=api.url,  # fetch counts from its /metrics too
        ZOSCII_STATISSA_API_METRICS_TOKEN=ADMIN,
    )
    try:
        wait_until(
            lambda: requests.get(f"{base}/stats.json", headers=_bearer(ADMIN), timeout=5).ok,
            60,
            "first computation",
        )
        yield base, api.url
    finally:
        _stop(process, log)
        api.stop()


def _as(driver: Any, token: str) -> None:
    """Every request of ``driver`` carries ``token`` from now on."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": _bearer(token)})


@pytest.fixture
def browser() -> Iterator[Any]:
    with headless_chromium() as driver:
        yield driver


def _compute_again(base: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A second computation, far enough from the first to be kept; the history points."""
    first = requests.get(f"{base}/stats.json", headers=headers, timeout=5).json()["generated_at"]
    time.sleep(max(0.0, first + MIN_SPACING + 0.5 - time.time()))
    assert requests.post(f"{base}/refresh", headers=headers, timeout=60).status_code == 200
    reply = requests.get(f"{base}/history.json?range=1h", headers=headers, timeout=5)
    points: list[dict[str, Any]] = reply.json()["points"]
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


LONG_QUEUE = "orders-from-partner-alpha-in-the-north-region-2026"  # 50 characters


def test_at_1280_px_tables_fit_labels_are_readable_and_time_stops_at_the_figures(
    statissa: str, published: tuple[Path, list[str]], browser: Any
) -> None:
    """Issue 29: the Queues table overflowed its card at 1280 px, the charts' labels were
    6-7 px, and a chart of one point (a rate, after two computations) ran its time axis
    30 s past the time of the figures."""
    from selenium.webdriver.common.by import By

    root, _ = published
    queues = QueueStore(DataDir(root))
    publish_body(queues, LONG_QUEUE, b"a message of a partner with a long queue name")
    queues.close()
    _compute_again(statissa)
    browser.get(f"{statissa}/?range=1h")
    assert browser.execute_script("return window.innerWidth") == 1280
    generated = browser.find_element(By.CSS_SELECTOR, "header .meta").text
    moment = generated.split("Generated at ")[1].split(" (UTC)")[0]  # YYYY-MM-DD HH:MM:SS
    layout = browser.execute_script(
        """
        const queues = [...document.querySelectorAll('section')]
          .find(s => s.querySelector('h2').textContent.trim() === 'Queues');
        const charts = [...document.querySelectorAll('svg.chart-svg')].map(svg => {
          const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
          const ticks = [...svg.querySelectorAll('text.tick')];
          return {metric: svg.dataset.metric, last: ticks[ticks.length - 1].textContent,
                  px: Math.min(...ticks.map(t =>
                        parseFloat(getComputedStyle(t).fontSize) * scale))};
        });
        return {scroll: queues.scrollWidth, width: queues.clientWidth, charts: charts};
        """
    )
    assert layout["scroll"] <= layout["width"], layout  # the card holds its table
    metrics = {c["metric"] for c in layout["charts"]}
    assert {"depth", "rate", "age"} <= metrics, layout
    for chart in layout["charts"]:
        assert chart["px"] >= 10.5, chart  # drawn at 11 px or more, not 6-7
        assert chart["last"] == moment[11:], (chart, moment)  # ends at the figures' time
    assert browser.find_element(By.CSS_SELECTOR, f'a[href="queues/{LONG_QUEUE}"]')


def test_a_purge_through_the_ui_removes_the_messages(
    admin_stack: tuple[str, str], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, api = admin_stack
    _as(browser, ADMIN)
    browser.get(f"{base}/queues/{QUEUE}")
    browser.find_element(By.ID, "purge").click()  # "before" left empty: every message
    wait_until(lambda: "/admin/purge" in browser.current_url, 10, "the confirmation page")
    assert "The api counts 12 message(s)" in browser.find_element(By.ID, "figures").text
    browser.find_element(By.ID, "confirm-button").click()  # the name not typed yet
    assert browser.find_elements(By.ID, "confirm-step"), "submitted without the name"
    browser.find_element(By.ID, "confirm").send_keys(QUEUE)
    browser.find_element(By.ID, "confirm-button").click()
    wait_until(lambda: browser.find_elements(By.ID, "result"), 30, "the purge's result")
    assert browser.find_element(By.ID, "result-purged").text == "12"

    with ZosciiClient(api, headers=_bearer(ADMIN)) as client:
        assert client.queues(QUEUE)[0]["messages"] == 0
        assert client.fetch(QUEUE) is None
        assert client.queues(OTHER)[0]["messages"] == 3  # nothing else touched
    browser.find_element(By.LINK_TEXT, f"Back to {QUEUE}").click()
    wait_until(lambda: browser.current_url.endswith(f"/queues/{QUEUE}"), 10, "the queue page")
    assert "No messages." in browser.find_element(By.TAG_NAME, "main").text


def test_the_fetch_rate_chart_shows_what_consumers_fetched(
    admin_stack: tuple[str, str], browser: Any
) -> None:
    """Messages fetched through the api between two computations: the second point
    carries the api's count, and the console charts the rate from it."""
    from selenium.webdriver.common.by import By

    base, api = admin_stack
    with ZosciiClient(api, headers=_bearer(ADMIN)) as client:
        pointer = ""
        for _ in range(5):
            message = client.fetch(QUEUE, pointer)
            assert message is not None
            pointer = message.name
    points = _compute_again(base, _bearer(ADMIN))
    assert len(points) == 2, points
    assert [p["queues"][QUEUE][4] for p in points] == [0.0, 5.0]
    minutes = (points[1]["at"] - points[0]["at"]) / 60

    _as(browser, ADMIN)
    browser.get(f"{base}/?range=1h")
    series = browser.find_element(
        By.CSS_SELECTOR, f'svg[data-metric="fetch"] g.series[data-queue="{QUEUE}"]'
    )
    assert series.get_attribute("data-points") == "1"
    tooltip = series.find_element(By.CSS_SELECTOR, "circle title").get_attribute("textContent")
    assert tooltip.endswith(f"{5 / minutes:.1f}/min"), tooltip
    other = browser.find_element(
        By.CSS_SELECTOR, f'svg[data-metric="fetch"] g.series[data-queue="{OTHER}"]'
    )
    assert (
        other.find_element(By.CSS_SELECTOR, "circle title")
        .get_attribute("textContent")
        .endswith("0.0/min")
    )


def test_a_message_page_shows_the_published_bytes(
    admin_stack: tuple[str, str], published: tuple[Path, list[str]], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, _ = admin_stack
    _, names = published
    _as(browser, ADMIN)
    browser.get(f"{base}/queues/{QUEUE}")
    browser.find_element(By.LINK_TEXT, names[3]).click()
    wait_until(lambda: browser.current_url.endswith(names[3]), 10, "the message page")
    assert browser.find_element(By.ID, "head").text == "order 3"
    assert browser.find_element(By.ID, "size").text.startswith("7 bytes")
    assert browser.find_element(By.ID, "published").text.startswith(
        f"{names[3][0:4]}-{names[3][4:6]}-{names[3][6:8]} "
    )
    _phone(browser)  # the message and confirmation pages fit a phone too
    browser.get(f"{base}/queues/{QUEUE}/messages/{names[3]}")
    assert _overflow(browser) <= 0, "the message page scrolls sideways at 390 px"
    browser.get(f"{base}/queues/{QUEUE}/admin/purge?before=2020-01-01T00:00:00Z")
    assert browser.find_elements(By.ID, "confirm-button")
    assert _overflow(browser) <= 0, "the confirmation page scrolls sideways at 390 px"


def test_without_the_admin_right_nothing_is_offered_and_the_steps_are_refused(
    admin_stack: tuple[str, str], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, api = admin_stack
    _as(browser, VIEWER)
    browser.get(f"{base}/queues/{QUEUE}")
    assert browser.find_element(By.ID, "depth").text == "12"  # the page itself is open
    assert not browser.find_elements(By.ID, "purge")
    assert not browser.find_elements(By.ID, "delete")
    assert "it answered 403" in browser.find_element(By.ID, "actions-note").text
    browser.get(f"{base}/queues/{QUEUE}/admin/purge")  # typed in by hand
    assert "Not allowed" in browser.find_element(By.ID, "error").text
    assert not browser.find_elements(By.ID, "confirm-button")
    # a POST that is not the console's own form (no token) never reaches the api
    forged = requests.post(
        f"{base}/queues/{QUEUE}/admin/purge",
        data={"confirm": QUEUE, "token": "1.0"},
        headers={**_bearer(VIEWER), "Origin": base},
        timeout=10,
    )
    assert forged.status_code == 403
    with ZosciiClient(api, headers=_bearer(ADMIN)) as client:
        assert client.queues(QUEUE)[0]["messages"] == 12
