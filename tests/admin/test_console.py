"""The web console in a real headless Chromium (Debian's chromium + chromedriver, driven by
Selenium): every page shows what real clients created, the charts draw, the queue page's
forms publish, get, purge and delete, the admin forms create and delete, and a screenshot
of each page lands under the test's tmp_path.

The broker runs on the test's event loop, so every blocking call (Selenium, pika) goes
through asyncio.to_thread.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from rstream import AMQPMessage, Consumer, ConsumerOffsetSpecification, OffsetType, Producer
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import Select, WebDriverWait

from mainstem import Broker
from mainstem.client.events import EventsClient
from mainstem.client.iggy import IggyClient, Message

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20
MIN_SCREENSHOT_BYTES = 20_000  # a rendered page with tables; a blank one is ~5 KB
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1100")


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    """Where the browser saves what a click downloads."""
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def browser(tmp_path_factory, downloads) -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False})
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


# -- driving the page (blocking: call through asyncio.to_thread) ---------------------------


class Console:
    def __init__(self, driver: webdriver.Chrome, admin_port: int, shots: Path) -> None:
        self.driver = driver
        self.base = f"http://127.0.0.1:{admin_port}"
        self.shots = shots

    def wait(self, condition: Callable[[webdriver.Chrome], Any]) -> Any:
        return WebDriverWait(self.driver, WAIT_S,
                             ignored_exceptions=(StaleElementReferenceException,)
                             ).until(condition)

    def log_in(self, page: str, user: str = "guest") -> None:
        self.driver.get(f"{self.base}/?poll_ms=300#{page}")
        if self.driver.find_element(By.ID, "login").is_displayed():
            self.driver.find_element(By.ID, "login-user").send_keys(user)
            self.driver.find_element(By.ID, "login-password").send_keys(user)
            self.driver.find_element(By.ID, "login-submit").click()
        self.wait(expected_conditions.visibility_of_element_located((By.ID, page)))

    def open(self, hash_route: str) -> None:
        self.driver.execute_script("location.hash = arguments[0]", hash_route)
        self.wait(expected_conditions.visibility_of_element_located(
            (By.ID, hash_route.split("/")[0])))

    # The console redraws its tables on every poll, so read them in one script, atomically.
    def names(self, table: str) -> list[str]:
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(r => r.dataset.name)",
            f"#{table} tbody tr")

    def cells(self, table: str, name: str) -> dict[str, str]:
        """The row's cells by column title."""
        return self.driver.execute_script(
            "const table = document.getElementById(arguments[0]);"
            "if (!table.tHead) return {};"
            "const row = [...table.tBodies[0].rows].find(r => r.dataset.name === arguments[1]);"
            "if (!row) return {};"
            "const titles = [...table.tHead.rows[0].cells].map(c => c.textContent);"
            "return Object.fromEntries([...row.cells].map((c, i) => [titles[i], c.textContent]))",
            table, name)

    def wait_for_row(self, table: str, name: str,
                     check: Callable[[dict[str, str]], bool] = bool) -> dict[str, str]:
        return self.wait(lambda _: (row := self.cells(table, name)) and check(row) and row)

    def wait_for_rows(self, table: str, predicate: Callable[[list[str]], bool]) -> list[str]:
        self.wait(lambda _: predicate(self.names(table)))
        return self.names(table)

    def click(self, css: str) -> None:
        """A real click, retried if a redraw replaced the element in between."""
        self.wait(lambda d: d.find_element(By.CSS_SELECTOR, css).click() or True)

    def text(self, element_id: str) -> str:
        return self.driver.find_element(By.ID, element_id).text

    def submit(self, form: str, **fields: str) -> str:
        """Fill a form's fields by name, submit it and wait for its result line."""
        form_element = self.driver.find_element(By.ID, form)
        for name, value in fields.items():
            field = form_element.find_element(By.NAME, name)
            if field.tag_name == "select":
                self.choose(Select(field), value)
            else:
                if field.get_attribute("type") != "file":
                    field.clear()
                field.send_keys(value)
        result = form_element.find_element(By.CLASS_NAME, "result")
        self.driver.execute_script("arguments[0].textContent = ''", result)
        form_element.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        return self.wait(lambda _: result.text)

    def choose(self, select: Select, value: str) -> None:
        """Select an option once a poll has filled it in (vhost and user lists)."""
        self.wait(lambda _: value in [o.get_attribute("value") for o in select.options])
        select.select_by_value(value)

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(path))
        return path


