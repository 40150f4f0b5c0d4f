"""The console under --console-login, against in-memory clusters: every page needs a session, the
login form (CSRF-protected) opens one with the user's own source, a failed login says "Login
failed." and nothing more, the cookie's flags, logout (CSRF-protected) closes the user's clients,
the session table's bounds (count and idle time), and an authorization error shown as such."""

from __future__ import annotations

import re

import pytest

from strom.client.cluster import TopicPartition
from strom.client.errors import AuthenticationError, error_for_code
from strom.console.app import SESSION_COOKIE, Console, ConsoleOptions
from strom.console.http import Request, Response
from strom.console.sessions import Sessions
from strom.protocol.errors import ErrorCode
from tests.console.fakes import FakeGroup, FakeSource

TOKEN = "process-token-0123456789"
HOST = "127.0.0.1:8080"
PASSWORDS = {"alice": "alice-secret", "admin": "admin-secret"}


class UserSource(FakeSource):
    """A user's view: refuses to create topics unless the user is admin; counts its closes."""

    def __init__(self, user: str) -> None:
        super().__init__()
        self.user = user
        self.closed = 0
        self.add_topic(f"{user}-topic", partitions=1, records=3)
        self.group_table["billing"] = FakeGroup(committed={TopicPartition(f"{user}-topic", 0): 1})

    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: object) -> None:
        if self.user != "admin":
            raise error_for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED, context=f"create topic {name!r}")
        super().create_topic(name, partitions, replication_factor, {})

    def close(self) -> None:
        self.closed += 1


class Harness:
    def __init__(self, *, sessions_max: int = 4, idle_ms: int = 60_000) -> None:
        self.now_ms = 1_700_000_000_000
        self.opened: list[UserSource] = []
        self.attempts: list[tuple[str, str]] = []
        options = ConsoleOptions(
            login=True,
            snapshot_fresh_ms=0,
            snapshot_stale_ms=0,
            sessions_max=sessions_max,
            session_idle_ms_max=idle_ms,
        )
        self.own = FakeSource()
        self.own.add_topic("console-own-topic", partitions=1)
        self.console = Console(
            self.own, options, clock_ms=lambda: self.now_ms, csrf_token=TOKEN, login_source=self.login_source
        )

    def login_source(self, user: str, password: str) -> UserSource:
        self.attempts.append((user, password))
        if PASSWORDS.get(user) != password:
            raise AuthenticationError("Authentication failed: Invalid username or password")
        source = UserSource(user)
        self.opened.append(source)
        return source

    def request(
        self, method: str, path: str, form: dict[str, str] | None = None, cookie: str = ""
    ) -> Response:
        headers = {"host": HOST}
        if cookie:
            headers["cookie"] = f"theme=dark; {SESSION_COOKIE}={cookie}"
        if method == "POST":
            headers["content-type"] = "application/x-www-form-urlencoded"
        return self.console.handle(Request(method, path, {}, headers, dict(form or {})))

    def login(self, user: str, password: str | None = None) -> str:
        response = self.request(
            "POST", "/login", {"csrf": TOKEN, "username": user, "password": password or PASSWORDS[user]}
        )
        assert response.status == 303, response.body
        return cookie_of(response)


def header(response: Response, name: str) -> str:
    return dict(response.headers)[name]


def cookie_of(response: Response) -> str:
    found = re.match(rf"{SESSION_COOKIE}=([^;]*);", header(response, "Set-Cookie"))
    assert found is not None
    return found.group(1)


def csrf_of(response: Response) -> str:
    found = re.search(r'name=csrf value="([^"]+)"', response.body.decode())
    assert found is not None
    return found.group(1)


@pytest.fixture
def harness() -> Harness:
    return Harness()


@pytest.mark.parametrize(
    "path", ["/", "/topics", "/topic?name=x", "/groups", "/group?id=billing", "/messages"]
)
def test_every_page_needs_a_session(harness: Harness, path: str) -> None:
    response = harness.request("GET", path.split("?")[0])
    assert response.status == 303
    assert header(response, "Location") == "/login"
    # A made-up cookie is no session either.
    assert harness.request("GET", path.split("?")[0], cookie="made-up").status == 303


def test_forms_without_a_session_are_refused(harness: Harness) -> None:
    response = harness.request("POST", "/topics", {"csrf": TOKEN, "name": "t"})
    assert response.status == 403
    assert harness.own.created == []
    assert "log in again" in response.body.decode()


