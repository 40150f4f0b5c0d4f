"""What the browser tests share: a headless Chromium driven by selenium (Debian's ``chromium`` and
``chromium-driver``, ``make system-deps``), a ``strom console`` process, and screenshots."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from strom.cli.dev_cluster import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# The screenshots docs/console.md shows: taken by every run, written over docs/console/ only when
# STROM_UPDATE_SCREENSHOTS=1 (so running the suite leaves the working tree as it was).
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "console"
    if os.environ.get("STROM_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "strom-console-screenshots"
)
WIDTH = 1280
HEIGHT_MAX = 1500
CONSOLE_START_TIMEOUT_S = 60.0


@contextlib.contextmanager
def headless_chromium() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in [
        "--headless=new",
        "--no-sandbox",  # the tests run as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        f"--window-size={WIDTH},900",
        "--hide-scrollbars",
    ]:
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(60)
        yield driver
    finally:
        driver.quit()


def screenshot(driver: webdriver.Chrome, name: str) -> Path:
    """The whole page (up to HEIGHT_MAX pixels high) as NAME.png in SCREENSHOTS."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    # The window's size counts the browser's own frame; the page gets what is left of it.
    frame = int(driver.execute_script("return window.outerHeight - window.innerHeight"))
    driver.set_window_size(WIDTH, min(max(height + 20, 400), HEIGHT_MAX) + frame)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    driver.set_window_size(WIDTH, 900)
    return path


class ConsoleProcess:
    """``strom console`` on a free port (it prints its URL), stopped by its PID."""

    def __init__(self, bootstrap: str, log_path: Path, *arguments: str) -> None:
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strom.cli.main",
                "-v",  # the console's info lines (a lag sample skipped, and why) in its log
                "console",
                "--bootstrap-server",
                bootstrap,
                "--port",
                "0",
                *arguments,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.url = ""

        def started() -> bool:
            assert self.process.poll() is None, self.log_path.read_text()
            found = re.search(r"strom console on (http://\S+/)", self.log_path.read_text())
            if found:
                self.url = found.group(1)
            return bool(found)

        wait_until(started, "strom console to print its URL", CONSOLE_START_TIMEOUT_S)

    def stop(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        self._log.close()
        return self.process.returncode