def assert_screenshot(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > MIN_SCREENSHOT_BYTES, path


@pytest.fixture
async def console(broker, browser, tmp_path) -> Console:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = Console(browser, broker.ports["admin"], shots)
    await asyncio.to_thread(page.log_in, "overview")
    return page


def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return asyncio.to_thread(function, *args, **kwargs)


# -- the clients that make the objects -----------------------------------------------------


def amqp_objects(port: int) -> pika.BlockingConnection:
    """An exchange bound to a queue holding 3 ready messages, and a queue with a consumer
    holding 2 unacked ones; the connection stays open."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1", port, credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": "console-pika"})
    connection = pika.BlockingConnection(parameters)
    channel = connection.channel()
    channel.exchange_declare("console-x", "direct")
    channel.queue_declare("console-q", durable=True)
    channel.queue_bind("console-q", "console-x", "k")
    channel.queue_declare("console-work")
    for n in range(3):
        channel.basic_publish("console-x", "k", f"ready-{n}".encode())
    for n in range(2):
        channel.basic_publish("", "console-work", f"work-{n}".encode())
    channel.basic_qos(prefetch_count=10)
    channel.basic_consume("console-work", lambda *_: None, consumer_tag="console-worker")
    connection.process_data_events(time_limit=0.2)
    return connection


def assert_shows(page: Console, table: str, name: str, **expected: str) -> None:
    row = page.wait_for_row(table, name, lambda r: all(r.get(k) == v
                                                       for k, v in expected.items()))
    assert row, (table, name)


def double_click(page: Console, table: str, name: str) -> None:
    """Delete a row by its danger button: the first click arms it, the second deletes."""
    button = f"#{table} tr[data-name='{name}'] button.danger-button"
    page.click(button)
    page.wait(lambda d: d.find_element(By.CSS_SELECTOR, button).text.startswith("Really"))
    page.click(button)
    page.wait_for_rows(table, lambda names: name not in names)


# -- the tests -----------------------------------------------------------------------------


async def test_every_page_shows_what_real_clients_made(broker, console):
    ports = broker.ports
    pika_connection = await call(amqp_objects, ports["amqp"])
    stream_args = {"host": "127.0.0.1", "port": ports["stream"], "username": "guest",
                   "password": "guest"}
    producer = Producer(**stream_args, connection_name="console-producer")
    consumer = Consumer(**stream_args, connection_name="console-consumer")
    iggy = await IggyClient.connect("127.0.0.1", ports["iggy"])
    events = await EventsClient.connect("127.0.0.1", ports["bson"], "guest", "guest")
    try:
        await producer.start()
        await producer.create_stream("console-stream")
        for n in range(5):
            await producer.send_wait("console-stream", AMQPMessage(body=f"m{n}".encode()))
        await consumer.start()
        await consumer.subscribe("console-stream", lambda *_: None, subscriber_name="reader",
                                 offset_specification=ConsumerOffsetSpecification(
                                     OffsetType.FIRST))
        await consumer.store_offset("console-stream", "reader", 1)

        await iggy.login("guest", "guest")
        await iggy.create_stream("shop")
        await iggy.create_topic("shop", "orders", partitions=2)
        await iggy.send("shop", "orders", [Message(b"o1"), Message(b"o2")], key=b"c")
        await iggy.create_group("shop", "orders", 1, "billing")
        await iggy.join_group("shop", "orders", "billing")

        await events.create_channel("visits")
        await events.publish_many("visits", [{"page": p} for p in "aab"])
        await events.create_projection("per_page", "visits", "pages", "page", "increment")

        await check_overview_charts(console)
        await check_pages(console)
    finally:
        await call(pika_connection.close)
        await consumer.close()
        await producer.close()
        await iggy.close()
        await events.close()


async def check_overview_charts(page: Console) -> None:
    # rates from the stream traffic, depth from the AMQP queues: both charts have points
    drawn = await call(page.wait, lambda d: d.execute_script(
        "const c = window.mainstemCharts;"
        "const canvases = [...document.querySelectorAll('#overview .chart canvas')];"
        "return c.rates.plot && c.depth.plot && canvases.length === 2"
        " && canvases.every(e => e.width > 0 && e.height > 0)"
        " && c.rates.data[1].some(v => v > 0) && c.depth.data[1].some(v => v > 0)"
        " && c.depth.data[2].some(v => v > 0) && c.rates.data[0].length"))
    assert drawn > 0
    assert (await call(page.text, "total-unacked")) != ""
    assert_screenshot(await call(page.screenshot, "overview"))


async def check_pages(page: Console) -> None:
    await call(page.open, "connections")
    for name in ("console-pika", "console-producer", "console-consumer"):
        await call(page.wait, lambda _, n=name: any(
            page.cells("connections-table", row).get("name") == n
            for row in page.names("connections-table")))
    assert_screenshot(await call(page.screenshot, "connections"))

    await call(page.open, "channels")
    [channel] = await call(page.wait_for_rows, "channels-table", lambda names: len(names) == 1)
    await call(assert_shows, page, "channels-table", channel, connection="console-pika",
               consumers="1", unacked="2", prefetch="10")
    assert_screenshot(await call(page.screenshot, "channels"))

    await call(page.open, "exchanges")
    await call(assert_shows, page, "exchanges-table", "console-x", type="direct")
    assert_screenshot(await call(page.screenshot, "exchanges"))

    await call(page.open, "queues")
    await call(assert_shows, page, "queues-table", "console-q", ready="3", unacked="0",
               type="classic")
    await call(assert_shows, page, "queues-table", "console-work", ready="0", unacked="2",
               consumers="1")
    assert_screenshot(await call(page.screenshot, "queues"))

    await call(page.open, "queue/%2F/console-q")
    await call(assert_shows, page, "queue-bindings-table", "console-x/k")
    assert_screenshot(await call(page.screenshot, "queue"))

    await call(page.open, "streams")
    await call(assert_shows, page, "streams-table", "console-stream", messages="5")
    publisher = (await call(page.wait_for_rows, "publishers-table", bool))[0]
    await call(assert_shows, page, "publishers-table", publisher,
               connection="console-producer", stream="console-stream", published="5")
    consumer = (await call(page.wait_for_rows, "stream-consumers-table", bool))[0]
    await call(assert_shows, page, "stream-consumers-table", consumer,
               connection="console-consumer", consumed="5", lag="0")
    await call(assert_shows, page, "offsets-table", "console-stream/reader", offset="1",
               lag="3")
    assert_screenshot(await call(page.screenshot, "streams"))

    await call(page.open, "events")
    await call(assert_shows, page, "event-channels-table", "visits", events="3")
    await call(assert_shows, page, "binders-table", "pages", documents="2")
    await call(assert_shows, page, "projections-table", "per_page", lag="0")
    assert_screenshot(await call(page.screenshot, "events"))

    await call(page.open, "iggy")
    await call(assert_shows, page, "iggy-streams-table", "shop", topics="1")
    await call(assert_shows, page, "iggy-topics-table", "orders", partitions="2",
               messages="2")
    await call(assert_shows, page, "iggy-groups-table", "billing", members="1")
    assert_screenshot(await call(page.screenshot, "iggy"))

    await call(page.open, "segments")
    await call(assert_shows, page, "segments-table", "/console-stream/0", events="5",
               sealed="open")
    await call(assert_shows, page, "segments-table", "shop/orders/1")
    assert_screenshot(await call(page.screenshot, "segments"))


async def test_queue_and_exchange_forms_bind_publish_get_purge_delete(broker, console):
    await call(console.open, "queues")
    assert "added" in await call(console.submit, "queue-form", vhost="/", name="forms-q")
    await call(console.open, "exchanges")
    assert "added" in await call(console.submit, "exchange-form", vhost="/", name="forms-x",
                                 type="fanout")
    await call(assert_shows, console, "exchanges-table", "forms-x", type="fanout")

    await call(console.open, "queue/%2F/forms-q")
    assert await call(console.submit, "bind-form", source="forms-x", routing_key="any") \
        == "Bound"
    await call(assert_shows, console, "queue-bindings-table", "forms-x/any")
    assert "published" in await call(console.submit, "publish-form", payload="hello")
    await call(console.wait, lambda _: console.text("queue-fact-ready") == "1")

    got = await call(console.submit, "get-form", ackmode="ack_requeue_false", count="2")
    assert got == "1 message(s)"
    assert (await call(console.cells, "got-table", "1"))["payload"] == "hello"
    await call(console.wait, lambda _: console.text("queue-fact-ready") == "0")

    for payload in ("a", "b"):
        await call(console.submit, "publish-form", payload=payload)
    await call(console.wait, lambda _: console.text("queue-fact-ready") == "2")
    await call(console.click, "#purge-queue")
    await call(console.wait, lambda _: console.text("queue-fact-ready") == "0")
    assert await call(console.driver.execute_script,
                      "return mainstemCharts.queue.data[1].some(v => v === 2)"
                      " && document.querySelector('#queue-chart canvas').width > 0")
    assert_screenshot(await call(console.screenshot, "queue-forms"))

    await call(console.click, "#queue-bindings-table tr[data-name='forms-x/any'] button")
    await call(console.wait_for_rows, "queue-bindings-table",
               lambda names: "forms-x/any" not in names)
    await call(console.click, "#delete-queue")  # arms it
    assert await call(console.text, "delete-queue") == "Really delete?"
    await call(console.click, "#delete-queue")
    await call(console.wait, lambda d: d.execute_script("return location.hash") == "#queues")
    await call(console.wait_for_rows, "queues-table", lambda names: "forms-q" not in names)
    assert "forms-q" not in broker.core.queues.vhosts["/"].queues

    await call(console.open, "exchanges")
    await call(double_click, console, "exchanges-table", "forms-x")
    assert "forms-x" not in [e.name for e in broker.core.queues.vhosts["/"].graph.exchanges()]


async def test_admin_forms_create_and_delete_users_vhosts_permissions(broker, console):
    catalog = broker.core.catalog
    await call(console.open, "admin")
    assert "added" in await call(console.submit, "vhost-form", name="console-vh")
    assert "added" in await call(console.submit, "user-form", name="ann", password="pw",
                                 tags="monitoring")
    await call(assert_shows, console, "users-table", "ann", tags="monitoring")
    assert "set" in await call(console.submit, "permission-form", user="ann",
                               vhost="console-vh", write="^ann-")
    await call(assert_shows, console, "permissions-table", "ann@console-vh", write="^ann-",
               read=".*")
    # guest's too: the creator of a vhost gets full permissions in it
    assert [(p.user, p.write) for p in catalog.list_permissions(namespace="console-vh")] \
        == [("ann", "^ann-"), ("guest", ".*")]
    assert_screenshot(await call(console.screenshot, "admin"))

    await call(console.click, "#permissions-table tr[data-name='ann@console-vh'] button")
    await call(console.wait_for_rows, "permissions-table",
               lambda names: "ann@console-vh" not in names)
    for table, name in (("users-table", "ann"), ("vhosts-table", "console-vh")):
        await call(double_click, console, table, name)
    assert catalog.get_user("ann") is None and catalog.get_namespace("console-vh") is None


async def test_admin_page_sets_and_clears_policies(broker, console):
    policies = broker.core.catalog.policies
    await call(console.open, "admin")
    refused = await call(console.submit, "policy-form", name="cap", pattern="^q$",
                         definition="{not json")
    assert "not JSON" in refused and policies.list("policy") == []
    assert "set" in await call(console.submit, "policy-form", name="cap", pattern="^q$",
                               priority="2", definition='{"max-length": 5}')
    assert "set" in await call(console.submit, "policy-form", kind="operator-policies",
                               name="ops", apply_to="quorum_queues",
                               definition='{"delivery-limit": 3}')
    await call(assert_shows, console, "policies-table", "policies:cap@/", pattern="^q$",
               priority="2", definition='{"max-length":5}')
    await call(assert_shows, console, "policies-table", "operator-policies:ops@/",
               kind="operator policy")
    assert policies.applied("/", "q", "classic").definition == {"max-length": 5}
    assert policies.applied("/", "q", "quorum").operator_policy == "ops"
    for name in ("policies:cap@/", "operator-policies:ops@/"):
        await call(console.click, f"#policies-table tr[data-name='{name}'] button")
        await call(console.wait_for_rows, "policies-table", lambda names, n=name: n not in names)
    assert policies.list("policy") == policies.list("operator_policy") == []


async def test_closing_a_connection_from_the_console(broker, console):
    """A close asks first, as every delete does: the first click only arms the button."""
    args = {"host": "127.0.0.1", "port": broker.ports["stream"], "username": "guest",
            "password": "guest"}
    producer = Producer(**args, connection_name="to-close")
    await producer.start()
    try:
        await call(console.open, "connections")
        names = await call(console.wait_for_rows, "connections-table",
                           lambda n: len(n) == 1)
        assert names == [broker.connections.list()[0].name]
        button = "#connections-table .close-connection"
        await call(console.click, button)
        await call(console.wait, lambda d: d.find_element(By.CSS_SELECTOR, button).text
                   == "Really close?")
        await asyncio.sleep(1)  # three polls: the connection stays
        assert len(broker.connections) == 1
        await call(console.click, button)
        assert await call(console.wait_for_rows, "connections-table", lambda n: not n) == []
        assert len(broker.connections) == 0
    finally:
        await producer.close()


async def test_wrong_password_shows_the_login_again(broker, browser):
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    await call(browser.get, base + "/")
    await call(browser.execute_script, "sessionStorage.clear()")
    await call(browser.get, base + "/?again=1#overview")  # a real reload
    await call(lambda: browser.find_element(By.ID, "login-user").send_keys("guest"))
    await call(lambda: browser.find_element(By.ID, "login-password").send_keys("nope"))
    await call(lambda: browser.find_element(By.ID, "login-submit").click())
    await call(WebDriverWait(browser, WAIT_S).until, lambda d: "Login failed" in
               d.find_element(By.ID, "login-error").text)


async def test_a_management_user_is_shown_refusals_not_logged_out(broker, browser):
    """A user tagged management uses the console for its vhosts; a page outside its scope
    (Admin: users and permissions) shows RabbitMQ's reason, and the user stays logged in."""
    broker.core.catalog.add_namespace("team")
    broker.core.auth.add_user("manager", "manager", tags=["management"])
    broker.core.auth.set_permissions("manager", "team", ".*", ".*", ".*")
    broker.core.queues.vhost("team").declare_queue(
        "team-q", durable=True, exclusive=False, auto_delete=False, arguments={}, owner=None)
    base = f"http://127.0.0.1:{broker.ports['admin']}"
    await call(browser.get, base + "/")
    await call(browser.execute_script, "sessionStorage.clear()")
    await call(browser.get, base + "/?poll_ms=300&scoped=1#queues")
    await call(lambda: browser.find_element(By.ID, "login-user").send_keys("manager"))
    await call(lambda: browser.find_element(By.ID, "login-password").send_keys("manager"))
    await call(lambda: browser.find_element(By.ID, "login-submit").click())
    await call(WebDriverWait(browser, WAIT_S).until, lambda d: "team-q" in
               d.find_element(By.ID, "queues").text)
    await call(browser.get, base + "/?poll_ms=300&scoped=1#admin")
    await call(WebDriverWait(browser, WAIT_S).until, lambda d: "Not administrator user" in
               d.find_element(By.ID, "status").text)
    assert not await call(lambda: browser.find_element(By.ID, "login").is_displayed())
    await call(browser.execute_script, "sessionStorage.clear()")


# -- issue 43: what a RabbitMQ team reaches for ---------------------------------------------

CHART_LABELS = """
const done = arguments[arguments.length - 1];
// a chart of the console's own kind, on an element of its own: no poll redraws it
const element = document.createElement("div");
element.id = "big-counts-chart";
element.className = "chart";
document.querySelector("#overview .charts").append(element);
const chart = new window.mainstemCharts.depth.constructor(element.id, ["ready", "unacked"], "");
const now = Date.now() / 1000;
chart.replace([now - 2, now - 1, now], [[150000, 2500000, 1200000], [0, 0, 0]]);
chart.draw();
setTimeout(() => {
  const axis = chart.plot.axes[1];
  const ctx = chart.plot.ctx;
  ctx.font = axis.font[0];
  const room = (axis._size - axis.ticks.size - axis.gap) * devicePixelRatio;
  const labels = axis._values.map((label) => [label, ctx.measureText(label).width <= room]);
  chart.reset();
  element.remove();
  done(labels);
}, 100);
"""


async def test_overview_charts_keep_their_history_across_a_reload(broker, console):
    """The charts are the broker's samples: a reload shows the minutes before it. Labels
    of 100,000 and more fit the y axis (as 150k, 2.5M)."""
    connection = await call(amqp_objects, broker.ports["amqp"])
    try:
        first = await call(console.wait, lambda d: d.execute_script(
            "const d = mainstemCharts.depth.data;"
            "const i = d[1].findIndex(v => v === 3);"
            "return i >= 0 && d[0].length >= i + 3 && d[0][i]"))
        await call(console.driver.refresh)
        await call(console.wait, expected_conditions.visibility_of_element_located(
            (By.ID, "overview")))
        times = await call(console.wait, lambda d: d.execute_script(
            "const d = mainstemCharts.depth.data;"
            "return d[0].length > 2 && d[1].includes(3) && mainstemCharts.depth.plot && d[0]"))
        assert times[0] <= first  # from before the reload
        labels = await call(console.driver.execute_async_script, CHART_LABELS)
        assert labels and all(fits for _, fits in labels), labels
        assert {"1M", "2M"} <= {label for label, _ in labels}, labels
    finally:
        await call(connection.close)


async def test_exchange_page_shows_arguments_policy_and_bindings(broker, console, http):
    def topology() -> None:
        connection = pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", broker.ports["amqp"],
            credentials=pika.PlainCredentials("guest", "guest")))
        channel = connection.channel()
        channel.exchange_declare("orders", "topic", arguments={"alternate-exchange": "dead"})
        channel.exchange_declare("web", "fanout")
        channel.exchange_bind("orders", "web", "from-web")
        channel.queue_declare("paid", durable=True)
        channel.queue_bind("paid", "orders", "order.*.paid")
        connection.close()

    await call(topology)
    async with http.put("/api/policies/%2F/orders-ae", json={
            "pattern": "^orders$", "apply-to": "exchanges",
            "definition": {"alternate-exchange": "dead"}}) as answer:
        assert answer.status in (201, 204), await answer.text()
    await call(console.open, "exchanges")
    await call(console.click, "#exchanges-table tr[data-name='orders'] a")
    await call(console.wait, lambda d: d.execute_script("return location.hash")
               == "#exchange/%2F/orders")
    await call(console.wait, lambda _: console.text("exchange-fact-policy") == "orders-ae")
    assert await call(console.text, "exchange-fact-type") == "topic"
    assert await call(console.text, "exchange-fact-arguments") == '{"alternate-exchange":"dead"}'
    await call(assert_shows, console, "exchange-source-table", "queue:paid/order.*.paid",
               to="paid", kind="queue", **{"routing key": "order.*.paid"})
    await call(assert_shows, console, "exchange-destination-table", "web/from-web",
               **{"from": "web", "routing key": "from-web"})
    assert await call(console.driver.execute_script,
                      "return document.querySelector('#nav-exchanges').className") == "active"
    assert_screenshot(await call(console.screenshot, "exchange"))


