"""``strom console --console-login`` against a real broker with a SASL_PLAINTEXT listener (PLAIN)
and ACLs on (``allow.everyone.if.no.acl.found=false``, ``super.users=User:admin``), over HTTP with
a cookie jar: Alice, allowed to describe the ``visible-`` topics only, sees those and no other, and
is told "Not authorized" when she creates a topic; admin creates and deletes one; a wrong password
is "Login failed." and no session; the password is in no page and not in the console's log."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.cli.dev_cluster import wait_until
from strom.client.admin import Admin, NewTopic
from strom.client.cluster import TopicPartition
from strom.protocol.acl import AclOperation
from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tests.compat.conftest import BrokerProcess, free_port
from tests.console.browser import ConsoleProcess

PASSWORDS = {"admin": "admin-secret-4417", "alice": "alice-secret-9203"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    f' username="admin" password="{PASSWORDS["admin"]}"'
    + "".join(f' user_{user}="{password}"' for user, password in PASSWORDS.items())
    + ";"
)
HTTP_TIMEOUT_S = 60
CONSOLE_UP_S = 60.0


def broker_settings(sasl_port: int) -> dict[str, str]:
    return {
        # PLAINTEXT is where the harness sees the broker is up; with ACLs on, a connection there
        # is User:ANONYMOUS, which no ACL names.
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "strom",
        "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false",
        "offsets.topic.num.partitions": "1",
    }


def set_up_as_admin(sasl_bootstrap: str) -> None:
    admin = Admin(
        {
            "bootstrap.servers": sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": PASSWORDS["admin"],
        }
    )
    try:
        admin.create_topics([NewTopic(name, 1, 1, {}) for name in ("visible-a", "visible-b", "hidden")])
        for group_id in ("billing", "secret-group"):
            admin.alter_group_offsets(group_id, {TopicPartition("visible-a", 0): 0})
        admin.create_acls(
            [
                AclBinding(
                    ResourcePattern(ResourceType.TOPIC, "visible-", PatternType.PREFIXED),
                    AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                ),
                # Describe is all the group page needs (DescribeGroups, and OffsetFetch since KIP-163).
                AclBinding(
                    ResourcePattern(ResourceType.GROUP, "billing", PatternType.LITERAL),
                    AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
                ),
            ]
        )
    finally:
        admin.close()


@dataclass
class Stack:
    broker: BrokerProcess
    sasl_bootstrap: str
    console: ConsoleProcess


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work: Path = tmp_path_factory.mktemp("console-login")
    sasl_port = free_port()
    broker = BrokerProcess(work / "broker", broker_settings(sasl_port))
    broker.work_dir.mkdir()
    sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    console: ConsoleProcess | None = None
    try:
        broker.start()
        set_up_as_admin(sasl_bootstrap)
        # The console has no credentials of its own: only its users' (and so no lag sampler).
        console = ConsoleProcess(
            sasl_bootstrap,
            work / "console.log",
            "--console-login",
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanism=PLAIN",
        )
        yield Stack(broker, sasl_bootstrap, console)
    finally:
        if console is not None:
            console.stop()
        broker.close()


class Browser:
    """urllib with a cookie jar; answers (status, body) without raising on 4xx/5xx."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str]:
        return self._open(urllib.request.Request(self.base_url + path))

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(
            self.base_url + path, data, {"Content-Type": "application/x-www-form-urlencoded"}
        )
        return self._open(request)

    def _open(self, request: urllib.request.Request) -> tuple[int, str]:
        try:
            with self.opener.open(request, timeout=HTTP_TIMEOUT_S) as answer:
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as error:
            with error:
                return int(error.code), error.read().decode()

    def csrf(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, body
        found = re.search(r'name=csrf value="([^"]+)"', body)
        assert found is not None, body
        return found.group(1)

    def login(self, user: str, password: str) -> tuple[int, str]:
        return self.post("/login", {"csrf": self.csrf("/login"), "username": user, "password": password})


def topic_names(body: str) -> set[str]:
    return set(re.findall(r'href="/topic\?name=([^"&]+)"', body))


def test_alice_sees_only_what_her_acls_allow_and_may_not_create(stack: Stack) -> None:
    alice = Browser(stack.console.url)
    # No session: every page sends to the login page.
    status, body = alice.get("/topics")
    assert status == 200 and "name=password type=password" in body
    status, body = alice.login("alice", PASSWORDS["alice"])
    assert status == 200, body  # redirected to the cluster page
    assert "Log out" in body
    status, body = alice.get("/topics")
    assert status == 200, body
    assert topic_names(body) == {"visible-a", "visible-b"}
    status, body = alice.get("/topic?name=hidden")
    assert status == 403 and "Not authorized" in body, body
    status, body = alice.get("/topic?name=visible-a")
    assert status == 200, body
    # Groups: the one she may describe, not the other.
    status, body = alice.get("/groups")
    assert status == 200, body
    assert set(re.findall(r'<tr data-group="([^"]+)"', body)) == {"billing"}
    status, body = alice.get("/group?id=billing")
    assert status == 200, body
    status, body = alice.get("/group?id=secret-group")
    assert status == 403 and "Not authorized" in body, body
    token = alice.csrf("/topics/new")
    status, body = alice.post("/topics", {"csrf": token, "name": "alice-made", "partitions": "1"})
    assert status == 403 and "Not authorized" in body, body
    assert "Traceback" not in body
    for page in (body, alice.get("/")[1]):
        assert PASSWORDS["alice"] not in page
    # Logout closes the session: pages need a login again.
    status, body = alice.post("/logout", {"csrf": alice.csrf("/")})
    assert status == 200 and "name=password type=password" in body
    assert alice.get("/topics")[1].count("type=password") == 1


def test_admin_creates_and_deletes_a_topic(stack: Stack) -> None:
    admin = Browser(stack.console.url)
    status, body = admin.login("admin", PASSWORDS["admin"])
    assert status == 200, body
    token = admin.csrf("/topics/new")
    status, body = admin.post("/topics", {"csrf": token, "name": "made-by-admin", "partitions": "2"})
    assert status == 200 and "Topic created." in body, body
    assert "made-by-admin" in topic_names(admin.get("/topics")[1])
    status, body = admin.post(
        "/topic/delete", {"csrf": token, "name": "made-by-admin", "confirm": "made-by-admin"}
    )
    assert status == 200 and "Topic deleted." in body, body
    assert "hidden" in topic_names(admin.get("/topics")[1])  # a super user sees every topic


def test_a_wrong_password_fails_cleanly(stack: Stack) -> None:
    mallory = Browser(stack.console.url)
    status, body = mallory.login("alice", "not-her-password")
    assert status == 401, body
    assert "Login failed." in body and "Traceback" not in body
    assert not list(mallory.jar)  # no session cookie
    status, body = mallory.get("/topics")
    assert "name=password type=password" in body
    # The console goes on serving the others, and its log holds no password.
    ok = Browser(stack.console.url)
    assert ok.login("alice", PASSWORDS["alice"])[0] == 200
    log_text = stack.console.log_path.read_text()
    for password in (*PASSWORDS.values(), "not-her-password"):
        assert password not in log_text


def test_the_console_beside_a_broker_logs_in_through_its_sasl_listener(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    work: Path = tmp_path_factory.mktemp("broker-console-login")
    sasl_port, console_port = free_port(), free_port()
    broker = BrokerProcess(
        work / "broker", broker_settings(sasl_port), ["--console-port", str(console_port), "--console-login"]
    )
    broker.work_dir.mkdir()
    try:
        broker.start()
        set_up_as_admin(f"127.0.0.1:{sasl_port}")
        alice = Browser(f"http://127.0.0.1:{console_port}/")

        def console_up() -> bool:
            try:
                return alice.get("/login")[0] == 200
            except OSError:
                return False

        wait_until(console_up, "the broker's console", CONSOLE_UP_S)
        assert alice.login("alice", "wrong")[0] == 401
        status, body = alice.login("alice", PASSWORDS["alice"])
        assert status == 200, body
        assert topic_names(alice.get("/topics")[1]) == {"visible-a", "visible-b"}
    finally:
        broker.close()
    # The broker's own log (not the harness's line with the command, whose JAAS setting has it).
    logged = [line for line in broker.log_text().splitlines() if not line.startswith("===== start")]
    assert "console login of 'alice'" in "\n".join(logged)
    assert not [line for line in logged if PASSWORDS["alice"] in line]


def test_login_in_a_real_browser(stack: Stack) -> None:
    """The login page and a logged-in page in headless Chromium (the cookie's SameSite=Strict and
    HttpOnly as a browser takes them); screenshots docs/console/login.png and login-topics.png."""
    from selenium.webdriver.common.by import By

    from tests.console.browser import headless_chromium, screenshot

    with headless_chromium() as driver:
        driver.get(stack.console.url + "topics")
        wait_until(lambda: "/login" in driver.current_url, "the redirect to the login page", CONSOLE_UP_S)
        driver.find_element(By.NAME, "username").send_keys("alice")
        driver.find_element(By.NAME, "password").send_keys(PASSWORDS["alice"])
        screenshot(driver, "login")
        driver.find_element(By.CSS_SELECTOR, "form.login button").click()
        wait_until(
            lambda: bool(driver.find_elements(By.CSS_SELECTOR, "header form.logout")),
            "the logged-in page",
            CONSOLE_UP_S,
        )
        assert driver.find_element(By.CSS_SELECTOR, "header .user").text == "alice"
        cookie = driver.get_cookie("strom_console_session")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert driver.execute_script("return document.cookie") == ""  # not readable by script
        driver.get(stack.console.url + "topics")
        names = {
            element.get_attribute("data-name")
            for element in driver.find_elements(By.CSS_SELECTOR, "#topics tr[data-name]")
        }
        assert names == {"visible-a", "visible-b"}
        screenshot(driver, "login-topics")
        driver.find_element(By.CSS_SELECTOR, "header form.logout button").click()
        wait_until(lambda: "/login" in driver.current_url, "the login page after logout", CONSOLE_UP_S)
        assert driver.get_cookie("strom_console_session") is None
