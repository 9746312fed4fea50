"""The web console in a real headless Chromium (Debian's chromium + chromedriver, driven by
Selenium): pages load, show what a test created, and closing a connection works."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator

import pytest
from rstream import Producer
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage")


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def test_chromium_is_installed():
    # scripts/test installs them; a missing browser must fail, not skip
    assert shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)


def log_in(driver: webdriver.Chrome, base: str, page: str) -> None:
    driver.get(f"{base}/?poll_ms=300#{page}")
    wait = WebDriverWait(driver, WAIT_S)
    if driver.find_element(By.ID, "login").is_displayed():
        driver.find_element(By.ID, "login-user").send_keys("guest")
        driver.find_element(By.ID, "login-password").send_keys("guest")
        driver.find_element(By.ID, "login-submit").click()
    wait.until(expected_conditions.visibility_of_element_located((By.ID, page)))


# The console redraws its tables on every poll, so read them in one script, atomically.
def table_names(driver: webdriver.Chrome, table: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.name)",
        f"#{table} tbody tr")


def row_cells(driver: webdriver.Chrome, table: str, name: str) -> list[str]:
    return driver.execute_script(
        "const row = [...document.querySelectorAll(arguments[0])]"
        ".find(r => r.dataset.name === arguments[1]);"
        "return row ? [...row.cells].map(c => c.textContent) : [];", f"#{table} tbody tr", name)


def click(driver: webdriver.Chrome, css: str) -> None:
    """A real click, retried if a redraw replaced the element in between."""
    WebDriverWait(driver, WAIT_S, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True)


def wait_for_rows(driver: webdriver.Chrome, table: str, predicate) -> list[str]:
    WebDriverWait(driver, WAIT_S).until(lambda d: predicate(table_names(d, table)))
    return table_names(driver, table)


async def test_overview_streams_and_queues_pages(broker, browser):
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    await asyncio.to_thread(log_in, browser, base, "overview")
    listeners = await asyncio.to_thread(
        wait_for_rows, browser, "listeners-table", lambda names: "stream" in names)
    assert "admin" in listeners

    broker.core.streams.create("/", "console-visible", 2)
    browser.find_element(By.ID, "nav-streams").click()
    assert "console-visible" in await asyncio.to_thread(
        wait_for_rows, browser, "streams-table", lambda names: "console-visible" in names)
    assert row_cells(browser, "streams-table", "console-visible")[2] == "2"  # partitions

    browser.find_element(By.ID, "nav-queues").click()
    await asyncio.to_thread(
        wait_for_rows, browser, "queues-table", lambda names: "console-visible" in names)
    # live update: a stream deleted elsewhere disappears without reloading the page
    await broker.core.streams.delete("/", "console-visible")
    assert await asyncio.to_thread(wait_for_rows, browser, "queues-table", lambda n: not n) == []

    browser.find_element(By.ID, "nav-overview").click()
    await asyncio.to_thread(WebDriverWait(browser, WAIT_S).until,
                            lambda d: d.find_element(By.ID, "total-streams").text == "0")


async def test_closing_a_connection_from_the_console(broker, browser):
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    closed = asyncio.Event()
    producer = Producer(**args, on_close_handler=lambda *_: closed.set())
    await producer.start()
    try:
        await asyncio.to_thread(log_in, browser, base, "connections")
        names = await asyncio.to_thread(wait_for_rows, browser, "connections-table",
                                        lambda n: len(n) == 1)
        assert names == [broker.connections.list()[0].name]
        await asyncio.to_thread(click, browser, "#connections-table .close-connection")
        assert await asyncio.to_thread(
            wait_for_rows, browser, "connections-table", lambda n: not n) == []
        assert len(broker.connections) == 0
    finally:
        await producer.close()


async def test_wrong_password_shows_the_login_again(broker, browser):
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    await asyncio.to_thread(browser.get, base + "/")
    await asyncio.to_thread(browser.execute_script, "sessionStorage.clear()")
    await asyncio.to_thread(browser.get, base + "/?again=1#overview")  # a real reload
    browser.find_element(By.ID, "login-user").send_keys("guest")
    browser.find_element(By.ID, "login-password").send_keys("nope")
    browser.find_element(By.ID, "login-submit").click()
    await asyncio.to_thread(WebDriverWait(browser, WAIT_S).until, lambda d: "Login failed" in
                            d.find_element(By.ID, "login-error").text)