async def test_admin_limits_topic_permissions_and_definitions(broker, console, downloads):
    catalog = broker.core.catalog
    await call(console.open, "admin")
    fixture = Path(__file__).parent / "fixtures" / "rabbitmq-3.10.8-migration.json"
    result = await call(console.submit, "import-form", file=str(fixture))
    assert result.startswith("Imported rabbitmq-3.10.8-migration.json; policy"), result
    assert "ignored ha-mode, ha-sync-mode" in result
    await call(assert_shows, console, "users-table", "orders-api", tags="management")
    await call(assert_shows, console, "topic-permissions-table", "orders-api@shop/orders",
               write="^order\\.", read="")
    await call(assert_shows, console, "limits-table", "vhost-limits:shop/max-queues",
               value="50", of="virtual host")
    await call(assert_shows, console, "limits-table", "user-limits:batch/max-connections",
               value="5", of="user")

    assert "set" in await call(console.submit, "limit-form", kind="vhost-limits",
                               owner="iot", limit="max-queues", value="7")
    assert "set" in await call(console.submit, "topic-permission-form", user="ops",
                               vhost="iot", exchange="amq.topic", write="^ops\\.")
    await call(assert_shows, console, "limits-table", "vhost-limits:iot/max-queues",
               value="7")
    await call(assert_shows, console, "topic-permissions-table", "ops@iot/amq.topic",
               write="^ops\\.", read=".*")
    assert [(t.exchange, t.write) for t in catalog.list_topic_permissions("ops")] == [
        ("amq.topic", "^ops\\.")]
    for row in ("topic-permissions-table", "ops@iot/amq.topic"), \
               ("limits-table", "vhost-limits:iot/max-queues"):
        await call(console.click, f"#{row[0]} tr[data-name='{row[1]}'] button")
        await call(console.wait_for_rows, row[0], lambda names, n=row[1]: n not in names)
    assert catalog.list_topic_permissions("ops") == []
    assert_screenshot(await call(console.screenshot, "admin-limits"))

    await call(console.click, "#export-definitions")
    saved = downloads / "mainstem-definitions.json"
    exported = await call(console.wait, lambda _: saved.exists() and saved.read_text())
    names = {user["name"] for user in json.loads(exported)["users"]}
    assert {"guest", "orders-api", "batch"} <= names


