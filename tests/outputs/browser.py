"""A real headless browser for the HTML report's tests and its screenshot in docs/commands.md: Debian's
chromium driven through its chromedriver by selenium (``.ci/run`` installs the packages; the
test extra installs selenium). Nothing is downloaded: the system browser and driver are used."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

#: Flags that let chromium run headless as root, offline: no sandbox, no GPU, no background
#: requests, and every host name resolving to nothing.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--host-resolver-rules=MAP * ~NOTFOUND")


def missing() -> str:
    """What is missing to start the browser ("" when nothing is)."""
    import importlib.util

    if importlib.util.find_spec("selenium") is None:
        return "selenium"
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium"
    return "" if shutil.which("chromedriver") else "chromedriver"


@contextmanager
def chromium(width: int = 1400, height: int = 1000) -> Iterator:
    """A selenium driver of a fresh headless chromium (own profile, browser and network logs)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in (*CHROMIUM_FLAGS, f"--window-size={width},{height}"):
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_report(driver, uri: str, timeout_s: float = 30.0) -> None:
    """Load a report page and wait until its data is decoded and drawn (or it reported an error)."""
    import time

    driver.get(uri)
    deadline = time.monotonic() + timeout_s
    while not driver.execute_script("return !!(window.simtrain && window.simtrain.ready) || "
                                    "(window.simtrainErrors || []).length > 0"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{uri}: the report did not get ready in {timeout_s} s")
        time.sleep(0.02)


def offset_of(driver, rank: int, stream: str, t: float) -> tuple[int, int]:
    """Where time ``t`` of the timeline's row (rank, stream) is, as an offset from the canvas's
    centre (what selenium's pointer moves take)."""
    g = driver.execute_script("return window.simtrain.geometry()")
    w, h = driver.execute_script("const r = document.getElementById('tl-canvas').getBoundingClientRect();"
                                 "return [r.width, r.height];")
    row = g["rows"].index([rank, stream])
    x = g["labelWidth"] + (t - g["t0"]) / (g["t1"] - g["t0"]) * g["plotWidth"]
    y = g["axisHeight"] + (row + 0.5) * g["rowHeight"] - g["scrollY"]
    return round(x - w / 2), round(y - h / 2)


def hover(driver, rank: int, stream: str, t: float) -> str:
    """Point at time ``t`` of row (rank, stream); the tooltip's text ("" when none shows)."""
    from selenium.webdriver.common.action_chains import ActionChains

    canvas = driver.find_element("id", "tl-canvas")
    ActionChains(driver).move_to_element_with_offset(canvas, *offset_of(driver, rank, stream, t)).perform()
    tip = driver.find_element("id", "tooltip")
    return tip.text if tip.is_displayed() else ""