def test_static_files_and_the_login_page_need_none(harness: Harness) -> None:
    assert harness.request("GET", "/static/console.css").status == 200
    page = harness.request("GET", "/login")
    assert page.status == 200
    body = page.body.decode()
    assert "name=password type=password" in body
    assert csrf_of(page) == TOKEN


def test_login_opens_a_session_with_the_users_own_source(harness: Harness) -> None:
    cookie = harness.login("alice")
    assert harness.attempts == [("alice", "alice-secret")]
    topics = harness.request("GET", "/topics", cookie=cookie).body.decode()
    # Alice's source answers, not the console's own.
    assert "alice-topic" in topics
    assert "console-own-topic" not in topics
    # The page names the user and offers a logout form with the session's own CSRF token.
    assert "alice" in topics and 'action="/logout"' in topics
    assert csrf_of(harness.request("GET", "/", cookie=cookie)) != TOKEN
    # The password appears in no page.
    assert "alice-secret" not in topics
    # Visiting /login with a session goes home.
    assert header(harness.request("GET", "/login", cookie=cookie), "Location") == "/"


def test_session_cookie_flags(harness: Harness) -> None:
    response = harness.request(
        "POST", "/login", {"csrf": TOKEN, "username": "alice", "password": "alice-secret"}
    )
    value = header(response, "Set-Cookie")
    attributes = [part.strip() for part in value.split(";")]
    assert attributes[0].startswith(f"{SESSION_COOKIE}=")
    token = attributes[0].split("=", 1)[1]
    assert len(token) >= 43  # 32 random bytes, URL-safe base64
    assert set(attributes[1:]) == {"HttpOnly", "SameSite=Strict", "Path=/"}
    # Plain HTTP: no Secure flag (a browser would drop the cookie on http://).
    assert "Secure" not in value


def test_bad_login_says_login_failed_and_nothing_else(harness: Harness) -> None:
    for user, password in [("alice", "wrong"), ("nobody", "whatever")]:
        response = harness.request("POST", "/login", {"csrf": TOKEN, "username": user, "password": password})
        assert response.status == 401
        body = response.body.decode()
        assert "Login failed." in body
        assert "Invalid username" not in body  # not the broker's words
        assert password not in body
        assert "Set-Cookie" not in dict(response.headers)
    assert len(harness.console.sessions) == 0
    empty = harness.request("POST", "/login", {"csrf": TOKEN, "username": "alice", "password": ""})
    assert empty.status == 400
    assert harness.attempts == [("alice", "wrong"), ("nobody", "whatever")]


def test_login_needs_the_csrf_token(harness: Harness) -> None:
    for form in (
        {"username": "alice", "password": "alice-secret"},
        {"csrf": "forged", "username": "alice", "password": "alice-secret"},
    ):
        response = harness.request("POST", "/login", form)
        assert response.status == 403
        assert "Set-Cookie" not in dict(response.headers)
    assert harness.attempts == []


def test_logout_needs_the_sessions_csrf_token_and_closes_the_clients(harness: Harness) -> None:
    cookie = harness.login("alice")
    token = csrf_of(harness.request("GET", "/", cookie=cookie))
    # The process's token (the login form's) is not this session's.
    for form in ({}, {"csrf": TOKEN}):
        assert harness.request("POST", "/logout", form, cookie=cookie).status == 403
    assert harness.request("GET", "/logout", cookie=cookie).status == 405
    assert harness.opened[0].closed == 0
    response = harness.request("POST", "/logout", {"csrf": token}, cookie=cookie)
    assert response.status == 303
    assert header(response, "Location") == "/login"
    assert header(response, "Set-Cookie").startswith(f"{SESSION_COOKIE}=; Max-Age=0;")
    assert harness.opened[0].closed == 1
    assert harness.request("GET", "/", cookie=cookie).status == 303


def test_a_sessions_forms_need_its_own_csrf_token(harness: Harness) -> None:
    alice = harness.login("alice")
    admin = harness.login("admin")
    admin_token = csrf_of(harness.request("GET", "/", cookie=admin))
    # Admin's token in Alice's session: refused.
    refused = harness.request("POST", "/topics", {"csrf": admin_token, "name": "x"}, cookie=alice)
    assert refused.status == 403
    created = harness.request("POST", "/topics", {"csrf": admin_token, "name": "made"}, cookie=admin)
    assert created.status == 303
    assert harness.opened[1].created[0][0] == "made"