async def test_logging_out_clears_what_the_previous_user_saw(broker, console):
    connection = await call(amqp_objects, broker.ports["amqp"])
    try:
        await call(console.open, "queues")
        await call(assert_shows, console, "queues-table", "console-q", ready="3")
        await call(console.open, "admin")
        await call(assert_shows, console, "users-table", "guest")
        await call(console.click, "#logout")
        await call(console.wait, lambda d: d.find_element(By.ID, "login").is_displayed())
        left = await call(console.driver.execute_script, """
            const main = document.querySelector("main");
            return {rows: main.querySelectorAll("tbody tr, dd, select.vhost-select option,"
                                                + " select.user-select option").length,
                    points: Object.values(mainstemCharts).map(c => c.data[0].length),
                    canvases: main.querySelectorAll("canvas").length,
                    text: [...main.querySelectorAll("section")].map(e => e.textContent)
                      .join(" "),
                    hash: location.hash}""")
        assert left["rows"] == 0 and left["canvases"] == 0, left
        assert left["points"] == [0, 0, 0] and left["hash"] == ""
        for seen in ("console-q", "guest", "console-x"):
            assert seen not in left["text"], seen
    finally:
        await call(connection.close)


async def test_a_stopped_broker_gets_a_banner(browser, tmp_path):
    async with Broker(tmp_path / "stopping") as stopping:
        page = Console(browser, stopping.ports["admin"], tmp_path)
        await call(page.log_in, "overview")
        await call(page.wait, lambda _: page.text("total-queues") == "0")
        assert not await call(lambda: browser.find_element(By.ID, "down-banner").is_displayed())
    await call(page.wait, lambda d: d.find_element(By.ID, "down-banner").is_displayed())
    assert "not answering" in await call(page.text, "down-banner")
    assert await call(page.text, "total-queues") == "0"  # what was seen stays
    await call(browser.execute_script, "sessionStorage.clear()")
