"""A real browser for the page tests: Debian's headless Chromium through chromedriver.

``open_page`` loads a page from disk and returns what a person would meet: the console
errors, every request the page made (all must stay on the file), the images that did not
decode, and the driver for reading the numbers shown. Tests skip with the reason where
Chromium or chromedriver is absent (CI installs both: `.ci/run`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from helpers import unavailable

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--window-size=1280,2000",
)


def _binaries() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        unavailable(
            "chromium", "needs Debian's chromium and chromium-driver (apt install them; CI does)"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        unavailable("chromium", "needs selenium (pip install -e .[dev])")
    return browser, driver


@dataclass
class PageVisit:
    driver: object  # selenium WebDriver
    console_errors: list[str]
    requests: list[str]  # URLs the page asked for, the page itself included
    broken_images: list[str]

    def text(self, selector: str) -> str:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector).text  # type: ignore[attr-defined]

    def texts(self, selector: str) -> list[str]:
        from selenium.webdriver.common.by import By

        found = self.driver.find_elements(By.CSS_SELECTOR, selector)  # type: ignore[attr-defined]
        return [element.text for element in found]

    def screenshot(self, path: Path) -> None:
        height = self.driver.execute_script("return document.body.scrollHeight")  # type: ignore[attr-defined]
        self.driver.set_window_size(1280, max(800, int(height) + 40))  # type: ignore[attr-defined]
        self.driver.save_screenshot(str(path))  # type: ignore[attr-defined]


@contextmanager
def open_page(path: Path) -> Iterator[PageVisit]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _binaries()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(path.resolve().as_uri())
        driver.execute_script("return document.readyState")
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        requests = []
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
        broken = driver.execute_script(
            "return Array.from(document.images)"
            ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.alt || i.src)"
        )
        yield PageVisit(driver, errors, requests, list(broken))
    finally:
        driver.quit()


def assert_self_contained(visit: PageVisit, page: Path) -> None:
    """No console error, no image that does not decode, no request but the page itself and
    inline data."""
    assert visit.console_errors == []
    assert visit.broken_images == []
    outside = [
        u for u in visit.requests if u != page.resolve().as_uri() and not u.startswith("data:")
    ]
    assert outside == []


def wait_until_drawn(visit: PageVisit, timeout: float = 10.0) -> None:
    """Until a page's map viewer has drawn every image it shows (``body[data-viewer]``)."""
    from selenium.webdriver.support.ui import WebDriverWait

    state = "return document.body.dataset.viewer"
    WebDriverWait(visit.driver, timeout).until(lambda d: d.execute_script(state) == "ready")
