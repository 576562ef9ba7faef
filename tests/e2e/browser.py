"""Headless Chromium from Debian's packages, driven by Selenium, for the console's tests.

Needs ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and ``selenium``
(requirements-dev.txt); without them the calling test is skipped with the reason.
Selenium is given the driver's path: it never downloads one.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver), or the test is skipped naming what is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        missing = [n for n, p in (("chromium", chromium), ("chromedriver", driver)) if not p]
        pytest.skip(
            f"{' and '.join(missing)} not installed: apt-get install chromium chromium-driver "
            "(.ci/run does)"
        )
    return chromium, driver


@contextlib.contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Selenium driver of a headless Chromium, 1280 x 900, quit at the end."""
    chromium, driver_path = browser_paths()
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