def test_not_authorized_is_shown_as_such(harness: Harness) -> None:
    cookie = harness.login("alice")
    token = csrf_of(harness.request("GET", "/", cookie=cookie))
    response = harness.request("POST", "/topics", {"csrf": token, "name": "new"}, cookie=cookie)
    assert response.status == 403
    body = response.body.decode()
    assert "Not authorized" in body and "TOPIC_AUTHORIZATION_FAILED" in body
    # A page whose request is refused is a 403 "Not authorized" page, and the console goes on.
    source = harness.opened[0]

    def refuse(name: str) -> object:
        raise error_for_code(ErrorCode.TOPIC_AUTHORIZATION_FAILED, context=f"topic {name!r}")

    source.topic = refuse  # type: ignore[method-assign,assignment]
    page = harness.request("GET", "/topic", cookie=cookie)
    assert page.status == 400  # no name: a bad request before the cluster is asked
    refused = harness.console.handle(
        Request("GET", "/topic", {"name": "secret"}, {"host": HOST, "cookie": f"{SESSION_COOKIE}={cookie}"})
    )
    assert refused.status == 403
    assert "Not authorized" in refused.body.decode() and "alice is not authorized" in refused.body.decode()
    assert harness.request("GET", "/", cookie=cookie).status == 200


def test_sessions_end_after_idle_time_and_close_their_clients() -> None:
    harness = Harness(idle_ms=60_000)
    cookie = harness.login("alice")
    harness.now_ms += 59_000
    assert harness.request("GET", "/", cookie=cookie).status == 200  # used: idle time starts again
    harness.now_ms += 59_000
    assert harness.request("GET", "/", cookie=cookie).status == 200
    harness.now_ms += 60_000
    assert harness.request("GET", "/", cookie=cookie).status == 303
    assert harness.opened[0].closed == 1
    assert len(harness.console.sessions) == 0


def test_a_login_beyond_the_count_ends_the_least_recently_used_session() -> None:
    harness = Harness(sessions_max=2)
    first = harness.login("alice")
    harness.now_ms += 1
    second = harness.login("admin")
    harness.now_ms += 1
    assert harness.request("GET", "/", cookie=first).status == 200  # now the second is older
    harness.now_ms += 1
    third = harness.login("alice")
    assert len(harness.console.sessions) == 2
    assert harness.opened[1].closed == 1  # admin's, the least recently used
    assert harness.request("GET", "/", cookie=second).status == 303
    assert harness.request("GET", "/", cookie=first).status == 200
    assert harness.request("GET", "/", cookie=third).status == 200


def test_closing_the_console_closes_every_session() -> None:
    harness = Harness()
    harness.login("alice")
    harness.login("admin")
    harness.console.close()
    assert [source.closed for source in harness.opened] == [1, 1]


def test_lag_trend_only_after_the_sessions_own_request_succeeded(harness: Harness) -> None:
    # The sampler (the console's own source) has a trend for "billing" and "hidden".
    harness.own.group_table["billing"] = FakeGroup(committed={TopicPartition("console-own-topic", 0): 0})
    with harness.console.history_lock:
        harness.console.history.record("billing", harness.now_ms - 60_000, 7)
    cookie = harness.login("alice")
    source = harness.opened[0]
    shown = harness.console.handle(
        Request("GET", "/group", {"id": "billing"}, {"host": HOST, "cookie": f"{SESSION_COOKIE}={cookie}"})
    )
    assert shown.status == 200 and "<svg" in shown.body.decode()

    def refuse(group_id: str) -> object:
        raise error_for_code(ErrorCode.GROUP_AUTHORIZATION_FAILED, context=f"group {group_id!r}")

    source.describe_group = refuse  # type: ignore[method-assign,assignment]
    refused = harness.console.handle(
        Request("GET", "/group", {"id": "billing"}, {"host": HOST, "cookie": f"{SESSION_COOKIE}={cookie}"})
    )
    assert refused.status == 403
    assert "<svg" not in refused.body.decode()


def test_sessions_table_alone() -> None:
    table: Sessions[str] = Sessions(2, 1_000)
    one, ended = table.add("a", "view-a", 0)
    assert ended == []
    two, _ = table.add("b", "view-b", 10)
    assert one.token != two.token and one.csrf_token != two.csrf_token
    found, ended = table.get(one.token, 500)
    assert found is one and ended == []
    _, ended = table.add("c", "view-c", 600)
    assert [s.user for s in ended] == ["b"]
    found, ended = table.get(one.token, 1_499)
    assert found is one and ended == []  # used at 500: idle 999 ms
    _, ended = table.get("", 2_600)
    assert sorted(s.user for s in ended) == ["a", "c"]
    assert len(table) == 0
    assert table.get("nope", 0) == (None, [])
